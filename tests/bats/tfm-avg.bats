#!/usr/bin/env bats
# tfm-avg: averaging checkpoints written by tfm-train (values checked against awk on the
# tfm-cat dump), selection of the newest N of a directory, refusals, and decoding the output.

setup_file() {
    D="$TFM_ROOT/data/multi30k-ende"
    M="$BATS_FILE_TMPDIR"
    zcat "$D/train.en.gz" | head -n 500 > "$M/en.txt"
    zcat "$D/train.de.gz" | head -n 500 > "$M/de.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 400 "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de.tfm" "$M/de.txt"
    tfm-batch -q --tokens 1024 "$M/en.tfm" "$M/de.tfm" > "$M/b.tfm"
    head -n 3 "$M/en.txt" | tfm-tokenize encode -q -m "$M/spm.model" --eos > "$M/test.tfm"
    SMALL=(-c "$TFM_ROOT/configs/tiny.conf" --set layers=1 --set d_model=32 --set d_ff=64
           --set heads=2 --set warmup=4 -j 1 -q)
    tfm-train "${SMALL[@]}" -o "$M/run" --save-every 1 --max-steps 6 "$M/b.tfm"
    # another architecture, and the same architecture under another vocabulary
    tfm-train "${SMALL[@]}" --set d_ff=32 -o "$M/ff32" --max-steps 1 "$M/b.tfm"
    tfm-tokenize train -q -m "$M/other.model" --vocab 400 --type unigram "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/other.model" --eos -o "$M/oen.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/other.model" --eos -o "$M/ode.tfm" "$M/de.txt"
    tfm-batch -q --tokens 1024 "$M/oen.tfm" "$M/ode.tfm" > "$M/other.tfm"
    tfm-train "${SMALL[@]}" -o "$M/vocab" --max-steps 1 "$M/other.tfm"   # max_steps may differ
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
}

# The values of one record of a checkpoint, one per line.
values() {
    tfm-cat --values "$1" | awk -v name="$2" '$1 == "record" { p = ($3 == name); next }
                                              p && /^\t/ { for (i = 1; i <= NF; i++) print $i }'
}

# Largest relative difference between the mean of the record NAME in files 3.. and OUT.
check_mean() {
    local name=$1 out=$2 k=0 cols=()
    shift 2
    for f in "$@"; do
        values "$f" "$name" > "$BATS_TEST_TMPDIR/col.$k"
        cols+=("$BATS_TEST_TMPDIR/col.$k")
        k=$((k + 1))
    done
    values "$out" "$name" > "$BATS_TEST_TMPDIR/col.out"
    paste "${cols[@]}" "$BATS_TEST_TMPDIR/col.out" |
        awk '{ s = 0; for (i = 1; i < NF; i++) s += $i; m = s / (NF - 1); d = m - $NF
               if (d < 0) d = -d; a = m < 0 ? -m : m; r = d / (a > 1e-3 ? a : 1e-3)
               if (r > worst) worst = r; n++ }
             END { printf "%d %.3g\n", n, worst }'
}

@test "--help mirrors the synopsis; --version" {
    run tfm-avg --help
    assert_success
    assert_line --index 0 "usage: tfm-avg [-n N] [-o OUT] [--keep-optimizer] [--progress | --quiet] DIR|CHECKPOINT..."
    run tfm-avg --version
    assert_success
    assert_output "tfm-avg $(cat "$TFM_ROOT/VERSION")"
}

@test "-n N of a directory: the element-wise mean of the newest N, optimizer dropped" {
    run tfm-avg -n 3 -o "$T/avg.tfm" "$M/run"
    assert_success
    assert_output ""
    run tfm-cat "$T/avg.tfm"
    assert_success
    assert_line "meta kind=checkpoint"
    assert_line "meta averaged=3"
    assert_line "meta averaged.steps=4,5,6"
    assert_line "meta step=6"
    refute_line --partial "adam."
    assert_line --regexp '^record [0-9]+ param\.emb f32 \[400,32\]'
    for name in param.emb param.enc.0.ffn.w1 param.dec.0.ln3.g; do
        run check_mean $name "$T/avg.tfm" "$M"/run/step-00000{4,5,6}.tfm
        echo "$name: $output"
        [ "${output% *}" -gt 0 ]
        awk -v r="${output#* }" 'BEGIN { exit !(r < 1e-6) }'
    done
    # and the check can fail: the average is not the newest checkpoint
    run check_mean param.emb "$T/avg.tfm" "$M/run/step-000006.tfm"
    awk -v r="${output#* }" 'BEGIN { exit !(r > 1e-4) }'
}

