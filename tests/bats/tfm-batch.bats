#!/usr/bin/env bats
# tfm-batch: token streams of real data (data/onmt-toy-ende, encoded by tfm-tokenize)
# into batches, checked with tfm-cat (the independent dumper); bad input and usage.

setup_file() {
    D="$TFM_ROOT/data/onmt-toy-ende"
    M="$BATS_FILE_TMPDIR"
    head -n 2000 "$D/src-train.txt" > "$M/train.en"
    head -n 2000 "$D/tgt-train.txt" > "$M/train.de"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 1000 "$M/train.en" "$M/train.de"
    tfm-tokenize train -q -m "$M/other.model" --vocab 900 "$M/train.en" "$M/train.de"
    tfm-tokenize encode -q -m "$M/spm.model" -o "$M/en.tfm" "$M/train.en"
    tfm-tokenize encode -q -m "$M/spm.model" -o "$M/de.tfm" "$M/train.de"
    # the ids of each sentence, a line each (line i+1 is sentence i)
    tfm-tokenize decode --ids "$M/en.tfm" > "$M/en.ids"
    tfm-tokenize decode --ids "$M/de.tfm" > "$M/de.ids"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
}

# header value of key $2 in stream $1
meta() { tfm-cat --header "$1" | sed -n "s/^meta $2=//p"; }

# "B S" of every record named $2 (batch.src, batch.tgt), a line each
shapes() { tfm-cat "$1" | awk -v n="$2" '$3 == n { gsub(/[][]/, "", $5); split($5, d, ","); print d[1], d[2] }'; }

# every row of record $2 as "INDEX<TAB>ids without eos and padding", from tfm-cat --values
rows() {
    tfm-cat --values "$1" | awk -v n="$2" '
        /^record / { what = ($3 == "batch.index") ? "ix" : ($3 == n) ? "rows" : ""; r = 0; next }
        /^\t/ && what == "ix" { k = split(substr($0, 2), ix, " "); next }
        /^\t/ && what == "rows" {
            m = split(substr($0, 2), id, " "); line = ""
            len = 0; for (j = 1; j <= m && id[j] != 0; j++) len = j
            for (j = 1; j < len; j++) line = line (j > 1 ? " " : "") id[j]
            print ix[++r] "\t" line "\t" id[len] "\t" (len < m ? id[m] : "-")
        }'
}

@test "pairs: every pair once, rows are the tokens, eos, padding; header and report" {
    run tfm-batch --tokens 2000 -o "$T/b.tfm" "$M/en.tfm" "$M/de.tfm"
    assert_success
    assert_output --regexp '^tfm-batch: 2000 sentences, [0-9]+ batches, 0 dropped \(longer than --max-len 256\), padding [0-9.]+% source [0-9.]+% target$'
    K=$(echo "$output" | sed 's/.* \([0-9]*\) batches.*/\1/')
    assert_equal "$(meta "$T/b.tfm" kind)" batches
    assert_equal "$(meta "$T/b.tfm" batches)" "$K"
    assert_equal "$(meta "$T/b.tfm" sentences)" 2000
    assert_equal "$(meta "$T/b.tfm" tokens)" 2000
    assert_equal "$(meta "$T/b.tfm" targets)" 1
    assert_equal "$(meta "$T/b.tfm" eos)" 1
    assert_equal "$(meta "$T/b.tfm" producer)" "tfm-batch $(cat "$TFM_ROOT/VERSION")"
    # the vocabulary travels: same model crc as the token stream
    assert_equal "$(meta "$T/b.tfm" spm.crc32)" "$(meta "$M/en.tfm" spm.crc32)"
    assert_equal "$(shapes "$T/b.tfm" batch.src | wc -l)" "$K"
    assert_equal "$(shapes "$T/b.tfm" batch.tgt | wc -l)" "$K"
    # source rows: index, ids, last token eos (3), then padding (0 or none)
    rows "$T/b.tfm" batch.src > "$T/src.rows"
    rows "$T/b.tfm" batch.tgt > "$T/tgt.rows"
    assert_equal "$(cut -f1 "$T/src.rows" | sort -n | uniq | wc -l)" 2000
    assert_equal "$(cut -f1 "$T/src.rows" | sort -n | uniq -d | wc -l)" 0
    assert_equal "$(cut -f3 "$T/src.rows" | sort -u)" 3
    assert_equal "$(cut -f4 "$T/src.rows" | sort -u | tr '\n' ' ')" "- 0 "
    # each row is the sentence of its index
    awk -F'\t' 'NR == FNR { s[NR - 1] = $0; next } $2 != s[$1] { bad++ } END { print bad + 0 }' \
        "$M/en.ids" "$T/src.rows" > "$T/bad"
    assert_equal "$(cat "$T/bad")" 0
    awk -F'\t' 'NR == FNR { s[NR - 1] = $0; next } $2 != s[$1] { bad++ } END { print bad + 0 }' \
        "$M/de.ids" "$T/tgt.rows" > "$T/bad"
    assert_equal "$(cat "$T/bad")" 0
    # padding fraction in the header agrees with the shapes and the token count
    tok=$(meta "$T/b.tfm" src.tokens)
    assert_equal "$tok" "$(awk '{ n += NF + 1 } END { print n }' "$M/en.ids")"
    pad=$(shapes "$T/b.tfm" batch.src | awk -v t="$tok" '{ c += $1 * $2 } END { printf "%.4f", 1 - t / c }')
    assert_equal "$(meta "$T/b.tfm" pad.src)" "$pad"
}

