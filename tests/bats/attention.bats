#!/usr/bin/env bats
# tfm-decode --attention and pipelines/plot-attention: a small model trained here for a
# few seconds on a copy task; the attention stream's records, shapes and rows (each a
# distribution), its order, the errors, and the heat maps of a known sentence.

setup_file() {
    M="$BATS_FILE_TMPDIR"
    command -v tfm-batch > /dev/null && command -v tfm-train > /dev/null || return 0
    # copy task: 600 lines of 2..6 words from 12 words, deterministic
    awk 'BEGIN {
        split("red green blue cat dog bird sun moon star tree house lake", w, " ")
        s = 11
        for (i = 0; i < 600; i++) {
            s = (s * 1103515245 + 12345) % 2147483648; n = 2 + int(s / 65536) % 5; line = ""
            for (j = 0; j < n; j++) {
                s = (s * 1103515245 + 12345) % 2147483648
                line = line (j ? " " : "") w[1 + int(s / 65536) % 12]
            }
            print line
        }
    }' > "$M/train.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 60 -O hard_vocab_limit=false "$M/train.txt"
    tfm-tokenize encode -m "$M/spm.model" --eos < "$M/train.txt" > "$M/train.tfm"
    tfm-batch -q --tokens 400 --seed 1 "$M/train.tfm" "$M/train.tfm" > "$M/batches.tfm"
    cat > "$M/copy.conf" <<'EOF'
layers = 2
d_model = 32
d_ff = 64
heads = 4
max_len = 40
dropout = 0
label_smoothing = 0
warmup = 50
lr_scale = 0.5
tokens = 400
beam = 3
max_len_b = 4
EOF
    tfm-train -q -c "$M/copy.conf" -o "$M/ckpt" --max-steps 300 --threads 2 "$M/batches.tfm"
    cp -L "$M/ckpt/last.tfm" "$M/model.tfm"
    printf '%s\n' "red green blue cat" "sun moon" "tree house lake dog bird" > "$M/test.txt"
    tfm-tokenize encode -m "$M/spm.model" < "$M/test.txt" > "$M/test.tfm"
    tfm-decode -q -m "$M/model.tfm" --attention "$M/all.tfm" --attention-all \
        -o "$M/hyp.tfm" "$M/test.tfm"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    bats_load_library bats-file
    command -v tfm-batch > /dev/null || skip "tfm-batch is not built yet"
    command -v tfm-train > /dev/null || skip "tfm-train is not built yet"
    command -v gnuplot > /dev/null || skip "gnuplot is not installed (.ci/install-deps)"
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
}

# The values of record NAME of a stream, one line per row of its last dimension.
values() {
    tfm-cat --values "$1" | awk -v name="$2" '
        /^record / { on = ($3 == name); next } on && /^\t/ { print substr($0, 2) }'
}

# The shapes of record NAME, one line per sentence: "[2,4,5,5]".
shapes() {
    tfm-cat "$1" | awk -v name="$2" '$1 == "record" && $3 == name { print $5 }'
}

# The largest |row sum - 1| of record NAME.
worst_row() {
    values "$1" "$2" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; d = s - 1
                              if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g\n", m }'
}

@test "--attention: a stream of kind attention, with the model's vocabulary and shape" {
    run tfm-cat --header "$M/all.tfm"
    assert_success
    assert_line "meta kind=attention"
    assert_line "meta layers=2"
    assert_line "meta heads=4"
    assert_line "meta attention=all"
    assert_line "meta model=$M/model.tfm"
    [ "$(tfm-cat --header "$M/all.tfm" | grep spm.crc32)" = \
      "$(tfm-cat --header "$M/model.tfm" | grep spm.crc32)" ]
}

@test "--attention: every row of every layer and head sums to 1 (within 1e-5)" {
    for r in attn.cross attn.enc attn.dec; do
        [ "$(values "$M/all.tfm" "$r" | wc -l)" -gt 0 ]
        run worst_row "$M/all.tfm" "$r"
        assert_success
        awk -v w="$output" -v r="$r" 'BEGIN { if (!(w + 0 <= 1e-5)) { print r ": " w; exit 1 } }'
    done
}