@test "the default takes the newest 5; files can be given; output to a pipe" {
    run tfm-avg -o "$T/a5.tfm" "$M/run"
    assert_success
    run tfm-cat --header "$T/a5.tfm"
    assert_line "meta averaged.steps=2,3,4,5,6"
    run bash -c "tfm-avg '$M/run/step-000001.tfm' '$M/run/step-000003.tfm' | tfm-cat --header"
    assert_success
    assert_line "meta averaged=2"
    assert_line "meta averaged.steps=1,3"
    tfm-avg "$M/run/step-000001.tfm" "$M/run/step-000003.tfm" > "$T/piped.tfm"
    run check_mean param.emb "$T/piped.tfm" "$M/run/step-000001.tfm" "$M/run/step-000003.tfm"
    awk -v r="${output#* }" 'BEGIN { exit !(r < 1e-6) }'
    # one checkpoint averages to itself, bit for bit
    run tfm-avg -o "$T/one.tfm" "$M/run/step-000002.tfm"
    assert_success
    diff <(values "$T/one.tfm" param.emb) <(values "$M/run/step-000002.tfm" param.emb)
    # - is a checkpoint on standard input, as for every input (it was a file named '-')
    cd "$T"
    cat "$M/run/step-000001.tfm" | tfm-avg -o "$T/in.tfm" - "$M/run/step-000003.tfm"
    cmp "$T/in.tfm" "$T/piped.tfm"
    run bash -c "cat '$M/run/step-000001.tfm' | tfm-avg - /dev/stdin"
    assert_failure 2
    assert_line --index 0 "tfm-avg: standard input given 2 times (- or /dev/stdin): it holds one checkpoint"
    run tfm-avg -o "$T/none.tfm" - < /dev/null
    assert_failure 1
    assert_output --partial "<stdin>: empty input"
}

@test "--keep-optimizer averages the Adam moments too; training can resume from it" {
    run tfm-avg -n 2 --keep-optimizer -o "$T/k.tfm" "$M/run"
    assert_success
    run tfm-cat "$T/k.tfm"
    assert_line --regexp '^record [0-9]+ adam\.m\.emb f32 \[400,32\]'
    assert_line --regexp '^record [0-9]+ adam\.v\.emb f32 \[400,32\]'
    run check_mean adam.v.emb "$T/k.tfm" "$M"/run/step-00000{5,6}.tfm
    awk -v r="${output#* }" 'BEGIN { exit !(r < 1e-6) }'
    mkdir "$T/cont"
    cp "$T/k.tfm" "$T/cont/step-000006.tfm"
    run tfm-train -o "$T/cont" --resume --max-steps 7 -j 1 "$M/b.tfm"
    assert_success
    assert_line --partial "max steps reached at update 7"
    # without the moments, resuming says what is missing
    mkdir "$T/cont2"
    tfm-avg -n 2 -o "$T/cont2/step-000006.tfm" "$M/run"
    run tfm-train -o "$T/cont2" --resume --max-steps 7 -j 1 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "cannot resume: $T/cont2/step-000006.tfm: tensor adam.m.emb missing (config wants 400x32): no optimizer state to resume from (dropped, as tfm-avg does?)"
}

