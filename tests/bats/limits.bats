#!/usr/bin/env bats
# Memory limits and stop signals: under an address-space limit (ulimit -v) too small for
# OpenBLAS's per-thread buffers, tfm-train and tfm-decode refuse at once with a message
# instead of spinning in OpenBLAS's allocation retries; a computation that does not end
# cannot make SIGTERM ineffective (TFM_STOP_GRACE); a --log that fails stops training
# only after a checkpoint.

setup_file() {
    M="$BATS_FILE_TMPDIR"
    command -v tfm-batch > /dev/null && command -v tfm-train > /dev/null || return 0
    zcat "$TFM_ROOT/data/multi30k-ende/train.en.gz" | head -n 300 > "$M/en.txt"
    zcat "$TFM_ROOT/data/multi30k-ende/train.de.gz" | head -n 300 > "$M/de.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 300 "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de.tfm" "$M/de.txt"
    tfm-batch -q --tokens 1024 "$M/en.tfm" "$M/de.tfm" > "$M/b.tfm"
    tfm-train -q -c "$TFM_ROOT/configs/tiny.conf" -o "$M/ckpt" --max-steps 1 --threads 1 "$M/b.tfm"
    cp -L "$M/ckpt/last.tfm" "$M/model.tfm"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    command -v tfm-train > /dev/null || skip "tfm-train is not built yet"
    # sanitizer builds reserve terabytes of address space: no ulimit -v for them
    if ldd "$(command -v tfm-train)" 2> /dev/null | grep -q 'libasan'; then
        skip "an AddressSanitizer build cannot run under ulimit -v"
    fi
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
    CONF="$TFM_ROOT/configs/tiny.conf"
}

@test "the BLAS headroom is checked against ulimit -v: a clear refusal, at once" {
    # 2 threads of 2 GiB each cannot fit under 3 GB, whatever the machine
    run bash -c "ulimit -v 3000000; TFM_BLAS_BUFFER_MB=2048 timeout -k 5 60 \
        tfm-train -q -c '$CONF' -o '$T/ck' --max-steps 1 --threads 2 '$M/b.tfm'"
    assert_failure 1
    assert_output --partial "address-space limit (ulimit -v)"
    assert_output --partial "OpenBLAS needs 2048 MiB for each of 2 threads"
    run bash -c "ulimit -v 3000000; TFM_BLAS_BUFFER_MB=2048 timeout -k 5 60 \
        tfm-decode -q -m '$M/model.tfm' --threads 2 '$M/en.tfm'"
    assert_failure 1
    assert_output --partial "OpenBLAS needs 2048 MiB for each of 2 threads"
    # one thread of 1 GiB fits: the check does not refuse what can run
    run bash -c "ulimit -v 3000000; TFM_BLAS_BUFFER_MB=1024 timeout -k 5 60 \
        tfm-decode -q -m '$M/model.tfm' --threads 1 '$M/en.tfm' > /dev/null"
    assert_success
    run env TFM_BLAS_BUFFER_MB=lots tfm-decode -q -m "$M/model.tfm" "$M/en.tfm"
    assert_failure 1
    assert_output --partial "TFM_BLAS_BUFFER_MB='lots'"
}

@test "under a real 500 MB limit, training and decoding end (done or refused), never spin" {
    # OpenBLAS's 128 MiB buffers per thread do not fit next to the program: before the
    # check both tools spun in OpenBLAS's allocation retries until killed
    for tool in "tfm-train -q -c $CONF -o $T/ck2 --max-steps 2 --threads 2 $M/b.tfm" \
                "tfm-decode -q -m $M/model.tfm --threads 2 $M/en.tfm"; do
        run bash -c "ulimit -v 500000; timeout -k 5 60 $tool > /dev/null"
        [ "$status" -eq 0 ] || [ "$status" -eq 1 ] || { echo "$tool: exit $status: $output"; false; }
        [ "$status" -eq 0 ] || assert_output --partial "ulimit -v"
    done
}

@test "under a limit too small for OpenBLAS's own threads: the refusal, then the exit, not a hang" {
    # OpenBLAS's threads take their buffers as they start and retry forever when they
    # cannot; its exit handler waited for them after the message (killed by timeout: 137)
    for tool in "tfm-train -q -c $CONF -o $T/ck4 --max-steps 2 --threads 2 $M/b.tfm" \
                "tfm-decode -q -m $M/model.tfm --threads 2 $M/en.tfm"; do
        run bash -c "ulimit -v 150000; timeout -s KILL 30 $tool > /dev/null"
        [ "$status" -eq 1 ] || { echo "$tool: exit $status: $output"; false; }
        assert_output --partial "address-space limit (ulimit -v)"
    done
    [ ! -e "$T/ck4/last.tfm" ]
}

@test "SIGTERM ends a computation that never ends: TFM_STOP_GRACE seconds after it" {
    # with the check off (TFM_BLAS_BUFFER_MB=0), OpenBLAS spins under the limit (400 MB:
    # its second buffer does not fit); the signal's grace period ends the process with a
    # message, exit 128 + 15
    bash -c "ulimit -v 400000; exec env TFM_BLAS_BUFFER_MB=0 TFM_STOP_GRACE=1 \
        tfm-train -q -c '$CONF' -o '$T/ck3' --max-steps 2 --threads 2 '$M/b.tfm'" \
        2> "$T/err" &
    pid=$!
    sleep 2
    kill -0 "$pid"                      # still running (spinning)
    kill -TERM "$pid"
    for _ in $(seq 40); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2> /dev/null; then kill -KILL "$pid"; false; fi
    run wait "$pid"
    assert_equal "$status" 143
    run cat "$T/err"
    assert_output --partial "still busy long after the stop signal (TFM_STOP_GRACE)"
    run env TFM_STOP_GRACE=soon tfm-train -q -c "$CONF" -o "$T/ck4" --max-steps 1 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "TFM_STOP_GRACE"
}

@test "a --log that fails mid-run (a reader gone, a full disk) stops the run after saving" {
    # a FIFO whose reader leaves after the first lines: later writes fail with EPIPE
    mkfifo "$T/log"
    head -c 200 "$T/log" > "$T/got" &
    reader=$!
    run timeout -k 5 120 tfm-train -q -c "$CONF" -o "$T/ck5" --report-every 1 --save-every 1000 \
        --max-steps 40 --threads 1 --log "$T/log" "$M/b.tfm"
    wait "$reader" || true
    assert_failure 1
    assert_output --partial "$T/log: write error: Broken pipe; stopped at update"
    step=$(echo "$output" | sed -n 's/.*stopped at update \([0-9]*\).*/\1/p')
    [ "$step" -ge 1 ] && [ "$step" -lt 40 ]
    # the work up to that update is in a checkpoint (not only at --save-every)
    run tfm-cat --header "$T/ck5/last.tfm"
    assert_line "meta step=$step"
}
