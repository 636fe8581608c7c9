#!/usr/bin/env bats
# tfm-train: every option and bad input, checkpoints, resume after SIGKILL (bit for bit),
# ranks against update-freq, signals, and convergence of configs/tiny.conf on real data
# (the first 3000 pairs of data/multi30k-ende).

setup_file() {
    D="$TFM_ROOT/data/multi30k-ende"
    M="$BATS_FILE_TMPDIR"
    zcat "$D/train.en.gz" | head -n 3000 > "$M/en.txt"
    zcat "$D/train.de.gz" | head -n 3000 > "$M/de.txt"
    zcat "$D/val.en.gz" | head -n 200 > "$M/val.en"
    zcat "$D/val.de.gz" | head -n 200 > "$M/val.de"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 1000 "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de.tfm" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/val.en.tfm" "$M/val.en"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/val.de.tfm" "$M/val.de"
    tfm-batch -q --tokens 1024 "$M/en.tfm" "$M/de.tfm" > "$M/b.tfm"
    tfm-batch -q --tokens 1024 "$M/val.en.tfm" "$M/val.de.tfm" > "$M/v.tfm"
    # a small stream (about 12 batches) and a source-only one
    head -n 500 "$M/en.txt" > "$M/en500.txt"
    head -n 500 "$M/de.txt" > "$M/de500.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en500.tfm" "$M/en500.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de500.tfm" "$M/de500.txt"
    tfm-batch -q --tokens 1024 "$M/en500.tfm" "$M/de500.tfm" > "$M/b500.tfm"
    tfm-batch -q --tokens 1024 "$M/en500.tfm" > "$M/src-only.tfm"
    # the same sentences under another vocabulary of the same size
    tfm-tokenize train -q -m "$M/other.model" --vocab 1000 --type unigram "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/other.model" --eos -o "$M/oen.tfm" "$M/en500.txt"
    tfm-tokenize encode -q -m "$M/other.model" --eos -o "$M/ode.tfm" "$M/de500.txt"
    tfm-batch -q --tokens 1024 "$M/oen.tfm" "$M/ode.tfm" > "$M/other.tfm"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    load checkpoints
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
    CONF="$TFM_ROOT/configs/tiny.conf"
    # a smaller model than tiny for the option tests: a few ms an update
    SMALL=(-c "$CONF" --set layers=1 --set d_model=32 --set d_ff=64 --set heads=2 -j 1)
    BG=()                       # background runs of a test, ended by teardown
}

teardown() {
    for p in "${BG[@]}"; do kill -KILL "$p" 2> /dev/null || true; done
}