@test "the mean is the exact one rounded once: values that nearly cancel, sums over fp32's range" {
    edit() { python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$@"; }
    # element 0 of param.emb: 1e8 + 1 is 1e8 in fp32, and a sum in fp32 made the mean 0
    local k=0
    for v in 1e8 1 -1e8; do
        k=$((k + 1))
        edit "$M/run/step-00000$((k + 3)).tfm" "$T/c$k.tfm" --poison param.emb $v
    done
    run tfm-avg -o "$T/third.tfm" "$T"/c{1,2,3}.tfm
    assert_success
    values "$T/third.tfm" param.emb | head -n 1 > "$T/got"
    run cat "$T/got"
    assert_output "0.333333343"         # 1/3 rounded to fp32
    # 3e38 twice sums to Inf in fp32, and the average was refused as poisoned; the Adam
    # second moments (-k) too
    for k in 1 2; do
        edit "$M/run/step-00000$((k + 4)).tfm" "$T/big$k.tfm" --poison param.emb 3e38 \
            --poison adam.v.emb 2e38
    done
    run tfm-avg -k -o "$T/big.tfm" "$T"/big{1,2}.tfm
    assert_success
    assert_output ""
    for name in param.emb adam.v.emb; do
        values "$T/big.tfm" $name | head -n 1
    done > "$T/got"
    run cat "$T/got"
    assert_output "3.00000001e+38
1.99999994e+38"
}

@test "the average decodes" {
    tfm-avg -n 3 -o "$T/avg.tfm" "$M/run"
    run tfm-decode -m "$T/avg.tfm" --max-len-b 3 -q --text -o "$T/hyp.txt" "$M/test.tfm"
    assert_success
    run wc -l < "$T/hyp.txt"
    assert_output 3
}

@test "different configs or vocabularies are refused and nothing is written" {
    run tfm-avg -o "$T/x.tfm" "$M/run/step-000006.tfm" "$M/ff32/step-000001.tfm"
    assert_failure 1
    assert_output --partial "$M/ff32/step-000001.tfm and $M/run/step-000006.tfm: different config: 'd_ff = 32' against 'd_ff = 64'"
    run tfm-avg -o "$T/x.tfm" "$M/run/step-000006.tfm" "$M/vocab/step-000001.tfm"
    assert_failure 1
    assert_output --partial "different vocabulary (crc"
    [ ! -e "$T/x.tfm" ]
}

@test "checkpoints of one run at two precisions (resumed at another) are averaged" {
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/run/step-000006.tfm" "$T/bf16.tfm" \
        --config precision=bf16
    run tfm-avg -o "$T/p.tfm" "$M/run/step-000005.tfm" "$T/bf16.tfm"
    assert_success
    # the config of the last one averaged
    run bash -c "tfm-cat --values '$T/p.tfm' | awk '\$1 == \"record\" { p = (\$3 == \"config\"); next }
        p { for (i = 1; i <= NF; i++) printf \"%c\", \$i }' | grep '^precision'"
    assert_output "precision = bf16"
    run check_mean param.emb "$T/p.tfm" "$M/run/step-000005.tfm" "$T/bf16.tfm"
    [ "${output% *}" -gt 0 ]        # values were compared
    awk -v r="${output#* }" 'BEGIN { exit !(r < 1e-6) }'
}

@test "a run resumed at another precision averages across the change; the last's config is the output's" {
    SMALL=(-c "$TFM_ROOT/configs/tiny.conf" --set layers=1 --set d_model=32 --set d_ff=64
           --set heads=2 --set warmup=4 -j 1 -q)
    tfm-train "${SMALL[@]}" -o "$T/p" --save-every 1 --max-steps 2 "$M/b.tfm"
    tfm-train "${SMALL[@]}" -o "$T/p" --save-every 1 --max-steps 4 --set precision=bf16 \
        --resume "$M/b.tfm"
    run tfm-avg -n 4 -o "$T/p.tfm" "$T/p"
    assert_success
    run bash -c "tfm-cat --values '$T/p.tfm' | awk '\$1 == \"record\" { p = (\$3 == \"config\"); next }
        p && /^\t/ { for (i = 1; i <= NF; i++) printf \"%c\", \$i }' | grep '^precision = '"
    assert_output "precision = bf16"
}

@test "a checkpoint whose vocabulary has another size than its config's vocab is refused" {
    tfm-tokenize train -q -m "$T/v300.model" --vocab 300 "$M/en.txt" "$M/de.txt"
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/run/step-000006.tfm" "$T/vocab.tfm" \
        --spm "$T/v300.model"
    run tfm-avg -o "$T/x.tfm" "$M/run/step-000005.tfm" "$T/vocab.tfm"
    assert_failure 1
    assert_output "tfm-avg: $T/vocab.tfm: its vocabulary has 300 pieces, its config says vocab=400"
    run tfm-avg -o "$T/x.tfm" "$T/vocab.tfm"
    assert_failure 1
    assert_output "tfm-avg: $T/vocab.tfm: its vocabulary has 300 pieces, its config says vocab=400"
    [ ! -e "$T/x.tfm" ]
}

@test "bad input: too few checkpoints, not a checkpoint, damaged, missing, usage" {
    run tfm-avg -n 7 -o "$T/x.tfm" "$M/run"
    assert_failure 1
    assert_output "tfm-avg: $M/run: 6 checkpoints (step-*.tfm), -n asks for the last 7"
    run tfm-avg -o "$T/x.tfm" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-avg: $M/b.tfm: not a checkpoint (stream kind 'batches')"
    head -c 3000 "$M/run/step-000006.tfm" > "$T/cut.tfm"
    run tfm-avg -o "$T/x.tfm" "$M/run/step-000005.tfm" "$T/cut.tfm"
    assert_failure 1
    assert_output --partial "tfm-avg: $T/cut.tfm: "
    run tfm-avg -o "$T/x.tfm" "$T/missing.tfm"
    assert_failure 1
    assert_output "tfm-avg: $T/missing.tfm: No such file or directory"
    run tfm-avg -o "$T/x.tfm" "$T"
    assert_failure 1
    assert_output --partial "0 checkpoints"
    run tfm-avg -n 0 "$M/run"
    assert_failure 2
    assert_line --index 0 "tfm-avg: -n: '0': expected an integer from 1 to 100000"
    run tfm-avg
    assert_failure 2
    run tfm-avg -o /proc/tfm-avg.tfm "$M/run"
    assert_failure 1
    [ ! -e "$T/x.tfm" ]
}

@test "tfm-avg through two FIFOs: a process writes the checkpoint, then reads the average" {
    tfm-avg -o "$T/want.tfm" "$M/run/step-000006.tfm"
    mkfifo "$T/in.fifo" "$T/out.fifo"
    # the output, opened first, waited for its reader while that process waited to write
    timeout 20 sh -c 'cat "$1" > "$2" && cat "$3" > "$4"' sh "$M/run/step-000006.tfm" \
        "$T/in.fifo" "$T/out.fifo" "$T/got.tfm" 3>&- &
    local peer=$!
    run timeout 20 tfm-avg -o "$T/out.fifo" "$T/in.fifo"
    wait $peer
    assert_success
    cmp "$T/got.tfm" "$T/want.tfm"
}

@test "an output that cannot be written is found before the checkpoints are read" {
    head -c 3000 "$M/run/step-000006.tfm" > "$T/cut.tfm"
    # the output's error, not the damaged input's: nothing was read
    run tfm-avg -o "$T/no/dir/x.tfm" "$T/cut.tfm" "$M/run/step-000005.tfm"
    assert_failure 1
    assert_output "tfm-avg: $T/no/dir/x.tfm: No such file or directory"
    # a failure after the output is open leaves the old file and no temporary
    echo old > "$T/x.tfm"
    run tfm-avg -o "$T/x.tfm" "$M/run/step-000005.tfm" "$T/cut.tfm"
    assert_failure 1
    assert_output --partial "tfm-avg: $T/cut.tfm: "
    run cat "$T/x.tfm"
    assert_output old
    run ls "$T"
    refute_output --partial ".tmp."
}

@test "a damaged Adam record is refused without --keep-optimizer too; decoding passes it over" {
    f="$T/bad.tfm"
    cp "$M/run/step-000006.tfm" "$f"
    at=$(tfm-cat "$f" | awk '$3 == "adam.m.emb" { print $NF }')
    printf 'A' | dd of="$f" bs=1 seek=$((at + 200)) conv=notrunc status=none
    run tfm-cat "$f"
    assert_failure 1
    for k in "" -k; do
        run tfm-avg $k -o "$T/x.tfm" "$M/run/step-000005.tfm" "$f"
        assert_failure 1
        assert_output --regexp "^tfm-avg: $f: record [0-9]+ 'adam.m.emb': at byte [0-9]+: crc mismatch$"
        [ ! -e "$T/x.tfm" ]
    done
    # tfm-decode reads the parameters only (tfm-decode(1)): the same output as from the intact one
    tfm-decode -q -m "$M/run/step-000006.tfm" --text "$M/test.tfm" > "$T/good.txt"
    run tfm-decode -q -m "$f" --text "$M/test.tfm"
    assert_success
    assert_output "$(cat "$T/good.txt")"
}

@test "-o a link: the checkpoint replaces the link's target, the link stays" {
    tfm-avg -n 2 -o "$T/ref.tfm" "$M/run"
    mkdir "$T/models"
    echo old > "$T/models/avg.tfm"
    ln -s models/avg.tfm "$T/avg.tfm"
    run tfm-avg -n 2 -o "$T/avg.tfm" "$M/run"
    assert_success
    [ -L "$T/avg.tfm" ]
    cmp "$T/models/avg.tfm" "$T/ref.tfm"
    run ls "$T" "$T/models"
    refute_output --partial ".tmp"
}

@test "-o naming one of the checkpoints averaged is a usage error: it stays" {
    # (run/last.tfm over run/ replaced the newest checkpoint with the average, its Adam
    # moments gone, exit 0)
    cp -r "$M/run" "$T/run"
    cp "$T/run/step-000006.tfm" "$T/keep.tfm"
    run tfm-avg -n 2 -o "$T/run/last.tfm" "$T/run"
    assert_failure 2
    assert_line --index 0 "tfm-avg: --output '$T/run/last.tfm' is the checkpoint $T/run/step-000006.tfm: the average would replace it"
    run tfm-avg -o "$T/run/step-000005.tfm" "$T/run/step-000005.tfm" "$T/run/step-000006.tfm"
    assert_failure 2
    cmp "$T/run/step-000006.tfm" "$T/keep.tfm"
    tfm-avg -n 2 -o "$T/avg.tfm" "$T/run"
}

@test "a checkpoint is not written to a terminal" {
    command -v script > /dev/null || skip "no script(1) to make a terminal"
    run script -qec "tfm-avg '$M/run/step-000002.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "tfm-avg: refusing to write a checkpoint to a terminal"
    assert_line --partial "rc=2"
    refute_output --partial "TFM"
    run script -qec "tfm-avg -o /dev/tty '$M/run/step-000002.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "tfm-avg: --output: '/dev/tty' is a terminal: refusing to write a binary stream to it"
    assert_line --partial "rc=2"
}

@test "--progress: a line as each checkpoint is read, one when the mean is written; a terminal gets them, --quiet none" {
    run tfm-avg --progress -n 3 -o "$T/avg.tfm" "$M/run"
    assert_success
    assert_equal "${#lines[@]}" 4
    # the values are those of the parameters: the bytes read count them, 4 each
    local values; values=$(tfm-cat "$M/run/step-000004.tfm" |
        awk '$1 == "record" && $3 ~ /^param\./ { d = $5; gsub(/[][]/, "", d); n = split(d, a, ",")
                                                  v = 1; for (i = 1; i <= n; i++) v *= a[i]; s += v }
             END { print s }')
    [ "$values" -gt 1000 ]
    local mb; mb=$(awk -v v="$values" 'BEGIN { printf "%.1f", 4 * v / 1e6 }')
    assert_line --index 0 --regexp "^tfm-avg: read 1/3: $M/run/step-000004.tfm \(step 4\), $mb MB in [0-9.]+s \([0-9]+ MB/s\), eta [0-9]+s$"
    mb=$(awk -v v="$values" 'BEGIN { printf "%.1f", 3 * 4 * v / 1e6 }')
    assert_line --index 2 --regexp "^tfm-avg: read 3/3: $M/run/step-000006.tfm \(step 6\), $mb MB in [0-9.]+s \([0-9]+ MB/s\), eta 0s$"
    assert_line --index 3 --regexp "^tfm-avg: wrote $T/avg.tfm: the mean of 3 checkpoints \(steps 4,5,6\), $values values \(the parameters\), in [0-9.]+s$"
    # with the moments, three times the values
    run tfm-avg -p -k -o "$T/avgk.tfm" "$M/run/step-000002.tfm"
    assert_success
    assert_line --index 1 --regexp "^tfm-avg: wrote $T/avgk.tfm: the mean of 1 checkpoint \(step 2\), $((3 * values)) values \(the parameters and their Adam moments\), in "
    # -k over checkpoints without moments (an average): the parameters alone, said so
    tfm-avg -o "$T/nomoments.tfm" "$M/run/step-000002.tfm"
    run tfm-avg -p -k -o "$T/k2.tfm" "$T/nomoments.tfm"
    assert_success
    assert_line --index 1 --regexp "^tfm-avg: wrote $T/k2.tfm: the mean of 1 checkpoint \\(step 2\\), $values values \\(the parameters\\), in "
    # standard input is named as in the errors
    run bash -c "tfm-avg -p -o '$T/in.tfm' - < '$M/run/step-000003.tfm'"
    assert_success
    assert_line --index 0 --partial "tfm-avg: read 1/1: <stdin> (step 3), "
    # not a terminal: nothing unless asked; --quiet wins over a terminal
    run tfm-avg -n 2 -o "$T/avg.tfm" "$M/run"
    assert_success
    assert_output ""
    command -v script > /dev/null || skip "no script(1) to make a terminal"
    run script -qec "tfm-avg -n 2 -o '$T/t.tfm' '$M/run'" /dev/null
    assert_output --partial "tfm-avg: read 2/2: $M/run/step-000006.tfm (step 6)"
    assert_output --partial "tfm-avg: wrote $T/t.tfm: the mean of 2 checkpoints (steps 5,6)"
    run script -qec "tfm-avg -q -n 2 -o '$T/t.tfm' '$M/run'" /dev/null
    assert_output ""
}
