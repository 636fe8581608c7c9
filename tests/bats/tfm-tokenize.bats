#!/usr/bin/env bats
# tfm-tokenize: train, encode, decode on real data (data/onmt-toy-ende, data/multi30k-ende),
# checked against the SentencePiece command-line tools (spm_train, spm_encode, spm_decode).

setup_file() {
    D="$TFM_ROOT/data/onmt-toy-ende"
    M="$BATS_FILE_TMPDIR"
    # one shared BPE model from source and target, small and quick (about a second)
    tfm-tokenize train -q -m "$M/bpe.model" --vocab 1000 --max-sentences 3000 \
        "$D/src-train.txt" "$D/tgt-train.txt"
    head -n 300 "$D/src-val.txt" > "$M/val.en"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    D="$TFM_ROOT/data/onmt-toy-ende"
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
}

# Token ids of a stream, one sentence a line, from tfm-cat (the independent dumper): the
# offsets and ids records of each chunk, cut into sentences with awk.
ids_by_cat() {
    tfm-cat --values "$1" | awk '
        /^record .* tokens.offsets/ { what = "off"; next }
        /^record .* tokens.ids/ { what = "ids"; next }
        /^\t/ && what == "off" { n = split(substr($0, 2), off, " "); next }
        /^\t/ && what == "ids" {
            split(substr($0, 2), id, " ")
            for (s = 1; s < n; s++) {
                line = ""
                for (k = off[s] + 1; k <= off[s + 1]; k++) line = line (line == "" ? "" : " ") id[k]
                print line
            }
            what = ""
        }'
}

@test "train bpe: a standard model, spm_encode gives the ids of tfm-tokenize encode" {
    [ -s "$M/bpe.model" ]
    run ls "$M"
    refute_output --partial ".tmp"
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/val.tfm" "$M/val.en"
    spm_encode --model="$M/bpe.model" --output_format=id < "$M/val.en" > "$T/spm.ids"
    ids_by_cat "$T/val.tfm" > "$T/cat.ids"
    assert_equal "$(wc -l < "$T/cat.ids")" 300
    cmp "$T/spm.ids" "$T/cat.ids"
    tfm-tokenize decode --ids "$T/val.tfm" | cmp - "$T/spm.ids"
    # the vocabulary has the size asked for and the fixed ids
    run spm_export_vocab --model="$M/bpe.model"
    assert_equal "${#lines[@]}" 1000
    assert_line --index 0 --regexp $'^<pad>\t'
    assert_line --index 1 --regexp $'^<unk>\t'
    assert_line --index 2 --regexp $'^<s>\t'
    assert_line --index 3 --regexp $'^</s>\t'
}

@test "train unigram on German: spm_encode agrees" {
    tfm-tokenize train -q -m "$T/uni.model" --type unigram --vocab 800 --coverage 1 \
        --max-sentences 2000 "$D/tgt-train.txt"
    head -n 200 "$D/tgt-val.txt" > "$T/val.de"
    spm_encode --model="$T/uni.model" --output_format=id < "$T/val.de" > "$T/spm.ids"
    tfm-tokenize encode -m "$T/uni.model" "$T/val.de" | tfm-tokenize decode --ids > "$T/tfm.ids"
    cmp "$T/spm.ids" "$T/tfm.ids"
    run spm_export_vocab --model="$T/uni.model"
    assert_equal "${#lines[@]}" 800
}

@test "train: quiet, and the same seed and data give the same model" {
    run tfm-tokenize train -m "$T/a.model" --vocab 500 --max-sentences 1000 --seed 7 "$D/src-train.txt"
    assert_success
    assert_output ""            # the trainer's log is silenced (stderr is not a tty here)
    tfm-tokenize train -q -m "$T/b.model" --vocab 500 --max-sentences 1000 --seed 7 "$D/src-train.txt"
    cmp "$T/a.model" "$T/b.model"
}

@test "train --max-sentences: --seed draws the sample; the same seed, the same model" {
    for s in 1 2 3 2; do
        tfm-tokenize train -q -m "$T/new.model" --vocab 300 --max-sentences 200 --seed $s \
            "$D/src-val.txt" "$D/tgt-val.txt"
        if [ -e "$T/s$s.model" ]; then cmp "$T/s$s.model" "$T/new.model"; fi
        mv "$T/new.model" "$T/s$s.model"
    done
    run cmp -s "$T/s1.model" "$T/s2.model"
    assert_failure
    run cmp -s "$T/s2.model" "$T/s3.model"
    assert_failure
    run cmp -s "$T/s1.model" "$T/s3.model"
    assert_failure
    # a sample of at least every line is every line, whatever the seed
    tfm-tokenize train -q -m "$T/all.model" --vocab 300 "$D/src-val.txt" "$D/tgt-val.txt"
    tfm-tokenize train -q -m "$T/big.model" --vocab 300 --max-sentences 100000 --seed 9 \
        "$D/src-val.txt" "$D/tgt-val.txt"
    cmp "$T/all.model" "$T/big.model"
    # any sample size: no limit of SentencePiece's applies to tfm's sample
    tfm-tokenize train -q -m "$T/few.model" --vocab 100 --max-sentences 20 \
        --trainer-option hard_vocab_limit=false "$D/src-val.txt"
    [ -s "$T/few.model" ]
}

@test "train reads gzip files and stdin (multi30k, as shipped)" {
    tfm-tokenize train -q -m "$T/gz.model" --vocab 600 "$TFM_ROOT/data/multi30k-ende/val.en.gz"
    gzip -dc "$TFM_ROOT/data/multi30k-ende/val.en.gz" | tfm-tokenize train -q -m "$T/in.model" --vocab 600 -
    cmp "$T/gz.model" "$T/in.model"
    gzip -dc "$TFM_ROOT/data/multi30k-ende/val.en.gz" > "$T/val.en"
    tfm-tokenize encode -m "$T/gz.model" "$TFM_ROOT/data/multi30k-ende/val.en.gz" > "$T/a.tfm"
    tfm-tokenize encode -m "$T/gz.model" "$T/val.en" > "$T/b.tfm"
    cmp "$T/a.tfm" "$T/b.tfm"
}