# Wait (up to 30 s) until DIR's newest checkpoint, last.tfm, is of update N or later: with
# --keep, the file of update N itself may be gone again between two looks.
wait_step() {
    local i l
    for i in $(seq 3000); do
        l=$(readlink "$1/last.tfm" 2> /dev/null) && [ $((10#${l:5:6})) -ge "$2" ] && return 0
        sleep 0.01
    done
    return 1
}


@test "--help mirrors the synopsis; --version" {
    run tfm-train --help
    assert_success
    assert_line --index 0 --partial "usage: tfm-train -c CONFIG [--set KEY=VALUE]... -o DIR [--valid FILE] [--valid-every N]"
    assert_output --partial "--ranks R"
    assert_output --partial "--print-config"
    # every option of the list is in the usage: contract.bats, for every tool
    run tfm-train --version
    assert_success
    assert_output "tfm-train $(cat "$TFM_ROOT/VERSION")"
}

@test "usage errors exit 2 and name the flag" {
    run tfm-train -c "$CONF" "$M/b.tfm"
    assert_failure 2
    assert_output --partial "-o DIR is required"
    run tfm-train -o "$T/x" "$M/b.tfm"
    assert_failure 2
    assert_output --partial "-c CONFIG is required"
    run tfm-train -c "$CONF" -o "$T/x" --max-steps 1x "$M/b.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-train: --max-steps: '1x': expected an integer from 0 to 2147483647"
    run tfm-train -c "$CONF" -o "$T/x" --max-time 5q "$M/b.tfm"
    assert_failure 2
    assert_output --partial "--max-time: '5q' is not a duration"
    run tfm-train -c "$CONF" -o "$T/x" --save-every 10x "$M/b.tfm"
    assert_failure 2
    assert_output --partial "--save-every: '10x' is neither"
    # a fraction without a unit is neither updates nor a duration: '1' is 1 update, '1.5'
    # is not 1.5 seconds
    run tfm-train -c "$CONF" -o "$T/x" --save-every 1.5 "$M/b.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-train: --save-every: '1.5': a number of updates is whole, a duration has a unit (1.5s, 1.5m)"
    run tfm-train -c "$CONF" -o "$T/x" --ranks 0 "$M/b.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-train: --ranks: '0': expected an integer from 1 to 256"
    run tfm-train -c "$CONF" -o "$T/x" --update-freq 0 "$M/b.tfm"
    assert_failure 2
    run tfm-train -c "$CONF" -o "$T/x" --keep -1 "$M/b.tfm"
    assert_failure 2
    run tfm-train -c "$CONF" -o "$T/x" --threads 0 "$M/b.tfm"
    assert_failure 2
    run tfm-train -c "$CONF" -o "$T/x" --report-every 0 "$M/b.tfm"
    assert_failure 2
    run tfm-train -c "$CONF" -o "$T/x" --max-memory 12Q "$M/b.tfm"
    assert_failure 2
    assert_output --partial "--max-memory: '12Q' is not a size"
    run tfm-train -c "$CONF" -o "$T/x" --set dropuot=0.3 "$M/b.tfm"
    assert_failure 2
    assert_output --partial "dropuot"
    run tfm-train -c "$CONF" -o "$T/x" --device tpu "$M/b.tfm"
    assert_failure 2
    assert_output --partial "tfm-train: --device: 'tpu': expected auto, cpu, cuda or sim"
    run tfm-train -c "$CONF" -o "$T/x" "$M/b.tfm" "$M/v.tfm"
    assert_failure 2
    run tfm-train -c "$T/none.conf" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$T/none.conf"
    [ ! -e "$T/x" ]
}

@test "--print-config prints the effective config with --set and the key options" {
    run tfm-train -c "$CONF" --set dropout=0.3 --max-steps 77 --keep 3 --save-every 50 --print-config
    assert_success
    assert_line "dropout = 0.3"
    assert_line "max_steps = 77"
    assert_line "keep = 3"
    assert_line "save_every = 50"
    assert_line "d_model = 64"
    # the options that name a key win over --set of it, before or after; --set's last wins
    run tfm-train -c "$CONF" --max-steps 3 --set max_steps=5 --set keep=7 --keep 2 \
        --set dropout=0.2 --set dropout=0.25 --print-config
    assert_success
    assert_line "max_steps = 3"
    assert_line "keep = 2"
    assert_line "dropout = 0.25"
}

@test "training writes step-NNNNNN.tfm checkpoints and last.tfm, with config, vocabulary and state" {
    run tfm-train "${SMALL[@]}" -o "$T/ck" --max-steps 4 --save-every 2 "$M/b.tfm"
    assert_success
    assert_line --partial "tfm-train: device: cpu"
    assert_line "tfm-train: saved $T/ck/step-000002.tfm"
    assert_line "tfm-train: max steps reached at update 4; last checkpoint $T/ck/step-000004.tfm"
    run ls "$T/ck"
    assert_output $'last.tfm\nstep-000002.tfm\nstep-000004.tfm'
    [ "$(readlink "$T/ck/last.tfm")" = step-000004.tfm ]
    run tfm-cat "$T/ck/last.tfm"
    assert_success
    assert_line "meta kind=checkpoint"
    assert_line "meta step=4"
    assert_line "meta ranks=1"
    assert_line "meta spm.crc32=$(tfm-cat --header "$M/b.tfm" | sed -n 's/^meta spm.crc32=//p')"
    assert_line --regexp '^record 2 config u8 '
    assert_line --regexp '^record 3 state i64 \[9\]'
    assert_line --regexp '^record [0-9]+ param\.emb f32 \[1000,32\]'
    assert_line --regexp '^record [0-9]+ adam\.m\.emb f32 \[1000,32\]'
    assert_line --regexp '^record [0-9]+ adam\.v\.emb f32 \[1000,32\]'
    # config text (u8 values, one row): the effective config, vocab from the stream
    run bash -c "tfm-cat --values '$T/ck/last.tfm' | awk '/record 2 config/ { getline; n = split(\$0, b, \" \"); for (i = 1; i <= n; i++) printf \"%c\", b[i] }'"
    assert_line "vocab = 1000"
    assert_line "d_model = 32"
    # state: layout version 2, step 4, epoch 0, 4 batches read, tokens, ms, seed 1, 1 rng word = 4
    run bash -c "tfm-cat --values '$T/ck/last.tfm' | awk '/record 3 state/ { getline; print }'"
    assert_output --regexp $'^\t2 4 0 4 [0-9]+ [0-9]+ 1 1 4$'
}

@test "--save-every N and --keep N keep the newest checkpoints; a duration saves at the end" {
    run tfm-train "${SMALL[@]}" -o "$T/k" --max-steps 10 --save-every 3 --keep 2 -q "$M/b.tfm"
    assert_success
    assert_output ""
    run ls "$T/k"
    assert_output $'last.tfm\nstep-000009.tfm\nstep-000010.tfm'
    run tfm-train "${SMALL[@]}" -o "$T/h" --max-steps 5 --save-every 1h -q "$M/b.tfm"
    assert_success
    run ls "$T/h"
    assert_output $'last.tfm\nstep-000005.tfm'
}

@test "--max-time stops after the duration, with a checkpoint" {
    run tfm-train "${SMALL[@]}" -o "$T/t" --max-time 1s "$M/b.tfm"
    assert_success
    assert_line --partial "max time reached at update"
    run ls "$T/t"
    assert_line --regexp '^step-[0-9]{6}\.tfm$'
}

@test "a piped stream ends training at its end; the last partial update is dropped" {
    nb=$(tfm-cat --header "$M/b500.tfm" | sed -n 's/^meta batches=//p')
    run bash -c "cat '$M/b500.tfm' | tfm-train ${SMALL[*]} -o '$T/p' --update-freq 2 --max-steps 1000"
    assert_success
    assert_line "tfm-train: end of the batch stream at update $((nb / 2)); last checkpoint $T/p/step-$(printf %06d $((nb / 2))).tfm"
    # a file is read again: more updates than batches
    run tfm-train "${SMALL[@]}" -o "$T/f" --max-steps $((nb + 3)) "$M/b500.tfm"
    assert_success
    assert_line --partial "max steps reached at update $((nb + 3))"
}

@test "--progress, --log and --valid: progress lines, tab-separated log, validation" {
    run tfm-train "${SMALL[@]}" -o "$T/l" --max-steps 6 --report-every 2 --valid "$M/v.tfm" \
        --valid-every 3 --log "$T/log" "$M/b.tfm"
    assert_success
    refute_line --partial "step 2/6"        # stderr is not a terminal: no progress lines
    assert_line --regexp '^tfm-train: valid step 3 loss [0-9.]+ ppl [0-9.]+ tokens [0-9]+$'
    run tfm-train "${SMALL[@]}" -o "$T/l2" --max-steps 4 --report-every 2 --progress "$M/b.tfm"
    assert_success
    assert_line --regexp '^tfm-train: step 2/4 loss [0-9.]+ ppl [0-9.]+ lr [0-9.e+-]+ [0-9.]+k? tok/s elapsed [0-9]+s eta [0-9]+s$'
    assert_line --regexp '^tfm-train: step 4/4 '
    run cat "$T/log"
    assert_line --index 0 $'kind\tstep\tloss\tppl\tlr\ttokens_per_s\telapsed_s\ttokens\tbleu'
    assert_line --index 1 --regexp $'^train\t2\t[0-9.]+\t[0-9.]+\t[0-9.e+-]+\t[0-9.]+\t[0-9.]+\t[0-9]+\t-$'
    assert_line --index 2 --regexp $'^valid\t3\t[0-9.]+\t[0-9.]+\t-\t-\t'
    assert_line --index 3 --regexp $'^train\t4\t'
    assert_line --index 4 --regexp $'^train\t6\t'
    assert_line --index 5 --regexp $'^valid\t6\t'
    assert_equal "${#lines[@]}" 6
    # every train line has 9 columns and a loss below the uniform one (ln 1000 + smoothing)
    run awk -F '\t' '$1 == "train" && (NF != 9 || $3 > 7.5) { bad++ } END { print bad + 0 }' "$T/log"
    assert_output 0
    # --log - is standard output (it was a file named '-'), under its header line
    cd "$T"
    run bash -c "tfm-train ${SMALL[*]} -q -o '$T/l3' --max-steps 2 --report-every 1 --log - '$M/b.tfm' 2> /dev/null"
    assert_success
    assert_line --index 0 $'kind\tstep\tloss\tppl\tlr\ttokens_per_s\telapsed_s\ttokens\tbleu'
    assert_line --index 2 --regexp $'^train\t2\t'
    [ ! -e "$T/-" ]
    # a FIFO (another shell's reader) gets the header too: ftell, which said whether the
    # log was new, fails on it
    mkfifo "$T/fifo"
    cat "$T/fifo" > "$T/fifo.log" &
    tfm-train "${SMALL[@]}" -q -o "$T/l4" --max-steps 2 --report-every 1 --log "$T/fifo" "$M/b.tfm"
    wait $!
    run cat "$T/fifo.log"
    assert_line --index 0 $'kind\tstep\tloss\tppl\tlr\ttokens_per_s\telapsed_s\ttokens\tbleu'
    assert_equal "${#lines[@]}" 3
}

@test "tfm-train(1)'s progress lines are lines a run of configs/base.conf could print" {
    # the example's lr is the schedule's at its step, its eta the remaining updates at the
    # rate of its elapsed time, its tokens per update within the budget, and its ppl
    # (unsmoothed) below exp(loss): with label smoothing eps and V pieces the smoothed loss
    # is at least (1 - eps) NLL + eps ln V, above the NLL while NLL < ln V
    man=$(sed -n '/^tfm-train: step [0-9]/p; /^tfm-train: valid step/p' "$TFM_ROOT/man/tfm-train.1")
    [ "$(printf '%s\n' "$man" | wc -l)" -eq 2 ]
    run tfm-train -c "$TFM_ROOT/configs/base.conf" --set vocab=37000 --print-config
    assert_success
    conf=$output
    run awk -v conf="$conf" -v man="$man" '
        function dur(s,   t, n, c, i) {
            t = 0; n = ""
            for (i = 1; i <= length(s); i++) {
                c = substr(s, i, 1)
                if (c ~ /[0-9]/) { n = n c; continue }
                t += n * (c == "d" ? 86400 : c == "h" ? 3600 : c == "m" ? 60 : 1); n = ""
            }
            return t
        }
        function si(s,   u) {
            u = substr(s, length(s), 1)
            return u == "k" ? s * 1e3 : u == "M" ? s * 1e6 : s + 0
        }
        BEGIN {
            split(conf, cl, "\n")
            for (i in cl) if (split(cl[i], kv, " = ") == 2) key[kv[1]] = kv[2]
            split(man, ml, "\n")
            split(ml[1], f, " ")          # tfm-train: step S/MAX loss L ppl P lr R T tok/s elapsed E eta A
            split(f[3], sm, "/")
            step = sm[1]; max = sm[2]
            lr = key["lr_scale"] * key["d_model"] ^ -0.5 * \
                 (step ^ -0.5 < step * key["warmup"] ^ -1.5 ? step ^ -0.5 : step * key["warmup"] ^ -1.5)
            if (sprintf("%.3e", lr) != f[9]) print "lr " f[9] ", the schedule gives " sprintf("%.3e", lr)
            if (max != key["max_steps"]) print "max steps " max ", base.conf has " key["max_steps"]
            el = dur(f[13]); eta = dur(f[15]); want = (max - step) * el / step
            # elapsed is rounded to the minute here, eta to the hour
            if (eta - want > 3600 + (max - step) * 60 / step || want - eta > 3600 + (max - step) * 60 / step)
                print "eta " f[15] ", the rate gives " want " s"
            if (si(f[10]) * el / step > key["tokens"])
                print f[10] " tok/s is more target tokens an update than the budget " key["tokens"]
            eps = key["label_smoothing"]; V = key["vocab"]
            for (k = 1; k <= 2; k++) {
                split(ml[k], g, " ")
                for (j = 1; j < length(g); j++) {
                    if (g[j] == "loss") loss = g[j + 1]
                    if (g[j] == "ppl") ppl = g[j + 1]
                }
                nll = log(ppl)
                if (nll < log(V) && loss < (1 - eps) * nll + eps * log(V))
                    print "line " k ": loss " loss " below what ppl " ppl " allows"
            }
        }'
    assert_success
    assert_output ""
}

@test "tok/s is the rate of training: the time spent validating and saving is left out" {
    # every update validates on a set of about 100 batches and saves: most of the time
    run tfm-train "${SMALL[@]}" -q -o "$T/r" --max-steps 4 --report-every 1 --valid-every 1 \
        --save-every 1 --valid "$M/b.tfm" --log "$T/log" "$M/b500.tfm"
    assert_success
    # tokens_per_s of each report after the first against its tokens over the elapsed time
    # (which counts validation): training alone is several times faster
    run awk -F '\t' '$1 == "train" { if (t != "") { wall = ($8 - k) / ($7 - t);
                                        print ($6 > 3 * wall) ? "ok" : "slow " $6 " " wall }
                                      t = $7; k = $8 }' "$T/log"
    assert_output $'ok\nok\nok'
}

@test "--quiet prints nothing but errors" {
    run tfm-train "${SMALL[@]}" -o "$T/q" --max-steps 2 --progress --quiet "$M/b.tfm"
    assert_success
    assert_output ""
}

@test "--resume after SIGKILL ends with the same parameters, bit for bit" {
    run tfm-train "${SMALL[@]}" -o "$T/whole" --max-steps 60 -q "$M/b500.tfm"
    assert_success
    tfm-train "${SMALL[@]}" -o "$T/cut" --max-steps 60 --save-every 2 -q "$M/b500.tfm" &
    pid=$!
    for i in $(seq 3000); do [ -e "$T/cut/step-000010.tfm" ] && break; sleep 0.01; done
    kill -KILL $pid
    wait $pid || true
    newest=$(ls "$T/cut" | grep -E '^step-[0-9]+\.tfm$' | tail -n 1)
    [ "$newest" != step-000060.tfm ]     # it was killed before the end
    run tfm-train "${SMALL[@]}" -o "$T/cut" --max-steps 60 --save-every 2 --resume "$M/b500.tfm"
    assert_success
    assert_line "tfm-train: resuming from $T/cut/$newest: update $((10#${newest:5:6})), epoch $(( 10#${newest:5:6} / $(tfm-cat --header "$M/b500.tfm" | sed -n 's/^meta batches=//p') )), batch $(( 10#${newest:5:6} % $(tfm-cat --header "$M/b500.tfm" | sed -n 's/^meta batches=//p') ))"
    diff <(params "$T/whole/step-000060.tfm") <(params "$T/cut/step-000060.tfm")
    # and the comparison can fail: an earlier checkpoint differs
    ! diff -q <(params "$T/whole/step-000060.tfm") <(params "$T/cut/step-000010.tfm")
}

@test "--resume without -c takes the checkpoint's config; may change max_steps only" {
    run tfm-train "${SMALL[@]}" -o "$T/r" --max-steps 3 -q "$M/b.tfm"
    assert_success
    run tfm-train -o "$T/r" --resume --max-steps 5 -j 1 "$M/b.tfm"
    assert_success
    assert_line "tfm-train: resuming from $T/r/step-000003.tfm: update 3, epoch 0, batch 3"
    assert_line --partial "max steps reached at update 5"
    run tfm-train "${SMALL[@]}" --set dropout=0.3 -o "$T/r" --resume --max-steps 6 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "config key 'dropout' is 0.1 in the checkpoint and 0.3 now"
    run tfm-train "${SMALL[@]}" -o "$T/r" --max-steps 6 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$T/r: holds checkpoints (newest $T/r/step-000005.tfm): use --resume"
    run tfm-train -o "$T/empty" --resume "$M/b.tfm"
    assert_failure 2
    assert_output --partial "no checkpoint to resume and no -c CONFIG"
}

@test "--resume: the keys of the search may change, and the checkpoints after carry them" {
    run tfm-train "${SMALL[@]}" -o "$T/s" --max-steps 2 -q "$M/b.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" --set beam=6 --set alpha=1 --set max_len_b=9 --set min_len=2 \
        -o "$T/s" --resume --max-steps 3 -q "$M/b.tfm"
    assert_success
    run bash -c "tfm-cat --values '$T/s/step-000003.tfm' | awk '/record 2 config/ { getline; n = split(\$0, b, \" \"); for (i = 1; i <= n; i++) printf \"%c\", b[i] }'"
    assert_line "beam = 6"
    assert_line "alpha = 1"
    assert_line "max_len_b = 9"
    assert_line "min_len = 2"
    # a key of the model still may not
    run tfm-train "${SMALL[@]}" --set heads=4 -o "$T/s" --resume --max-steps 4 -q "$M/b.tfm"
    assert_failure 1
    assert_output --partial "config key 'heads' is 2 in the checkpoint and 4 now"
}

@test "--ranks R equals --update-freq R up to float reassociation" {
    # adam_eps 1e-3: Adam's first steps turn tiny gradients into +-lr; this keeps the
    # comparison about the gradients (see tests/unit/test_train.c)
    run tfm-train "${SMALL[@]}" --set adam_eps=1e-3 -o "$T/r2" --ranks 2 --max-steps 8 -q "$M/b.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" --set adam_eps=1e-3 -o "$T/k2" --update-freq 2 --max-steps 8 -q "$M/b.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" --set adam_eps=1e-3 -o "$T/k1" --max-steps 8 -q "$M/b.tfm"
    assert_success
    run max_diff "$T/r2/last.tfm" "$T/k2/last.tfm"
    echo "ranks 2 against update-freq 2: $output"
    awk -v d="$output" 'BEGIN { exit !(d < 2e-6) }'
    run max_diff "$T/k1/last.tfm" "$T/k2/last.tfm"
    echo "update-freq 1 against 2: $output"
    awk -v d="$output" 'BEGIN { exit !(d > 2e-5) }'
    run tfm-cat --header "$T/r2/last.tfm"
    assert_line "meta ranks=2"
}

@test "SIGTERM, SIGINT and SIGHUP finish the update, write a checkpoint and exit 143 / 130 / 129" {
    env --default-signal=INT true 2> /dev/null || skip "env has no --default-signal"
    for sig in TERM INT HUP; do
        rm -rf "$T/s"
        # background jobs start with SIGINT ignored: env gives tfm-train the default back
        env --default-signal=INT tfm-train "${SMALL[@]}" -o "$T/s" --save-every 1 \
            --max-steps 100000 "$M/b.tfm" 2> "$T/err" &
        pid=$!
        for i in $(seq 3000); do [ -e "$T/s/step-000002.tfm" ] && break; sleep 0.01; done
        kill -$sig $pid
        rc=0
        wait $pid || rc=$?
        [ $sig = TERM ] && assert_equal $rc 143
        [ $sig = INT ] && assert_equal $rc 130
        [ $sig = HUP ] && assert_equal $rc 129
        run cat "$T/err"
        assert_line --regexp '^tfm-train: stopped by a signal at update [0-9]+; last checkpoint '
        last=$(readlink "$T/s/last.tfm")
        run tfm-cat "$T/s/$last"
        assert_success
    done
}

@test "a closed stderr does not kill training: it runs to its end and saves" {
    rm -rf "$T/pipe"
    set +o pipefail
    tfm-train "${SMALL[@]}" -o "$T/pipe" --progress --report-every 1 --max-steps 40 \
        "$M/b.tfm" 2>&1 | head -n 2 > /dev/null
    rc=${PIPESTATUS[0]}
    assert_equal "$rc" 0
    [ -e "$T/pipe/step-000040.tfm" ]
}

@test "wrong stream kinds: tokens, checkpoint, source-only batches" {
    run tfm-train "${SMALL[@]}" -o "$T/w" "$M/en.tfm"
    assert_failure 1
    assert_output --partial "$M/en.tfm: a 'tokens' stream, expected batches"
    run tfm-train "${SMALL[@]}" -o "$T/w2" --max-steps 1 -q "$M/b.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" -o "$T/w3" "$T/w2/last.tfm"
    assert_failure 1
    assert_output --partial "a 'checkpoint' stream, expected batches"
    run tfm-train "${SMALL[@]}" -o "$T/w4" "$M/src-only.tfm"
    assert_failure 1
    assert_output --partial "without targets"
    run tfm-train "${SMALL[@]}" -o "$T/w4" --valid "$M/src-only.tfm" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$M/src-only.tfm: a batch stream without targets: training and validation need source and target"
    run tfm-train "${SMALL[@]}" -o "$T/w5" --valid "$M/en.tfm" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$M/en.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/w6" "$T/nothing.tfm"
    assert_failure 1
    assert_output --partial "$T/nothing.tfm"
    # - is standard input (it was a file named '-'): the config there, with the batches
    # from FILE; both from standard input, or the validation stream read once, refused
    cd "$T"
    run bash -c "tfm-train -c - -o '$T/w7' --max-steps 1 -q '$M/b.tfm' < '$CONF'"
    assert_success
    [ -e "$T/w7/last.tfm" ]
    run bash -c "cat '$M/b.tfm' | tfm-train -c - -o '$T/w8' --max-steps 1 -q"
    assert_failure 2
    assert_line --index 0 "tfm-train: -c -: standard input cannot feed both the config and the batch stream (give FILE)"
    # a regular file too: the config read again as the batches
    run bash -c "tfm-train -c /dev/stdin -o '$T/w8' --max-steps 1 -q < '$CONF'"
    assert_failure 2
    assert_line --index 0 "tfm-train: -c /dev/stdin: standard input cannot feed both the config and the batch stream (give FILE)"
    run bash -c "cat '$M/b.tfm' | tfm-train ${SMALL[*]} -o '$T/w8' --valid - --max-steps 1 -q '$M/b.tfm'"
    assert_failure 2
    assert_line --index 0 --partial "tfm-train: --valid -: standard input is read once"
    [ ! -e "$T/w8" ]
    [ ! -e "$T/-" ]
    # -o - made a directory named '-'
    run tfm-train "${SMALL[@]}" -o - --max-steps 1 -q "$M/b.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-train: -o -: checkpoints are files of a directory, not a stream: give its path"
    [ ! -e "$T/-" ]
}

@test "vocabulary mismatch between batches and checkpoint, or batches and validation" {
    run tfm-train "${SMALL[@]}" -o "$T/v" --max-steps 2 -q "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" -o "$T/v" --resume --max-steps 4 "$M/other.tfm"
    assert_failure 1
    assert_output --partial "$M/other.tfm: vocabulary mismatch: the batches have vocabulary crc"
    assert_output --partial "checkpoint $T/v/step-000002.tfm has"
    run tfm-train "${SMALL[@]}" -o "$T/v2" --valid "$M/other.tfm" "$M/b500.tfm"
    assert_failure 1
    assert_output --partial "$M/other.tfm: vocabulary mismatch with the training batches"
}

@test "an unwritable output directory is an error before training" {
    touch "$T/file"
    run tfm-train "${SMALL[@]}" -o "$T/file" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$T/file: not a directory"
    run tfm-train "${SMALL[@]}" -o "$T/file/sub" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$T/file/sub: cannot create directory"
    run tfm-train "${SMALL[@]}" -o /proc/tfm-ckpt "$M/b.tfm"
    assert_failure 1
    assert_output --partial "/proc/tfm-ckpt: cannot create directory"
    refute_output --partial "saved"
}

@test "a checkpoint the disk cannot hold stops the run naming the file once; the one before stays whole" {
    run tfm-train "${SMALL[@]}" -q -o "$T/f" --max-steps 2 "$M/b.tfm"
    assert_success
    # a file size limit (SIGXFSZ ignored: writes fail with EFBIG, as on a full disk) that
    # holds the header and vocabulary but not the tensors
    kb=$(( $(stat -c %s "$T/f/step-000002.tfm") / 1024 - 100 ))
    run bash -c "trap '' XFSZ; ulimit -f $kb; exec tfm-train ${SMALL[*]} -q -o '$T/f' \
        --max-steps 4 --save-every 1 --resume '$M/b.tfm'"
    assert_failure 1
    assert_output "tfm-train: update 3: $T/f/step-000003.tfm: write error: File too large"
    run ls -A "$T/f"
    assert_output $'last.tfm\nstep-000002.tfm'
    run tfm-train "${SMALL[@]}" -q -o "$T/f" --max-steps 4 --resume "$M/b.tfm"
    assert_success
    run tfm-cat --header "$T/f/last.tfm"
    assert_line "meta step=4"
}

@test "a corrupt or truncated checkpoint on resume is an error naming it" {
    run tfm-train "${SMALL[@]}" -o "$T/c" --max-steps 2 -q "$M/b.tfm"
    assert_success
    f="$T/c/step-000002.tfm"
    size=$(stat -c %s "$f")
    printf '\x55' | dd of="$f" bs=1 seek=$((size - 2000)) conv=notrunc status=none
    run tfm-train "${SMALL[@]}" -o "$T/c" --resume --max-steps 4 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "cannot resume: $f: record"
    assert_output --partial "crc"
    head -c 5000 "$T/c/step-000002.tfm" > "$T/c/step-000003.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/c" --resume --max-steps 4 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "cannot resume: $T/c/step-000003.tfm"
}

@test "a truncated batch stream is an error naming it" {
    head -c 20000 "$M/b.tfm" > "$T/cut.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/t" --max-steps 100 "$T/cut.tfm"
    assert_failure 1
    assert_output --partial "$T/cut.tfm"
    refute_output --partial "saved"
}

@test "bad input met once training has begun loses no update: the updates done are saved" {
    # a pipe cut inside a batch record: the updates before it are kept, and resume
    nb=$(tfm-cat --header "$M/b500.tfm" | sed -n 's/^meta batches=//p')
    at=$(tfm-cat "$M/b500.tfm" | awk '$3 == "batch.tgt" { print $NF }' | sed -n "$((nb / 2))p")
    run bash -c "head -c $((at + 100)) '$M/b500.tfm' | tfm-train ${SMALL[*]} -q -o '$T/p' --save-every 0"
    assert_failure 1
    assert_output --regexp "^tfm-train: <stdin>: record [0-9]+ 'batch\.tgt': .*truncated.*; stopped at update [1-9][0-9]*, its checkpoint saved$"
    n=$(echo "$output" | sed -n 's/.*stopped at update \([0-9]*\),.*/\1/p')
    [ "$n" -lt "$nb" ]
    [ -e "$T/p/step-$(printf %06d "$n").tfm" ]
    # the same updates as a run of as many from the whole file
    run tfm-train "${SMALL[@]}" -o "$T/f" --max-steps "$n" -q "$M/b500.tfm"
    assert_success
    diff <(params "$T/p/last.tfm") <(params "$T/f/last.tfm")
    # a validation that fails (a sentence longer than max_len): the update before it is kept
    head -n 12 "$M/val.en" | tr '\n' ' ' | sed 's/$/\n/' > "$T/long.en"
    head -n 12 "$M/val.de" | tr '\n' ' ' | sed 's/$/\n/' > "$T/long.de"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$T/long.en.tfm" "$T/long.en"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$T/long.de.tfm" "$T/long.de"
    tfm-batch -q --tokens 1024 --max-len 1000 "$T/long.en.tfm" "$T/long.de.tfm" > "$T/vlong.tfm"
    run tfm-train "${SMALL[@]}" --set max_len=64 -o "$T/v" --valid "$T/vlong.tfm" --valid-every 3 \
        --save-every 0 --max-steps 10 "$M/b500.tfm"
    assert_failure 1
    assert_output --partial "$T/vlong.tfm: batch 0: sentences of"
    assert_output --partial "longer than max_len=64"
    assert_output --partial "; stopped at update 3, its checkpoint saved"
    [ -e "$T/v/step-000003.tfm" ]
    # what the first validation would meet is refused before training: a budget too large,
    # a stream without batches
    tfm-batch -q --tokens 4096 "$M/val.en.tfm" "$M/val.de.tfm" > "$T/v4k.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/v2" --valid "$T/v4k.tfm" "$M/b500.tfm"
    assert_failure 1
    assert_output --partial "$T/v4k.tfm: batches of up to 4096 tokens, more than the batch budget"
    refute_output --partial "saved"
    tfm-batch -q --tokens 1024 --max-len 2 "$M/val.en.tfm" "$M/val.de.tfm" > "$T/none.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/v3" --valid "$T/none.tfm" "$M/b500.tfm"
    assert_failure 1
    assert_output --partial "$T/none.tfm: no batch in the stream: nothing to validate on"
    [ ! -e "$T/v2" ] && [ ! -e "$T/v3" ]
}

@test "a signal ignored at the start stays ignored: nohup's SIGHUP does not stop training" {
    nohup tfm-train "${SMALL[@]}" -o "$T/n" --save-every 0 --max-steps 100000 "$M/b.tfm" \
        > /dev/null 2> "$T/err" &
    pid=$!
    BG+=($pid)
    for i in $(seq 300); do grep -q "^tfm-train: step\|device" "$T/err" 2> /dev/null && break; sleep 0.1; done
    sleep 1
    kill -HUP $pid
    sleep 1
    kill -0 $pid                # still training
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    assert_equal $rc 143
    run cat "$T/err"
    assert_line --regexp '^tfm-train: stopped by a signal at update [0-9]+; last checkpoint '
}

@test "a stop signal while a pipe is silent ends the wait at once: the last update saved, exit 143" {
    mkfifo "$T/fifo"
    tfm-train "${SMALL[@]}" -o "$T/s" --max-steps 100000 --save-every 0 "$T/fifo" 2> "$T/err" &
    pid=$!
    BG+=($pid)
    exec 7> "$T/fifo"           # a writer that sends some batches, then nothing
    cat "$M/b500.tfm" >&7
    for i in $(seq 300); do grep -q . "$T/err" 2> /dev/null && break; sleep 0.1; done
    sleep 1                     # every batch sent is read: the run now waits on the pipe
    kill -TERM $pid
    rc=0
    for i in $(seq 50); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
    ! kill -0 $pid 2> /dev/null # ended within 5 s (it used to wait for the writer)
    wait $pid || rc=$?
    exec 7>&-
    assert_equal $rc 143
    run cat "$T/err"
    assert_line --regexp '^tfm-train: stopped by a signal at update [1-9][0-9]*; last checkpoint '
    run tfm-cat "$T/s/last.tfm"
    assert_success
    # TFM_STOP_GRACE takes a fraction, and says what it wants
    for g in x 0x10 ' 5' inf; do
        run env TFM_STOP_GRACE="$g" tfm-train "${SMALL[@]}" -q -o "$T/g" "$M/b500.tfm"
        assert_failure 1        # as every bad environment value (2 is for the command line)
        assert_output "tfm-train: TFM_STOP_GRACE=$g: expected seconds from 0 (none) to 1e7"
    done
    run env TFM_STOP_GRACE=0.5 tfm-train "${SMALL[@]}" -o "$T/g" --max-steps 1 -q "$M/b500.tfm"
    assert_success
    # every variable of tfm-train(1) with a bad value is an error on the CPU and on one
    # process, not only on the GPU or with several processes, where it is used
    local bad
    for bad in "TFM_CUDA_ATTN=bogus:TFM_CUDA_ATTN=bogus: flash or mm" \
               "TFM_BLAS_BUFFER_MB=lots:TFM_BLAS_BUFFER_MB='lots'" \
               "TFM_RENDEZVOUS_TIMEOUT=0:TFM_RENDEZVOUS_TIMEOUT=0: not a number of seconds" \
               "TFM_JOIN_TIMEOUT=x:TFM_JOIN_TIMEOUT=x: not a number of seconds" \
               "TFM_COLLECTIVE_TIMEOUT=-1:TFM_COLLECTIVE_TIMEOUT=-1: not a number of seconds" \
               "TFM_STOP_TIMEOUT=1e9:TFM_STOP_TIMEOUT=1e9: not a number of seconds" \
               "TFM_BUCKET_MB=0:TFM_BUCKET_MB=0: not a size in megabytes" \
               "TFM_RUN_TOKEN=short:TFM_RUN_TOKEN: 5 characters, 16 at least" \
               "TFM_MASTER_PORT=99999:TFM_MASTER_PORT='99999': not a port"; do
        for dev in cpu sim; do
            run env "${bad%%:*}" tfm-train "${SMALL[@]}" --device $dev -q -o "$T/env" \
                --max-steps 1 "$M/b500.tfm"
            assert_failure 1
            assert_output --partial "${bad#*:}"
            [ ! -e "$T/env" ]
        done
    done
    # a run resumed at its last update names the checkpoint it resumed
    run tfm-train "${SMALL[@]}" -o "$T/g" --max-steps 1 --resume "$M/b500.tfm"
    assert_success
    assert_line "tfm-train: max steps reached at update 1, before this run's first update: nothing trained; last checkpoint $T/g/step-000001.tfm"
}

@test "a run that stops before its first update writes no checkpoint: a signal on a stalled pipe, --max-time" {
    # the first batches of an update of 4, then nothing: SIGTERM wrote an untrained
    # step-000000.tfm
    cut=$(tfm-cat "$M/b500.tfm" | awk '$1 == "record" && $2 == 8 { print $NF }')
    mkfifo "$T/fifo"
    tfm-train "${SMALL[@]}" -o "$T/s" --update-freq 4 "$T/fifo" 2> "$T/err" &
    pid=$!
    BG+=($pid)
    exec 7> "$T/fifo"
    head -c "$cut" "$M/b500.tfm" >&7
    for i in $(seq 300); do grep -q device "$T/err" 2> /dev/null && break; sleep 0.1; done
    sleep 1
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    exec 7>&-
    assert_equal $rc 143
    run cat "$T/err"
    assert_line "tfm-train: stopped by a signal at update 0, before this run's first update: nothing trained, no checkpoint written"
    [ ! -e "$T/s" ]             # the directory it made is gone: nothing was written
    # a time limit over before the first update (a nanosecond): the same, exit 0; a
    # directory that was there stays, empty
    mkdir "$T/t"
    run tfm-train "${SMALL[@]}" -o "$T/t" --max-time 0.000000001 "$M/b.tfm"
    assert_success
    assert_line "tfm-train: max time reached at update 0, before this run's first update: nothing trained, no checkpoint written"
    run ls -A "$T/t"
    assert_output ""
    # resumed: its checkpoint stays the newest, and no other is written
    tfm-train "${SMALL[@]}" -q -o "$T/r" --max-steps 2 "$M/b.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/r" --resume --max-time 0.000000001 "$M/b.tfm"
    assert_success
    assert_line "tfm-train: max time reached at update 2, before this run's first update: nothing trained; last checkpoint $T/r/step-000002.tfm"
    run ls "$T/r"
    assert_output $'last.tfm\nstep-000002.tfm'
}

@test "a stop signal before a pipe has a writer, its header or first batch ends the wait at once: exit 143, nothing left" {
    # no writer yet (open(2) of the FIFO waits); nothing yet; then the header and
    # vocabulary, but no batch
    first=$(tfm-cat "$M/b500.tfm" | awk '$1 == "record" && $2 == 2 { print $NF }')
    for part in none 0 $first; do
        rm -rf "$T/h"
        mkfifo "$T/fifo"
        tfm-train "${SMALL[@]}" -o "$T/h" "$T/fifo" 2> "$T/err" &
        pid=$!
        BG+=($pid)
        if [ $part = none ]; then
            exec 7> /dev/null
        else
            exec 7> "$T/fifo"
            head -c $part "$M/b500.tfm" >&7
        fi
        for i in $(seq 300); do grep -q device "$T/err" 2> /dev/null && break; sleep 0.1; done
        sleep 0.5
        kill -TERM $pid
        for i in $(seq 50); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
        run kill -0 $pid            # ended within 5 s, not TFM_STOP_GRACE (120 s) later
        assert_failure
        rc=0
        wait $pid || rc=$?
        exec 7>&-
        rm "$T/fifo"
        assert_equal $rc 143
        run cat "$T/err"
        assert_line "tfm-train: $T/fifo: stopped by a signal while waiting for the batch stream: nothing trained"
        [ ! -e "$T/h" ]         # the directory it made is gone with its lock
    done
}

@test "a batch over the budget or the memory names the budget to lower" {
    run tfm-train "${SMALL[@]}" --set tokens=512 --set max_len=128 -o "$T/b" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$M/b.tfm: batches of up to 1024 tokens, more than the batch budget tokens=512: re-batch with tfm-batch --tokens 512"
    run tfm-train "${SMALL[@]}" -o "$T/m" --max-memory 4M "$M/b.tfm"
    assert_failure 1
    assert_output --regexp "needs [0-9.]+ GiB \(1 rank: [0-9.]+ GiB the model, [0-9.]+ GiB the activations\), more than the 0.00 GiB available: lower the budget \(--set tokens=N"
    # the parameters, gradients and Adam moments alone are over: no budget is low enough
    # (it said to lower tokens)
    run tfm-train "${SMALL[@]}" --set d_model=16384 --set heads=1 -o "$T/m" --max-memory 8G \
        "$M/b.tfm"
    assert_failure 1
    assert_line --regexp "^tfm-train: the model needs [0-9.]+ GiB for its parameters, gradients and Adam moments alone \(1 rank\), more than the 8.00 GiB available, at any batch budget: train a smaller model \(d_model, d_ff, layers, vocab\) or raise --max-memory$"
    run tfm-train "${SMALL[@]}" --set d_model=16384 --set heads=1 -o "$T/m" --max-memory 8G \
        --ranks 2 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "alone (2 ranks), more than the 8.00 GiB available, at any batch budget: train a smaller model (d_model, d_ff, layers, vocab), on fewer --ranks, or raise --max-memory"
    [ ! -e "$T/m" ]
}

@test "NaN is reported with its update; no poisoned checkpoint is written" {
    # Adam moments at the top of fp32 (finite, so resume takes them): the next update's
    # bias-corrected m and sqrt(v) overflow to Inf, and Inf/Inf is NaN
    tfm-train "${SMALL[@]}" -o "$T/g" --max-steps 3 -q "$M/b.tfm"
    for d in n n2; do
        mkdir "$T/$d"
        python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$T/g/step-000003.tfm" \
            "$T/$d/step-000003.tfm" --poison adam.m.enc.0.ffn.w1 3e38 \
            --poison adam.v.enc.0.ffn.w1 3e38
    done
    run tfm-train -o "$T/n" --resume -j 1 --save-every 1 --max-steps 100 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "tfm-train: update 4: $T/n/step-000004.tfm: 'param.enc.0.ffn.w1' element 0 is NaN: not writing a poisoned checkpoint"
    run ls "$T/n"
    assert_output "step-000003.tfm"
    run tfm-train -o "$T/n2" --resume -j 1 --max-steps 100 "$M/b.tfm"
    assert_failure 1
    assert_output --regexp "tfm-train: update 5: .*([Nn]a[Nn]).*stopping without a checkpoint"
    run ls "$T/n2"
    assert_output "step-000003.tfm"
}

@test "Adam settings that fp32 cannot train with are refused: adam_eps 0, adam_beta2 1" {
    # eps 0 made the update of an unused embedding row 0/0 (NaN at update 2); 1e-50 is 0
    # in fp32; a beta2 of 0.99999999 is 1 in fp32 (NaN at update 2 too)
    for kv in adam_eps=0 adam_eps=1e-50 adam_beta2=0.99999999 adam_beta2=1; do
        run tfm-train "${SMALL[@]}" --set "$kv" --set tie=0 -o "$T/a" --max-steps 10 "$M/b.tfm"
        assert_failure 2
        assert_line --index 0 --regexp "^tfm-train: --set $kv: key '${kv%%=*}': ${kv#*=} is out of range \[(1e-30, 1|0, 0.9999999)\]$"
        [ ! -e "$T/a" ]
    done
    printf 'adam_eps = 0\n' > "$T/ae.conf"
    run tfm-train -c "$T/ae.conf" --print-config
    assert_failure 1
    assert_output "tfm-train: $T/ae.conf:1: key 'adam_eps': 0 is out of range [1e-30, 1]"
    # the ends of the ranges train
    run tfm-train "${SMALL[@]}" --set adam_eps=1e-30 --set adam_beta2=0.9999999 --set tie=0 \
        -o "$T/ok" --max-steps 10 -q "$M/b.tfm"
    assert_success
}

@test "--device cuda without a GPU is an error saying why; a bad process place too" {
    if tfm-train "${SMALL[@]}" -o "$T/auto" --max-steps 1 "$M/b.tfm" 2>&1 | grep -q "device: cuda"; then
        skip "this machine has a GPU"
    fi
    run tfm-train "${SMALL[@]}" -o "$T/d" --device cuda --max-steps 1 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "tfm-train: --device cuda: no CUDA device ("
    [ ! -e "$T/d/last.tfm" ]
    run env TFM_RANK=3 TFM_WORLD_SIZE=2 tfm-train "${SMALL[@]}" -o "$T/d" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "TFM_RANK=3 outside TFM_WORLD_SIZE=2"
}

@test "Slurm: an sbatch script or an salloc shell is one process; a task of srun is its step's" {
    # the environment of an sbatch script of 4 tasks (SLURM_PROCID 0 of the job), and of an
    # salloc shell (SLURM_NTASKS alone): no job step, one process
    run env SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0 tfm-train "${SMALL[@]}" -o "$T/sb" \
        --max-steps 1 "$M/b.tfm"
    assert_success
    [ -e "$T/sb/step-000001.tfm" ]
    run env SLURM_NTASKS=4 tfm-train "${SMALL[@]}" -o "$T/sa" --max-steps 1 "$M/b.tfm"
    assert_success
    [ -e "$T/sa/step-000001.tfm" ]
    # a task of srun -n 2: process 1 of 2, which must find process 0
    run env SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 tfm-train "${SMALL[@]}" \
        -o "$T/st" --max-steps 1 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "several processes need to find process 0"
}

@test "--device sim: through device memory, the same bits as the CPU, resume included" {
    # sim keeps the model where the host cannot read it (as on a GPU): training, validation,
    # checkpoints and resume must all go through uploads and downloads
    run tfm-train "${SMALL[@]}" -o "$T/cpu" --device cpu --max-steps 12 --save-every 4 \
        --valid "$M/v.tfm" --valid-every 6 "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" -o "$T/sim" --device sim --max-steps 8 --save-every 4 \
        --valid "$M/v.tfm" --valid-every 6 "$M/b500.tfm"
    assert_success
    assert_line --regexp "^tfm-train: device: sim \(the CPU behind device memory, as asked\); sim checked against the CPU on a 2-layer model: loss, gradients, an Adam step and 3 decoding steps within 0, 0, 0, 0$"
    run tfm-train "${SMALL[@]}" -o "$T/sim" --device sim --max-steps 12 --save-every 4 \
        --valid "$M/v.tfm" --valid-every 6 --resume "$M/b500.tfm"
    assert_success
    assert_line --partial "resuming from $T/sim/step-000008.tfm"
    diff <(params "$T/cpu/step-000012.tfm") <(params "$T/sim/step-000012.tfm")
    ! diff -q <(params "$T/cpu/step-000012.tfm") <(params "$T/sim/step-000008.tfm")
    # two devices: the gradients summed through host buffers, the CPU's sums bit for bit
    run tfm-train "${SMALL[@]}" -o "$T/r2" --device sim --ranks 2 --max-steps 6 "$M/b500.tfm"
    assert_success
    assert_line --partial "tfm-train: device: sim (the CPU behind device memory, as asked); 2 sim devices, each checked"
    run tfm-train "${SMALL[@]}" -o "$T/c2" --device cpu --ranks 2 --max-steps 6 "$M/b500.tfm"
    assert_success
    diff <(params "$T/c2/step-000006.tfm") <(params "$T/r2/step-000006.tfm")
    run tfm-train "${SMALL[@]}" -o "$T/r65" --device sim --ranks 65 --max-steps 1 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "tfm-train: --device sim: 65 GPUs wanted from GPU 0 on, 64 at most"
}

@test "--device sim: at precision bf16 the startup check has a second pass, at bf16; auto is fp32 there" {
    # bf16 asked: the device at bf16 against the CPU's emulation of bf16, after fp32's pass
    run tfm-train "${SMALL[@]}" -o "$T/b16" --device sim --set precision=bf16 --max-steps 1 "$M/b.tfm"
    assert_success
    assert_line --regexp "^tfm-train: device: sim \(the CPU behind device memory, as asked\); sim checked against the CPU on a 2-layer model: loss, gradients, an Adam step and 3 decoding steps within 0, 0, 0, 0; at bf16 against the CPU's emulation: within 0, 0, 0, 0$"
    TFM_SIM_PACKED=0 run tfm-train "${SMALL[@]}" -o "$T/b16w" --device sim --set precision=bf16 \
        --max-steps 1 "$M/b.tfm"
    assert_success
    assert_line --partial "; at bf16 against the CPU's emulation: within 0, 0, 0, 0"
    # auto is fp32 on the sim device (as on the CPU): fp32's pass only
    run tfm-train "${SMALL[@]}" -o "$T/auto" --device sim --set precision=auto --max-steps 1 "$M/b.tfm"
    assert_success
    assert_line --regexp "^tfm-train: device: sim .*within 0, 0, 0, 0$"
    refute_output --partial "bf16"
    # the CPU is never checked, whatever the precision
    run tfm-train "${SMALL[@]}" -o "$T/cpu" --device cpu --set precision=bf16 --max-steps 1 "$M/b.tfm"
    assert_success
    assert_line --regexp "^tfm-train: device: cpu \(as asked\); OpenBLAS [0-9.]+: [A-Za-z0-9_]+ kernels"
}

@test "OpenBLAS's kernels: named in the device line, never older than the CPU unless OPENBLAS_CORETYPE says" {
    # the CPU's instruction set, as tfm judges it (src/blas.h); OpenBLAS's tables below AVX2
    flags=" $(grep -m 1 '^flags' /proc/cpuinfo 2> /dev/null) "
    has() { for f; do [[ $flags == *" $f "* ]] || return 1; done; }
    older="Unknown|Katmai|Coppermine|Northwood|Prescott|Banias|Atom|Core2|Penryn|Dunnington|Nehalem|Athlon|Opteron|Opteron_SSE3|Barcelona|Nano|Bobcat"
    if has avx512f avx512bw avx512dq avx512vl || has avx2 fma; then
        older="$older|Sandybridge|Bulldozer|Piledriver|Steamroller|Excavator"
    elif ! has avx; then
        older=NONE
    fi
    run env -u OPENBLAS_CORETYPE tfm-train "${SMALL[@]}" -o "$T/a" --device cpu --max-steps 1 "$M/b.tfm"
    assert_success
    assert_line --regexp "^tfm-train: device: cpu \(as asked\); OpenBLAS [0-9.]+: [A-Za-z0-9_]+ kernels"
    refute_line --regexp "OpenBLAS [0-9.]+: ($older) kernels"
    # the user's choice stands, named as such
    OPENBLAS_CORETYPE=Prescott run tfm-train "${SMALL[@]}" -o "$T/p" --device cpu --max-steps 1 "$M/b.tfm"
    assert_success
    assert_line --regexp "^tfm-train: device: cpu \(as asked\); OpenBLAS [0-9.]+: Prescott kernels \(OPENBLAS_CORETYPE=Prescott\)$"
}

@test "processes (TFM_RANK, TFM_WORLD_SIZE): W are one process of --ranks W, bit for bit" {
    export TFM_RENDEZVOUS_TIMEOUT=60
    two() {     # two processes, a rendezvous file; rank 1's messages in $T/e1
        rm -f "$T/rv"
        TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv" tfm-train "$@" 2> "$T/e1" &
        TFM_RANK=0 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv" tfm-train "$@"
        local rc=$?
        wait $! || return 1
        return $rc
    }
    run two "${SMALL[@]}" -o "$T/p" --max-steps 4 --save-every 2 --valid "$M/v.tfm" "$M/b500.tfm"
    assert_success
    assert_line --partial "tfm-train: saved $T/p/step-000004.tfm"
    assert_line --regexp "^tfm-train: valid step 4 loss "
    [ ! -s "$T/e1" ]            # process 0 reports for the run
    [ ! -e "$T/rv" ]            # the rendezvous file is gone once all joined
    run tfm-train "${SMALL[@]}" -o "$T/r" --ranks 2 --max-steps 6 --save-every 2 -q "$M/b500.tfm"
    assert_success
    diff <(params "$T/p/step-000004.tfm") <(params "$T/r/step-000004.tfm")
    # resumed by two processes, over TCP to a fixed port this time
    export TFM_MASTER_ADDR=127.0.0.1 TFM_MASTER_PORT=$((20000 + RANDOM % 20000)) TFM_RUN_TOKEN=tfm-train.bats-token
    run two "${SMALL[@]}" -o "$T/p" --max-steps 6 --save-every 2 --resume -q "$M/b500.tfm"
    assert_success
    diff <(params "$T/p/step-000006.tfm") <(params "$T/r/step-000006.tfm")
    ! diff -q <(params "$T/p/step-000006.tfm") <(params "$T/p/step-000004.tfm")
    # four processes: a chain of four links, still the in-process sums
    unset TFM_MASTER_ADDR TFM_MASTER_PORT TFM_RUN_TOKEN
    rm -f "$T/rv"
    for r in 3 2 1; do
        TFM_RANK=$r TFM_WORLD_SIZE=4 TFM_RENDEZVOUS="$T/rv" tfm-train "${SMALL[@]}" -o "$T/p4" --max-steps 3 -q "$M/b500.tfm" &
    done
    run env TFM_RANK=0 TFM_WORLD_SIZE=4 TFM_RENDEZVOUS="$T/rv" tfm-train "${SMALL[@]}" -o "$T/p4" --max-steps 3 -q "$M/b500.tfm"
    assert_success
    wait
    run tfm-train "${SMALL[@]}" -o "$T/r4" --ranks 4 --max-steps 3 -q "$M/b500.tfm"
    assert_success
    diff <(params "$T/p4/step-000003.tfm") <(params "$T/r4/step-000003.tfm")
}

@test "a run resumes in another layout of as many ranks: processes as ranks of one process, and back, across epochs" {
    export TFM_RENDEZVOUS_TIMEOUT=60
    two() {     # two processes, a rendezvous file
        rm -f "$T/rv"
        TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv" tfm-train "$@" 2> /dev/null &
        TFM_RANK=0 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv" tfm-train "$@"
        local rc=$?
        wait $! || return 1
        return $rc
    }
    # an odd number of batches: the last of each epoch goes to no update, in one process of
    # 2 ranks as in two processes, and 8 updates go into the second epoch
    nb=$(tfm-cat --header "$M/b500.tfm" | sed -n 's/^meta batches=//p')
    [ $((nb % 2)) = 1 ] && [ "$nb" -lt 16 ]
    run tfm-train "${SMALL[@]}" -o "$T/r" --ranks 2 --max-steps 8 --save-every 1 -q "$M/b500.tfm"
    assert_success
    # two processes for 7 updates, 2 batches into the second epoch; then one process
    run two "${SMALL[@]}" -o "$T/p" --max-steps 7 -q "$M/b500.tfm"
    assert_success
    diff <(params "$T/p/step-000007.tfm") <(params "$T/r/step-000007.tfm")
    cp -r "$T/p" "$T/p1"
    run tfm-train "${SMALL[@]}" -o "$T/p" --ranks 2 --max-steps 8 --resume "$M/b500.tfm"
    assert_success
    assert_line --partial "update 7, epoch 1, batch 2"
    diff <(params "$T/p/step-000008.tfm") <(params "$T/r/step-000008.tfm")
    # one process of 2 ranks, then two processes
    run tfm-train "${SMALL[@]}" -o "$T/o" --ranks 2 --max-steps 7 -q "$M/b500.tfm"
    assert_success
    run two "${SMALL[@]}" -o "$T/o" --max-steps 8 --resume "$M/b500.tfm"
    assert_success
    assert_line --partial "update 7, epoch 1, batch 2"
    diff <(params "$T/o/step-000008.tfm") <(params "$T/r/step-000008.tfm")
    # a state of layout 1 (earlier versions: one process's batches) resumes in its layout
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$T/p1/step-000007.tfm" "$T/v1.tfm" \
        --state 0=1 --state 3=1
    rm "$T/p1/step-000007.tfm" "$T/p1/last.tfm"
    mv "$T/v1.tfm" "$T/p1/step-000007.tfm"
    run two "${SMALL[@]}" -o "$T/p1" --max-steps 8 --resume "$M/b500.tfm"
    assert_success
    assert_line --partial "update 7, epoch 1, batch 2"
    diff <(params "$T/p1/step-000008.tfm") <(params "$T/r/step-000008.tfm")
    # 3 batches in: two processes, which take the stream in turns of 2, cannot go on
    run tfm-train "${SMALL[@]}" -o "$T/s" --max-steps 3 -q "$M/b500.tfm"
    assert_success
    run two "${SMALL[@]}" -o "$T/s" --max-steps 4 --resume "$M/b500.tfm"
    assert_failure 1
    assert_output --partial "$T/s/step-000003.tfm: the run has trained on 3 batches of epoch 0, which 2 processes of 1 rank cannot take up: they read the stream in turns of 2"
    # an epoch of fewer batches than one update cannot give one
    run tfm-train "${SMALL[@]}" -o "$T/u" --ranks 2 --update-freq 8 -q "$M/b500.tfm"
    assert_failure 1
    assert_output --partial "$M/b500.tfm: an epoch of the stream gives fewer batches than the 16 of one update (update_freq 8 x 2 ranks)"
}

@test "processes of several ranks each equal one process of all the ranks, up to reassociation" {
    export TFM_RENDEZVOUS_TIMEOUT=60
    # adam_eps 1e-3 as in the --ranks test above: the comparison is about the gradients
    local args=(-c "$CONF" --set layers=1 --set d_model=32 --set d_ff=64 --set heads=2
                --set adam_eps=1e-3 --max-steps 8 -q)
    rm -f "$T/rv"
    TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv" tfm-train "${args[@]}" -j 2 --ranks 2 -o "$T/pr" "$M/b.tfm" &
    run env TFM_RANK=0 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv" tfm-train "${args[@]}" -j 2 --ranks 2 -o "$T/pr" "$M/b.tfm"
    assert_success
    wait $!
    run tfm-cat --header "$T/pr/last.tfm"
    assert_line "meta ranks=4"
    run tfm-train "${args[@]}" -j 4 --ranks 4 -o "$T/r4" "$M/b.tfm"
    assert_success
    run max_diff "$T/pr/last.tfm" "$T/r4/last.tfm"
    echo "2 processes of 2 ranks against 4 ranks: $output"
    awk -v d="$output" 'BEGIN { exit !(d < 2e-6) }'
    # and the comparison can fail: 3 ranks train on other batches
    run tfm-train "${args[@]}" -j 3 --ranks 3 -o "$T/r3" "$M/b.tfm"
    run max_diff "$T/pr/last.tfm" "$T/r3/last.tfm"
    awk -v d="$output" 'BEGIN { exit !(d > 1e-4) }'
}

@test "processes: a lost process stops the run, naming it; bad setups are errors" {
    export TFM_RENDEZVOUS_TIMEOUT=60 TFM_WORLD_SIZE=2 TFM_RENDEZVOUS="$T/rv"
    TFM_RANK=0 tfm-train "${SMALL[@]}" -o "$T/k" --max-steps 1000000 --save-every 0 -q "$M/b.tfm" 2> "$T/e0" &
    p0=$!
    TFM_RANK=1 tfm-train "${SMALL[@]}" -o "$T/k" --max-steps 1000000 --save-every 0 -q "$M/b.tfm" &
    p1=$!
    # once both have joined (process 0 removes the rendezvous file then), kill process 1
    for i in $(seq 600); do [ -e "$T/rv" ] && break; sleep 0.05; done
    for i in $(seq 600); do [ -e "$T/rv" ] || break; sleep 0.05; done
    sleep 0.5
    kill -KILL $p1
    rc=0
    wait $p0 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_output --regexp "^tfm-train: (update [0-9]+: [a-z -]+: )?process 1 of 2 left the run \(see its messages\)"
    # processes that would train different models
    rm -f "$T/rv"
    TFM_RANK=1 tfm-train "${SMALL[@]}" --set dropout=0.2 -o "$T/d2" --max-steps 2 -q "$M/b.tfm" 2> /dev/null &
    run env TFM_RANK=0 tfm-train "${SMALL[@]}" -o "$T/d2" --max-steps 2 "$M/b.tfm"
    wait $! || true
    assert_failure 1
    assert_output --partial "tfm-train: process 1 does not start where process 0 does: its config differs"
    [ ! -e "$T/d2/last.tfm" ]
    # another number of ranks in a process: the shards would overlap, and GPUs' NCCL
    # communicators of different sizes would never start
    rm -f "$T/rv"
    TFM_RANK=1 tfm-train "${SMALL[@]}" --ranks 1 -o "$T/d3" --max-steps 2 -q "$M/b.tfm" 2> /dev/null &
    run env TFM_RANK=0 tfm-train "${SMALL[@]}" --ranks 2 -o "$T/d3" --max-steps 2 "$M/b.tfm"
    wait $! || true
    assert_failure 1
    assert_output --partial "tfm-train: process 1 does not start where process 0 does: its layout (--ranks, --update-freq, GPUs or CPU) differs"
    [ ! -e "$T/d3/last.tfm" ]
    # another batch stream of the same vocabulary
    rm -f "$T/rv"
    TFM_RANK=1 tfm-train "${SMALL[@]}" -o "$T/d4" --max-steps 2 -q "$M/b500.tfm" 2> /dev/null &
    run env TFM_RANK=0 tfm-train "${SMALL[@]}" -o "$T/d4" --max-steps 2 "$M/b.tfm"
    wait $! || true
    assert_failure 1
    assert_output --partial "tfm-train: process 1 does not start where process 0 does: its batch stream (its header) differs"
    [ ! -e "$T/d4/last.tfm" ]
    # gradients summed in buckets of another size: the sums, bytes along the chain of
    # processes, would have added the gradients of different parameters
    rm -f "$T/rv"
    TFM_BUCKET_MB=0.01 TFM_RANK=1 tfm-train "${SMALL[@]}" -o "$T/d6" --max-steps 2 -q "$M/b.tfm" 2> /dev/null &
    run env TFM_RANK=0 tfm-train "${SMALL[@]}" -o "$T/d6" --max-steps 2 "$M/b.tfm"
    wait $! || true
    assert_failure 1
    assert_output --partial "tfm-train: process 1 does not start where process 0 does: its gradient bucket size (TFM_BUCKET_MB) differs"
    [ ! -e "$T/d6/last.tfm" ]
    # another version of tfm-train: a copy whose version strings differ in their last place
    # (every string that ends with the version: the linker may keep the version's own
    # string apart or as the tail of "tfm-train VERSION")
    mkdir -p "$T/other"
    local v
    v=$(python3 - "$(command -v tfm-train)" "$T/other/tfm-train" "$(cat "$TFM_ROOT/VERSION")" <<'PY'
import sys
src, dst, v = sys.argv[1], sys.argv[2], sys.argv[3]
b = open(src, 'rb').read()
old = v.encode() + b'\0'
assert b.count(old) >= 1, b.count(old)
w = v[:-1] + ('8' if v.endswith('9') else '9')
open(dst, 'wb').write(b.replace(old, w.encode() + b'\0'))
print(w)
PY
)
    chmod +x "$T/other/tfm-train"
    run "$T/other/tfm-train" --version
    assert_output "tfm-train $v"
    rm -f "$T/rv"
    TFM_RANK=1 "$T/other/tfm-train" "${SMALL[@]}" -o "$T/d5" --max-steps 2 -q "$M/b.tfm" 2> /dev/null &
    run env TFM_RANK=0 tfm-train "${SMALL[@]}" -o "$T/d5" --max-steps 2 "$M/b.tfm"
    wait $! || true
    assert_failure 1
    assert_output --partial "tfm-train: process 1 does not start where process 0 does: its tfm-train version differs"
    # no way to find process 0; a file to shard
    run env -u TFM_RENDEZVOUS TFM_RANK=1 tfm-train "${SMALL[@]}" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "several processes need to find process 0: set TFM_MASTER_ADDR and TFM_MASTER_PORT, or TFM_RENDEZVOUS"
    run env TFM_RANK=0 tfm-train "${SMALL[@]}" -o "$T/x" - < "$M/b.tfm"
    assert_failure 1
    assert_output --partial "2 processes: each reads its own shard of the batch stream, so it must be a file"
    # a process that never comes: process 0 gives up after the timeout
    run env TFM_RANK=0 TFM_RENDEZVOUS_TIMEOUT=1 tfm-train "${SMALL[@]}" -o "$T/y" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "1 of 2 processes joined within 1 s (TFM_RENDEZVOUS_TIMEOUT)"
}

@test "convergence: configs/tiny.conf on 3000 multi30k pairs gets below loss 5.6 in 150 updates" {
    # deterministic with -j 1: the loss of updates 126-150 is 5.356 (first 25: 7.21)
    run tfm-train -c "$CONF" -j 1 -o "$T/cv" --max-steps 150 --report-every 25 --log "$T/log" -q "$M/b.tfm"
    assert_success
    run awk -F '\t' '$1 == "train" && $2 == 25 { print ($3 > 7.0) }' "$T/log"
    assert_output 1
    run awk -F '\t' '$1 == "train" && $2 == 150 { print $3; exit !($3 < 5.6) }' "$T/log"
    echo "loss at 150: $output"
    assert_success
}

@test "precision=bf16 (emulated on the CPU) converges like fp32: validation loss within 0.05 after 150 updates" {
    # a 1-layer d_model 32 model, 150 updates on 3000 multi30k pairs, a few seconds each.
    # Measured |bf16 - fp32| of the validation loss: 0.020, 0.009, 0.001 for seeds 1, 2, 3
    # (4.760 4.740, 4.693 4.702, 4.798 4.799), while fp32 alone spreads 0.10 over those
    # seeds: the bound 0.05 is half the seeds' spread, 2.5 times the worst measured.
    for p in fp32 bf16; do
        run tfm-train "${SMALL[@]}" --set warmup=50 --set precision=$p -o "$T/$p" \
            --max-steps 150 --valid "$M/v.tfm" --valid-every 150 --log "$T/$p.log" -q "$M/b.tfm"
        assert_success
    done
    f=$(awk -F '\t' '$1 == "valid" && $2 == 150 { print $3 }' "$T/fp32.log")
    b=$(awk -F '\t' '$1 == "valid" && $2 == 150 { print $3 }' "$T/bf16.log")
    echo "validation loss fp32 $f bf16 $b"
    [ -n "$f" ] && [ -n "$b" ] && [ "$f" != "$b" ]
    awk -v f="$f" -v b="$b" 'BEGIN { d = f - b; exit !(d < 0.05 && d > -0.05) }'
    # the checkpoint holds fp32 master weights and moments, and its config the precision
    run tfm-cat "$T/bf16/last.tfm"
    assert_success
    assert_output --regexp "param.emb f32 "
    refute_output --regexp "(param|adam)\.[^ ]* bf16 "
    grep -a -q "^precision = bf16$" "$T/bf16/last.tfm"
    # decoding at the checkpoint's precision: the sim device gives the CPU's hypotheses; an
    # ensemble is one precision (all its models compute on one device)
    run tfm-decode -q -m "$T/bf16/last.tfm" --beam 2 -o "$T/h16.tfm" "$M/val.en.tfm"
    assert_success
    run tfm-decode -q --device sim -m "$T/bf16/last.tfm" --beam 2 -o "$T/h16s.tfm" "$M/val.en.tfm"
    assert_success
    cmp "$T/h16.tfm" "$T/h16s.tfm"
    run tfm-decode -q -m "$T/fp32/last.tfm" -m "$T/bf16/last.tfm" "$M/val.en.tfm"
    assert_failure 1
    assert_output --partial "bf16/last.tfm: cpu backend: precision bf16: 1 model on it computes in fp32"
}

@test "precision: --print-config, bad values, resume at another precision, sim = CPU bits at bf16" {
    run tfm-train "${SMALL[@]}" -o "$T/p" --print-config
    assert_success
    assert_line "precision = auto"
    run tfm-train "${SMALL[@]}" -o "$T/p" --set precision=bf16 --print-config
    assert_success
    assert_line "precision = bf16"
    run tfm-train "${SMALL[@]}" -o "$T/p" --set precision=fp16 --print-config
    assert_failure 2
    assert_output --partial "key 'precision': 'fp16' is not one of auto|fp32|bf16"
    # fp32 on the CPU is auto, bit for bit
    run tfm-train "${SMALL[@]}" -o "$T/a" --max-steps 4 "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" -o "$T/f" --set precision=fp32 --max-steps 4 "$M/b500.tfm"
    assert_success
    diff <(params "$T/a/step-000004.tfm") <(params "$T/f/step-000004.tfm")
    # a run resumes at another precision (the master weights are fp32 either way)
    run tfm-train "${SMALL[@]}" -o "$T/b" --set precision=bf16 --max-steps 2 "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" -o "$T/b" --set precision=fp32 --max-steps 4 --resume "$M/b500.tfm"
    assert_success
    assert_line --partial "resuming from $T/b/step-000002.tfm"
    # the sim device rounds at the CPU's places: the same bits at bf16
    run tfm-train "${SMALL[@]}" -o "$T/cb" --set precision=bf16 --device cpu --max-steps 3 "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" -o "$T/sb" --set precision=bf16 --device sim --max-steps 3 "$M/b500.tfm"
    assert_success
    diff <(params "$T/cb/step-000003.tfm") <(params "$T/sb/step-000003.tfm")
    run tfm-train "${SMALL[@]}" -o "$T/cf" --device cpu --max-steps 3 "$M/b500.tfm"
    assert_success
    ! diff -q <(params "$T/cb/step-000003.tfm") <(params "$T/cf/step-000003.tfm") > /dev/null
}

@test "precision=bf16 on --device sim (activations in 2 bytes, as on a GPU): training, validation, resume and decoding give the CPU's bits" {
    # sim at bf16 stores each activation as 2-byte bf16 bits and converts them around the
    # CPU's emulated ops: the same bits as the CPU only if every step through activation
    # memory counts 2-byte elements (pre-norm, learned positions, untied embeddings here;
    # post-norm, sinusoids and tied embeddings in the test above)
    local P=(--set precision=bf16 --set norm=pre --set pos=learned --set tie=0 --set dropout=0.1)
    run tfm-train "${SMALL[@]}" "${P[@]}" -o "$T/cpu" --device cpu --max-steps 6 --save-every 3 \
        --valid "$M/v.tfm" --valid-every 3 --log "$T/cpu.log" "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" "${P[@]}" -o "$T/sim" --device sim --max-steps 3 --save-every 3 \
        --valid "$M/v.tfm" --valid-every 3 --log "$T/sim.log" "$M/b500.tfm"
    assert_success
    run tfm-train "${SMALL[@]}" "${P[@]}" -o "$T/sim" --device sim --max-steps 6 --save-every 3 \
        --valid "$M/v.tfm" --valid-every 3 --log "$T/sim.log" --resume "$M/b500.tfm"
    assert_success
    assert_line --partial "resuming from $T/sim/step-000003.tfm"
    diff <(params "$T/cpu/step-000006.tfm") <(params "$T/sim/step-000006.tfm")
    # the validation lines (kind, step, loss, ppl; the training lines cover other updates:
    # the first sim run reports at its end)
    diff <(grep '^valid' "$T/cpu.log" | cut -f 1-4) <(grep '^valid' "$T/sim.log" | cut -f 1-4)
    [ "$(grep -c '^valid' "$T/cpu.log")" -eq 2 ]
    # decoding the checkpoint at its precision: greedy, beam with n-best, text, attention
    for opts in "--beam 1" "--beam 3 --nbest 2"; do
        tfm-decode -q -m "$T/cpu/last.tfm" --device cpu $opts -o "$T/h.cpu" "$M/val.en.tfm"
        tfm-decode -q -m "$T/cpu/last.tfm" --device sim $opts -o "$T/h.sim" "$M/val.en.tfm"
        cmp "$T/h.cpu" "$T/h.sim"
    done
    diff <(tfm-decode -q -m "$T/cpu/last.tfm" --device cpu --text "$M/val.en.tfm") \
        <(tfm-decode -q -m "$T/cpu/last.tfm" --device sim --text "$M/val.en.tfm")
    tfm-decode -q -m "$T/cpu/last.tfm" --device cpu --attention "$T/a.cpu" --attention-all \
        -o /dev/null "$M/val.en.tfm"
    tfm-decode -q -m "$T/cpu/last.tfm" --device sim --attention "$T/a.sim" --attention-all \
        -o /dev/null "$M/val.en.tfm"
    cmp "$T/a.cpu" "$T/a.sim"
    # TFM_SIM_PACKED=0: sim at bf16 in 4-byte words, as the CPU, the same bits
    run env TFM_SIM_PACKED=0 tfm-train "${SMALL[@]}" "${P[@]}" -o "$T/words" --device sim \
        --max-steps 3 "$M/b500.tfm"
    assert_success
    diff <(params "$T/cpu/step-000003.tfm") <(params "$T/words/step-000003.tfm")
}

@test "--resume refuses a checkpoint that is not the model its config describes, Adam moments included" {
    run tfm-train "${SMALL[@]}" --set layers=2 -o "$T/good" --max-steps 3 -q "$M/b500.tfm"
    assert_success
    # each damaged copy is the newest checkpoint of a directory; resume must refuse it,
    # name it and the tensor, and write nothing
    bad() {
        local name=$1
        shift
        mkdir -p "$T/$name"
        cp "$T/good/step-000003.tfm" "$T/$name/step-000003.tfm"
        python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$T/good/step-000003.tfm" \
            "$T/$name/step-000004.tfm" "$@"
        run tfm-train -o "$T/$name" --resume --max-steps 6 -j 1 "$M/b500.tfm"
        assert_failure 1
        local out=$output
        run ls "$T/$name"
        assert_output $'step-000003.tfm\nstep-000004.tfm'
        output=$out             # the refusal, for the caller to check
    }
    # the editor's copy resumes (so the refusals below are the edits')
    mkdir "$T/copy"
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$T/good/step-000003.tfm" "$T/copy/step-000003.tfm"
    run tfm-train -o "$T/copy" --resume --max-steps 4 -j 1 -q "$M/b500.tfm"
    assert_success
    diff <(params "$T/copy/step-000004.tfm") <(
        tfm-train "${SMALL[@]}" --set layers=2 -o "$T/ref" --max-steps 4 -q "$M/b500.tfm" && params "$T/ref/step-000004.tfm")
    bad nan --poison param.enc.1.ffn.w1 nan
    assert_output --partial "tfm-train: cannot resume: $T/nan/step-000004.tfm: tensor param.enc.1.ffn.w1: element 0 is NaN"
    bad adamnan --poison adam.v.dec.0.cross.wkv inf
    assert_output --partial "tfm-train: cannot resume: $T/adamnan/step-000004.tfm: tensor adam.v.dec.0.cross.wkv: element 0 is Inf"
    bad adamneg --poison adam.v.emb -1
    assert_output --partial "tensor adam.v.emb: element 0 is negative"
    # a config of 1 layer over the tensors of 2: the second layer was dropped silently
    bad layers --config layers=1
    assert_output --partial "tfm-train: cannot resume: $T/layers/step-000004.tfm: tensor param.enc.1.self.wqkv: not a parameter of the model its config describes (layer 1; the config has layers = 1)"
    bad extra --copy adam.m.enc.0.ffn.w1 adam.m.enc.0.ffn.w9
    assert_output --partial "$T/extra/step-000004.tfm: tensor adam.m.enc.0.ffn.w9: not a parameter of the model its config describes"
    bad missing --drop param.dec.1.ln2.b
    assert_output --partial "$T/missing/step-000004.tfm: tensor param.dec.1.ln2.b missing (config wants 32)"
    bad nomoment --drop adam.m.dec.1.ln2.b
    assert_output --partial "$T/nomoment/step-000004.tfm: tensor adam.m.dec.1.ln2.b missing (config wants 32): the other Adam moments are there"
    # the same number of values in another shape (resume looked at the count only)
    bad reshaped --reshape param.enc.0.ffn.w1 64x32
    assert_output --partial "tfm-train: cannot resume: $T/reshaped/step-000004.tfm: tensor param.enc.0.ffn.w1: shape 64x32, config wants 32x64"
    bad rmoment --reshape adam.m.enc.0.ffn.w1 64x32
    assert_output --partial "$T/rmoment/step-000004.tfm: tensor adam.m.enc.0.ffn.w1: shape 64x32, config wants 32x64"
    # a vocabulary of another size than the config's vocab = 1000 (the tensors' too)
    tfm-tokenize train -q -m "$T/v500.model" --vocab 500 "$M/en500.txt"
    bad vocab --spm "$T/v500.model"
    assert_output --partial "tfm-train: cannot resume: $T/vocab/step-000004.tfm: its vocabulary has 500 pieces, its config says vocab=1000"
}

@test "two runs in one directory: the second is refused, naming the holder's pid and host" {
    tfm-train "${SMALL[@]}" -o "$T/two" --save-every 1 --keep 3 --max-steps 100000 -q "$M/b.tfm" 3>&- &
    pid=$!
    BG+=($pid)
    wait_step "$T/two" 2
    # a fresh run, a resumed run and one with another config are all refused
    for args in "" "--resume" "--set dropout=0.3 --resume"; do
        run tfm-train "${SMALL[@]}" $args -o "$T/two" --max-steps 3 "$M/b.tfm"
        assert_failure 1
        assert_output --partial "tfm-train: $T/two: in use by another run (pid $pid on host $(hostname); lock $T/two/.tfm-train.lock): wait for it to end, or use another directory"
        refute_output --partial "saved"
    done
    # the holder is unharmed: it stops on a signal with its own checkpoints and last.tfm
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    assert_equal $rc 143
    last=$(readlink "$T/two/last.tfm")
    step=$((10#${last:5:6}))
    [ "$step" -ge 2 ]
    run tfm-cat --header "$T/two/$last"
    assert_line "meta step=$step"
    [ ! -e "$T/two/.tfm-train.lock" ]           # gone with the run
    # free again: a resume continues it
    run tfm-train "${SMALL[@]}" -o "$T/two" --resume --max-steps $((step + 2)) "$M/b.tfm"
    assert_success
    assert_line --partial "tfm-train: resuming from $T/two/$last: update $step, epoch "
    assert_line --partial "max steps reached at update $((step + 2))"
    # a killed holder (SIGKILL leaves its lock file) does not block the next run
    tfm-train "${SMALL[@]}" -o "$T/kill" --save-every 1 --keep 3 --max-steps 100000 -q "$M/b.tfm" 3>&- &
    pid=$!
    BG+=($pid)
    wait_step "$T/kill" 2
    kill -KILL $pid
    wait $pid || true
    [ -e "$T/kill/.tfm-train.lock" ]
    run tfm-train "${SMALL[@]}" -o "$T/kill" --resume --max-steps 1000000 --max-time 1s -q "$M/b.tfm"
    assert_success
}

@test "--resume without -c is refused by a holder before it reads the checkpoint for its config; --print-config takes no lock" {
    tfm-train "${SMALL[@]}" -q -o "$T/src" --max-steps 2 "$M/b.tfm"
    # the holder: a directory there before, locked, the run waiting for its FIFO's writer
    mkdir "$T/held"
    mkfifo "$T/fifo"
    tfm-train "${SMALL[@]}" -o "$T/held" "$T/fifo" 2> "$T/err" &
    pid=$!
    BG+=($pid)
    for i in $(seq 300); do [ -e "$T/held/.tfm-train.lock" ] && break; sleep 0.1; done
    [ -e "$T/held/.tfm-train.lock" ]
    # the config of its newest checkpoint is printed beside the holder
    cp "$T/src/step-000002.tfm" "$T/held/"
    run tfm-train -o "$T/held" --resume --print-config
    assert_success
    assert_line "d_model = 32"
    # a damaged newest checkpoint is not read: the lock refuses first (the checkpoint
    # was read for the config, and its damage named, before the lock was taken)
    head -c 3000 "$T/src/step-000002.tfm" > "$T/held/step-000002.tfm"
    run tfm-train -o "$T/held" --resume -j 1 "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: $T/held: in use by another run (pid $pid on host $(hostname); lock $T/held/.tfm-train.lock): wait for it to end, or use another directory"
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    assert_equal $rc 143
    [ ! -e "$T/held/.tfm-train.lock" ]
    # free: the checkpoint is read, and its damage named; the lock is not left behind
    run tfm-train -o "$T/held" --resume -j 1 "$M/b.tfm"
    assert_failure 1
    assert_output --partial "$T/held/step-000002.tfm: record 1 'tfm.spm'"
    [ ! -e "$T/held/.tfm-train.lock" ]
    # and a sound one resumes, holding the lock that main took
    cp "$T/src/step-000002.tfm" "$T/held/"
    run tfm-train -o "$T/held" --resume -j 1 --max-steps 3 "$M/b.tfm"
    assert_success
    assert_line "tfm-train: max steps reached at update 3; last checkpoint $T/held/step-000003.tfm"
    [ ! -e "$T/held/.tfm-train.lock" ]
}

@test "two runs started together on one new directory: one trains, the other is refused" {
    # each would train for 2 s: the second to start finds the first holding the directory
    for k in 1 2; do
        tfm-train "${SMALL[@]}" -o "$T/both" --save-every 0 --max-time 2s -q "$M/b.tfm" 2> "$T/e$k" 3>&- &
        eval "p$k=$!"
        BG+=($!)
    done
    r1=0 r2=0
    wait $p1 || r1=$?
    wait $p2 || r2=$?
    echo "exit $r1 $r2"
    cat "$T/e1" "$T/e2"
    [ $((r1 + r2)) = 1 ]
    run cat "$T/e1" "$T/e2"
    assert_output --regexp "^tfm-train: $T/both: in use by another run \(pid ($p1|$p2) on host "
    run ls "$T/both"
    assert_line --index 0 last.tfm
    assert_equal "${#lines[@]}" 2      # the one run's final checkpoint
}

@test "a batch stream without batches trains nothing, from a pipe as from a file" {
    : > "$T/empty.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$T/e.tfm" "$T/empty.txt"
    tfm-batch -q --tokens 1024 "$T/e.tfm" "$T/e.tfm" > "$T/eb.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/file" "$T/eb.tfm"
    assert_failure 1
    assert_output --partial "tfm-train: $T/eb.tfm: no batch for rank 0 of 1 in the stream"
    # a pipe wrote an untrained step-000000.tfm and exited 0
    run bash -c "cat '$T/eb.tfm' | tfm-train ${SMALL[*]} -o '$T/pipe'"
    assert_failure 1
    assert_output --partial "tfm-train: <stdin>: no batch in the stream: nothing to train on"
    [ ! -e "$T/pipe" ]
    # fewer batches than one update takes: nothing trained either
    head -n 3 "$M/en500.txt" | tfm-tokenize encode -q -m "$M/spm.model" --eos > "$T/s.tfm"
    head -n 3 "$M/de500.txt" | tfm-tokenize encode -q -m "$M/spm.model" --eos > "$T/t.tfm"
    tfm-batch -q --tokens 1024 "$T/s.tfm" "$T/t.tfm" > "$T/one.tfm"
    run tfm-cat --header "$T/one.tfm"
    assert_line "meta batches=1"
    run bash -c "tfm-train ${SMALL[*]} -o '$T/short' --update-freq 2 < '$T/one.tfm'"
    assert_failure 1
    assert_output --partial "tfm-train: <stdin>: the stream ended after 1 batch, before the first update (2 batches each): nothing trained"
    [ ! -e "$T/short" ]
    # one update's worth is trained and saved
    run bash -c "tfm-train ${SMALL[*]} -o '$T/short' < '$T/one.tfm'"
    assert_success
    assert_line "tfm-train: end of the batch stream at update 1; last checkpoint $T/short/step-000001.tfm"
    # a resumed run whose pipe holds only what it has trained on
    run bash -c "tfm-train ${SMALL[*]} -o '$T/short' --resume < '$T/one.tfm'"
    assert_failure 1
    assert_output --partial "tfm-train: <stdin>: no batch after the 1 already trained on: nothing to train on"
    run ls "$T/short"
    assert_output $'last.tfm\nstep-000001.tfm'
}

@test "a failed run removes the directory it made, if still empty, and never one that was there" {
    head -c 20000 "$M/b.tfm" > "$T/cut.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/new" --max-steps 100 "$T/cut.tfm"
    assert_failure 1
    [ ! -e "$T/new" ]
    mkdir "$T/old"
    run tfm-train "${SMALL[@]}" -o "$T/old" --max-steps 100 "$T/cut.tfm"
    assert_failure 1
    [ -d "$T/old" ]
    run ls -A "$T/old"
    assert_output ""
    # a directory the run made and wrote to stays, with its checkpoints
    # (cut inside the fifth batch: four updates first)
    at=$(tfm-cat "$M/b.tfm" | awk '$1 == "record" && $2 == 14 { print $NF }')
    head -c $((at + 100)) "$M/b.tfm" > "$T/cut2.tfm"
    run tfm-train "${SMALL[@]}" -o "$T/some" --save-every 1 --max-steps 100 "$T/cut2.tfm"
    assert_failure 1
    assert_line "tfm-train: saved $T/some/step-000004.tfm"
    assert_output --partial "$T/cut2.tfm: record 14"
    run ls "$T/some"
    assert_output $'last.tfm\nstep-000001.tfm\nstep-000002.tfm\nstep-000003.tfm\nstep-000004.tfm'
}

@test "--print-config refuses a config that is no model (heads must divide d_model ...)" {
    run tfm-train -c "$CONF" --set heads=3 --print-config
    assert_failure 1
    assert_output "tfm-train: config: d_model 64 is not divisible by heads 3"
    run tfm-train -c "$CONF" --set d_model=63 --set heads=1 --print-config
    assert_failure 1
    assert_output "tfm-train: config: d_model 63 must be even for sinusoidal positions"
    run tfm-train -c "$CONF" --set max_len=4096 --print-config
    assert_failure 1
    assert_output --partial "tfm-train: config: tokens 2048 is less than max_len 4096"
    run tfm-train -c "$CONF" --set heads=3 -o "$T/h" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: config: d_model 64 is not divisible by heads 3"
    [ ! -e "$T/h" ]
    run tfm-train -c "$CONF" --set heads=4 --print-config
    assert_success
    assert_line "heads = 4"
}

@test "--max-time 0 is refused: no limit is the option left out" {
    for v in 0 0s 0m 0h0m; do
        run tfm-train "${SMALL[@]}" -o "$T/z" --max-steps 2 --max-time $v "$M/b.tfm"
        assert_failure 2
        assert_line --index 0 "tfm-train: --max-time: '$v': no time to train; omit the option for no time limit"
    done
    [ ! -e "$T/z" ]
}

@test "numbers with white space, hex or inf are refused by every numeric option, as --max-time's are" {
    run tfm-train "${SMALL[@]}" -o "$T/w" -n '  2' --print-config
    assert_failure 2
    assert_line --index 0 "tfm-train: --max-steps: '  2': expected an integer from 0 to 2147483647"
    for opt in --max-steps --keep --update-freq --threads --ranks --report-every --valid-every; do
        for v in ' 2' '2 ' '	2'; do
            run tfm-train "${SMALL[@]}" -o "$T/w" $opt "$v" --print-config
            assert_failure 2
            assert_line --index 0 --partial "tfm-train: $opt: '$v': expected an integer"
        done
    done
    run tfm-train "${SMALL[@]}" -o "$T/w" --max-time ' 5' --print-config
    assert_failure 2
    run tfm-train "${SMALL[@]}" -o "$T/w" --save-every ' 5' --print-config
    assert_failure 2
    run tfm-train "${SMALL[@]}" -o "$T/w" --max-memory ' 5G' --print-config
    assert_failure 2
    assert_line --index 0 "tfm-train: --max-memory: ' 5G' is not a size (512M, 8G)"
    # decimal numbers only: no hex, no inf
    for v in 0x10M 0x1p4G infG 5GG; do
        run tfm-train "${SMALL[@]}" -o "$T/w" --max-memory "$v" --print-config
        assert_failure 2
        assert_line --index 0 "tfm-train: --max-memory: '$v' is not a size (512M, 8G)"
    done
    run tfm-train "${SMALL[@]}" -o "$T/w" --set lr_scale=0x1p-3 --print-config
    assert_failure 2
    assert_output --partial "key 'lr_scale': '0x1p-3' is not a number"
    run tfm-train "${SMALL[@]}" -o "$T/w" -n 2 --max-memory 5G --print-config
    assert_success
    assert_line "max_steps = 2"
    # the other tools share the parser
    run tfm-avg -n ' 2' "$T"
    assert_failure 2
    assert_line --index 0 "tfm-avg: -n: ' 2': expected an integer from 1 to 100000"
    run tfm-batch --tokens ' 100' "$M/en500.tfm"
    assert_failure 2
}

@test "--valid-bleu: the logged BLEU is what tfm-decode --beam 1 and tfm-score give" {
    run tfm-train -c "$CONF" -o "$T/vb" --max-steps 40 --save-every 1000 --threads 2 \
        --valid "$M/v.tfm" --valid-every 20 --valid-bleu --log "$T/log" "$M/b.tfm"
    assert_success
    assert_line --regexp '^tfm-train: valid step 40 loss [0-9.]+ ppl [0-9.]+ tokens [0-9]+ bleu [0-9.]+$'
    assert_equal "$(head -n 1 "$T/log" | cut -f 9)" "bleu"
    logged=$(awk -F '\t' '$1 == "valid" && $2 == 40 { print $9 }' "$T/log")
    assert_equal "$(awk -F '\t' '$1 == "train" { print $9 }' "$T/log" | sort -u)" "-"
    # the same model, decoded and scored by the tools (references: the targets' text)
    tfm-decode -q -m "$T/vb/last.tfm" --beam 1 "$M/val.en.tfm" | tfm-tokenize decode > "$T/hyp"
    tfm-tokenize decode "$M/val.de.tfm" > "$T/ref"
    scored=$(tfm-score --json -r "$T/ref" "$T/hyp" | sed -n 's/.*"score": *\([0-9.]*\).*/\1/p')
    echo "logged $logged, tfm-score $scored"
    [ -n "$logged" ] && [ -n "$scored" ]
    awk -v a="$logged" -v b="$scored" 'BEGIN { exit !(a > 0 && (a - b) ^ 2 < 1e-8) }'
    run tfm-train -c "$CONF" -o "$T/vb2" --valid-bleu "$M/b.tfm"
    assert_failure 2
    assert_output --partial "--valid-bleu needs --valid FILE"
}

@test "--early-stop N: N validations without a better perplexity end the run, saved" {
    # lr_scale 0: the model never changes, so no validation after the first is better
    run tfm-train -c "$CONF" --set lr_scale=0 -o "$T/es" --max-steps 100 --save-every 1000 \
        --threads 1 --valid "$M/v.tfm" --valid-every 5 --early-stop 2 "$M/b.tfm"
    assert_success
    assert_line --partial "no better validation in --early-stop validations at update 15"
    run tfm-cat --header "$T/es/last.tfm"
    assert_line "meta step=15"
    run tfm-train -c "$CONF" -o "$T/es2" --early-stop 0 --valid "$M/v.tfm" "$M/b.tfm"
    assert_failure 2
    assert_output --partial "--early-stop"
}

@test "a FIFO or a process substitution is one pass, as standard input: training ends with it" {
    n=$(tfm-cat -H "$M/b500.tfm" | sed -n 's/^meta batches=//p')
    [ "$n" -gt 2 ]
    # at its end the stream was opened again for a second epoch: /dev/fd/N gave an empty
    # input, and a FIFO waited for a writer that never came
    run tfm-train "${SMALL[@]}" -o "$T/p" --max-steps 100000 --save-every 0 <(cat "$M/b500.tfm")
    assert_success
    assert_line "tfm-train: end of the batch stream at update $n; last checkpoint $T/p/step-$(printf %06d "$n").tfm"
    mkfifo "$T/fifo"
    cat "$M/b500.tfm" > "$T/fifo" &
    run timeout 60 tfm-train "${SMALL[@]}" -o "$T/f" --max-steps 100000 --save-every 0 "$T/fifo"
    assert_success
    assert_line "tfm-train: end of the batch stream at update $n; last checkpoint $T/f/step-$(printf %06d "$n").tfm"
    # the same updates as from the file for one epoch
    tfm-train "${SMALL[@]}" -q -o "$T/r" --max-steps "$n" --save-every 0 "$M/b500.tfm"
    diff <(params "$T/p/step-$(printf %06d "$n").tfm") <(params "$T/r/step-$(printf %06d "$n").tfm")
    diff <(params "$T/f/step-$(printf %06d "$n").tfm") <(params "$T/r/step-$(printf %06d "$n").tfm")
    # a pipe cannot go back to a checkpoint's later epoch: the error names it, not stdin
    tfm-train "${SMALL[@]}" -q -o "$T/e1" --max-steps $((n + 1)) --save-every 0 "$M/b500.tfm"
    run tfm-train "${SMALL[@]}" --resume -o "$T/e1" --max-steps $((n + 2)) <(cat "$M/b500.tfm")
    assert_failure 1
    assert_line --regexp "^tfm-train: /dev/fd/[0-9]+: the checkpoint is in epoch 1 of its stream, and a pipe is read once: resume from a regular file$"
    # a validation stream is read at every validation: a pipe is refused before training
    run tfm-train "${SMALL[@]}" -o "$T/v" --valid <(cat "$M/b500.tfm") "$M/b500.tfm"
    assert_failure 1
    assert_line --regexp "^tfm-train: --valid /dev/fd/[0-9]+: a pipe, read once, not a regular file: the validation batches are read again at every validation$"
    run tfm-train "${SMALL[@]}" -o "$T/v" --valid "$T" "$M/b500.tfm"
    assert_failure 1
    assert_line "tfm-train: --valid $T: a directory, not a regular file: the validation batches are read again at every validation"
    # one that is not there is named so, not as a pipe
    run tfm-train "${SMALL[@]}" -o "$T/v" --valid "$T/none.tfm" "$M/b500.tfm"
    assert_failure 1
    assert_line "tfm-train: $T/none.tfm: No such file or directory"
    [ ! -e "$T/v" ]
}

@test "--threads above what one CPU rank runs (1024) trains with 1024 on that rank" {
    run tfm-train "${SMALL[@]}" -j 2000 -o "$T/j" --max-steps 1 -q "$M/b.tfm"
    assert_success
    run tfm-cat "$T/j/last.tfm"
    assert_success
}

@test "resuming on a stream shorter than the checkpoint's place in its epoch names it once, with both counts" {
    local n all
    n=$(tfm-cat "$M/b500.tfm" | sed -n 's/^meta batches=//p')
    all=$(tfm-cat "$M/b.tfm" | sed -n 's/^meta batches=//p')
    [ "$all" -gt $((n + 2)) ]
    tfm-train "${SMALL[@]}" -q -o "$T/sh" --max-steps $((n + 2)) --save-every 1 "$M/b.tfm"
    run tfm-train "${SMALL[@]}" -q -o "$T/sh" --max-steps $((n + 3)) --resume "$M/b500.tfm"
    assert_failure 1
    assert_output "tfm-train: $M/b500.tfm: cannot skip the $((n + 2)) batches the checkpoint has read in its epoch: it has $n (not the stream it was trained on?)"
}