@test "--attention: source = input + eos, target = hypothesis + eos, shapes (N,H,T,S)" {
    diff <(values "$M/all.tfm" attn.src) \
         <(tfm-tokenize encode -m "$M/spm.model" --eos < "$M/test.txt" | tfm-tokenize decode --ids)
    diff <(values "$M/all.tfm" attn.tgt) <(tfm-tokenize decode --ids "$M/hyp.tfm" | sed 's/$/ 3/; s/^ //')
    paste <(values "$M/all.tfm" attn.src | awk '{ print NF }') \
          <(values "$M/all.tfm" attn.tgt | awk '{ print NF }') > "$T/len"
    diff <(shapes "$M/all.tfm" attn.cross) <(awk '{ printf "[2,4,%d,%d]\n", $2, $1 }' "$T/len")
    diff <(shapes "$M/all.tfm" attn.enc) <(awk '{ printf "[2,4,%d,%d]\n", $1, $1 }' "$T/len")
    diff <(shapes "$M/all.tfm" attn.dec) <(awk '{ printf "[2,4,%d,%d]\n", $2, $2 }' "$T/len")
    # the pieces: the source's then the target's, one a line
    tfm-cat --values "$M/all.tfm" | awk '$3 == "attn.pieces" { getline; print }' |
        awk '{ n = 0; for (i = 1; i <= NF; i++) n += $i == 10; print n }' > "$T/pieces"
    diff "$T/pieces" <(awk '{ print $1 + $2 }' "$T/len")
}

@test "--attention: the copy model's known sentence comes back, in input order" {
    [ "$(tfm-decode -q -m "$M/model.tfm" --text "$M/test.tfm" | head -1)" = "red green blue cat" ]
    diff <(values "$M/all.tfm" attn.index) <(printf '%s\n' 0 1 2)
    # the record order of a sentence
    tfm-cat "$M/all.tfm" | awk '$1 == "record" { print $3 }' | head -7 > "$T/order"
    diff "$T/order" <(printf '%s\n' attn.index attn.src attn.tgt attn.pieces attn.cross attn.enc attn.dec)
}

@test "--attention: decoder self-attention is causal; without --attention-all, cross only" {
    values "$M/all.tfm" attn.dec | awk '
        NF != last { c = 0; last = NF }
        { r = c++ % NF; for (j = r + 2; j <= NF; j++) if ($j != 0) { print "row " NR; exit 1 } }'
    tfm-decode -q -m "$M/model.tfm" --attention "$T/x.tfm" -o "$T/h.tfm" "$M/test.tfm"
    run tfm-cat "$T/x.tfm"
    assert_line "meta attention=cross"
    assert_output --partial "attn.cross"
    refute_output --partial "attn.enc"
    refute_output --partial "attn.dec"
    diff <(values "$T/x.tfm" attn.cross) <(values "$M/all.tfm" attn.cross)
    cmp "$T/h.tfm" "$M/hyp.tfm"
}

@test "--attention with n-best and greedy: the best hypothesis of each sentence, once" {
    tfm-decode -q -m "$M/model.tfm" --nbest 2 --attention "$T/n.tfm" --text "$M/test.tfm" > /dev/null
    diff <(values "$T/n.tfm" attn.index) <(printf '%s\n' 0 1 2)
    diff <(values "$T/n.tfm" attn.tgt) <(values "$M/all.tfm" attn.tgt)
    tfm-decode -q -m "$M/model.tfm" --beam 1 --attention - -o "$T/g.tfm" "$M/test.tfm" > "$T/a.tfm"
    diff <(values "$T/a.tfm" attn.tgt) <(tfm-tokenize decode --ids "$T/g.tfm" | sed 's/$/ 3/; s/^ //')
}

@test "--attention on a device (sim: memory the host cannot touch): the CPU's weights" {
    tfm-decode -q -m "$M/model.tfm" --device sim --attention "$T/sim.tfm" --attention-all \
        -o "$T/h.tfm" "$M/test.tfm"
    for r in attn.src attn.tgt attn.cross attn.enc attn.dec; do
        diff <(values "$T/sim.tfm" "$r") <(values "$M/all.tfm" "$r")
    done
}

@test "--attention: usage errors and an unwritable file" {
    run tfm-decode -m "$M/model.tfm" --attention-all "$M/test.tfm"
    assert_failure 2
    assert_output --partial "--attention-all needs --attention FILE"
    run tfm-decode -m "$M/model.tfm" --attention - "$M/test.tfm"
    assert_failure 2
    assert_output --partial "standard output carries the hypotheses"
    run tfm-decode -q -m "$M/model.tfm" --attention "$T/no/such/dir/a.tfm" -o "$T/h.tfm" "$M/test.tfm"
    assert_failure 1
    assert_output --partial "$T/no/such/dir/a.tfm"
    assert_not_exist "$T/h.tfm"
}