@test "train: a vocabulary too large for the corpus says so and what to do" {
    head -n 200 "$D/src-train.txt" > "$T/small.txt"
    echo old > "$T/keep.model"
    run tfm-tokenize train -m "$T/keep.model" --vocab 100000 "$T/small.txt"
    assert_failure 1
    assert_output --regexp '^tfm-tokenize: vocabulary size 100000 too high for this corpus \(at most [0-9]+ pieces\); use a smaller --vocab, or --trainer-option hard_vocab_limit=false'
    assert_equal "$(cat "$T/keep.model")" old          # the old model is untouched
    run ls "$T"
    refute_output --partial ".tmp"
    run tfm-tokenize train -q -m "$T/soft.model" --vocab 100000 \
        --trainer-option hard_vocab_limit=false "$T/small.txt"
    assert_success
    [ -s "$T/soft.model" ]
}

@test "a model made by spm_train with tfm's ids works; with the default ids it is refused" {
    spm_train --input="$D/src-train.txt" --model_prefix="$T/ok" --vocab_size=700 \
        --input_sentence_size=2000 --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3 \
        --minloglevel=2 > /dev/null 2>&1
    tfm-tokenize encode -m "$T/ok.model" "$M/val.en" | tfm-tokenize decode --ids > "$T/tfm.ids"
    spm_encode --model="$T/ok.model" --output_format=id < "$M/val.en" | cmp - "$T/tfm.ids"

    spm_train --input="$D/src-train.txt" --model_prefix="$T/def" --vocab_size=700 \
        --input_sentence_size=2000 --minloglevel=2 > /dev/null 2>&1
    run tfm-tokenize encode -m "$T/def.model" -o "$T/out.tfm" "$M/val.en"
    assert_failure 1
    assert_output "tfm-tokenize: $T/def.model: SentencePiece model has pad=-1 unk=0 bos=1 eos=2, tfm needs pad=0 unk=1 bos=2 eos=3 (train it with tfm-tokenize train, or spm_train --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3)"
    [ ! -e "$T/out.tfm" ]
    run tfm-tokenize decode -m "$T/def.model" /dev/null
    assert_failure 1
    assert_output --partial "pad=-1 unk=0 bos=1 eos=2"
}

@test "encode writes a tokens stream: header keys, the model embedded, no bos/eos by default" {
    tfm-tokenize encode -m "$M/bpe.model" "$M/val.en" > "$T/val.tfm"
    run tfm-cat --header "$T/val.tfm"
    assert_success
    assert_line "meta kind=tokens"
    assert_line "meta vocab.size=1000"
    assert_line "meta spm.size=$(stat -c %s "$M/bpe.model")"
    assert_line --regexp '^meta producer=tfm-tokenize [0-9]'
    refute_line "meta bos=1"
    refute_line "meta eos=1"
    # the embedded model serves as -m for another encode
    tfm-tokenize encode -m "$T/val.tfm" "$M/val.en" | cmp - "$T/val.tfm"
}

@test "encode --bos --eos: 2 before and 3 after every sentence, and header keys" {
    printf 'Hello world .\n\nThank you .\n' > "$T/in.txt"
    tfm-tokenize encode -m "$M/bpe.model" --bos --eos "$T/in.txt" > "$T/be.tfm"
    run tfm-cat --header "$T/be.tfm"
    assert_line "meta bos=1"
    assert_line "meta eos=1"
    spm_encode --model="$M/bpe.model" --output_format=id < "$T/in.txt" > "$T/spm.ids"
    run tfm-tokenize decode --ids "$T/be.tfm"
    assert_success
    assert_equal "${#lines[@]}" 3
    assert_equal "${lines[0]}" "2 $(sed -n 1p "$T/spm.ids") 3"
    assert_equal "${lines[1]}" "2 3"
    assert_equal "${lines[2]}" "2 $(sed -n 3p "$T/spm.ids") 3"
    tfm-tokenize encode -m "$M/bpe.model" -e "$T/in.txt" | tfm-tokenize decode --ids > "$T/e.ids"
    assert_equal "$(sed -n 2p "$T/e.ids")" "3"
    # decoding drops bos and eos
    run tfm-tokenize decode "$T/be.tfm"
    assert_output "$(printf 'Hello world .\n\nThank you .')"
}

@test "encode --threads 1, 2 and 4 write byte-identical streams" {
    cat "$D/src-val.txt" "$D/tgt-val.txt" > "$T/in.txt"
    tfm-tokenize encode -m "$M/bpe.model" --eos --threads 1 "$T/in.txt" > "$T/1.tfm"
    tfm-tokenize encode -m "$M/bpe.model" --eos --threads 2 "$T/in.txt" > "$T/2.tfm"
    tfm-tokenize encode -m "$M/bpe.model" --eos -j 4 < "$T/in.txt" > "$T/4.tfm"
    cmp "$T/1.tfm" "$T/2.tfm"
    cmp "$T/1.tfm" "$T/4.tfm"
}

@test "encode | decode is spm_decode(spm_encode(x)) on real data, through pipes" {
    spm_encode --model="$M/bpe.model" --output_format=id < "$D/src-val.txt" |
        spm_decode --model="$M/bpe.model" --input_format=id > "$T/spm.txt"
    cat "$D/src-val.txt" | tfm-tokenize encode -m "$M/bpe.model" -j 2 | tfm-tokenize decode > "$T/tfm.txt"
    assert_equal "$(wc -l < "$T/tfm.txt")" 3000
    cmp "$T/spm.txt" "$T/tfm.txt"
    # text the model covers comes back unchanged
    tfm-tokenize encode -m "$M/bpe.model" < "$M/val.en" | tfm-tokenize decode > "$T/back.txt"
    spm_encode --model="$M/bpe.model" --output_format=id < "$M/val.en" |
        spm_decode --model="$M/bpe.model" --input_format=id | cmp - "$T/back.txt"
}

@test "decode reads lines of ids with -m, and needs a model for them" {
    spm_encode --model="$M/bpe.model" --output_format=id < "$M/val.en" > "$T/ids.txt"
    tfm-tokenize decode -m "$M/bpe.model" "$T/ids.txt" > "$T/a.txt"
    spm_decode --model="$M/bpe.model" --input_format=id < "$T/ids.txt" | cmp - "$T/a.txt"
    run tfm-tokenize decode "$T/ids.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/ids.txt: plain text input (token ids) needs -m MODEL"
    printf '5 6\n7 x 9\n' > "$T/bad.txt"
    run tfm-tokenize decode -m "$M/bpe.model" "$T/bad.txt"
    assert_failure 1
    assert_line "tfm-tokenize: $T/bad.txt: line 2: 'x' is not a token id of this model (0 to 999)"
    printf '5 1000\n' > "$T/big.txt"
    run tfm-tokenize decode -m "$M/bpe.model" "$T/big.txt"
    assert_failure 1
    assert_output --partial "line 1: '1000' is not a token id"
}

