#!/usr/bin/env bats
# tfm-decode: a tiny model trained for a few seconds on a copy task (made here with
# tfm-tokenize, tfm-batch and tfm-train) must reproduce its input; every option and the
# bad inputs (missing, corrupt or wrong models, vocabulary mismatch, wrong stream kind,
# empty input).

setup_file() {
    M="$BATS_FILE_TMPDIR"
    command -v tfm-batch > /dev/null && command -v tfm-train > /dev/null || return 0
    # copy task: 1500 lines of 2..7 words from 24 words, deterministic
    awk 'BEGIN {
        split("red green blue cat dog bird one two three four five six sun moon star tree " \
              "house car boat road hill lake rain snow", w, " ")
        s = 7
        for (i = 0; i < 1500; i++) {
            s = (s * 1103515245 + 12345) % 2147483648; n = 2 + int(s / 65536) % 6; line = ""
            for (j = 0; j < n; j++) {
                s = (s * 1103515245 + 12345) % 2147483648
                line = line (j ? " " : "") w[1 + int(s / 65536) % 24]
            }
            print line
        }
    }' > "$M/train.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 100 -O hard_vocab_limit=false "$M/train.txt"
    tfm-tokenize encode -m "$M/spm.model" --eos < "$M/train.txt" > "$M/train.tfm"
    tfm-batch --tokens 600 --seed 1 "$M/train.tfm" "$M/train.tfm" > "$M/batches.tfm"
    cat > "$M/copy.conf" <<'EOF'
layers = 2
d_model = 64
d_ff = 128
heads = 4
max_len = 48
dropout = 0
label_smoothing = 0
warmup = 100
lr_scale = 0.3
tokens = 600
beam = 3
alpha = 0.6
max_len_b = 4
EOF
    # 1500 updates (100 epochs): every one of seeds 1-5 then copies all 20 test lines; at 700
    # the last few words of a line still depended on the bits of the run (float sums)
    tfm-train -q -c "$M/copy.conf" -o "$M/ckpt" --max-steps 1500 --threads 2 "$M/batches.tfm"
    cp -L "$M/ckpt/last.tfm" "$M/model.tfm"
    # a stream and a model (one step) of another vocabulary
    tfm-tokenize train -q -m "$M/other.model" --vocab 80 -O hard_vocab_limit=false "$M/train.txt"
    tfm-tokenize encode -m "$M/other.model" --eos < "$M/train.txt" > "$M/other.tfm"
    tfm-batch --tokens 600 "$M/other.tfm" "$M/other.tfm" > "$M/other-batches.tfm"
    tfm-train -q -c "$M/copy.conf" -o "$M/other-ckpt" --max-steps 1 "$M/other-batches.tfm"
    cp -L "$M/other-ckpt/last.tfm" "$M/other-model.tfm"
    head -n 20 "$M/train.txt" > "$M/test.txt"
    tfm-tokenize encode -m "$M/spm.model" < "$M/test.txt" > "$M/test.tfm"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    command -v tfm-batch > /dev/null || skip "tfm-batch is not built yet"
    command -v tfm-train > /dev/null || skip "tfm-train is not built yet"
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
}

# The values of record NAME of a stream, one line per chunk.
values() {
    tfm-cat --values "$1" | awk -v name="$2" '
        /^record / { on = ($3 == name); next } on && /^\t/ { print substr($0, 2) }'
}

@test "tfm-decode reproduces the input of a model trained on a copy task" {
    run tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm"
    assert_success
    diff <(echo "$output") "$M/test.txt"
}

@test "tfm-decode: a bad TFM_CUDA_ATTN, TFM_BLAS_BUFFER_MB or TFM_SIM_PACKED is an error on every device" {
    # each used to be read only by the backend it steers (the GPU's, the CPU's)
    for dev in auto cpu sim; do
        run env TFM_CUDA_ATTN=bogus tfm-decode -q --device $dev -m "$M/model.tfm" "$M/train.tfm"
        assert_failure 1
        assert_output "tfm-decode: TFM_CUDA_ATTN=bogus: flash or mm"
    done
    run env TFM_BLAS_BUFFER_MB=-1 tfm-decode -q --device sim -m "$M/model.tfm" "$M/train.tfm"
    assert_failure 1
    assert_output --partial "TFM_BLAS_BUFFER_MB='-1'"
    # TFM_SIM_PACKED steers the sim device alone: 0 or 1, never ignored elsewhere
    for dev in auto cpu sim cuda; do
        for v in 2 yes ""; do
            run env TFM_SIM_PACKED="$v" tfm-decode -q --device $dev -m "$M/model.tfm" "$M/train.tfm"
            assert_failure 1
            assert_output "tfm-decode: TFM_SIM_PACKED='$v': expected 0 or 1"
        done
    done
    for v in 0 1; do
        run env TFM_SIM_PACKED=$v tfm-decode -q --device sim -m "$M/model.tfm" -o /dev/null "$M/train.tfm"
        assert_success
    done
    run env TFM_CUDA_ATTN=flash tfm-decode -q --device cpu -m "$M/model.tfm" -o /dev/null "$M/train.tfm"
    assert_success
}