@test "--attention: a run that fails writes neither file; a bad path fails before decoding" {
    # the hypotheses cannot be written: the attention must not appear either
    run tfm-decode -q -m "$M/model.tfm" --attention "$T/a.tfm" -o /dev/full "$M/test.tfm"
    assert_failure 1
    assert_output --partial "/dev/full"
    assert_not_exist "$T/a.tfm"
    run bash -c "tfm-decode -q -m '$M/model.tfm' --attention '$T/a.tfm' '$M/test.tfm' > /dev/full"
    assert_failure 1
    assert_not_exist "$T/a.tfm"
    run bash -c "tfm-decode -q -m '$M/model.tfm' --attention '$T/a.tfm' --text '$M/test.tfm' > /dev/full"
    assert_failure 1
    assert_not_exist "$T/a.tfm"
    # and the other way round
    run tfm-decode -q -m "$M/model.tfm" --attention /dev/full -o "$T/h.tfm" "$M/test.tfm"
    assert_failure 1
    assert_not_exist "$T/h.tfm"
    # an output path that cannot be written is found before any sentence is decoded
    run tfm-decode --progress -m "$M/model.tfm" --attention "$T/a.tfm" -o "$T/no/dir/h.tfm" \
        "$M/test.tfm"
    assert_failure 1
    assert_output --partial "$T/no/dir/h.tfm"
    refute_output --partial "sentences"
    assert_not_exist "$T/a.tfm"
    run tfm-decode --progress -m "$M/model.tfm" --text -o "$T/no/dir/h.txt" "$M/test.tfm"
    assert_failure 1
    refute_output --partial "sentences"
    run ls "$T"
    refute_output --partial ".tmp."
}

@test "--attention - with standard output closed: an error, and the -o file untouched" {
    # descriptor 1 closed: the hypotheses' temporary file must not become 'standard output'
    run bash -c "tfm-decode -q -m '$M/model.tfm' --attention - -o '$T/h.tfm' '$M/test.tfm' >&-"
    assert_failure 1
    assert_output --partial "<stdout>: write error"
    assert_not_exist "$T/h.tfm"
    # and a run that writes nothing there succeeds with it closed
    run bash -c "tfm-decode -q -m '$M/model.tfm' --attention '$T/a.tfm' -o '$T/h.tfm' '$M/test.tfm' >&-"
    assert_success
    assert_output ""
    run tfm-cat "$T/h.tfm"
    assert_success
    run tfm-cat "$T/a.tfm"
    assert_success
}

@test "plot-attention: the heat maps of a known sentence, a picture a layer and kind" {
    run "$TFM_ROOT/pipelines/plot-attention" -n 1 -o "$T/s1" "$M/all.tfm"
    assert_success
    for k in cross enc dec; do
        for l in 1 2; do
            assert_line "$T/s1.$k.$l.png"
            [ -s "$T/s1.$k.$l.png" ]
            [ "$(head -c 8 "$T/s1.$k.$l.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
        done
    done
    [ "$(ls "$T" | grep -c png)" -eq 6 ]
    # another run's picture being drawn under the name every run used is left alone
    echo "another run's picture" > "$T/s1.cross.1.png.tmp"
    run "$TFM_ROOT/pipelines/plot-attention" -n 1 -o "$T/s1" "$M/all.tfm"
    assert_success
    assert_equal "$(cat "$T/s1.cross.1.png.tmp")" "another run's picture"
    rm "$T/s1.cross.1.png.tmp"
    # cross only: cross pictures only; the default prefix is the file's name
    tfm-decode -q -m "$M/model.tfm" --attention "$T/x.tfm" -o "$T/h.tfm" "$M/test.tfm"
    run "$TFM_ROOT/pipelines/plot-attention" -n 3 "$T/x.tfm"
    assert_success
    assert_output "$T/x.cross.1.png
$T/x.cross.2.png"
}

@test "plot-attention: a missing sentence, another kind of stream, bad options" {
    run "$TFM_ROOT/pipelines/plot-attention" -n 4 "$M/all.tfm"
    assert_failure 1
    assert_output --partial "no sentence 4"
    run "$TFM_ROOT/pipelines/plot-attention" "$M/hyp.tfm"
    assert_failure 1
    assert_output --partial "a \"hypotheses\" stream, not attention"
    run "$TFM_ROOT/pipelines/plot-attention" -n x "$M/all.tfm"
    assert_failure 2
    run "$TFM_ROOT/pipelines/plot-attention"
    assert_failure 2
    assert_output --partial "usage: plot-attention"
    run "$TFM_ROOT/pipelines/plot-attention" "$T/none.tfm"
    assert_failure 1
    assert_output --partial "none.tfm"
    run "$TFM_ROOT/pipelines/plot-attention" - < "$M/all.tfm"
    assert_failure 2
    assert_output --partial "standard input: give -o PREFIX"
    run "$TFM_ROOT/pipelines/plot-attention" -n 2 -o "$T/in" - < "$M/all.tfm"
    assert_success
    assert_line "$T/in.dec.2.png"
}
