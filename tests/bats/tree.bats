#!/usr/bin/env bats
# tfm-decode --tree: with it every output is a linearized tree over the source's words,
# whatever the model prefers.  The model here is trained for one update on linearized
# trees of the bundled WSJ sample (tfm-score --linearize --keep-words), so that without
# the constraint it writes anything; with it, beam, greedy and sampling write trees whose
# leaves are the source's words (copy) or as many as its words (count).

setup_file() {
    M="$BATS_FILE_TMPDIR"
    command -v tfm-train > /dev/null || return 0
    P="$TFM_ROOT/data/ptb-nltk-sample"
    tfm-score --linearize --keep-words "$P/wsj_0001-0149.train.oneline.txt" | head -n 600 > "$M/train.lin"
    tfm-score --linearize --keep-words "$P/wsj_0150-0169.dev.oneline.txt" | head -n 12 > "$M/test.lin"
    cut -f1 "$M/train.lin" > "$M/train.src"
    cut -f2 "$M/train.lin" > "$M/train.tgt"
    cut -f1 "$M/test.lin" > "$M/test.src"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 800 --coverage 1 \
        -O split_by_unicode_script=false "$M/train.src" "$M/train.tgt"
    tfm-tokenize encode -m "$M/spm.model" --eos "$M/train.src" > "$M/train.src.tfm"
    tfm-tokenize encode -m "$M/spm.model" --eos "$M/train.tgt" > "$M/train.tgt.tfm"
    tfm-tokenize encode -m "$M/spm.model" --eos "$M/test.src" > "$M/test.tfm"
    tfm-batch --tokens 3000 --max-len 400 --seed 1 "$M/train.src.tfm" "$M/train.tgt.tfm" > "$M/batches.tfm"
    printf '%s\n' "layers = 1" "d_model = 32" "d_ff = 64" "heads = 2" "max_len = 400" \
        "tokens = 3000" "max_len_b = 150" > "$M/tiny.conf"
    tfm-train -q -c "$M/tiny.conf" -o "$M/ckpt" --max-steps 1 "$M/batches.tfm"
    cp -L "$M/ckpt/last.tfm" "$M/model.tfm"
    # a vocabulary without bracket pieces
    tfm-tokenize train -q -m "$M/plain.model" --vocab 300 "$M/train.src"
    tfm-tokenize encode -m "$M/plain.model" --eos "$M/train.src" > "$M/plain.tfm"
    tfm-batch --tokens 3000 "$M/plain.tfm" "$M/plain.tfm" > "$M/plain-batches.tfm"
    tfm-train -q -c "$M/tiny.conf" -o "$M/plain-ckpt" --max-steps 1 "$M/plain-batches.tfm"
    cp -L "$M/plain-ckpt/last.tfm" "$M/plain-model.tfm"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    command -v tfm-train > /dev/null || skip "tfm-train is not built yet"
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
}

# How many lines of hypotheses $2 are not a tree over the words of sources $1: one root,
# closings matching their openings, leaves inside constituents, and the leaves the source
# words (mode copy) or as many (mode count).
not_trees() {
    awk -v mode="$3" 'NR == FNR { src[FNR] = $0; n[FNR] = NF; next }
        {   ok = 1; d = 0; roots = 0; w = ""; k = 0
            for (i = 1; i <= NF; i++) {
                t = $i
                if (t ~ /^\(./) { if (d == 0) roots++; st[++d] = substr(t, 2) }
                else if (t ~ /^\)./) { if (d == 0 || st[d] != substr(t, 2)) ok = 0; d-- }
                else { if (d == 0) ok = 0; w = w (k++ ? " " : "") t }
            }
            if (d != 0 || roots != 1) ok = 0
            if (mode == "copy" && w != src[FNR]) ok = 0
            if (mode == "count" && k != n[FNR]) ok = 0
            bad += !ok
        }
        END { print bad + 0 }' "$1" "$2"
}

@test "without --tree the barely trained model writes no trees" {
    tfm-decode -q -m "$M/model.tfm" --beam 1 --text "$M/test.tfm" > "$T/h"
    [ "$(wc -l < "$T/h")" -eq 12 ]
    [ "$(not_trees "$M/test.src" "$T/h" copy)" -eq 12 ]
}

@test "--tree copy: beam, greedy and sampling write trees over exactly the source words" {
    for opts in "--beam 4" "--beam 1" "--sample --seed 3" "--beam 4 --nbest 1 --max-len-b 150"; do
        tfm-decode -q -m "$M/model.tfm" $opts --tree copy --text "$M/test.tfm" > "$T/h"
        [ "$(wc -l < "$T/h")" -eq 12 ]
        run not_trees "$M/test.src" "$T/h" copy
        assert_output 0
    done
    # restored and scored like any parser output: every tree is valid
    run tfm-score -m f1 -r <(head -n 12 "$TFM_ROOT/data/ptb-nltk-sample/wsj_0150-0169.dev.oneline.txt") \
        --source "$M/test.src" "$T/h"
    assert_success
    assert_line -n 0 --partial "sentences = 12 valid = 12 errors = 0"
}

@test "--tree count: as many leaves as source words" {
    tfm-decode -q -m "$M/model.tfm" --beam 3 --tree count --text "$M/test.tfm" > "$T/h"
    run not_trees "$M/test.src" "$T/h" count
    assert_output 0
    run not_trees "$M/test.src" "$T/h" copy      # any words, not the source's
    refute_output 0
}

@test "--tree: a maximum length too short for any tree gives empty outputs, not cut trees" {
    # a tree needs the pieces, a root and its closing: more than 1 token past the source
    tfm-decode -q -m "$M/model.tfm" --tree copy --max-len-b 1 --text "$M/test.tfm" > "$T/h"
    [ "$(wc -l < "$T/h")" -eq 12 ]
    run grep -c . "$T/h"
    assert_output 0
}

@test "--tree: bad mode, and a vocabulary without brackets" {
    run tfm-decode -m "$M/model.tfm" --tree forest "$M/test.tfm"
    assert_failure 2
    assert_line -n 0 "tfm-decode: --tree: 'forest': expected copy, count or off"
    run tfm-decode -q -m "$M/plain-model.tfm" --tree copy "$M/plain.tfm"
    assert_failure 1
    assert_output --partial "plain-model.tfm: tree constraint: the vocabulary has no bracket pieces"
}