@test "the budget holds: B*S and B*T never exceed --tokens" {
    for n in 300 1000 5000; do
        tfm-batch -q --tokens $n "$M/en.tfm" "$M/de.tfm" > "$T/b.tfm"
        assert_equal "$(shapes "$T/b.tfm" batch.src | awk -v n=$n '$1 * $2 > n' | wc -l)" 0
        assert_equal "$(shapes "$T/b.tfm" batch.tgt | awk -v n=$n '$1 * $2 > n' | wc -l)" 0
        # and batches are full: the mean fill is above half the budget
        assert [ "$(shapes "$T/b.tfm" batch.tgt | awk -v n=$n '{ f += $1 * $2 / n } END { print (f / NR > 0.5) }')" = 1 ]
    done
}

@test "a pipe: tfm-tokenize encode | tfm-batch - TGT gives the same stream as files" {
    tfm-batch -q -o "$T/files.tfm" "$M/en.tfm" "$M/de.tfm"
    tfm-tokenize encode -q -m "$M/spm.model" "$M/train.en" | tfm-batch -q - "$M/de.tfm" > "$T/pipe.tfm"
    cmp "$T/files.tfm" "$T/pipe.tfm"
    # and the target from stdin
    tfm-batch -q "$M/en.tfm" - < "$M/de.tfm" | cmp - "$T/files.tfm"
}

@test "eos already added by tfm-tokenize encode --eos: the same batches" {
    tfm-tokenize encode -q --eos -m "$M/spm.model" -o "$T/en-eos.tfm" "$M/train.en"
    assert_equal "$(meta "$T/en-eos.tfm" eos)" 1
    tfm-batch -q "$M/en.tfm" "$M/de.tfm" > "$T/a.tfm"
    tfm-batch -q "$T/en-eos.tfm" "$M/de.tfm" > "$T/b.tfm"
    cmp "$T/a.tfm" "$T/b.tfm"
}

