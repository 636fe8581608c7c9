#!/usr/bin/env bats
# The tools on a GPU against the CPU: training, decoding, two ranks, two processes.  On
# a machine with a working GPU (`make check-gpu` there) DEV is cuda; elsewhere the same
# tests run through sim, the stand-in for a GPU (src/backend_sim.c), where the results
# must be the CPU's bit for bit.  Bounds on a GPU: fp32 products and sums in other
# orders (~1e-6 an op) compounding over the updates.

setup_file() {
    D="$TFM_ROOT/data/multi30k-ende"
    M="$BATS_FILE_TMPDIR"
    zcat "$D/train.en.gz" | head -n 600 > "$M/en.txt"
    zcat "$D/train.de.gz" | head -n 600 > "$M/de.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 400 "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de.tfm" "$M/de.txt"
    tfm-batch -q --tokens 1024 "$M/en.tfm" "$M/de.tfm" > "$M/b.tfm"
    head -n 30 "$M/en.txt" | tfm-tokenize encode -q -m "$M/spm.model" > "$M/test.tfm"
    # a GPU if the tools can use one (it passes the startup check), else the stand-in
    tfm-train -q -c "$TFM_ROOT/configs/tiny.conf" --set layers=1 --set d_model=32 \
        --set d_ff=64 --set heads=2 -j 1 --max-steps 1 -o "$M/probe" "$M/b.tfm"
    if tfm-decode -q --device cuda -m "$M/probe/last.tfm" "$M/test.tfm" > /dev/null 2>&1; then
        echo cuda > "$M/dev"
    else
        echo sim > "$M/dev"
    fi
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    load checkpoints
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
    DEV=$(cat "$M/dev")
    SMALL=(-c "$TFM_ROOT/configs/tiny.conf" --set layers=2 --set d_model=64 --set d_ff=128
           --set heads=4 -j 1 -q)
}


# The bound for a comparison with the CPU: none on sim (the same bits), $1 on a GPU.
bound() {
    if [ "$DEV" = sim ]; then echo 0; else echo "$1"; fi
}

@test "gpu ($(cat "$BATS_FILE_TMPDIR/dev" 2>/dev/null)): 40 updates follow the CPU's" {
    run tfm-train "${SMALL[@]}" --device cpu --max-steps 40 --report-every 10 --log "$T/cpu.log" -o "$T/cpu" "$M/b.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" --device "$DEV" --max-steps 40 --report-every 10 --log "$T/dev.log" -o "$T/dev" "$M/b.tfm"
    assert_success
    a=$(awk -F '\t' '$1 == "train" && $2 == 40 { print $3 }' "$T/cpu.log")
    b=$(awk -F '\t' '$1 == "train" && $2 == 40 { print $3 }' "$T/dev.log")
    echo "loss at 40: cpu $a, $DEV $b"
    awk -v a="$a" -v b="$b" -v t="$(bound 1e-3)" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(a > 0 && d <= t) }'
    run max_diff "$T/cpu/last.tfm" "$T/dev/last.tfm"
    echo "parameters: $output"
    awk -v d="$output" -v t="$(bound 1e-2)" 'BEGIN { exit !(d <= t) }'
}

@test "gpu: decoding gives the CPU's translations" {
    tfm-train "${SMALL[@]}" --device cpu --max-steps 60 -o "$T/m" "$M/b.tfm"
    tfm-decode -q --device cpu -m "$T/m/last.tfm" --text "$M/test.tfm" > "$T/cpu.txt"
    run tfm-decode -q --device "$DEV" -m "$T/m/last.tfm" --text "$M/test.tfm"
    assert_success
    echo "$output" > "$T/dev.txt"
    same=$(paste -d '\t' "$T/cpu.txt" "$T/dev.txt" | awk -F '\t' '$1 == $2' | wc -l)
    echo "$same of 30 lines the same"
    # a GPU may break a near tie the other way in a line or two
    [ "$same" -ge "$([ "$DEV" = sim ] && echo 30 || echo 27)" ]
}

@test "gpu: two ranks follow the CPU's two ranks" {
    if [ "$DEV" = cuda ] && ! tfm-train "${SMALL[@]}" --device cuda --ranks 2 --max-steps 1 -o "$T/probe" "$M/b.tfm" 2> /dev/null; then
        skip "fewer than 2 GPUs"
    fi
    run tfm-train "${SMALL[@]}" --device cpu --ranks 2 --max-steps 20 -o "$T/cpu" "$M/b.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" --device "$DEV" --ranks 2 --max-steps 20 -o "$T/dev" "$M/b.tfm"
    assert_success
    run max_diff "$T/cpu/last.tfm" "$T/dev/last.tfm"
    echo "parameters: $output"
    awk -v d="$output" -v t="$(bound 1e-2)" 'BEGIN { exit !(d <= t) }'
}

@test "gpu: two processes, one device each, follow the CPU's two ranks" {
    if [ "$DEV" = cuda ] && ! tfm-train "${SMALL[@]}" --device cuda --ranks 2 --max-steps 1 -o "$T/probe" "$M/b.tfm" 2> /dev/null; then
        skip "fewer than 2 GPUs"
    fi
    export TFM_RENDEZVOUS="$T/rv" TFM_RENDEZVOUS_TIMEOUT=60 TFM_WORLD_SIZE=2
    TFM_RANK=1 TFM_LOCAL_RANK=1 tfm-train "${SMALL[@]}" --device "$DEV" --max-steps 20 -o "$T/dev" "$M/b.tfm" &
    run env TFM_RANK=0 TFM_LOCAL_RANK=0 tfm-train "${SMALL[@]}" --device "$DEV" --max-steps 20 -o "$T/dev" "$M/b.tfm"
    assert_success
    wait $!
    unset TFM_RENDEZVOUS TFM_WORLD_SIZE
    run tfm-train "${SMALL[@]}" --device cpu --ranks 2 --max-steps 20 -o "$T/cpu" "$M/b.tfm"
    assert_success
    run max_diff "$T/cpu/last.tfm" "$T/dev/last.tfm"
    echo "parameters: $output"
    awk -v d="$output" -v t="$(bound 1e-2)" 'BEGIN { exit !(d <= t) }'
}
