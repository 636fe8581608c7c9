#!/usr/bin/env bats
# pipelines/plot-train: the curves of a training log, a log still being written, and the
# errors.  tests/fixtures/logs/valid-bleu.log is the train.log of a real run:
# `make -f pipelines/wmt_ende.mk MAX_TIME=14m VALID_EVERY=250 VALID_BLEU=1 THREADS=2`
# (bundled Multi30k, tiny config, 1126 updates on 2 busy cores), the run that README.md's
# picture shows; no-bleu.log is the same with its bleu column "-", as without --valid-bleu.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    bats_load_library bats-file
    command -v gnuplot > /dev/null || skip "gnuplot is not installed (.ci/install-deps)"
    PLOT="$TFM_ROOT/pipelines/plot-train"
    LOGS="$TFM_ROOT/tests/fixtures/logs"
    T="$BATS_TEST_TMPDIR"
}

is_png() {
    [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
}

# The panels of an SVG picture, by their y labels.
panels() {
    grep -o '>[a-zA-Z ]*</tspan>' "$1" | tr -d '<>' | sed 's|/tspan$||' |
        grep -E '^(training loss|validation ppl|validation BLEU|learning rate)$'
}

@test "plot-train: loss, validation perplexity and BLEU, learning rate, as PNG and SVG" {
    run "$PLOT" "$LOGS/valid-bleu.log" "$T/c"
    assert_success
    is_png "$T/c.png"
    grep -q '<svg' "$T/c.svg"
    diff <(panels "$T/c.svg") <(printf '%s\n' "training loss" "validation ppl" \
                                              "validation BLEU" "learning rate")
    assert_not_exist "$T/c.png.tmp"
}

@test "plot-train: two runs at once draw under names of their own; a signal leaves none" {
    # another run's picture being drawn, under the name every run used (PREFIX.png.tmp)
    echo "another run's picture" > "$T/c.png.tmp"
    run "$PLOT" "$LOGS/valid-bleu.log" "$T/c"
    assert_success
    is_png "$T/c.png"
    assert_equal "$(cat "$T/c.png.tmp")" "another run's picture"
    rm "$T/c.png.tmp"
    # the pictures take the mode that the umask gives a new file, as before
    (umask 027 && "$PLOT" "$LOGS/valid-bleu.log" "$T/m")
    assert_equal "$(stat -c %a "$T/m.png")" 640
    # stopped by a signal while gnuplot draws: no partial picture is left behind
    mkdir "$T/bin"
    printf '#!/bin/sh\nsleep 2\n' > "$T/bin/gnuplot"   # the shell waits for it
    chmod +x "$T/bin/gnuplot"
    PATH="$T/bin:$PATH" "$PLOT" "$LOGS/valid-bleu.log" "$T/s" &
    pid=$!
    for _ in $(seq 50); do ls "$T"/s.png.tmp.* > /dev/null 2>&1 && break; sleep 0.1; done
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    assert_equal $rc 143
    run ls "$T"
    refute_output --partial "s.png"
}

@test "plot-train: no BLEU panel when the log has none" {
    run "$PLOT" "$LOGS/no-bleu.log" "$T/c"
    assert_success
    is_png "$T/c.png"
    diff <(panels "$T/c.svg") <(printf '%s\n' "training loss" "validation ppl" "learning rate")
}

@test "plot-train: a log being written: its unfinished last line is left out" {
    cp "$LOGS/no-bleu.log" "$T/log"
    "$PLOT" "$T/log" "$T/whole"
    # an update far beyond the others, its line not yet ended: the x axis must not reach it
    printf 'train\t987654\t2.5\t12.1\t1.0e-04\t5000.0\t900.0\t123456\t-' >> "$T/log"
    run "$PLOT" "$T/log" "$T/c"
    assert_success
    is_png "$T/c.png"
    ! grep -q '987654\|1e+06\|1000000\|800000' "$T/c.svg"
    # once the line is ended, it counts
    printf '\n' >> "$T/log"
    "$PLOT" "$T/log" "$T/d"
    grep -q '1e+06\|1000000\|800000' "$T/d.svg"
}

@test "plot-train: a log that tfm-train is writing now" {
    command -v tfm-train > /dev/null || skip "tfm-train is not built yet"
    printf '%s\n' "a b c d" "e f g" "b c a" "g f e d" > "$T/t.txt"
    for i in $(seq 40); do cat "$T/t.txt"; done > "$T/train.txt"
    tfm-tokenize train -q -m "$T/spm.model" --vocab 20 -O hard_vocab_limit=false "$T/train.txt"
    tfm-tokenize encode -m "$T/spm.model" --eos < "$T/train.txt" > "$T/train.tfm"
    tfm-batch -q --tokens 200 "$T/train.tfm" "$T/train.tfm" > "$T/b.tfm"
    printf '%s\n' "layers = 1" "d_model = 16" "d_ff = 32" "heads = 2" "max_len = 16" \
        "tokens = 200" "warmup = 10" > "$T/c.conf"
    tfm-train -q -c "$T/c.conf" -o "$T/ckpt" --max-time 2m --threads 1 --report-every 1 \
        --valid "$T/b.tfm" --valid-every 5 --log "$T/train.log" "$T/b.tfm" &
    local pid=$! i
    for i in $(seq 300); do
        [ "$(grep -c '^valid' "$T/train.log" 2> /dev/null)" -ge 2 ] && break
        sleep 0.1
    done
    run "$PLOT" "$T/train.log" "$T/c"
    kill "$pid"
    wait "$pid" || true
    assert_success
    is_png "$T/c.png"
    diff <(panels "$T/c.svg") <(printf '%s\n' "training loss" "validation ppl" "learning rate")
}

@test "plot-train: runs appended to one log (resumed, restarted) are drawn" {
    { cat "$LOGS/no-bleu.log"; tail -n +2 "$LOGS/no-bleu.log"; } > "$T/log"
    run "$PLOT" "$T/log" "$T/c"
    assert_success
    is_png "$T/c.png"
}

@test "plot-train: no log, an empty log, a log without reports, not a log, usage" {
    run "$PLOT" "$T/none.log" "$T/c"
    assert_failure 1
    assert_output "plot-train: $T/none.log: no training log yet (tfm-train --log writes it)"
    : > "$T/empty.log"
    run "$PLOT" "$T/empty.log" "$T/c"
    assert_failure 1
    assert_output --partial "empty: no header line yet"
    head -1 "$LOGS/no-bleu.log" > "$T/header.log"
    run "$PLOT" "$T/header.log" "$T/c"
    assert_failure 1
    assert_output --partial "$T/header.log: no reports yet"
    printf 'step\tloss\n1\t2\n' > "$T/other.log"
    run "$PLOT" "$T/other.log" "$T/c"
    assert_failure 1
    assert_output --partial "not a tfm-train log (no column \"kind\" in its first line)"
    assert_not_exist "$T/c.png"
    run "$PLOT" "$T/other.log"
    assert_failure 2
    assert_output "usage: plot-train LOG PREFIX"
}