@test "decode: a NUL in a line of ids is a bad id, never the end of the line" {
    printf '5\0 16\n17\n' > "$T/nul1.txt"
    run tfm-tokenize decode -m "$M/bpe.model" --ids "$T/nul1.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/nul1.txt: line 1: '5\\x00' is not a token id of this model (0 to 999)"
    printf '5 16\0 99\n' > "$T/nul2.txt"
    run tfm-tokenize decode -m "$M/bpe.model" "$T/nul2.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/nul2.txt: line 1: '16\\x00' is not a token id of this model (0 to 999)"
    printf '5 \v7\n' > "$T/vt.txt"
    run tfm-tokenize decode -m "$M/bpe.model" "$T/vt.txt"
    assert_failure 1
    assert_output --partial "line 1: '\\x0b7' is not a token id"
}

@test "decode: a stream without a model needs -m; ids outside the model are refused" {
    run tfm-tokenize decode "$TFM_ROOT/tests/fixtures/good.tfm"
    assert_failure 1
    assert_output "tfm-tokenize: $TFM_ROOT/tests/fixtures/good.tfm: no embedded SentencePiece model; give one with -m MODEL"
    run tfm-tokenize decode --ids "$TFM_ROOT/tests/fixtures/good.tfm"
    assert_success
    assert_output "$(printf '5 6\n7 8 9')"
    run tfm-tokenize decode -m "$M/bpe.model" "$TFM_ROOT/tests/fixtures/good.tfm"
    assert_success
    assert_equal "${#lines[@]}" 2
    # -m with a stream of another vocabulary is an error, not garbage
    head -n 200 "$D/src-train.txt" > "$T/small.txt"
    tfm-tokenize train -q -m "$T/small.model" --vocab 300 "$T/small.txt"
    tfm-tokenize encode -m "$M/bpe.model" "$M/val.en" > "$T/val.tfm"
    run tfm-tokenize decode -m "$T/small.model" "$T/val.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-tokenize: $T/val.tfm: the stream's vocabulary \([0-9a-f]{8}\) is not $T/small.model's \([0-9a-f]{8}\): not decoded with another"
}

@test "encode and decode: standard input feeds the model or the input, not both" {
    run bash -c "cat '$M/bpe.model' | tfm-tokenize encode -m /dev/stdin"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: -m /dev/stdin: standard input cannot feed both the model and the text (give FILE)"
    run bash -c "cat '$M/bpe.model' | tfm-tokenize decode -m /dev/stdin -"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: decode: -m /dev/stdin: standard input cannot feed both the model and the input (give FILE)"
    # a regular file on standard input too: /dev/stdin opens it again from its start, and
    # the text would be the model's bytes; nor the text by /dev/stdin and the model by -
    run tfm-tokenize encode -m /dev/stdin < "$M/bpe.model"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: -m /dev/stdin: standard input cannot feed both the model and the text (give FILE)"
    run tfm-tokenize encode -m - /dev/stdin < "$M/bpe.model"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: -m -: standard input cannot feed both the model and the text (give FILE)"
    run tfm-tokenize decode -m /proc/self/fd/0 < "$M/bpe.model"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: decode: -m /proc/self/fd/0: standard input cannot feed both the model and the input (give FILE)"
    # the model on standard input and the text from a file; or /dev/stdin a regular file
    tfm-tokenize encode -m "$M/bpe.model" "$M/val.en" > "$T/a.tfm"
    cat "$M/bpe.model" | tfm-tokenize encode -m /dev/stdin "$M/val.en" | cmp - "$T/a.tfm"
    tfm-tokenize encode -m /dev/stdin "$M/val.en" < "$M/bpe.model" | cmp - "$T/a.tfm"
    # - is standard input too (it was opened as a file named '-'), for decode as well
    cd "$T"
    cat "$M/bpe.model" | tfm-tokenize encode -m - "$M/val.en" | cmp - "$T/a.tfm"
    run bash -c "cat '$M/bpe.model' | tfm-tokenize decode -m - '$T/a.tfm'"
    assert_success
    assert_output "$(tfm-tokenize decode "$T/a.tfm")"
    run bash -c "cat '$M/bpe.model' | tfm-tokenize encode -m -"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: -m -: standard input cannot feed both the model and the text (give FILE)"
    run tfm-tokenize encode -m - "$M/val.en" < /dev/null
    assert_failure 1
    assert_output "tfm-tokenize: <stdin>: empty file, not a SentencePiece model"
    # train writes its model to a file, renamed into place: - is refused, not a file '-'
    run tfm-tokenize train -m - --vocab 50 "$M/val.en"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: train: -m -: the model is written to a file: give its path"
    [ ! -e "$T/-" ]
}

@test "decode reads a stream a chunk at a time: 120 MB of ids under a 100 MB address limit" {
    # 30 chunks of 1024 sentences x 1024 ids (zeros, deflated to a few KiB each); the
    # whole stream in memory, as decode once held it, needs 120 MB for the ids alone
    python3 -c '
import struct, sys
sys.path.insert(0, sys.argv[1] + "/tests/fixtures")
import make_bad as mb
s = mb.Stream(); s.header("kind=tokens\nproducer=tfm-tokenize.bats\n")
offs = struct.pack("<1025q", *[i * 1024 for i in range(1025)])
for k in range(30):
    s.record("tokens.offsets", "i64", [1025], offs, codec=1)
    s.record("tokens.ids", "i32", [1 << 20], bytes(4 << 20), codec=1)
s.end()
open(sys.argv[2], "wb").write(s.b)
' "$TFM_ROOT" "$T/big.tfm"
    # sanitizer builds reserve terabytes of address space: the output alone for them
    local limit="ulimit -v 100000;"
    [ -z "${TFM_SANITIZE:-}" ] || limit=
    run bash -c "$limit tfm-tokenize decode --ids '$T/big.tfm' | awk 'NF != 1024 || \$1 != 0 { bad++ } END { print NR, bad + 0 }'; exit \${PIPESTATUS[0]}"
    assert_success
    assert_output "30720 0"
}