@test "header eos, bos and targets are 0, 1 or absent: anything else is an error naming file and key" {
    ed="$TFM_ROOT/tests/bats/edit-checkpoint.py"
    tfm-tokenize encode -q --eos -m "$M/spm.model" -o "$T/en-eos.tfm" "$M/train.en"
    # eos=true was read as absent, and a second eos appended to every sentence
    python3 "$ed" "$T/en-eos.tfm" "$T/true.tfm" --header eos=true
    run tfm-batch -q -o "$T/b.tfm" "$T/true.tfm" "$M/de.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/true.tfm: header: eos=true: 0 or 1 expected (or no eos key)"
    [ ! -e "$T/b.tfm" ]
    python3 "$ed" "$M/de.tfm" "$T/bos.tfm" --header bos=yes
    run tfm-batch -q -o "$T/b.tfm" "$M/en.tfm" "$T/bos.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/bos.tfm: header: bos=yes: 0 or 1 expected (or no bos key)"
    run tfm-batch -q -o "$T/b.tfm" "$T/bos.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/bos.tfm: header: bos=yes: 0 or 1 expected (or no bos key)"
    # 0 is as absent: the same batches as without the keys
    python3 "$ed" "$M/en.tfm" "$T/zero.tfm" --header eos=0 --header bos=0
    tfm-batch -q "$M/en.tfm" "$M/de.tfm" > "$T/a.tfm"
    tfm-batch -q "$T/zero.tfm" "$M/de.tfm" > "$T/z.tfm"
    tfm-cat --values "$T/a.tfm" | grep -v '^stream \|^meta \(producer\|src.bos\)=' > "$T/a.txt"
    tfm-cat --values "$T/z.tfm" | grep -v '^stream \|^meta \(producer\|src.bos\)=' > "$T/z.txt"
    cmp "$T/a.txt" "$T/z.txt"
    assert_equal "$(meta "$T/z.tfm" src.bos)" 0
    # (a batch stream's targets=: test_batch)
}

@test "--seed: same seed same bytes, another seed another order" {
    tfm-batch -q --tokens 1000 --seed 7 "$M/en.tfm" "$M/de.tfm" > "$T/a.tfm"
    tfm-batch -q --tokens 1000 --seed 7 "$M/en.tfm" "$M/de.tfm" > "$T/b.tfm"
    tfm-batch -q --tokens 1000 --seed 8 "$M/en.tfm" "$M/de.tfm" > "$T/c.tfm"
    cmp "$T/a.tfm" "$T/b.tfm"
    run cmp -s "$T/a.tfm" "$T/c.tfm"
    assert_failure
    assert_equal "$(meta "$T/c.tfm" seed)" 8
    # the batch order is not the length order
    down=$(shapes "$T/a.tfm" batch.src | awk '$2 < prev { d++ } { prev = $2 } END { print d + 0 }')
    assert [ "$down" -gt 3 ]
}

