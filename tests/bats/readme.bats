#!/usr/bin/env bats
# README.md's commands run as written: the block of "The tools", on a slice of the bundled
# Multi30k corpus, with its training time in seconds where it says minutes.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    command -v tfm-train > /dev/null || skip "the tools are not built yet"
}

@test "README: the commands of 'The tools' run one after another, as written" {
    T="$BATS_TEST_TMPDIR"
    D="$TFM_ROOT/data/multi30k-ende"
    cd "$T"
    zcat "$D/train.en.gz" | head -n 3000 > train.en
    zcat "$D/train.de.gz" | head -n 3000 > train.de
    zcat "$D/val.en.gz" | head -n 20 > test.en
    zcat "$D/val.de.gz" | head -n 20 > test.de
    ln -s "$TFM_ROOT/configs" configs
    # the first sh block after the heading, its training durations in seconds
    awk '/^## The tools/ { on = 1 } on && /^```sh/ { inb = 1; next }
         inb && /^```/ { exit } inb' "$TFM_ROOT/README.md" > block.sh
    grep -q '^tfm-train ' block.sh
    grep -q '^tfm-avg ' block.sh
    sed -i -E '/^tfm-train /s/([0-9]+)m\b/\1s/g' block.sh
    run bash -e block.sh
    assert_success
    assert_line --regexp '^BLEU = [0-9.]+ '
    assert_line "meta kind=batches"
}

@test "README: the checkpoint sizes of 'Disk' are those of the parameter counts" {
    T="$BATS_TEST_TMPDIR"
    D="$TFM_ROOT/data/multi30k-ende"
    cd "$T"
    zcat "$D/train.en.gz" > en.txt
    zcat "$D/train.de.gz" > de.txt
    tfm-tokenize train -q -m spm.model --vocab 8000 en.txt de.txt
    head -n 1000 en.txt | tfm-tokenize encode -q -m spm.model --eos > en.tfm
    head -n 1000 de.txt | tfm-tokenize encode -q -m spm.model --eos > de.tfm
    tfm-batch -q --tokens 2048 en.tfm de.tfm > b.tfm
    tfm-train -q -c "$TFM_ROOT/configs/tiny.conf" -j 2 --max-steps 1 -o c b.tfm
    tfm-avg -n 1 -o avg.tfm c
    text=$(tr '\n' ' ' < "$TFM_ROOT/README.md" | sed 's/  */ /g')
    # the ratio the README gives, to its one decimal
    ratio=$(printf '%s\n' "$text" | grep -o "model's checkpoint[a-z0-9 ]* is [0-9.]* times" | grep -o "[0-9][0-9.]*" | tail -n 1)
    [ -n "$ratio" ]
    run awk -v a="$(stat -c %s c/step-000001.tfm)" -v b="$(stat -c %s avg.tfm)" -v r="$ratio" \
        'BEGIN { printf "%.1f\n", a / b; exit (sprintf("%.1f", a / b) == r ? 0 : 1) }'
    assert_success
    # the parameter count of a layout, checked against the tiny checkpoint's tensors, then
    # for the base and big models: 12 bytes a parameter (the parameter, two Adam moments)
    count() {   # V D F N
        awk -v V="$1" -v D="$2" -v F="$3" -v N="$4" 'BEGIN {
            enc = 3*D*D + 3*D + D*D + D + 4*D + D*F + F + F*D + D
            dec = enc + D*D + D + 2*D*D + 2*D + D*D + D + 2*D
            printf "%d\n", V*D + N*(enc + dec) }'
    }
    elements=$(tfm-cat c/step-000001.tfm | awk '$1 == "record" && $3 ~ /^param\./ {
        gsub(/[][]/, "", $5); n = split($5, d, ","); p = 1
        for (i = 1; i <= n; i++) p *= d[i]
        s += p } END { print s }')
    assert_equal "$(count 8000 64 256 2)" "$elements"
    gb() { awk -v p="$1" 'BEGIN { printf "%.2f GB (%.1f million)\n", 12 * p / 1e9, p / 1e6 }'; }
    run gb "$(count 37000 512 2048 6)"
    assert_output "0.76 GB (63.1 million)"
    run gb "$(count 32000 1024 4096 6)"
    assert_output "2.51 GB (209.1 million)"
    run gb "$(count 37000 1024 4096 6)"
    assert_output "2.57 GB (214.2 million)"
    printf '%s\n' "$text" | grep -q "about 0.76 GB each for the base model (63.1 million parameters with 37000 pieces) and 2.5 GB for the big one of EN-FR (209 million with 32000; 2.6 GB, 214 million, for a big EN-DE model)"
}