@test "decode: one line per sentence, whatever bytes byte-fallback pieces give" {
    # identity normalization: NFKC would drop or change the control characters of text
    tfm-tokenize train -q -m "$T/bf.model" --vocab 600 --trainer-option byte_fallback=true \
        --trainer-option normalization_rule_name=identity "$D/src-val.txt"
    spm_export_vocab --model="$T/bf.model" > "$T/bf.vocab"
    id() { awk -F'\t' -v p="$1" '$1 == p { print NR - 1 }' "$T/bf.vocab"; }
    # bytes 1 10 2 | NUL | CR | tab a DEL, each a piece <0xNN>
    printf '%s %s %s\n%s\n%s\n%s %s %s\n' "$(id '<0x01>')" "$(id '<0x0A>')" "$(id '<0x02>')" \
        "$(id '<0x00>')" "$(id '<0x0D>')" "$(id '<0x09>')" "$(id a)" "$(id '<0x7F>')" > "$T/ids.txt"
    r=$'\xef\xbf\xbd'
    tfm-tokenize decode -m "$T/bf.model" "$T/ids.txt" > "$T/out.txt"
        cmp "$T/out.txt" <(printf '%s\n' "$r$r$r" "$r" "$r" $'\ta'"$r")
    # from a stream: control characters in the middle of a line, encoded as bytes
    printf 'a\x01b\rc\x7f\x00d\n' | tfm-tokenize encode -m "$T/bf.model" > "$T/c.tfm"
    tfm-tokenize decode --ids "$T/c.tfm" | grep -qw "$(id '<0x0D>')"
    tfm-tokenize decode "$T/c.tfm" | cmp - <(printf '%s\n' "a${r}b${r}c${r}${r}d")
}

@test "decode: a truncated stream is an error" {
    tfm-tokenize encode -m "$M/bpe.model" "$M/val.en" > "$T/val.tfm"
    # cut inside its one chunk: nothing is decoded
    ids=$(tfm-cat "$T/val.tfm" | awk '$3 == "tokens.ids" { print $NF + 100 }')
    head -c "$ids" "$T/val.tfm" > "$T/cut.tfm"
    run tfm-tokenize decode "$T/cut.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-tokenize: $T/cut.tfm: "
    # cut in its end record: the chunk is decoded, then the error (a chunk at a time)
    head -c -4 "$T/val.tfm" > "$T/cut.tfm"
    run tfm-tokenize decode "$T/cut.tfm"
    assert_failure 1
    assert_equal "${#lines[@]}" 301
    assert_line --index 300 --regexp "^tfm-tokenize: $T/cut.tfm: record 4 'tfm.end': .*truncated"
}

@test "--compress: smaller, decodes the same" {
    tfm-tokenize encode -m "$M/bpe.model" "$M/val.en" > "$T/raw.tfm"
    tfm-tokenize encode -m "$M/bpe.model" --compress "$M/val.en" > "$T/z.tfm"
    [ "$(stat -c %s "$T/z.tfm")" -lt "$(stat -c %s "$T/raw.tfm")" ]
    cmp <(tfm-tokenize decode --ids "$T/raw.tfm") <(tfm-tokenize decode --ids "$T/z.tfm")
}

@test "empty lines are empty sentences; CRLF reads as LF" {
    printf 'Good morning .\r\n\r\n\nThe end .' > "$T/crlf.txt"
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/c.tfm" "$T/crlf.txt"
    tfm-tokenize decode "$T/c.tfm" > "$T/c.txt"
    assert_equal "$(wc -l < "$T/c.txt")" 4
    cmp "$T/c.txt" <(printf 'Good morning .\n\n\nThe end .\n')
}

@test "invalid UTF-8: error naming file, line and byte; -o leaves no file" {
    printf 'fine\nstill fine\nbroken \xe2\x28\xa1 here\n' > "$T/bad.txt"
    run tfm-tokenize encode -m "$M/bpe.model" -o "$T/out.tfm" "$T/bad.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/bad.txt: line 3: invalid UTF-8 at byte 8"
    run ls "$T"
    refute_output --partial "out.tfm"
    run bash -c "printf 'a\n\xff\n' | tfm-tokenize encode -m '$M/bpe.model' > /dev/null"
    assert_failure 1
    assert_output "tfm-tokenize: <stdin>: line 2: invalid UTF-8 at byte 1"
    run tfm-tokenize train -m "$T/x.model" --vocab 100 "$T/bad.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/bad.txt: line 3: invalid UTF-8 at byte 8"
    [ ! -e "$T/x.model" ]
}

@test "a line over 1 MiB is an error naming it" {
    { echo short; head -c 1048577 /dev/zero | tr '\0' a; echo; } > "$T/long.txt"
    run tfm-tokenize encode -m "$M/bpe.model" -o "$T/out.tfm" "$T/long.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/long.txt: line 2: longer than 1048576 bytes"
    [ ! -e "$T/out.tfm" ]
}

@test "a tfm stream given as text is refused" {
    tfm-tokenize encode -m "$M/bpe.model" "$M/val.en" > "$T/val.tfm"
    run tfm-tokenize encode -m "$M/bpe.model" "$T/val.tfm"
    assert_failure 1
    assert_output "tfm-tokenize: $T/val.tfm: a tfm stream, not text"
}

@test "missing input, missing or unreadable model" {
    run tfm-tokenize encode -m "$M/bpe.model" "$T/nope.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/nope.txt: No such file or directory"
    run tfm-tokenize encode -m "$T/nope.model" "$M/val.en"
    assert_failure 1
    assert_output "tfm-tokenize: $T/nope.model: No such file or directory"
    run tfm-tokenize encode -m "$T" "$M/val.en"
    assert_failure 1
    assert_output "tfm-tokenize: $T: Is a directory"
    echo "not a model" > "$T/junk.model"
    run tfm-tokenize encode -m "$T/junk.model" "$M/val.en"
    assert_failure 1
    assert_output "tfm-tokenize: $T/junk.model: not a SentencePiece model"
    run tfm-tokenize train -m "$T/x.model" --vocab 100 "$D/src-val.txt" "$T/nope.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/nope.txt: No such file or directory"
    run tfm-tokenize decode "$T/nope.tfm"
    assert_failure 1
    assert_output "tfm-tokenize: $T/nope.tfm: No such file or directory"
}