@test "--max-len drops long pairs and reports how many" {
    # pairs with a side of more than 20 tokens, eos included, counted from the ids
    want=$(paste -d'|' "$M/en.ids" "$M/de.ids" | awk -F'|' '{ split($1, a, " "); split($2, b, " ") }
        length(a) + 1 > 20 || length(b) + 1 > 20 { n++ } END { print n }')
    assert [ "$want" -gt 100 ]
    run tfm-batch --max-len 20 -o "$T/b.tfm" "$M/en.tfm" "$M/de.tfm"
    assert_success
    assert_output --regexp "^tfm-batch: 2000 sentences, [0-9]+ batches, $want dropped \(longer than --max-len 20\), padding "
    assert_equal "$(meta "$T/b.tfm" dropped)" "$want"
    assert_equal "$(meta "$T/b.tfm" max-len)" 20
    assert_equal "$(shapes "$T/b.tfm" batch.src | awk '$2 > 20' | wc -l)" 0
    assert_equal "$(rows "$T/b.tfm" batch.src | wc -l)" $((2000 - want))
    # a budget under the longest pair drops it too, and says so
    run tfm-batch --tokens 15 --max-len 0 -o "$T/c.tfm" "$M/en.tfm" "$M/de.tfm"
    assert_success
    assert_output --partial "dropped (longer than the budget of 15)"
}

@test "source only: every sentence, in length order, no target records" {
    run tfm-batch --tokens 3000 -o "$T/b.tfm" "$M/en.tfm"
    assert_success
    assert_output --regexp '^tfm-batch: 2000 sentences, [0-9]+ batches, padding [0-9.]+%$'
    assert_equal "$(meta "$T/b.tfm" targets)" 0
    assert_equal "$(shapes "$T/b.tfm" batch.tgt | wc -l)" 0
    rows "$T/b.tfm" batch.src > "$T/rows"
    assert_equal "$(cut -f1 "$T/rows" | sort -n | uniq | wc -l)" 2000
    # batches shortest first: S never decreases
    assert_equal "$(shapes "$T/b.tfm" batch.src | awk '$2 < prev { d++ } { prev = $2 } END { print d + 0 }')" 0
    # a sentence that does not fit is an error, not a silent drop
    run tfm-batch --max-len 10 -o "$T/c.tfm" "$M/en.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-batch: .*en.tfm: line [0-9]+: [0-9]+ tokens, more than max_len 10 \(a sentence to decode cannot be dropped\)$"
    [ ! -e "$T/c.tfm" ]
}

@test "--compress: smaller, the same values" {
    tfm-batch -q "$M/en.tfm" "$M/de.tfm" > "$T/a.tfm"
    tfm-batch -q --compress "$M/en.tfm" "$M/de.tfm" > "$T/z.tfm"
    assert [ "$(stat -c %s "$T/z.tfm")" -lt "$(stat -c %s "$T/a.tfm")" ]
    diff <(tfm-cat --values "$T/a.tfm" | grep -v '^record\|^stream') \
         <(tfm-cat --values "$T/z.tfm" | grep -v '^record\|^stream')
}

@test "different sentence counts: the message names both counts" {
    head -n 1999 "$M/train.de" | tfm-tokenize encode -q -m "$M/spm.model" -o "$T/short.tfm"
    run tfm-batch -o "$T/b.tfm" "$M/en.tfm" "$T/short.tfm"
    assert_failure 1
    assert_output "tfm-batch: $M/en.tfm has 2000 sentences but $T/short.tfm has 1999: not a parallel corpus"
    [ ! -e "$T/b.tfm" ]
}

@test "different vocabularies are refused, naming both files" {
    tfm-tokenize encode -q -m "$M/other.model" -o "$T/other.tfm" "$M/train.de"
    run tfm-batch "$M/en.tfm" "$T/other.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-batch: $M/en.tfm and $T/other.tfm have different vocabularies \(spm.crc32 [0-9a-f]{8} and [0-9a-f]{8}\): source and target must share one model$"
}

@test "a stream of the wrong kind is refused" {
    tfm-batch -q "$M/en.tfm" > "$T/b.tfm"
    run tfm-batch "$T/b.tfm" "$M/de.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/b.tfm: a 'batches' stream, expected tokens (made by tfm-tokenize encode)"
    run tfm-batch "$M/train.en"
    assert_failure 1
    assert_output "tfm-batch: $M/train.en: at byte 0: bad magic (not a tfm stream)"
}

@test "corrupt and truncated input: exit 1, no output file left" {
    size=$(stat -c %s "$M/en.tfm")
    cp "$M/en.tfm" "$T/bad.tfm"
    # flip a byte near the end: inside the last chunk's ids
    printf '\xff' | dd of="$T/bad.tfm" bs=1 seek=$((size - 200)) conv=notrunc status=none
    run tfm-batch -o "$T/out.tfm" "$T/bad.tfm" "$M/de.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-batch: $T/bad.tfm: record [0-9]+ 'tokens.ids': at byte [0-9]+: crc mismatch$"
    run ls "$T"
    assert_output "bad.tfm"
    head -c $((size / 2)) "$M/de.tfm" > "$T/cut.tfm"
    run tfm-batch -o "$T/out.tfm" "$M/en.tfm" "$T/cut.tfm"
    assert_failure 1
    assert_output --partial "$T/cut.tfm: record"
    assert_output --partial "truncated"
    [ ! -e "$T/out.tfm" ]
    run bash -c "ls '$T' | grep -c tmp"
    assert_output 0
}

@test "missing file" {
    run tfm-batch -o "$T/out.tfm" "$T/nope.tfm" "$M/de.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/nope.tfm: No such file or directory"
    [ ! -e "$T/out.tfm" ]
}

@test "usage errors exit 2 and name the flag" {
    for bad in 0 -5 abc 12x 100000001 ''; do
        run tfm-batch --tokens "$bad" "$M/en.tfm"
        assert_failure 2
        assert_line --index 0 "tfm-batch: --tokens: '$bad': expected an integer from 1 to 100000000"
        assert_line --index 1 --partial "usage: tfm-batch"
    done
    run tfm-batch --max-len -1 "$M/en.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-batch: --max-len: '-1': expected an integer from 0 to 100000000"
    run tfm-batch --seed x "$M/en.tfm"
    assert_failure 2
    assert_line --index 0 --partial "tfm-batch: --seed: 'x'"
    run tfm-batch
    assert_failure 2
    assert_line --index 0 "tfm-batch: SRC is needed (- for stdin)"
    run tfm-batch "$M/en.tfm" "$M/de.tfm" "$M/de.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-batch: at most SRC and TGT"
    run tfm-batch - - < "$M/en.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-batch: SRC and TGT cannot both be stdin"
    # /dev/stdin on a pipe is standard input too
    run bash -c "cat '$M/en.tfm' | tfm-batch - /dev/stdin"
    assert_failure 2
    assert_line --index 0 "tfm-batch: SRC and TGT cannot both be stdin"
    # one FIFO as both, or one pipe by two names, is read once: refused before a read
    # (which would wait for ever for the writer gone)
    mkfifo "$T/ff"
    run timeout 10 tfm-batch -q -o "$T/b.tfm" "$T/ff" "$T/ff"
    assert_failure 2
    assert_line --index 0 "tfm-batch: SRC '$T/ff' and TGT '$T/ff' are one pipe, FIFO or device: it can be read once"
    run timeout 10 bash -c "tfm-batch -q -o '$T/b.tfm' /dev/fd/3 /proc/self/fd/3 \
        3< <(cat '$M/en.tfm') < /dev/null"
    assert_failure 2
    assert_line --index 0 "tfm-batch: SRC '/dev/fd/3' and TGT '/proc/self/fd/3' are one pipe, FIFO or device: it can be read once"
    [ ! -e "$T/b.tfm" ]
    # one regular file as both is read twice, as two files
    run tfm-batch -q -o "$T/b.tfm" "$M/en.tfm" "$M/en.tfm"
    assert_success
    [ -s "$T/b.tfm" ]
    run tfm-batch --frobnicate "$M/en.tfm"
    assert_failure 2
}

@test "--help, --version, --quiet, --progress" {
    run tfm-batch --help
    assert_success
    assert_line --index 0 "usage: tfm-batch [--tokens N] [--max-len N] [--seed N] [--compress] [-o OUT]"
    assert_output --partial "--tokens N"
    run tfm-batch -h
    assert_success
    run tfm-batch --version
    assert_success
    assert_output "tfm-batch $(cat "$TFM_ROOT/VERSION")"
    run tfm-batch -q -o "$T/b.tfm" "$M/en.tfm" "$M/de.tfm"
    assert_success
    assert_output ""
    run tfm-batch --progress -o "$T/b.tfm" "$M/en.tfm" "$M/de.tfm"
    assert_success
    assert_line --index 0 --regexp "^tfm-batch: $M/en.tfm: 2000 sentences, [0-9]+ tokens read \([0-9.]+ s\)$"
    assert_line --index 2 --regexp "^tfm-batch: [0-9]+ batches planned"
    assert_line --index 3 --regexp "^tfm-batch: [0-9]+ batches written"
    assert_line --index 4 --partial "2000 sentences"
}

@test "an empty input makes an empty batch stream" {
    : > "$T/empty.txt"
    tfm-tokenize encode -q -m "$M/spm.model" -o "$T/empty.tfm" "$T/empty.txt"
    run tfm-batch -o "$T/b.tfm" "$T/empty.tfm" "$T/empty.tfm"
    assert_success
    assert_output "tfm-batch: 0 sentences, 0 batches, 0 dropped (longer than --max-len 256), padding 0.00% source 0.00% target"
    assert_equal "$(meta "$T/b.tfm" batches)" 0
    run tfm-cat "$T/b.tfm"
    refute_line --regexp "^record "
    assert_line --index -1 "end 3 records"
}

@test "concatenated token streams are batched as one: the same batches as the whole" {
    head -n 700 "$M/train.en" | tfm-tokenize encode -q -m "$M/spm.model" -o "$T/en1.tfm"
    tail -n 1300 "$M/train.en" | tfm-tokenize encode -q -m "$M/spm.model" -o "$T/en2.tfm"
    cat "$T/en1.tfm" "$T/en2.tfm" > "$T/en12.tfm"
    tfm-batch -q --tokens 2000 --seed 3 -o "$T/whole.tfm" "$M/en.tfm" "$M/de.tfm"
    run tfm-batch --tokens 2000 --seed 3 -o "$T/parts.tfm" "$T/en12.tfm" "$M/de.tfm"
    assert_success
    assert_output --partial "tfm-batch: 2000 sentences, "
    cmp <(rows "$T/whole.tfm" batch.src) <(rows "$T/parts.tfm" batch.src)
    cmp <(rows "$T/whole.tfm" batch.tgt) <(rows "$T/parts.tfm" batch.tgt)
    assert_equal "$(meta "$T/parts.tfm" sentences)" 2000
    # through a pipe, source only
    run bash -c "cat '$T/en1.tfm' '$T/en2.tfm' | tfm-batch -q --tokens 2000 -"
    assert_success
    cat "$T/en1.tfm" "$T/en2.tfm" | tfm-batch -q --tokens 2000 - > "$T/pipe.tfm"
    assert_equal "$(meta "$T/pipe.tfm" sentences)" 2000
}

@test "garbage or another vocabulary after a token stream is an error naming file and byte" {
    size=$(wc -c < "$M/en.tfm")
    { cat "$M/en.tfm"; echo x; } > "$T/junk.tfm"
    run tfm-batch -q -o "$T/b.tfm" "$T/junk.tfm" "$M/de.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/junk.tfm: at byte $size: input after the end record is not a tfm stream (bad magic)"
    [ ! -e "$T/b.tfm" ]
    head -n 10 "$M/train.de" | tfm-tokenize encode -q -m "$M/other.model" -o "$T/other.tfm"
    cat "$M/de.tfm" "$T/other.tfm" > "$T/mixed.tfm"
    run tfm-batch -q -o "$T/b.tfm" "$M/en.tfm" "$T/mixed.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-batch: $T/mixed.tfm: stream 2, record 1 'tfm.spm': at byte [0-9]+: vocabulary [0-9a-f]{8}, the first stream's is [0-9a-f]{8}: streams of different vocabularies are not read as one$"
}

@test "a target stream encoded with --bos is refused: the model adds bos itself" {
    head -n 20 "$M/train.en" | tfm-tokenize encode -q -m "$M/spm.model" -o "$T/en20.tfm"
    head -n 20 "$M/train.de" | tfm-tokenize encode -q -m "$M/spm.model" -o "$T/de20.tfm"
    head -n 20 "$M/train.de" | tfm-tokenize encode -q --bos -m "$M/spm.model" -o "$T/bos.de.tfm"
    head -n 20 "$M/train.en" | tfm-tokenize encode -q --bos -m "$M/spm.model" -o "$T/bos.en.tfm"
    run tfm-batch -o "$T/b.tfm" "$T/en20.tfm" "$T/bos.de.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/bos.de.tfm: the target sentences begin with bos (bos=1 in the header, tfm-tokenize encode --bos): encode the targets without --bos; the model adds bos to the decoder's input itself"
    [ ! -e "$T/b.tfm" ]
    # through a pipe too, and whatever the source
    run bash -c "tfm-batch -q '$T/bos.en.tfm' - < '$T/bos.de.tfm' > '$T/b.tfm'"
    assert_failure 1
    assert_output --partial "tfm-batch: <stdin>: the target sentences begin with bos"
    # a source with bos is still batched, and the header says so
    run tfm-batch -q -o "$T/b.tfm" "$T/bos.en.tfm" "$T/de20.tfm"
    assert_success
    assert_equal "$(meta "$T/b.tfm" src.bos)" 1
}

@test "a header vocab.size that is not a positive count is refused, naming file and key" {
    edit() { python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/en.tfm" "$T/v.tfm" "$@"; }
    for bad in 0 -5 x 12x ''; do
        edit --header "vocab.size=$bad"
        run tfm-batch -q -o "$T/b.tfm" "$T/v.tfm"
        assert_failure 1
        assert_output "tfm-batch: $T/v.tfm: header: vocab.size=$bad is not a positive count"
        [ ! -e "$T/b.tfm" ]
        # as the target as well
        run tfm-batch -q -o "$T/b.tfm" "$M/en.tfm" "$T/v.tfm"
        assert_failure 1
        assert_output "tfm-batch: $T/v.tfm: header: vocab.size=$bad is not a positive count"
    done
    # a positive one is checked: ids of a 1000-piece vocabulary are not all below 5
    edit --header vocab.size=5
    run tfm-batch -q -o "$T/b.tfm" "$T/v.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-batch: $T/v.tfm: .*outside the vocabulary \(5\)$"
    # an absent one is not checked, as before
    edit --header vocab.size
    run tfm-batch -q -o "$T/b.tfm" "$T/v.tfm" "$M/de.tfm"
    assert_success
    assert_equal "$(meta "$T/b.tfm" vocab.size)" ""
}

@test "-o a terminal (/dev/tty, /dev/stdout on one) is refused as stdout on one is" {
    run script -qec "tfm-batch -q -o /dev/stdout '$M/en.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "tfm-batch: --output: '/dev/stdout' is a terminal: refusing to write a binary stream to it"
    assert_line --partial "rc=2"
    run script -qec "tfm-batch -q -o /dev/tty '$M/en.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "rc=2"
    run script -qec "tfm-batch -q '$M/en.tfm'; echo rc=\$?" /dev/null
    assert_line --partial "rc=2"
    tfm-batch -q -o /dev/stdout "$M/en.tfm" | tfm-cat > /dev/null
}

@test "a closed standard input is not the source file opened in its place" {
    # SRC opened first takes descriptor 0 when stdin is closed; '-' must not read it again
    run bash -c "tfm-batch -q -o '$T/b.tfm' '$M/en.tfm' - <&-"
    assert_failure 1
    assert_output "tfm-batch: <stdin>: at byte 0: Bad file descriptor"
    [ ! -e "$T/b.tfm" ]
    # a closed standard output stays unwritable, -o /dev/stdout too
    run bash -c "tfm-batch -q '$M/en.tfm' '$M/de.tfm' >&-"
    assert_failure 1
    assert_output "tfm-batch: <stdout>: write error: Bad file descriptor"
    run bash -c "tfm-batch -q -o /dev/stdout '$M/en.tfm' >&-"
    assert_failure 1
    assert_output "tfm-batch: /dev/stdout: descriptor 1 was not open when the program started"
}

@test "-o naming an input is a usage error: the input stays" {
    cp "$M/en.tfm" "$T/en.tfm"
    run tfm-batch -q -o "$T/en.tfm" "$T/en.tfm" "$M/de.tfm"
    assert_failure 2
    assert_line --index 0 "tfm-batch: --output '$T/en.tfm' is the input $T/en.tfm: the batches would replace it"
    ln -s en.tfm "$T/link.tfm"
    run tfm-batch -q -o "$T/link.tfm" "$M/de.tfm" "$T/en.tfm"
    assert_failure 2
    run bash -c "tfm-batch -q -o '$T/en.tfm' '$M/de.tfm' - < '$T/en.tfm'"
    assert_failure 2
    assert_line --index 0 "tfm-batch: --output '$T/en.tfm' is the input on standard input: the batches would replace it"
    cmp "$M/en.tfm" "$T/en.tfm"
}

@test "a target without vocab.size is checked against the source's, which the output states" {
    # token streams of no embedded model, by the independent writer: the source says
    # vocab.size=100, the target says nothing and holds id 150
    python3 -c '
import struct, sys
sys.path.insert(0, sys.argv[1] + "/tests/fixtures")
import make_bad as mb
def tok(path, hdr, sents):
    s = mb.Stream(); s.header(hdr)
    off = [0]; ids = []
    for x in sents:
        ids += x; off.append(len(ids))
    s.record("tokens.offsets", "i64", [len(off)], struct.pack("<%dq" % len(off), *off))
    s.record("tokens.ids", "i32", [len(ids)], struct.pack("<%di" % len(ids), *ids))
    s.end(); open(path, "wb").write(s.b)
t = sys.argv[2]
tok(t + "/src.tfm", "kind=tokens\nvocab.size=100\n", [[5, 6], [7]])
tok(t + "/bad.tfm", "kind=tokens\n", [[150], [8, 9]])
tok(t + "/good.tfm", "kind=tokens\n", [[99], [8, 9]])
tok(t + "/neg.tfm", "kind=tokens\n", [[5, 6], [7, -3, 9]])
' "$TFM_ROOT" "$T"
    # no vocabulary size known: a negative id is said as such, by its line and token
    run tfm-batch -q -o "$T/b.tfm" "$T/neg.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/neg.tfm: record 2 'tokens.ids': at byte 280: line 2: negative id -3 at token 2"
    run bash -c "cat '$T/neg.tfm' | tfm-batch -q -o '$T/b.tfm' -"
    assert_failure 1
    assert_output "tfm-batch: <stdin>: record 2 'tokens.ids': at byte 280: line 2: negative id -3 at token 2"
    run tfm-batch -q -o "$T/b.tfm" "$T/src.tfm" "$T/bad.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/bad.tfm: record 2 'tokens.ids': at byte 280: line 1: id 150 at token 1 outside the vocabulary (100)"
    [ ! -e "$T/b.tfm" ]
    run tfm-batch -q -o "$T/b.tfm" "$T/src.tfm" "$T/good.tfm"
    assert_success
    assert_equal "$(meta "$T/b.tfm" vocab.size)" 100
    tfm-cat "$T/b.tfm" > /dev/null
}

@test "ids are checked against the embedded model: vocab.size may not exceed its pieces" {
    python3 "$TFM_ROOT/tests/bats/edit-checkpoint.py" "$M/en.tfm" "$T/big.tfm" --header vocab.size=5000
    run tfm-batch -q -o "$T/b.tfm" "$T/big.tfm" "$M/de.tfm"
    assert_failure 1
    assert_output "tfm-batch: $T/big.tfm: header: vocab.size=5000, but the embedded model has 1000 pieces"
    [ ! -e "$T/b.tfm" ]
    run tfm-batch -q -o "$T/b.tfm" "$M/en.tfm" "$T/big.tfm"
    assert_failure 1
    # a stream with the model and without the key: the model's pieces bound the ids
    python3 -c '
import struct, sys, zlib
sys.path.insert(0, sys.argv[1] + "/tests/fixtures")
import make_bad as mb
spm = open(sys.argv[2] + "/spm.model", "rb").read()
for name, ids in (("nokey", [5, 6, 1500]), ("nokey-ok", [5, 6, 999])):
    s = mb.Stream()
    s.header("kind=tokens\nspm.size=%d\nspm.crc32=%08x\n" % (len(spm), zlib.crc32(spm)))
    s.record("tfm.spm", "u8", [len(spm)], spm)
    s.record("tokens.offsets", "i64", [2], struct.pack("<2q", 0, len(ids)))
    s.record("tokens.ids", "i32", [len(ids)], struct.pack("<%di" % len(ids), *ids))
    s.end(); open(sys.argv[3] + "/" + name + ".tfm", "wb").write(s.b)
' "$TFM_ROOT" "$M" "$T"
    run tfm-batch -q -o "$T/b.tfm" "$T/nokey.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-batch: $T/nokey.tfm: record 3 'tokens.ids': .*line 1: id 1500 at token 3 outside the vocabulary \(1000\)$"
    run tfm-batch -q -o "$T/b.tfm" "$T/nokey-ok.tfm"
    assert_success
}

@test "-o a link keeps the link; -o /dev/fd/1 or /dev/stdout writes the redirected file" {
    tfm-batch -q "$M/en.tfm" "$M/de.tfm" > "$T/ref.tfm"
    echo old > "$T/target.tfm"
    ln -s target.tfm "$T/link.tfm"
    run tfm-batch -q -o "$T/link.tfm" "$M/en.tfm" "$M/de.tfm"
    assert_success
    [ -L "$T/link.tfm" ]
    cmp "$T/target.tfm" "$T/ref.tfm"
    [ -e /proc/self/fd/1 ] || skip "no /proc"
    outs=(/dev/fd/1)
    # as root, a regression would rename a file over /dev/stdout itself: not risked there
    [ -w /dev ] || outs+=(/dev/stdout)
    for o in "${outs[@]}"; do
        run bash -c "tfm-batch -q -o $o '$M/en.tfm' '$M/de.tfm' > '$T/got.tfm'"
        assert_success
        cmp "$T/got.tfm" "$T/ref.tfm"
    done
    run ls "$T"
    refute_output --partial ".tmp"
}
