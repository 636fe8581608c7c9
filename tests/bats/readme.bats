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