@test "-m from a pipe or a FIFO: a .model file or a stream, read once" {
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/val.tfm" "$M/val.en"
        tfm-tokenize encode -m <(cat "$M/bpe.model") "$M/val.en" | cmp - "$T/val.tfm"
    tfm-tokenize encode -m <(cat "$T/val.tfm") "$M/val.en" | cmp - "$T/val.tfm"
    tfm-tokenize decode -m <(cat "$M/bpe.model") "$T/val.tfm" | cmp - <(tfm-tokenize decode "$T/val.tfm")
    # a FIFO opened twice would wait for a second writer: time limits on both sides
    mkfifo "$T/fifo"
    timeout 20 sh -c 'cat "$1" > "$2"' sh "$M/bpe.model" "$T/fifo" 3>&- &
    timeout 20 tfm-tokenize encode -m "$T/fifo" "$M/val.en" > "$T/fifo.tfm"
    wait
    cmp "$T/fifo.tfm" "$T/val.tfm"
    # what is wrong with piped input is said as it is for a file
    run tfm-tokenize encode -m <(echo "not a model") "$M/val.en"
    assert_failure 1
    assert_output --regexp "^tfm-tokenize: /dev/fd/[0-9]+: not a SentencePiece model$"
    run tfm-tokenize encode -m <(head -c 100 "$T/val.tfm") "$M/val.en"
    assert_failure 1
    assert_output --regexp "^tfm-tokenize: /dev/fd/[0-9]+: record 0 'tfm.header': "
}

@test "usage errors exit 2 and name the flag" {
    run tfm-tokenize train -m "$T/x.model" --vocab abc "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --vocab: 'abc': expected an integer from 5 to 1000000"
    run tfm-tokenize train -m "$T/x.model" --vocab 4 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 --partial "--vocab: '4'"
    run tfm-tokenize train -m "$T/x.model" --type word "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --type: 'word': bpe or unigram expected"
    run tfm-tokenize train -m "$T/x.model" --coverage 0 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --coverage: '0': expected a number in [0.98, 1]"
    run tfm-tokenize train -m "$T/x.model" --max-sentences -1 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 --partial "tfm-tokenize: --max-sentences: '-1': expected an integer from 0 to"
    run tfm-tokenize train -m "$T/x.model" --seed 4294967295 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --seed: '4294967295': expected an integer from 0 to 4294967294"
    run tfm-tokenize train -m "$T/x.model" --trainer-option bos_id=5 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 --partial "bos_id is set by tfm-tokenize itself"
    # a key the trainer does not know, or a value it cannot take, is a usage error found
    # by the trainer itself before any input is read (here none can be)
    run tfm-tokenize train -m "$T/x.model" -O nonexistent_opt=1 "$T/no-such-file"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --trainer-option: 'nonexistent_opt=1': unknown field name \"nonexistent_opt\" in TrainerSpec."
    run tfm-tokenize train -m "$T/x.model" -O split_digits=maybe "$T/no-such-file"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --trainer-option: 'split_digits=maybe': cannot parse \"maybe\" as bool."
    run tfm-tokenize train -m "$T/x.model" --trainer-option=--max_sentence_length=x "$T/no-such-file"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --trainer-option: '--max_sentence_length=x': cannot parse \"x\" as int."
    run tfm-tokenize train -m "$T/x.model" -O num_sub_iterations=0 "$T/no-such-file"
    assert_failure 2
    assert_line --index 0 --partial "tfm-tokenize: --trainer-option: 'num_sub_iterations=0': "
    run tfm-tokenize train -m "$T/x.model" -O normalization_rule_name=bogus "$T/no-such-file"
    assert_failure 2
    assert_line --index 0 --partial "tfm-tokenize: --trainer-option: 'normalization_rule_name=bogus': "
    # good ones pass the check: the missing input is the error
    run tfm-tokenize train -m "$T/x.model" -O split_digits=true -O minloglevel=1 \
        -O normalization_rule_name=nfkc "$T/no-such-file"
    assert_failure 1
    assert_output "tfm-tokenize: $T/no-such-file: No such file or directory"
    [ ! -e "$T/x.model" ]
    run tfm-tokenize train -m "$T/x.model"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: train: at least one FILE is needed"
    run tfm-tokenize train "$D/src-val.txt"
    assert_failure 2
    run tfm-tokenize encode -m "$M/bpe.model" --threads 0 "$M/val.en"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --threads: '0': expected an integer from 1 to 256"
    run tfm-tokenize encode "$M/val.en"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: -m MODEL is needed"
    run tfm-tokenize encode -m "$M/bpe.model" a b
    assert_failure 2
    run tfm-tokenize decode --bos
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: decode: option '--bos' is not one of decode's"
    run tfm-tokenize frobnicate
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: 'frobnicate': unknown subcommand (train, encode or decode)"
    run tfm-tokenize
    assert_failure 2
    [ ! -e "$T/x.model" ]
}

@test "train --coverage: SentencePiece's range [0.98, 1], else a usage error saying so" {
    run tfm-tokenize train -m "$T/x.model" --coverage 0.9 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --coverage: '0.9': expected a number in [0.98, 1]"
    run tfm-tokenize train -m "$T/x.model" --coverage 1.01 "$D/src-val.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: --coverage: '1.01': expected a number in [0.98, 1]"
    [ ! -e "$T/x.model" ]
    run tfm-tokenize train -q -m "$T/x.model" --vocab 300 --coverage 0.98 "$D/src-val.txt"
    assert_success
    [ -s "$T/x.model" ]
}

@test "an option of another subcommand is named, not its argument" {
    run tfm-tokenize encode --vocab 500 -m "$M/bpe.model" "$M/val.en"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: option '--vocab' is not one of encode's"
    run tfm-tokenize encode --coverage=1 -m "$M/bpe.model" "$M/val.en"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: option '--coverage' is not one of encode's"
    run tfm-tokenize decode --output out.txt "$M/val.en"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: decode: option '--output' is not one of decode's"
}

@test "--help and --version" {
    run tfm-tokenize --help
    assert_success
    assert_line --index 0 --partial "usage: tfm-tokenize train  -m MODEL [--vocab N] [--type bpe|unigram]"
    assert_output --partial "pad=0 unk=1 bos=2 eos=3"
    run tfm-tokenize encode --help
    assert_success
    assert_line --index 0 --partial "usage: tfm-tokenize train"
    run tfm-tokenize --version
    assert_success
    assert_output "tfm-tokenize $(cat "$TFM_ROOT/VERSION")"
    run tfm-tokenize decode --version
    assert_output "tfm-tokenize $(cat "$TFM_ROOT/VERSION")"
}