@test "tfm-decode writes a hypothesis stream with the model's vocabulary, in input order" {
    tfm-decode -q -m "$M/model.tfm" "$M/test.tfm" > "$T/h.tfm"
    run tfm-cat --header "$T/h.tfm"
    assert_line "meta kind=hypotheses"
    assert_line "meta spm.crc32=$(tfm-cat --header "$M/test.tfm" | sed -n 's/^meta spm.crc32=//p')"
    assert_line "meta beam=3"           # defaults from the model's config
    assert_line "meta alpha=0.6"
    assert_line "meta max_len_b=4"
    assert_equal "$(values "$T/h.tfm" hyp.index)" "$(seq -s ' ' 0 19)"
    # ids exclude bos and eos, and the stream decodes to the input text
    assert_equal "$(values "$T/h.tfm" tokens.ids | tr ' ' '\n' | grep -cx '[23]')" "0"
    run tfm-tokenize decode "$T/h.tfm"
    assert_success
    diff <(echo "$output") <(tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm")
}

@test "tfm-decode --nbest N writes N hypotheses per sentence, best first, as text too" {
    tfm-decode -q -m "$M/model.tfm" --nbest 3 "$M/test.tfm" > "$T/h.tfm"
    assert_equal "$(values "$T/h.tfm" hyp.index | tr ' ' '\n' | uniq -c | awk '{print $1}' | sort -u)" "3"
    values "$T/h.tfm" hyp.score | tr ' ' '\n' | awk 'NR % 3 != 1 && $1 > prev + 1e-6 { bad = 1 }
        { prev = $1 } END { exit bad }'
    run tfm-decode -q -m "$M/model.tfm" --nbest 3 --text "$M/test.tfm"
    assert_success
    assert_equal "${#lines[@]}" 60
    assert_line --index 0 --regexp '^0 \|\|\| .* \|\|\| -[0-9]+\.[0-9]{6}$'
    assert_line --index 59 --regexp '^19 \|\|\| .* \|\|\| -[0-9.]+$'
}

@test "tfm-decode --beam 1 is greedy; --beam and --alpha are recorded; --nbest above the beam fails" {
    run tfm-decode -q -m "$M/model.tfm" --beam 1 --text "$M/test.tfm"
    assert_success
    diff <(echo "$output") <(tfm-decode -q -m "$M/model.tfm" --sample --topk 1 --text "$M/test.tfm")
    tfm-decode -q -m "$M/model.tfm" --beam 5 --alpha 1.5 "$M/test.tfm" > "$T/h.tfm"
    run tfm-cat --header "$T/h.tfm"
    assert_line "meta beam=5"
    assert_line "meta alpha=1.5"
    assert_line "meta search=beam"
    run tfm-decode -q -m "$M/model.tfm" --beam 2 --nbest 3 "$M/test.tfm"
    assert_failure 2
    assert_output --partial "tfm-decode: --nbest 3 exceeds --beam 2"
    # above the config's beam: a usage error too, naming the option and the config
    run tfm-decode -q -m "$M/model.tfm" --nbest 4 "$M/test.tfm"     # config beam 3
    assert_failure 2
    assert_output "tfm-decode: --nbest 4 exceeds the beam 3 of $M/model.tfm's config (beam = 3): give --beam 4 or more"
    run tfm-decode -q -m "$M/model.tfm" --nbest 4 --beam 4 --text "$M/test.tfm"
    assert_success
    assert_equal "${#lines[@]}" 80
    run tfm-decode -q -m "$M/model.tfm" --nbest 4 --sample --text "$M/test.tfm"
    assert_success
}

@test "tfm-decode --max-len-b bounds the output length by the source length" {
    printf 'red green blue cat dog bird one\n' | tfm-tokenize encode -m "$M/spm.model" > "$T/one.tfm"
    srclen=$(values "$T/one.tfm" tokens.ids | wc -w)
    tfm-decode -q -m "$M/model.tfm" --max-len-b 0 --sample --seed 3 --nbest 20 "$T/one.tfm" > "$T/h.tfm"
    values "$T/h.tfm" tokens.offsets | tr ' ' '\n' |
        awk -v max="$srclen" 'NR > 1 && $1 - prev > max { bad = 1 } { prev = $1 } END { exit bad }'
    run tfm-cat --header "$T/h.tfm"
    assert_line "meta max_len_b=0"
}

@test "tfm-decode: batching (--tokens) and threads do not change the output" {
    tfm-decode -q -m "$M/model.tfm" --nbest 2 "$M/test.tfm" > "$T/a.tfm"
    tfm-decode -q -m "$M/model.tfm" --nbest 2 --tokens 1 --threads 1 "$M/test.tfm" > "$T/b.tfm"
    assert_equal "$(values "$T/a.tfm" tokens.ids)" "$(values "$T/b.tfm" tokens.ids)"
    assert_equal "$(values "$T/a.tfm" hyp.index)" "$(values "$T/b.tfm" hyp.index)"
    paste <(values "$T/a.tfm" hyp.score | tr ' ' '\n') <(values "$T/b.tfm" hyp.score | tr ' ' '\n') |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4) exit 1 }'
}

@test "tfm-decode: an ensemble of a model with itself gives the model's output" {
    tfm-decode -q -m "$M/model.tfm" "$M/test.tfm" > "$T/a.tfm"
    tfm-decode -q -m "$M/model.tfm" -m "$M/model.tfm" "$M/test.tfm" > "$T/b.tfm"
    assert_equal "$(values "$T/a.tfm" tokens.ids)" "$(values "$T/b.tfm" tokens.ids)"
    run tfm-cat --header "$T/b.tfm"
    assert_line "meta models=2"
}

@test "tfm-decode --sample: seeded and reproducible, top-k 1 is greedy" {
    run tfm-decode -q -m "$M/model.tfm" --sample --nbest 4 --seed 7 --temperature 3 --text "$M/test.tfm"
    assert_success
    assert_equal "${#lines[@]}" 80
    a="$output"
    # the same draws in other batches (scores may differ in the last float bits)
    run tfm-decode -q -m "$M/model.tfm" --sample --nbest 4 --seed 7 --temperature 3 --tokens 1 --text "$M/test.tfm"
    assert_equal "$(echo "$output" | sed 's/ ||| [^|]*$//')" "$(echo "$a" | sed 's/ ||| [^|]*$//')"
    paste -d' ' <(echo "$output" | sed 's/.* ||| //') <(echo "$a" | sed 's/.* ||| //') |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4) exit 1 }'
    run tfm-decode -q -m "$M/model.tfm" --sample --nbest 4 --seed 8 --temperature 3 --text "$M/test.tfm"
    [ "$output" != "$a" ]
    run tfm-decode -q -m "$M/model.tfm" --sample --topp 0.000001 --seed 2 --text "$M/test.tfm"
    diff <(echo "$output") <(tfm-decode -q -m "$M/model.tfm" --beam 1 --text "$M/test.tfm")
    tfm-decode -q -m "$M/model.tfm" --sample --topp 0.9 --topk 5 --seed 2 "$M/test.tfm" > "$T/h.tfm"
    run tfm-cat --header "$T/h.tfm"
    assert_line "meta search=sample"
    assert_line "meta topk=5"
    assert_line "meta topp=0.9"
    assert_line "meta seed=2"
    # there is no beam to sample from
    run tfm-decode -q -m "$M/model.tfm" --sample --nbest 5 --beam 5 "$M/test.tfm"
    assert_failure 2
    assert_line -n 0 "tfm-decode: --beam and --sample exclude each other"
}