@test "--progress prints a summary on stderr, stdout stays data" {
    run bash -c "tfm-tokenize encode -m '$M/bpe.model' --progress '$M/val.en' 2>&1 > /dev/null"
    assert_success
    assert_output --regexp '^tfm-tokenize: 300 sentences, [0-9]+ tokens \([0-9]+ unknown\)'
    run bash -c "tfm-tokenize encode -m '$M/bpe.model' --quiet '$M/val.en' 2>&1 > /dev/null"
    assert_output ""
}

@test "encode -o a terminal (/dev/tty, /dev/stdout on one) is refused as stdout on one is" {
    cd "$T"
    printf 'a b\n' > in.txt
    run script -qec "tfm-tokenize encode -q -m '$M/bpe.model' -o /dev/stdout in.txt; echo rc=\$?" /dev/null
    assert_line --partial "tfm-tokenize: --output: '/dev/stdout' is a terminal: refusing to write a binary stream to it"
    assert_line --partial "rc=2"
    run script -qec "tfm-tokenize encode -q -m '$M/bpe.model' -o /dev/tty in.txt; echo rc=\$?" /dev/null
    assert_line --partial "rc=2"
    run script -qec "tfm-tokenize encode -q -m '$M/bpe.model' in.txt; echo rc=\$?" /dev/null
    assert_line --partial "rc=2"
    # not a terminal: written
    tfm-tokenize encode -q -m "$M/bpe.model" -o /dev/stdout in.txt > out.tfm
    tfm-cat out.tfm > /dev/null
}

@test "-m of train or -o of encode naming an input (or encode's model) is a usage error: the input stays" {
    cd "$T"
    head -n 50 "$M/val.en" > a.txt
    cp a.txt keep.txt
    ln -s a.txt link.txt
    run tfm-tokenize train -q -m a.txt --vocab 50 a.txt
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: train: -m MODEL 'a.txt' is the input a.txt: the model would replace it"
    run tfm-tokenize train -q -m link.txt --vocab 50 "$M/val.en" a.txt
    assert_failure 2
    run bash -c "tfm-tokenize train -q -m a.txt --vocab 50 - < a.txt"
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: train: -m MODEL 'a.txt' is the input on standard input: the model would replace it"
    run tfm-tokenize encode -q -m "$M/bpe.model" -o a.txt a.txt
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: --output 'a.txt' is the input a.txt: the stream would replace it"
    run bash -c "tfm-tokenize encode -q -m '$M/bpe.model' -o link.txt < a.txt"
    assert_failure 2
    cmp a.txt keep.txt
    [ -L link.txt ]
    # the model is an input too (was replaced by the stream, exit 0)
    cp "$M/bpe.model" m.model
    ln -s m.model mlink.model
    run tfm-tokenize encode -q -m m.model -o m.model a.txt
    assert_failure 2
    assert_line --index 0 "tfm-tokenize: encode: --output 'm.model' is the model m.model: the stream would replace it"
    run tfm-tokenize encode -q -m m.model -o mlink.model a.txt
    assert_failure 2
    cmp m.model "$M/bpe.model"
    # another file is written, over an old one too
    tfm-tokenize encode -q -m "$M/bpe.model" -o b.tfm a.txt
    tfm-tokenize encode -q -m "$M/bpe.model" -o b.tfm a.txt
    tfm-cat b.tfm > /dev/null
}

@test "decode --progress prints its summary too; stdout stays the text" {
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/v.tfm" "$M/val.en"
    printf '5 1 7\n\n1\n' > "$T/ids.txt"
    run bash -c "tfm-tokenize decode --progress '$T/v.tfm' 2>&1 > /dev/null"
    assert_success
    assert_output --regexp '^tfm-tokenize: 300 sentences, [0-9]+ tokens \([0-9]+ unknown\), [0-9.]+ s'
    run bash -c "tfm-tokenize decode -m '$M/bpe.model' --ids -p '$T/ids.txt' 2>&1 > /dev/null"
    assert_output --regexp '^tfm-tokenize: 3 sentences, 4 tokens \(2 unknown\), '
    run bash -c "tfm-tokenize decode -p '$T/v.tfm' 2> /dev/null | cmp - <(tfm-tokenize decode -q '$T/v.tfm')"
    assert_success
    run bash -c "tfm-tokenize decode --quiet '$T/v.tfm' 2>&1 > /dev/null"
    assert_output ""
}

@test "decode: concatenated streams are read as one, from a file or a pipe" {
    head -n 100 "$M/val.en" > "$T/a.en"
    sed -n 101,300p "$M/val.en" > "$T/b.en"
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/a.tfm" "$T/a.en"
    tfm-tokenize encode -m "$M/bpe.model" --compress -o "$T/b.tfm" "$T/b.en"
    cat "$T/a.tfm" "$T/b.tfm" > "$T/ab.tfm"
    run tfm-tokenize decode "$T/ab.tfm"
    assert_success
    assert_equal "${#lines[@]}" 300
    tfm-tokenize decode "$T/ab.tfm" | cmp - <(spm_decode --model="$M/bpe.model" --input_format=id \
        < <(spm_encode --model="$M/bpe.model" --output_format=id < "$M/val.en"))
    cat "$T/a.tfm" "$T/b.tfm" | tfm-tokenize decode --ids | cmp - <(tfm-tokenize decode --ids "$T/ab.tfm")
}

@test "decode: garbage or another vocabulary after the end of a stream is an error" {
    head -n 10 "$M/val.en" > "$T/a.en"
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/a.tfm" "$T/a.en"
    size=$(wc -c < "$T/a.tfm")
    { cat "$T/a.tfm"; printf 'more text\n'; } > "$T/junk.tfm"
    run tfm-tokenize decode "$T/junk.tfm"
    assert_failure 1
    assert_line "tfm-tokenize: $T/junk.tfm: at byte $size: input after the end record is not a tfm stream (bad magic)"
    run bash -c "cat '$T/junk.tfm' | tfm-tokenize decode"
    assert_failure 1
    assert_line "tfm-tokenize: <stdin>: at byte $size: input after the end record is not a tfm stream (bad magic)"
    tfm-tokenize train -q -m "$T/other.model" --vocab 500 --max-sentences 3000 "$D/src-train.txt"
    tfm-tokenize encode -m "$T/other.model" -o "$T/other.tfm" "$T/a.en"
    cat "$T/a.tfm" "$T/other.tfm" > "$T/mixed.tfm"
    run tfm-tokenize decode "$T/mixed.tfm"
    assert_failure 1
    assert_line --regexp "^tfm-tokenize: $T/mixed.tfm: stream 2, record 1 'tfm.spm': at byte [0-9]+: vocabulary [0-9a-f]{8}, the first stream's is [0-9a-f]{8}: streams of different vocabularies are not read as one$"
    # ids added differently (eos) are not one stream either
    tfm-tokenize encode -m "$M/bpe.model" --eos -o "$T/eos.tfm" "$T/a.en"
    run bash -c "cat '$T/a.tfm' '$T/eos.tfm' | tfm-tokenize decode"
    assert_failure 1
    assert_line "tfm-tokenize: <stdin>: stream 2: at byte $size: header key 'eos': '1' here, absent in the first stream"
}

@test "decode -m MODEL: a stream of another vocabulary is refused, never decoded into garbage" {
    head -n 10 "$M/val.en" > "$T/a.en"
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/a.tfm" "$T/a.en"
    tfm-tokenize train -q -m "$T/other.model" --vocab 500 --max-sentences 3000 "$D/src-train.txt"
    run tfm-tokenize decode -m "$T/other.model" "$T/a.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-tokenize: $T/a.tfm: the stream's vocabulary \([0-9a-f]{8}\) is not $T/other.model's \([0-9a-f]{8}\): not decoded with another \(leave out -m: the stream's own is used\)$"
    # the stream's own model given with -m is fine
    run tfm-tokenize decode -m "$M/bpe.model" "$T/a.tfm"
    assert_success
    assert_equal "$output" "$(tfm-tokenize decode "$T/a.tfm")"
}

@test "train on lines all too long for the trainer names the files and says why" {
    python3 -c "print('ab ' * 2000); print(); print('cd ' * 1500)" > "$T/long.txt"
    : > "$T/empty.txt"
    for s in 0 5; do
        run tfm-tokenize train -q -m "$T/l.model" --vocab 20 --max-sentences $s "$T/long.txt" "$T/empty.txt"
        assert_failure 1
        assert_output "tfm-tokenize: $T/long.txt, $T/empty.txt: no text to train on (every line is empty or longer than max_sentence_length, 4192 bytes, which the trainer leaves out; --trainer-option max_sentence_length=N raises it)"
        [ ! -e "$T/l.model" ]
    done
    run tfm-tokenize train -q -m "$T/l.model" --vocab 20 -O max_sentence_length=100 "$T/long.txt"
    assert_output --partial "max_sentence_length, 100 bytes,"
    run tfm-tokenize train -q -m "$T/l.model" --vocab 12 -O max_sentence_length=8000 "$T/long.txt"
    assert_success
    [ -s "$T/l.model" ]
}

@test "train on empty files names them" {
    : > "$T/empty.txt"
    printf '\n\n' > "$T/blank.txt"
    run tfm-tokenize train -q -m "$T/e.model" "$T/empty.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/empty.txt: no text to train on (the file is empty or has only empty lines)"
    run tfm-tokenize train -q -m "$T/e.model" "$T/empty.txt" "$T/blank.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/empty.txt, $T/blank.txt: no text to train on (every file is empty or has only empty lines)"
    [ ! -e "$T/e.model" ]
    # among files with text, each file without any is an error too, as on stdin
    printf 'hello world\nthe cat sat\n' > "$T/text.txt"
    for s in 0 1; do
        run tfm-tokenize train -q -m "$T/e.model" --vocab 20 --max-sentences $s "$T/text.txt" "$T/empty.txt"
        assert_failure 1
        assert_output "tfm-tokenize: $T/empty.txt: no text to train on (the file is empty or has only empty lines)"
    done
    run tfm-tokenize train -q -m "$T/e.model" --vocab 20 "$T/blank.txt" "$T/text.txt" - < "$T/empty.txt"
    assert_failure 1
    assert_output "tfm-tokenize: $T/blank.txt, <stdin>: no text to train on (each of them is empty or has only empty lines)"
    [ ! -e "$T/e.model" ]
    run tfm-tokenize train -q -m "$T/e.model" --vocab 20 "$T/text.txt" - < "$T/text.txt"
    assert_success
    [ -s "$T/e.model" ]
}

@test "decode: a write error in the middle of the output is reported once" {
    tfm-tokenize encode -m "$M/bpe.model" -o "$T/val.tfm" "$M/val.en"
    run bash -c "tfm-tokenize decode '$T/val.tfm' > /dev/full"
    assert_failure 1
    assert_output "tfm-tokenize: write error: No space left on device"
    run bash -c "tfm-tokenize decode --ids '$T/val.tfm' > /dev/full"
    assert_failure 1
    assert_output "tfm-tokenize: write error: No space left on device"
}

@test "-o a link: the link stays and its target gets the stream; train -m too" {
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/ref.tfm" "$M/val.en"
    mkdir "$T/d"
    echo old > "$T/d/target.tfm"
    ln -s d/target.tfm "$T/link.tfm"
    run tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/link.tfm" "$M/val.en"
    assert_success
    [ -L "$T/link.tfm" ]
    cmp "$T/d/target.tfm" "$T/ref.tfm"
    # a link to a file not yet made: made where the link points
    ln -s d/new.tfm "$T/later.tfm"
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/later.tfm" "$M/val.en"
    [ -L "$T/later.tfm" ]
    cmp "$T/d/new.tfm" "$T/ref.tfm"
    ln -s d/m.model "$T/m.model"
    tfm-tokenize train -q -m "$T/m.model" --vocab 200 "$M/val.en"
    [ -L "$T/m.model" ] && [ -s "$T/d/m.model" ]
    run ls "$T" "$T/d"
    refute_output --partial ".tmp"
}