@test "tfm-decode: sources cut to the model's max_len are counted in a warning that --quiet keeps" {
    # two lines longer than max_len (48) and one short one
    { for n in 60 70; do for ((i = 0; i < n; i++)); do printf 'red '; done; echo; done
      echo "blue cat"; } | tfm-tokenize encode -m "$M/spm.model" > "$T/long.tfm"
    tfm-decode -q -m "$M/model.tfm" --text "$T/long.tfm" > "$T/out.txt" 2> "$T/err.txt"
    assert_equal "$(cat "$T/err.txt")" "tfm-decode: $T/long.tfm: warning: 2 source sentences cut to the model's max_len"
    assert_equal "$(wc -l < "$T/out.txt")" 3
    assert_equal "$(sed -n 3p "$T/out.txt")" "blue cat"
    tfm-decode -q -m "$M/model.tfm" --text - < "$T/long.tfm" > /dev/null 2> "$T/err.txt"
    assert_equal "$(cat "$T/err.txt")" "tfm-decode: <stdin>: warning: 2 source sentences cut to the model's max_len"
    # none cut, no warning
    tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm" > /dev/null 2> "$T/err.txt"
    assert_equal "$(cat "$T/err.txt")" ""
}

@test "tfm-decode reads a batch stream and writes its sentences in the order of their numbers" {
    tfm-batch --tokens 40 --seed 5 "$M/test.tfm" > "$T/b.tfm"
    tfm-decode -q -m "$M/model.tfm" --text "$T/b.tfm" > "$T/out.txt"
    diff "$T/out.txt" <(tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm")
}

@test "tfm-decode: empty input gives an empty, valid hypothesis stream; an empty sentence decodes" {
    : | tfm-tokenize encode -m "$M/spm.model" > "$T/empty.tfm"
    tfm-decode -q -m "$M/model.tfm" "$T/empty.tfm" > "$T/h.tfm"
    run tfm-cat "$T/h.tfm"
    assert_success
    assert_line "meta kind=hypotheses"
    refute_line --regexp '^record '
    assert_line --regexp "^end [0-9]+ records$"
    printf 'red cat\n\nblue dog\n' | tfm-tokenize encode -m "$M/spm.model" > "$T/three.tfm"
    tfm-decode -q -m "$M/model.tfm" "$T/three.tfm" > "$T/h.tfm"
    assert_equal "$(values "$T/h.tfm" hyp.index)" "0 1 2"
    # the empty sentence changes nothing for its neighbours
    printf 'red cat\nblue dog\n' | tfm-tokenize encode -m "$M/spm.model" > "$T/two.tfm"
    assert_equal "$(tfm-tokenize decode "$T/h.tfm" | wc -l)" 3
    assert_equal "$(tfm-tokenize decode "$T/h.tfm" | sed -n '1p;3p')" \
        "$(tfm-decode -q -m "$M/model.tfm" --text "$T/two.tfm")"
}

@test "tfm-decode reads stdin, from a pipe; -o writes a file" {
    tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm" > "$T/want.txt"
    run bash -c "tfm-tokenize encode -m '$M/spm.model' < '$M/test.txt' | tfm-decode -q -m '$M/model.tfm' --text"
    assert_success
    diff <(echo "$output") "$T/want.txt"
    run tfm-decode -q -m "$M/model.tfm" -o "$T/out.tfm" - < "$M/test.tfm"
    assert_success
    assert_output ""
    run tfm-tokenize decode "$T/out.tfm"
    diff <(echo "$output") "$T/want.txt"
}

@test "tfm-decode refuses a stream of another vocabulary, naming both files" {
    run tfm-decode -q -m "$M/model.tfm" "$M/other.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-decode: $M/other.tfm: vocabulary [0-9a-f]{8} differs from the model's \($M/model.tfm: [0-9a-f]{8}\)$"
}

@test "tfm-decode refuses a stream of the wrong kind" {
    run tfm-decode -q -m "$M/model.tfm" "$M/model.tfm"
    assert_failure 1
    assert_output "tfm-decode: $M/model.tfm: a 'checkpoint' stream, expected tokens or batches"
}

@test "tfm-decode: missing, corrupt and non-checkpoint models fail with the file's name" {
    run tfm-decode -m "$T/none.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/none.tfm: No such file or directory"
    head -c $(($(wc -c < "$M/model.tfm") / 2)) "$M/model.tfm" > "$T/cut.tfm"
    run tfm-decode -m "$T/cut.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-decode: $T/cut.tfm: record [0-9]+ .*truncated"
    run tfm-decode -m "$M/test.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output --partial "tfm-decode: $M/test.tfm: "
    assert_output --partial "checkpoint"
    # an ensemble member of another vocabulary
    run tfm-decode -m "$M/model.tfm" -m "$M/other-model.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-decode: $M/other-model.tfm: vocabulary [0-9a-f]{8} differs from $M/model.tfm's"
}

@test "tfm-decode: usage errors exit 2 and name the flag" {
    run tfm-decode "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: a model is required (-m MODEL)"
    run tfm-decode -m "$M/model.tfm" --beam 0 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --beam: '0': expected an integer from 1 to 4096"
    run tfm-decode -m "$M/model.tfm" --alpha x "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 --partial "tfm-decode: --alpha: 'x'"
    run tfm-decode -m "$M/model.tfm" --sample --topp 1.5 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --topp: '1.5': expected a number in (0, 1]"
    run tfm-decode -m "$M/model.tfm" --sample --temperature 0 "$M/test.tfm"
    assert_failure 2
    run tfm-decode -m "$M/model.tfm" --topk 3 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --topk, --topp, --temperature and --seed need --sample"
    run tfm-decode -m "$M/model.tfm" --tokens -1 "$M/test.tfm"
    assert_failure 2
    run tfm-decode -m "$M/model.tfm" --device tpu "$M/test.tfm"
    assert_failure 2
    assert_output --partial "tfm-decode: --device: 'tpu': expected auto, cpu, cuda or sim"
    run tfm-decode -m "$M/model.tfm" "$M/test.tfm" "$M/test.tfm"
    assert_failure 2
    run tfm-decode --bogus
    assert_failure 2
    # the CPU backend's own limit, found when the options are read (it was an exit 1
    # after the models were loaded, for 1025 to 4096)
    run tfm-decode -m "$M/model.tfm" --threads 1025 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --threads: '1025': expected an integer from 0 to 1024"
}

@test "tfm-decode --device sim: through device memory, the same output as the CPU" {
    tfm-decode -q -m "$M/model.tfm" --device cpu --nbest 2 "$M/test.tfm" > "$T/cpu.tfm"
    run bash -c "tfm-decode --progress -m '$M/model.tfm' --device sim --nbest 2 '$M/test.tfm' 2>&1 > '$T/sim.tfm'"
    assert_success
    assert_line --partial "tfm-decode: device: sim (the CPU behind device memory, as asked); sim checked against the CPU"
    cmp "$T/cpu.tfm" "$T/sim.tfm"
    run tfm-decode -q -m "$M/model.tfm" --device sim --text "$M/test.tfm"
    assert_success
    diff <(echo "$output") <(tfm-decode -q -m "$M/model.tfm" --device cpu --text "$M/test.tfm")
}

@test "tfm-decode --device sim: a checkpoint at bf16 has the device checked at bf16 too" {
    # the precision the models compute at is the checkpoints' (read before the device opens)
    tfm-train -q -c "$M/copy.conf" --set precision=bf16 -o "$T/b16" --max-steps 1 --threads 2 \
        "$M/batches.tfm"
    run bash -c "tfm-decode --progress -m '$T/b16/last.tfm' --device sim '$M/test.tfm' 2>&1 > '$T/sim.tfm'"
    assert_success
    assert_line --partial "; sim checked against the CPU"
    assert_line --partial "; at bf16 against the CPU's emulation: within 0, 0, 0, 0"
    tfm-decode -q -m "$T/b16/last.tfm" --device cpu "$M/test.tfm" > "$T/cpu.tfm"
    cmp "$T/cpu.tfm" "$T/sim.tfm"
    # the model trained at auto is fp32 on the sim device: fp32's pass only
    run bash -c "tfm-decode --progress -m '$M/model.tfm' --device sim '$M/test.tfm' 2>&1 > /dev/null"
    assert_success
    assert_line --partial "; sim checked against the CPU"
    refute_output --partial "at bf16"
}

@test "tfm-decode --help, --version, --progress, --quiet, --device cpu" {
    run tfm-decode --help
    assert_success
    assert_line --index 0 --partial "usage: tfm-decode -m MODEL [-m MODEL]..."
    run tfm-decode --version
    assert_output --regexp '^tfm-decode [0-9]+\.[0-9]+'
    run bash -c "tfm-decode --progress --device cpu -m '$M/model.tfm' '$M/test.tfm' 2>&1 >/dev/null"
    assert_success
    assert_line --regexp '^tfm-decode: 20 sentences, 20 hypotheses, [0-9]+ tokens in '
    run bash -c "tfm-decode --quiet -m '$M/model.tfm' '$M/test.tfm' 2>&1 >/dev/null"
    assert_output ""
}

# lengths of the sentences of a stream, one line, from its offsets
lengths() {
    values "$1" tokens.offsets | tr ' ' '\n' | awk 'NF { if (n++) printf "%s%d", (n > 2 ? " " : ""), $1 - p; p = $1 } END { print "" }'
}

@test "tfm-decode --min-len: outputs at least N tokens in beam, greedy and sampling; the length limit wins" {
    tfm-decode -q -m "$M/model.tfm" "$M/test.tfm" > "$T/h.tfm"
    run tfm-cat --header "$T/h.tfm"
    assert_line "meta min_len=1"        # the config's default
    # the copy model stops after the source's words; --min-len 1000 runs each hypothesis
    # to its limit, source length + max_len_b (4)
    want=$(lengths "$M/test.tfm" | tr ' ' '\n' | awk '{ printf "%s%d", (NR > 1 ? " " : ""), $1 + 4 } END { print "" }')
    for search in "--beam 3" "--beam 1" "--sample --seed 2"; do
        tfm-decode -q -m "$M/model.tfm" $search --min-len 1000 "$M/test.tfm" > "$T/long.tfm"
        assert_equal "$(lengths "$T/long.tfm")" "$want"
        run tfm-cat --header "$T/long.tfm"
        assert_line "meta min_len=1000"
    done
    # a minimum the model meets anyway changes nothing
    cmp <(tfm-decode -q -m "$M/model.tfm" --min-len 0 --text "$M/test.tfm") \
        <(tfm-decode -q -m "$M/model.tfm" --min-len 2 --text "$M/test.tfm")
    for bad in -1 x 1.5 ''; do
        run tfm-decode -m "$M/model.tfm" --min-len "$bad" "$M/test.tfm"
        assert_failure 2
        assert_output --partial "--min-len"
    done
}

@test "tfm-decode refuses a checkpoint that is not the model its config describes, naming the tensor" {
    edit() { python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/model.tfm" "$T/$1.tfm" "${@:2}"; }
    # the editor's own copy (every CRC rewritten) decodes as the original
    edit copy
    run tfm-decode -q -m "$T/copy.tfm" --text "$M/test.tfm"
    assert_success
    diff <(echo "$output") <(tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm")
    # a NaN parameter (it decoded to empty lines, exit 0)
    edit nan --poison param.dec.1.ffn.b2 nan
    run tfm-decode -q -m "$T/nan.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/nan.tfm: tensor param.dec.1.ffn.b2: element 0 is NaN"
    edit inf --poison param.emb -inf
    run tfm-decode -q -m "$T/inf.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/inf.tfm: tensor param.emb: element 0 is Inf"
    # a config of 1 layer over the tensors of 2 (it decoded to the same word repeated)
    edit layers1 --config layers=1
    run tfm-decode -q -m "$T/layers1.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/layers1.tfm: tensor param.enc.1.self.wqkv: not a parameter of the model its config describes (layer 1; the config has layers = 1)"
    edit layers3 --config layers=3
    run tfm-decode -q -m "$T/layers3.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/layers3.tfm: tensor param.enc.2.self.wqkv missing (config wants 64x192)"
    # an extra tensor (it was accepted), a missing one, one of the right size in another shape
    edit extra --copy param.enc.0.ffn.w1 param.enc.0.ffn.w3
    run tfm-decode -q -m "$T/extra.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/extra.tfm: tensor param.enc.0.ffn.w3: not a parameter of the model its config describes"
    edit missing --drop param.dec.0.ln3.g
    run tfm-decode -q -m "$T/missing.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/missing.tfm: tensor param.dec.0.ln3.g missing (config wants 64)"
    edit reshaped --reshape param.enc.0.ffn.w1 128x64
    run tfm-decode -q -m "$T/reshaped.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/reshaped.tfm: tensor param.enc.0.ffn.w1: shape 128x64, config wants 64x128"
    # a config that is no model at all
    edit heads --config heads=3
    run tfm-decode -q -m "$T/heads.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/heads.tfm: config: d_model 64 is not divisible by heads 3"
    # an ensemble member is checked as the first one is; nothing reaches the output file
    run tfm-decode -q -m "$M/model.tfm" -m "$T/reshaped.tfm" -o "$T/out.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output --partial "$T/reshaped.tfm: tensor param.enc.0.ffn.w1: shape 128x64"
    [ ! -e "$T/out.tfm" ]
}

@test "tfm-decode: numbers with white space are refused, as every tool's are" {
    run tfm-decode -m "$M/model.tfm" --beam ' 2' "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --beam: ' 2': expected an integer from 1 to 4096"
    run tfm-decode -m "$M/model.tfm" --alpha '0.6 ' "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 --partial "tfm-decode: --alpha: '0.6 ': expected a number"
    run tfm-decode -m "$M/model.tfm" --alpha ' 0.6' "$M/test.tfm"
    assert_failure 2
}

@test "tfm-decode reads concatenated token or batch streams as one input; tfm-score their hypotheses" {
    tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm" > "$T/want.txt"
    head -n 8 "$M/test.txt" | tfm-tokenize encode -m "$M/spm.model" > "$T/a.tfm"
    tail -n 12 "$M/test.txt" | tfm-tokenize encode -m "$M/spm.model" > "$T/b.tfm"
    run bash -c "cat '$T/a.tfm' '$T/b.tfm' | tfm-decode -q -m '$M/model.tfm' --text"
    assert_success
    diff <(echo "$output") "$T/want.txt"
    # batch streams: the numbers of the second go on after the first's sentences
    tfm-batch -q --tokens 40 --seed 5 "$T/a.tfm" > "$T/ba.tfm"
    tfm-batch -q --tokens 40 --seed 6 "$T/b.tfm" > "$T/bb.tfm"
    cat "$T/ba.tfm" "$T/bb.tfm" > "$T/bab.tfm"
    tfm-decode -q -m "$M/model.tfm" --text "$T/bab.tfm" > "$T/out.txt"
    diff "$T/out.txt" "$T/want.txt"
    # hypothesis streams: hyp.index of the second goes on after the first's
    tfm-decode -q -m "$M/model.tfm" "$T/a.tfm" > "$T/ha.tfm"
    tfm-decode -q -m "$M/model.tfm" --nbest 2 "$T/b.tfm" > "$T/hb.tfm"
    run bash -c "cat '$T/ha.tfm' '$T/hb.tfm' | tfm-score -r '$M/test.txt'"
    assert_success
    assert_line --index 0 "$(tfm-score -r "$M/test.txt" "$T/want.txt" | head -n 1)"
    run bash -c "cat '$T/ha.tfm' '$T/hb.tfm' | tfm-tokenize decode"
    assert_success
    assert_equal "${#lines[@]}" 32
    assert_equal "$(echo "$output" | head -n 8)" "$(head -n 8 "$T/want.txt")"
}

@test "tfm-decode: garbage or another vocabulary after the input, data after a model, are errors" {
    size=$(wc -c < "$M/test.tfm")
    { cat "$M/test.tfm"; echo more; } > "$T/junk.tfm"
    run tfm-decode -q -m "$M/model.tfm" "$T/junk.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/junk.tfm: at byte $size: input after the end record is not a tfm stream (bad magic)"
    run bash -c "cat '$M/test.tfm' '$M/other.tfm' | tfm-decode -q -m '$M/model.tfm'"
    assert_failure 1
    assert_output --regexp "^tfm-decode: <stdin>: stream 2, record 1 'tfm.spm': at byte [0-9]+: vocabulary [0-9a-f]{8}, the first stream's is [0-9a-f]{8}: streams of different vocabularies are not read as one$"
    cat "$M/model.tfm" "$M/model.tfm" > "$T/two.tfm"
    run tfm-decode -q -m "$T/two.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/two.tfm: at byte $(wc -c < "$M/model.tfm"): input after the end of the checkpoint (a checkpoint is one stream; concatenated checkpoints are not read)"
}

@test "tfm-decode: a pad id inside a source sentence is reported against the input's line" {
    # set the second id of the first sentence to 0 (pad), with the record's crcs made good
    python3 - "$M/test.tfm" "$T/pad.tfm" <<'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
pos = 16
while True:
    dtype, rank, codec, _, nlen, _, crc, size, hcrc, _ = struct.unpack_from("<BBBBHHIQII", b, pos + 4)
    npos = pos + 32 + 8 * rank
    name = bytes(b[npos:npos + nlen]).decode()
    p = npos + nlen
    p += (-p) % 64
    if name == "tokens.ids":
        assert codec == 0
        struct.pack_into("<i", b, p + 4, 0)
        struct.pack_into("<I", b, pos + 12, zlib.crc32(bytes(b[p:p + size])))
        struct.pack_into("<I", b, pos + 24, zlib.crc32(bytes(b[pos:pos + 24] + b[pos + 32:npos + nlen])))
        break
    pos = p + size
open(sys.argv[2], "wb").write(b)
PY
    run tfm-decode -q -m "$M/model.tfm" "$T/pad.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/pad.tfm: line 1: pad id 0 inside a sentence (at token 2)"
}

@test "tfm-decode: --alpha outside the config's range 0 to 10 is a usage error" {
    run tfm-decode -m "$M/model.tfm" --alpha -1 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --alpha: '-1': expected a number in [0, 10]"
    run tfm-decode -m "$M/model.tfm" --alpha 10.5 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --alpha: '10.5': expected a number in [0, 10]"
    run tfm-decode -q -m "$M/model.tfm" --alpha 10 --text "$M/test.tfm"
    assert_success
}

@test "tfm-decode: --beam, --max-len-b and --min-len take their config keys' ranges, as tfm-decode(1) says" {
    run tfm-decode -m "$M/model.tfm" --beam 4097 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --beam: '4097': expected an integer from 1 to 4096"
    run tfm-decode -m "$M/model.tfm" --max-len-b 1048577 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --max-len-b: '1048577': expected an integer from 0 to 1048576"
    run tfm-decode -m "$M/model.tfm" --min-len 1048577 "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --min-len: '1048577': expected an integer from 0 to 1048576"
    # the man page states each range
    run mandoc -Tascii "$TFM_ROOT/man/tfm-decode.1"
    assert_output --partial "1 to 4096"
    [ "$(printf '%s\n' "$output" | col -b | grep -c '0 to 1048576')" = 2 ]
    run tfm-decode -q -m "$M/model.tfm" --max-len-b 1048576 --min-len 0 --beam 2 "$M/test.tfm"
    assert_success
}

@test "tfm-decode: a config's beam of 4096 that the memory cannot hold is an error naming the hypotheses and the steps" {
    [ -z "${TFM_SANITIZE:-}" ] || skip "ASan's shadow memory needs more address space"
    # 4096 hypotheses of 48 steps (max_len caps max_len_b) at d_model 384, 2 layers: over
    # 1 GiB of decoder state
    tfm-train -q -c "$M/copy.conf" --set d_model=384 --set d_ff=256 --set beam=4096 \
        --set max_len_b=48 -o "$T/big" --max-steps 1 --threads 1 "$M/batches.tfm"
    head -n 1 "$M/test.txt" | tfm-tokenize encode -q -m "$M/spm.model" --eos > "$T/one.tfm"
    run timeout -s KILL 60 bash -c "ulimit -v 1000000 && tfm-decode -j 1 -m '$T/big/last.tfm' '$T/one.tfm'"
    assert_failure 1
    assert_output --regexp "^tfm-decode: $T/big/last.tfm: decoder state of [0-9.]+ MiB for 4096 hypotheses \(sentences x beam\) of 48 steps: the address-space limit \(ulimit -v\)"
}

@test "tfm-decode --text -o: a link keeps the link, /dev/fd/1 writes the redirected file" {
    tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm" > "$T/want.txt"
    echo old > "$T/target.txt"
    ln -s target.txt "$T/link.txt"
    run tfm-decode -q -m "$M/model.tfm" --text -o "$T/link.txt" "$M/test.tfm"
    assert_success
    [ -L "$T/link.txt" ]
    diff "$T/target.txt" "$T/want.txt"
    [ -e /proc/self/fd/1 ] || skip "no /proc"
    run bash -c "tfm-decode -q -m '$M/model.tfm' --text -o /dev/fd/1 '$M/test.tfm' > '$T/got.txt'"
    assert_success
    diff "$T/got.txt" "$T/want.txt"
    run ls "$T"
    refute_output --partial ".tmp"
}

@test "tfm-decode -o writes into a FIFO, the text and the stream alike, and leaves it a FIFO" {
    tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm" > "$T/want.txt"
    tfm-decode -q -m "$M/model.tfm" "$M/test.tfm" > "$T/want.tfm"
    mkfifo "$T/out.fifo"
    for fmt in text stream; do
        # the reader first (3>&-: bats must not wait for it); a replaced FIFO never gets a writer
        timeout 20 cat "$T/out.fifo" > "$T/got.$fmt" 3>&- &
        local reader=$!
        run tfm-decode -q -m "$M/model.tfm" $([ $fmt = text ] && echo --text) -o "$T/out.fifo" \
            "$M/test.tfm"
        [ -p "$T/out.fifo" ] || { kill $reader; false; }
        assert_success
        wait $reader
    done
    cmp "$T/got.text" "$T/want.txt"
    cmp "$T/got.stream" "$T/want.tfm"
    run ls "$T"
    refute_output --partial ".tmp."
    # a regular file is still replaced whole, with no temporary left beside it
    echo old > "$T/out.txt"
    tfm-decode -q -m "$M/model.tfm" --text -o "$T/out.txt" "$M/test.tfm"
    cmp "$T/out.txt" "$T/want.txt"
    run ls "$T"
    refute_output --partial ".tmp."
}

@test "tfm-decode through two FIFOs: a process writes the input, then reads the output" {
    tfm-decode -q -m "$M/model.tfm" "$M/test.tfm" > "$T/want.tfm"
    mkfifo "$T/in.fifo" "$T/out.fifo"
    # the other side: the whole input first, the output after (3>&-: bats must not wait)
    timeout 20 sh -c 'cat "$1" > "$2" && cat "$3" > "$4"' sh "$M/test.tfm" "$T/in.fifo" \
        "$T/out.fifo" "$T/got.tfm" 3>&- &
    local peer=$!
    run timeout 20 tfm-decode -q -m "$M/model.tfm" -o "$T/out.fifo" "$T/in.fifo"
    wait $peer
    assert_success
    cmp "$T/got.tfm" "$T/want.tfm"
}

@test "tfm-decode -o and --attention as two FIFOs, read one after the other: the attention first" {
    tfm-decode -q -m "$M/model.tfm" --attention "$T/want.attn" "$M/test.tfm" > "$T/want.tfm"
    mkfifo "$T/attn.fifo" "$T/out.fifo"
    # the reader takes the attention to its end, then the hypotheses (3>&-: bats must not
    # wait); the hypotheses' FIFO was opened first, waiting for a reader that never came
    timeout 20 sh -c 'cat "$1" > "$2" && cat "$3" > "$4"' sh "$T/attn.fifo" "$T/got.attn" \
        "$T/out.fifo" "$T/got.tfm" 3>&- &
    local peer=$!
    run timeout 20 tfm-decode -q -m "$M/model.tfm" -o "$T/out.fifo" --attention "$T/attn.fifo" \
        "$M/test.tfm"
    wait $peer
    assert_success
    cmp "$T/got.attn" "$T/want.attn"
    cmp "$T/got.tfm" "$T/want.tfm"
}

@test "tfm-decode refuses a checkpoint whose vocabulary has another size than its config says" {
    # the model's config says the size of spm.model; other.model has another
    local have want
    have=$(tfm-cat --header "$M/other.tfm" | sed -n 's/^meta vocab.size=//p')
    want=$(tfm-cat --header "$M/test.tfm" | sed -n 's/^meta vocab.size=//p')
    [ -n "$have" ] && [ -n "$want" ] && [ "$have" != "$want" ]
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/model.tfm" "$T/vocab.tfm" \
        --spm "$M/other.model"
    # (the stream decoded with it wrote ids outside the vocabulary, exit 0)
    run tfm-decode -q -m "$T/vocab.tfm" -o "$T/out.tfm" "$M/other.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/vocab.tfm: its vocabulary has $have pieces, its config says vocab=$want"
    [ ! -e "$T/out.tfm" ]
    run tfm-decode -q -m "$M/model.tfm" -m "$T/vocab.tfm" --text "$M/test.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/vocab.tfm: its vocabulary has $have pieces, its config says vocab=$want"
    # the editor's copy with the model's own vocabulary decodes (only the size is wrong above)
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/model.tfm" "$T/same.tfm" \
        --spm "$M/spm.model"
    run tfm-decode -q -m "$T/same.tfm" --text "$M/test.tfm"
    assert_success
    diff <(echo "$output") "$M/test.txt"
}

@test "tfm-decode: --attention and the hypotheses may both go to /dev/null" {
    tfm-decode -q -m "$M/model.tfm" --attention /dev/null -o /dev/null "$M/test.tfm"
    tfm-decode -q -m "$M/model.tfm" --attention /dev/null "$M/test.tfm" > /dev/null
}

@test "tfm-decode: --attention and -o naming one file is a usage error, however named" {
    local o=(-q -m "$M/model.tfm")
    run tfm-decode "${o[@]}" --attention "$T/x.tfm" -o "$T/x.tfm" "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --attention $T/x.tfm and -o $T/x.tfm are one file: the hypotheses would overwrite the attention (give two files)"
    # a path that does not exist yet, spelt otherwise
    run tfm-decode "${o[@]}" --attention "$T/./x.tfm" -o "$T/x.tfm" "$M/test.tfm"
    assert_failure 2
    run bash -c "cd '$T' && tfm-decode ${o[*]} --attention x.tfm -o '$T/x.tfm' '$M/test.tfm'"
    assert_failure 2
    # an existing file through a hard link, a symbolic link, or standard output
    echo keep > "$T/a.tfm"
    ln "$T/a.tfm" "$T/hard.tfm"
    ln -s a.tfm "$T/soft.tfm"
    ln -s new.tfm "$T/dangling.tfm"
    run tfm-decode "${o[@]}" --attention "$T/hard.tfm" -o "$T/a.tfm" "$M/test.tfm"
    assert_failure 2
    run tfm-decode "${o[@]}" --attention "$T/a.tfm" -o "$T/soft.tfm" "$M/test.tfm"
    assert_failure 2
    run tfm-decode "${o[@]}" --attention "$T/dangling.tfm" -o "$T/new.tfm" "$M/test.tfm"
    assert_failure 2
    # a chain of 20 links to a file not there yet: followed as far as the output is
    prev=chained.tfm
    for i in $(seq 20); do ln -s "$prev" "$T/c$i"; prev=c$i; done
    run tfm-decode "${o[@]}" --attention "$T/c20" -o "$T/chained.tfm" "$M/test.tfm"
    assert_failure 2
    [ ! -e "$T/chained.tfm" ]
    run bash -c "tfm-decode ${o[*]} --attention '$T/a.tfm' '$M/test.tfm' >> '$T/a.tfm'"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --attention $T/a.tfm is standard output, which carries the hypotheses (give -o OUT)"
    assert_equal "$(cat "$T/a.tfm")" keep
    run tfm-decode "${o[@]}" --attention - "$M/test.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --attention -: standard output carries the hypotheses (give -o OUT)"
    # two files: both written
    run tfm-decode "${o[@]}" --attention "$T/attn.tfm" -o "$T/h.tfm" "$M/test.tfm"
    assert_success
    assert_equal "$(tfm-cat --header "$T/attn.tfm" | sed -n 's/^meta kind=//p')" attention
    assert_equal "$(tfm-cat --header "$T/h.tfm" | sed -n 's/^meta kind=//p')" hypotheses
}

@test "tfm-decode --text: one plain line per sentence with one hypothesis, searched or sampled; the n-best format with more" {
    # --nbest 1: the lines a reference has, whatever the search (tfm-score takes them)
    for search in "--beam 3" "--beam 1" "--sample --seed 4"; do
        run tfm-decode -q -m "$M/model.tfm" $search --text "$M/test.tfm"
        assert_success
        assert_equal "${#lines[@]}" 20
        refute_output --partial "|||"
    done
    run tfm-decode -q -m "$M/model.tfm" --sample --topk 1 --text "$M/test.tfm"
    diff <(echo "$output") "$M/test.txt"
    # --nbest 2: 'N ||| text ||| score', sampled as searched
    for search in "--beam 3" "--sample --seed 4"; do
        run tfm-decode -q -m "$M/model.tfm" $search --nbest 2 --text "$M/test.tfm"
        assert_success
        assert_equal "${#lines[@]}" 40
        assert_line --index 0 --regexp '^0 \|\|\| .* \|\|\| -?[0-9]+\.[0-9]{6}$'
        assert_line --index 39 --regexp '^19 \|\|\| .* \|\|\| -?[0-9]+\.[0-9]{6}$'
    done
}

@test "tfm-decode: standard input feeds the model or the sentences, not both" {
    run bash -c "cat '$M/model.tfm' | tfm-decode -q -m - --text"
    assert_failure 2
    assert_line --index 0 "tfm-decode: -m -: standard input cannot feed both the model and the sentences to translate (give FILE)"
    run bash -c "cat '$M/model.tfm' | tfm-decode -q -m - --text -"
    assert_failure 2
    run bash -c "cat '$M/model.tfm' | tfm-decode -q -m - -m - --text '$M/test.tfm'"
    assert_failure 2
    assert_line --index 0 "tfm-decode: -m given standard input 2 times (- or /dev/stdin): it holds one model"
    run bash -c "cat '$M/model.tfm' | tfm-decode -q -m - --text '$M/test.tfm'"
    assert_success
    diff <(echo "$output") "$M/test.txt"
    # /dev/stdin on a pipe is standard input too; on a regular file it is a reader of its own
    run bash -c "cat '$M/model.tfm' | tfm-decode -q -m /dev/stdin --text"
    assert_failure 2
    assert_line --index 0 "tfm-decode: -m /dev/stdin: standard input cannot feed both the model and the sentences to translate (give FILE)"
    run bash -c "cat '$M/model.tfm' | tfm-decode -q -m - -m /dev/stdin --text '$M/test.tfm'"
    assert_failure 2
    assert_line --index 0 "tfm-decode: -m given standard input 2 times (- or /dev/stdin): it holds one model"
    run bash -c "tfm-decode -q -m /dev/stdin --text < '$M/model.tfm' '$M/test.tfm'"
    assert_success
    diff <(echo "$output") "$M/test.txt"
    # but the sentences from it too would be the checkpoint read as sentences
    run bash -c "tfm-decode -q -m /dev/stdin --text < '$M/model.tfm'"
    assert_failure 2
    assert_line --index 0 "tfm-decode: -m /dev/stdin: standard input cannot feed both the model and the sentences to translate (give FILE)"
}

@test "tfm-decode of a batch stream with sentences left out: tfm-score names the first one missing" {
    # a batch stream of pairs (--max-len 5 drops those of more than 4 tokens and eos): the
    # numbers of the pairs left out are gone
    tfm-tokenize encode -m "$M/spm.model" --eos < "$M/test.txt" > "$T/eos.tfm"
    tfm-batch -q --max-len 5 --tokens 40 "$T/eos.tfm" "$T/eos.tfm" > "$T/b.tfm"
    tfm-decode -q -m "$M/model.tfm" "$T/b.tfm" > "$T/h.tfm"
    local kept first last
    kept=$(values "$T/h.tfm" hyp.index | tr ' ' '\n' | grep -c .)
    first=$(values "$T/h.tfm" hyp.index | tr ' ' '\n' | awk '$1 != NR - 1 { print NR - 1; exit }')
    last=$(values "$T/h.tfm" hyp.index | tr ' ' '\n' | sort -n | tail -n 1)
    [ "$kept" -lt 20 ] && [ -n "$first" ] && [ "$last" -ge "$kept" ]
    run tfm-score -r "$M/test.txt" "$T/h.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-score: $T/h.tfm: no hypothesis for sentence $first, though hyp.index goes up to $last \(hypothesis [0-9]+\): every sentence from 0 to the last must have one$"
}

@test "a write error on the --attention output names the file once" {
    # (was 'FILE: FILE: write error', '<stdout>: <stdout>: write error'): a file size limit
    # above the stream's header, below the attention of 200 sentences
    for i in 1 2 3 4 5 6 7 8 9 10; do cat "$M/test.txt"; done |
        tfm-tokenize encode -q -m "$M/spm.model" > "$T/in.tfm"
    local limit=$(( ($(wc -c < "$M/spm.model") + 65536) / 1024 + 64 ))
    [ "$(tfm-decode -q -m "$M/model.tfm" --attention - -o /dev/null "$T/in.tfm" | wc -c)" \
        -gt $(( (limit + 64) * 1024 )) ]
    run bash -c 'trap "" XFSZ; ulimit -f $1; exec tfm-decode -q -m "$2" --attention "$3" \
        -o /dev/null "$4"' bash $limit "$M/model.tfm" "$T/attn.tfm" "$T/in.tfm"
    assert_failure 1
    assert_output "tfm-decode: $T/attn.tfm: write error: File too large"
    [ ! -e "$T/attn.tfm" ]
    run bash -c 'trap "" XFSZ; ulimit -f $1; exec tfm-decode -q -m "$2" --attention - \
        -o /dev/null "$4" > "$3"' bash $limit "$M/model.tfm" "$T/attn.tfm" "$T/in.tfm"
    assert_failure 1
    assert_output "tfm-decode: <stdout>: write error: File too large"
}

@test "-o or --attention naming the input or a model is a usage error: both stay" {
    # (each was replaced by the hypotheses or the attention, exit 0)
    cp "$M/model.tfm" "$T/m.tfm"
    cp "$M/test.tfm" "$T/in.tfm"
    ln -s m.tfm "$T/link.tfm"
    run tfm-decode -q -m "$T/m.tfm" -o "$T/m.tfm" "$T/in.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --output '$T/m.tfm' is the model $T/m.tfm: the hypotheses would replace it"
    run tfm-decode -q -m "$T/m.tfm" -o "$T/in.tfm" "$T/in.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --output '$T/in.tfm' is the input $T/in.tfm: the hypotheses would replace it"
    run bash -c 'tfm-decode -q -m "$1" -o "$2" < "$2"' bash "$T/m.tfm" "$T/in.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --output '$T/in.tfm' is the input on standard input: the hypotheses would replace it"
    run tfm-decode -q -m "$M/model.tfm" -m "$T/m.tfm" --attention "$T/link.tfm" -o "$T/h.tfm" \
        "$T/in.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-decode: --attention '$T/link.tfm' is the model $T/m.tfm: the attention would replace it"
    cmp "$T/m.tfm" "$M/model.tfm"
    cmp "$T/in.tfm" "$M/test.tfm"
    [ ! -e "$T/h.tfm" ]
}

@test "a hypothesis or attention stream is not written to a terminal; --text is" {
    command -v script > /dev/null || skip "no script(1) to make a terminal"
    cd "$BATS_TEST_TMPDIR"
    run script -qec "tfm-decode -q -m '$M/model.tfm' '$M/test.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "tfm-decode: refusing to write a binary stream to a terminal"
    assert_line --partial "rc=2"
    for o in "-o /dev/tty" "-o /dev/stdout"; do
        run script -qec "tfm-decode -q -m '$M/model.tfm' $o '$M/test.tfm'; echo rc=\$?" /dev/null
        assert_line --partial "is a terminal: refusing to write a binary stream to it"
        assert_line --partial "rc=2"
    done
    run script -qec "tfm-decode -q -m '$M/model.tfm' -o h.tfm --attention - '$M/test.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "--attention -: refusing to write a binary stream to a terminal"
    assert_line --partial "rc=2"
    [ ! -e h.tfm ]
    # the text is for a terminal
    run script -qec "tfm-decode -q --text -m '$M/model.tfm' '$M/test.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "rc=0"
    assert_equal "${#lines[@]}" 21
}

@test "tfm-decode reads its weights in the checkpoint's map: cut meanwhile, it says so, status 135, no output" {
    [ -z "${TFM_SANITIZE:-}" ] || skip "the sanitizers take SIGBUS for themselves"
    ulimit -c 0                     # SIGBUS would dump core
    cp "$M/model.tfm" "$T/m.tfm"
    mkfifo "$T/in.fifo"
    # tfm-decode opens its input once the model is loaded, so the helper's open returns
    # then: the checkpoint is cut to its first page, and only then come the sentences
    # (3>&-: bats must not wait for the helper)
    timeout 20 sh -c 'exec 4> "$1"; truncate -s 4096 "$2"; cat "$3" >&4' sh "$T/in.fifo" \
        "$T/m.tfm" "$M/test.tfm" 3>&- &
    local peer=$!
    run timeout 30 tfm-decode -q -m "$T/m.tfm" -o "$T/h.tfm" "$T/in.fifo"
    wait $peer
    assert_failure 135
    assert_output --partial "tfm-decode: $T/m.tfm: bus error: the file was truncated while it was mapped into memory; replace a file in use by renaming a new one over it, as tfm-train and tfm-avg do"
    [ ! -e "$T/h.tfm" ]
    run ls -A "$T"
    refute_output --partial ".tmp."
    # replaced by a rename instead, the old file is read to the end
    cp "$M/model.tfm" "$T/m.tfm"
    tfm-decode -q -m "$T/m.tfm" "$M/test.tfm" > "$T/want.tfm"
    timeout 20 sh -c 'exec 4> "$1"; cp "$2" "$3.new"; truncate -s 4096 "$3.new"; mv "$3.new" "$3"; cat "$4" >&4' \
        sh "$T/in.fifo" "$M/model.tfm" "$T/m.tfm" "$M/test.tfm" 3>&- &
    peer=$!
    run timeout 30 tfm-decode -q -m "$T/m.tfm" -o "$T/h.tfm" "$T/in.fifo"
    wait $peer
    assert_success
    cmp "$T/h.tfm" "$T/want.tfm"
}