@test "-o /dev/fd/1, /dev/stdout or a link to /proc/self/fd/1: into the redirected file" {
    [ -e /proc/self/fd/1 ] || skip "no /proc"
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/ref.tfm" "$M/val.en"
    ln -s /proc/self/fd/1 "$T/out.link"
    outs=(/dev/fd/1 "$T/out.link")
    # as root, a regression would rename a file over /dev/stdout itself: not risked there
    [ -w /dev ] || outs+=(/dev/stdout)
    for o in "${outs[@]}"; do
        run bash -c "tfm-tokenize encode -q -m '$M/bpe.model' -o '$o' '$M/val.en' > '$T/got.tfm'"
        assert_success
        cmp "$T/got.tfm" "$T/ref.tfm"
    done
    [ -L "$T/out.link" ]
    # after what the shell wrote before, as `>>` asks
    run bash -c "{ echo head; tfm-tokenize encode -q -m '$M/bpe.model' -o /dev/fd/1 '$M/val.en'; } > '$T/two'"
    assert_success
    cmp <(echo head; cat "$T/ref.tfm") "$T/two"
    run ls "$T"
    refute_output --partial ".tmp"
}

@test "-o /dev/fd/N not open at start: refused, never the input that took descriptor N" {
    [ -e /proc/self/fd/1 ] || skip "no /proc"
    cp "$M/val.en" "$T/in.txt"
    ln -s /proc/self/fd/3 "$T/three"
    for o in /dev/fd/3 /proc/self/fd/3 "$T/three"; do
        run bash -c "tfm-tokenize encode -q -m '$M/bpe.model' -o '$o' '$T/in.txt' 3>&-"
        assert_failure 1
        assert_output "tfm-tokenize: $o: descriptor 3 was not open when the program started"
        cmp "$T/in.txt" "$M/val.en"
    done
    # standard output closed: the input takes descriptor 1
    outs=(/dev/fd/1)
    [ -w /dev ] || outs+=(/dev/stdout)
    for o in "${outs[@]}"; do
        run bash -c "tfm-tokenize encode -q -m '$M/bpe.model' -o '$o' '$T/in.txt' >&-"
        assert_failure 1
        assert_output --partial "$o: descriptor 1 was not open when the program started"
        cmp "$T/in.txt" "$M/val.en"
    done
}

@test "-o /dev/fd/1 in a group of commands: at the offset they share, as > would be" {
    [ -e /proc/self/fd/1 ] || skip "no /proc"
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/ref.tfm" "$M/val.en"
    run bash -c "{ echo AAAA; tfm-tokenize encode -q -m '$M/bpe.model' -o /dev/fd/1 '$M/val.en'; echo BBBB; } > '$T/grp'"
    assert_success
    cmp <(echo AAAA; cat "$T/ref.tfm"; echo BBBB) "$T/grp"
}

@test "-o: a link planted at the temporary's name is not followed; the file keeps its mode" {
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/ref.tfm" "$M/val.en"
    echo precious > "$T/victim"
    run sh -c "cd '$T' && ln -s victim out.tfm.tmp.\$\$ && exec tfm-tokenize encode -q -m '$M/bpe.model' -o out.tfm '$M/val.en'"
    assert_success
    [ "$(cat "$T/victim")" = precious ]
    [ -f "$T/out.tfm" ] && [ ! -L "$T/out.tfm" ]
    cmp "$T/out.tfm" "$T/ref.tfm"
    # a leftover file of a killed process that had this PID: replaced too
    run sh -c "cd '$T' && echo left > out.tfm.tmp.\$\$ && exec tfm-tokenize encode -q -m '$M/bpe.model' -o out.tfm '$M/val.en'"
    assert_success
    cmp "$T/out.tfm" "$T/ref.tfm"
    # a private file stays private
    echo old > "$T/private.tfm"
    chmod 600 "$T/private.tfm"
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/private.tfm" "$M/val.en"
    [ "$(stat -c %a "$T/private.tfm")" = 600 ]
    cmp "$T/private.tfm" "$T/ref.tfm"
    # a file of no permissions stays so (mode 0 is a mode)
    chmod 000 "$T/private.tfm"
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/private.tfm" "$M/val.en"
    [ "$(stat -c %a "$T/private.tfm")" = 0 ]
    # and someone else's file, replaced by root, stays theirs
    if [ "$(id -u)" = 0 ]; then
        chmod 640 "$T/private.tfm"
        chown 65534:65533 "$T/private.tfm"
        tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/private.tfm" "$M/val.en"
        [ "$(stat -c %u:%g:%a "$T/private.tfm")" = 65534:65533:640 ]
        cmp "$T/private.tfm" "$T/ref.tfm"
    fi
    run ls -a "$T"
    refute_output --partial ".tmp"
}

@test "-o a name of 250 bytes: written, though NAME.tmp.PID would be too long a name" {
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/ref.tfm" "$M/val.en"
    long=$(printf 'x%.0s' $(seq 250))
    run tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/$long" "$M/val.en"
    assert_success
    cmp "$T/$long" "$T/ref.tfm"
    run ls -a "$T"
    refute_output --partial ".tmp"
}

@test "-o a FIFO: written in place for the process reading it" {
    tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/ref.tfm" "$M/val.en"
    mkfifo "$T/fifo"
    cat "$T/fifo" > "$T/got.tfm" 3>&- &
    run tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/fifo" "$M/val.en"
    assert_success
    wait $!
    [ -p "$T/fifo" ]
    cmp "$T/got.tfm" "$T/ref.tfm"
}

@test "SIGINT, SIGTERM, SIGHUP while the input is slow: no temporary left, 128 + the signal" {
    env --default-signal=INT true 2> /dev/null || skip "env has no --default-signal"
    mkfifo "$T/in"
    for sig in INT:130 TERM:143 HUP:129; do
        ( cat "$M/val.en"; exec sleep 30 ) > "$T/in" 3>&- &
        w=$!
        # background jobs start with SIGINT ignored: env gives the tool the default back
        env --default-signal=INT,TERM,HUP \
            tfm-tokenize encode -q -m "$M/bpe.model" -o "$T/out.tfm" "$T/in" 3>&- &
        p=$!
        for _ in $(seq 100); do
            compgen -G "$T/out.tfm.tmp.*" > /dev/null && break
            sleep 0.1
        done
        compgen -G "$T/out.tfm.tmp.*" > /dev/null      # the output was under way
        kill -"${sig%:*}" "$p"
        st=0
        wait "$p" || st=$?
        kill "$w" 2> /dev/null || true
        wait "$w" 2> /dev/null || true
        [ "$st" -eq "${sig#*:}" ] || { echo "SIG${sig%:*}: exit $st"; false; }
        run ls "$T"
        refute_output --partial "out.tfm"
    done
}
