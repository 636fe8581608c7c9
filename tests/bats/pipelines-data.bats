#!/usr/bin/env bats
# pipelines/wmt14.mk, wmt14-fetch.sh, tokenize-13a.pl and the cleaning of common.mk: the
# WMT14 data made from the WMT archives, and the two scores of newstest2014.  No network:
# the archives are tiny stand-ins with the real names and layouts, built at run time by
# tests/fixtures/wmt14/make-mirror.sh and served from a file:// mirror; the "offline"
# address is a closed port of this machine.

setup_file() {
    export BATS_NO_PARALLELIZE_WITHIN_FILE=true
    export BIN=${TFM_BIN:-$(dirname "$(command -v tfm-cat)")}
    export M="$BATS_FILE_TMPDIR/mirror"
    "$TFM_ROOT/tests/fixtures/wmt14/make-mirror.sh" "$M"
    export NT="$TFM_ROOT/data/newstest2013/newstest2013"
    export OFFLINE=http://127.0.0.1:9
    export ENDE="make --no-print-directory -f $TFM_ROOT/pipelines/wmt_ende.mk BIN=$BIN CORPUS=wmt14 WMT_SUMS=$M/wmt14.sums"
    export ENFR="make --no-print-directory -f $TFM_ROOT/pipelines/wmt_enfr.mk BIN=$BIN WMT_SUMS=$M/wmt14.sums"
    # a tiny run: the tiny model, 2 updates, short outputs, 1 thread
    export TINY="CONFIG=$TFM_ROOT/configs/tiny.conf VOCAB=300 TOKENS=1024 MAX_STEPS=2 MAX_TIME=
        SAVE_EVERY=1 AVG=2 VALID_EVERY=0 MAX_LEN_B=8 THREADS=1"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    bats_load_library bats-file
    cd "$BATS_TEST_TMPDIR"
}

need_tools() {
    local t
    for t in "$@"; do
        [ -x "$BIN/$t" ] || skip "$t not built yet"
    done
}

need_curl() {
    command -v curl > /dev/null || skip "curl not installed"
}

sha() { sha256sum < "$1" | cut -d ' ' -f 1; }

@test "help names the download variables, the download target and the cleaning" {
    run make -f "$TFM_ROOT/pipelines/wmt_enfr.mk" help WMT_MIRROR=/srv/wmt
    assert_success
    assert_line --partial "WMT_MIRROR=/srv/wmt  a mirror URL or local directory"
    assert_output --partial "WMT_DL=wmt-archives"
    assert_output --partial "WMT_SUMS=$TFM_ROOT/pipelines/wmt14.sums"
    assert_output --partial "PAPER_TOK="
    assert_line --partial "download  the target"
    assert_line --partial "CLEAN_LEN=250 CLEAN_RATIO=1.5"
    run make -f "$TFM_ROOT/pipelines/wmt_ende.mk" help CORPUS=wmt14
    assert_success
    assert_output --partial "WMT_MIRROR="
    assert_line --partial "CLEAN_LEN=250 CLEAN_RATIO=1.5"
    # the bundled corpora are not cleaned and need no download
    run make -f "$TFM_ROOT/pipelines/wmt_ende.mk" help
    assert_success
    refute_output --partial "WMT_MIRROR"
    assert_line --partial "CLEAN_LEN= CLEAN_RATIO="
}

@test "wmt14.sums lists every archive once: size, SHA-256, statmt.org address" {
    local sums="$TFM_ROOT/pipelines/wmt14.sums"
    run awk '!/^#/ && NF' "$sums"
    assert_success
    [ "${#lines[@]}" -eq 6 ]
    for l in "${lines[@]}"; do
        [[ $l =~ ^([a-z0-9.-]+)\ +([0-9]+)\ ([0-9a-f]{64})\ (http://(www|data)\.statmt\.org/.*/([a-z0-9.-]+))$ ]]
        [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[6]}" ]
    done
    # the sizes the README gives: EN-DE 1.70 GB, EN-FR 6.66 GB
    [ "$(awk '/^(training-parallel-(europarl-v7|commoncrawl|nc-v9)|dev)\.tgz / { s += $2 } END { printf "%.0f", s }' "$sums")" = 1695017123 ]
    [ "$(awk '!/^#/ { s += $2 } END { printf "%.0f", s }' "$sums")" = 6655754089 ]
    grep -q '^dev.tgz  *38654961 7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7 http://data.statmt.org/wmt19/translation-task/dev.tgz$' "$sums"
    grep -q 'tensorflow_datasets/url_checksums/wmt14_translate.txt' "$sums"
}

@test "download: every EN-FR archive from a file:// mirror, byte for byte; a second run does nothing" {
    need_curl
    run $ENFR WMT_MIRROR="file://$M" WMT_DL=dl download
    assert_success
    local f
    for f in training-parallel-europarl-v7.tgz training-parallel-commoncrawl.tgz \
             training-parallel-nc-v9.tgz training-parallel-un.tgz training-giga-fren.tar dev.tgz; do
        assert_line "wmt14-fetch: $f: downloading $(stat -c %s "$M/$f") bytes from file://$M/$f"
        cmp "$M/$f" "dl/$f"
    done
    [ "$(ls dl | wc -l)" -eq 6 ]            # no .part left
    run $ENFR WMT_MIRROR="file://$M" WMT_DL=dl download
    assert_success
    assert_output --partial "Nothing to be done for 'download'"
    # EN-DE needs neither UN nor Giga-FrEn
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl2 download
    assert_success
    [ "$(ls dl2 | sort | paste -sd ' ')" = "dev.tgz training-parallel-commoncrawl.tgz training-parallel-europarl-v7.tgz training-parallel-nc-v9.tgz" ]
}

@test "WMT_MIRROR may be a local directory; unset, the addresses of the list are used" {
    need_curl
    mkdir local; cp "$M/dev.tgz" local/
    run $ENDE WMT_MIRROR=local WMT_DL=dl dl/dev.tgz
    assert_success
    assert_output --partial "from file://$PWD/local/dev.tgz"
    cmp "$M/dev.tgz" dl/dev.tgz
    run $ENDE WMT_DL=dl3 dl3/dev.tgz            # the fixture's list gives file://$M/dev.tgz
    assert_success
    assert_output --partial "from file://$M/dev.tgz"
    cmp "$M/dev.tgz" dl3/dev.tgz
}

@test "EN-DE: train.{en,de} are Europarl, Common Crawl, News Commentary in order; newstest2014 is the text of the SGML" {
    need_curl
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d d/train.en d/train.de d/newstest2014.en d/newstest2014.de
    assert_success
    assert_line "d/train: 120 pairs from dl/training-parallel-europarl-v7.tgz (training/europarl-v7.de-en.*)"
    assert_line "d/train: 104 pairs from dl/training-parallel-commoncrawl.tgz (commoncrawl.de-en.*)"
    assert_line "d/train: 80 pairs from dl/training-parallel-nc-v9.tgz (training/news-commentary-v9.de-en.*)"
    assert_line "d/newstest2014: 20 segments from dl/dev.tgz (dev/newstest2014-deen-ref.en.sgm, dev/newstest2014-deen-src.de.sgm)"
    local l
    for l in en de; do
        [ "$(wc -l < d/train.$l)" -eq 304 ]
        # the fixture's corpora are lines 1-120, 121-220 (+4 to clean), 221-300 of newstest2013
        diff <(sed -n '1,220p' "$NT.$l") <(sed -n '1,220p' d/train.$l)
        diff <(sed -n '221,300p' "$NT.$l") <(sed -n '225,304p' d/train.$l)
        # segments 2001-2020, whitespace runs (tabs too) made one space, ends trimmed
        diff <(sed -n '2001,2020p' "$NT.$l" | sed -E 's/[[:space:]]+/ /g; s/^ | $//g') d/newstest2014.$l
    done
    [ "$(sed -n 224p d/train.en)" = "Yes." ]
    assert_file_not_exist d/train.en.tmp
}

@test "WMT14_DIR=. makes the corpus in the current directory" {
    need_curl
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=. W=w w/train.raw.src w/test.tgt
    assert_success
    assert_line "$PWD/train: 80 pairs from dl/training-parallel-nc-v9.tgz (training/news-commentary-v9.de-en.*)"
    [ "$(wc -l < train.en)" -eq 304 ]
    diff newstest2014.de w/test.tgt
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=./ W=w w/train.raw.src w/test.tgt
    assert_success
    refute_output --partial "pairs from"
}

@test "EN-FR: UN and Giga-FrEn too (gzip members of a plain tar)" {
    need_curl
    run $ENFR WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d d/train.en d/newstest2014.fr
    assert_success
    assert_line "d/train: 60 pairs from dl/training-parallel-un.tgz (un/undoc.2000.fr-en.*)"
    assert_line "d/train: 60 pairs from dl/training-giga-fren.tar (giga-fren.release2.fixed.*.gz)"
    assert_line "d/newstest2014: 20 segments from dl/dev.tgz (dev/newstest2014-fren-ref.en.sgm, dev/newstest2014-fren-src.fr.sgm)"
    local l
    for l in en fr; do
        diff "$NT.$l" <(head -420 d/train.$l) > /dev/null && false
        diff <(sed -n '1,420p' "$NT.$l") d/train.$l
    done
}

@test "a corrupted archive is refused by its SHA-256 and removed; nothing is made from it" {
    need_curl
    mkdir bad; cp "$M"/*.t* bad/
    printf 'X' | dd of=bad/training-parallel-commoncrawl.tgz bs=1 seek=100 conv=notrunc 2> /dev/null
    [ "$(stat -c %s bad/training-parallel-commoncrawl.tgz)" = "$(stat -c %s "$M/training-parallel-commoncrawl.tgz")" ]
    run $ENDE WMT_MIRROR="$PWD/bad" WMT_DL=dl WMT14_DIR=d d/train.en
    assert_failure
    assert_output --regexp "wmt14-fetch: training-parallel-commoncrawl.tgz from file://$PWD/bad/training-parallel-commoncrawl.tgz: SHA-256 [0-9a-f]{64}, not $(sha "$M/training-parallel-commoncrawl.tgz") \(as $M/wmt14.sums lists it\): refused and removed"
    assert_file_not_exist dl/training-parallel-commoncrawl.tgz
    assert_file_not_exist dl/training-parallel-commoncrawl.tgz.part
    assert_file_not_exist d/train.en
    # one byte too many: refused by its size
    cp "$M/training-parallel-commoncrawl.tgz" bad/; echo >> bad/training-parallel-commoncrawl.tgz
    run $ENDE WMT_MIRROR="$PWD/bad" WMT_DL=dl WMT14_DIR=d d/train.en
    assert_failure
    assert_output --partial "$(( $(stat -c %s "$M/training-parallel-commoncrawl.tgz") + 1 )) bytes, not $(stat -c %s "$M/training-parallel-commoncrawl.tgz")"
    assert_file_not_exist dl/training-parallel-commoncrawl.tgz
    # the right one is taken
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d d/train.en
    assert_success
    cmp "$M/training-parallel-commoncrawl.tgz" dl/training-parallel-commoncrawl.tgz
}

@test "an archive already in WMT_DL is checked before use, and kept when it is wrong" {
    mkdir dl; cp "$M/dev.tgz" dl/
    printf 'Y' | dd of=dl/dev.tgz bs=1 seek=50 conv=notrunc 2> /dev/null
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d d/newstest2014.en
    assert_failure
    assert_output --regexp "wmt14-fetch: dl/dev.tgz: SHA-256 [0-9a-f]{64}, not $(sha "$M/dev.tgz") .*: not the archive expected; remove it, and make again to download it"
    assert_file_exist dl/dev.tgz
    assert_file_not_exist d/newstest2014.en
    cp "$M/dev.tgz" dl/
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d d/newstest2014.en
    assert_success
    refute_output --partial "downloading"
}

@test "an interrupted download continues where it stopped (curl -C -)" {
    need_curl
    local a=training-parallel-un.tgz size
    size=$(stat -c %s "$M/$a")
    # The connection drops after 2000 bytes: a mirror whose copy ends there.
    mkdir cut; head -c 2000 "$M/$a" > cut/$a
    run $ENFR WMT_MIRROR="$PWD/cut" WMT_DL=dl dl/$a
    assert_failure
    assert_output --partial "wmt14-fetch: dl/$a.part: 2000 of $size bytes: the transfer ended early; make again to continue it"
    [ "$(stat -c %s dl/$a.part)" -eq 2000 ]
    # Continued from a mirror whose first bytes differ: only a resumed transfer, which
    # reads from byte 2000 on, gives the archive of the list.
    mkdir other; cp "$M/$a" other/
    printf 'XXXX' | dd of=other/$a bs=1 seek=10 conv=notrunc 2> /dev/null
    run $ENFR WMT_MIRROR="$PWD/other" WMT_DL=dl dl/$a
    assert_success
    assert_line "wmt14-fetch: $a: continuing at byte 2000 of $size from file://$PWD/other/$a"
    [ "$(sha dl/$a)" = "$(sha "$M/$a")" ]
    assert_file_not_exist dl/$a.part
    # A whole .part left by a run stopped before its check: checked, not fetched again.
    rm -r dl; mkdir dl; cp "$M/dev.tgz" dl/dev.tgz.part
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl dl/dev.tgz
    assert_success
    cmp "$M/dev.tgz" dl/dev.tgz
}

@test "two runs sharing WMT_DL and WMT14_DIR take turns: the second waits, then uses what the first made" {
    need_curl
    command -v flock > /dev/null || skip "flock not installed"
    # This test holds the lock of dl/dev.tgz.part, as a download under way would, and
    # meanwhile puts the archive there itself: the fetch waits, and then checks it instead of
    # writing the .part.
    mkdir dl
    exec 8>> dl/dev.tgz.part
    flock 8
    # (8<&-: the lock is this test's, not the run's)
    WMT_SUMS="$M/wmt14.sums" WMT_MIRROR="$OFFLINE" "$TFM_ROOT/pipelines/wmt14-fetch.sh" dl dev.tgz \
        > fetch.out 2>&1 8<&- &
    local pid=$!
    sleep 1
    assert_equal "$(cat fetch.out)" "wmt14-fetch: dl/dev.tgz.part: another run is downloading dev.tgz: waiting for it"
    assert_equal "$(stat -c %s dl/dev.tgz.part)" 0
    cp "$M/dev.tgz" dl/
    exec 8<&-
    timeout 20 tail --pid=$pid -f /dev/null
    wait $pid
    refute grep -q 'cannot download' fetch.out
    cmp "$M/dev.tgz" dl/dev.tgz
    assert_equal "$(ls -A dl)" "dev.tgz"
    # The run waited for renames its .part: the lock is taken again on the file of that
    # name, which is not the one waited on.
    exec 8>> dl/training-parallel-nc-v9.tgz.part
    flock 8
    WMT_SUMS="$M/wmt14.sums" WMT_MIRROR="$OFFLINE" "$TFM_ROOT/pipelines/wmt14-fetch.sh" dl \
        training-parallel-nc-v9.tgz > fetch.out 2>&1 8<&- &
    pid=$!
    sleep 1
    cat "$M/training-parallel-nc-v9.tgz" >&8
    mv dl/training-parallel-nc-v9.tgz.part dl/training-parallel-nc-v9.tgz
    exec 8<&-
    timeout 20 tail --pid=$pid -f /dev/null
    wait $pid
    assert_equal "$(cat fetch.out)" "wmt14-fetch: dl/training-parallel-nc-v9.tgz.part: another run is downloading training-parallel-nc-v9.tgz: waiting for it"
    cmp "$M/training-parallel-nc-v9.tgz" dl/training-parallel-nc-v9.tgz
    assert_equal "$(ls -A dl)" "dev.tgz
training-parallel-nc-v9.tgz"
    # The same for WMT14_DIR: the other run's ready files are not made again, nor mixed
    # with this one's.
    mkdir d
    exec 8>> d/newstest2014.en.tmp
    flock 8
    $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d d/newstest2014.en > make.out 2>&1 8<&- &
    pid=$!
    sleep 1
    assert_equal "$(cat make.out)" "d/newstest2014.en.tmp: another run is making d/newstest2014.en d/newstest2014.de: waiting for it"
    assert_equal "$(ls -A d)" "newstest2014.en.tmp"
    echo 'made by the other run' > d/newstest2014.en
    echo 'vom anderen Lauf' > d/newstest2014.de
    exec 8<&-
    timeout 20 tail --pid=$pid -f /dev/null
    wait $pid
    assert_equal "$(tail -1 make.out)" "d/newstest2014.en d/newstest2014.de: made by the other run"
    assert_equal "$(cat d/newstest2014.en)" "made by the other run"
    assert_equal "$(ls -A d)" "newstest2014.de
newstest2014.en"
}

@test "make -j2: the jobs of one run that fetch and unpack other archives do not wait for each other" {
    need_curl
    command -v flock > /dev/null || skip "flock not installed"
    run timeout 60 $ENFR -j2 WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d d/train.en d/newstest2014.en
    assert_success
    refute_output --partial "waiting for it"
    assert_line "d/train: 60 pairs from dl/training-giga-fren.tar (giga-fren.release2.fixed.*.gz)"
    assert_line "d/newstest2014: 20 segments from dl/dev.tgz (dev/newstest2014-fren-ref.en.sgm, dev/newstest2014-fren-src.fr.sgm)"
    [ "$(ls dl | wc -l)" -eq 6 ]
    assert_equal "$(ls -A d | paste -sd ' ')" "newstest2014.en newstest2014.fr train.en train.fr"
    # offline, each job says what it needs and leaves nothing behind
    run timeout 60 $ENDE -j2 WMT_MIRROR="$OFFLINE" WMT_DL=dl2 WMT14_DIR=d2 download
    assert_failure
    refute_output --partial "waiting for it"
    assert_output --partial "cannot download $OFFLINE/"
    assert_equal "$(ls -A dl2)" ""
}

@test "where WMT_DL and WMT14_DIR cannot be locked, the run says so and goes on alone" {
    need_curl
    # flock as util-linux's fails on a file system without flock (Lustre mounted without
    # it): exit status 65
    mkdir fake
    printf '#!/bin/sh\necho "flock: $*: Bad file descriptor" >&2\nexit 65\n' > fake/flock
    chmod +x fake/flock
    PATH="$PWD/fake:$PATH" run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d d/newstest2014.en
    assert_success
    assert_line "wmt14-fetch: dl/dev.tgz.part: cannot lock it (flock exit status 65): going on without taking turns with other runs"
    assert_line "d/newstest2014.en.tmp: cannot lock it (flock exit status 65): going on without taking turns with other runs"
    refute_output --partial "waiting for it"
    assert_line "d/newstest2014: 20 segments from dl/dev.tgz (dev/newstest2014-deen-ref.en.sgm, dev/newstest2014-deen-src.de.sgm)"
    cmp "$M/dev.tgz" dl/dev.tgz
    [ "$(wc -l < d/newstest2014.en)" -eq 20 ]
}

@test "offline: the download stops at once, naming the archive, its address and the ways out" {
    need_curl
    local t0=$SECONDS
    run $ENFR WMT_MIRROR="$OFFLINE" WMT_DL=dl W=w
    assert_failure
    [ $((SECONDS - t0)) -lt 10 ]
    assert_output --regexp "wmt14-fetch: [a-z0-9.-]+: cannot download $OFFLINE/[a-z0-9.-]+ \(curl exit status 7\)\."
    assert_output --regexp "wmt14-fetch: it needs [a-z0-9.-]+ \([0-9]+ bytes, SHA-256 [0-9a-f]{64}\)\."
    assert_output --partial "Set WMT_MIRROR to a mirror or a local directory that holds it, or WMT14_DIR to a directory with the ready files"
    assert_line "wmt_enfr.mk needs these archives in WMT_DL=dl (sizes in bytes):"
    assert_line "  training-giga-fren.tar $(stat -c %s "$M/training-giga-fren.tar")"
    assert_line "or ready files in WMT14_DIR=wmt14-enfr: train.en train.fr newstest2014.en newstest2014.fr"
    assert_not_exist w
    assert_not_exist wmt14-enfr
    [ -z "$(ls dl)" ]
    # without WMT_MIRROR, the address of the list
    sed "s|file://$M/|$OFFLINE/wmt10/|" "$M/wmt14.sums" > sums
    run $ENFR WMT_SUMS=sums WMT_DL=dl dl/training-giga-fren.tar
    assert_failure
    assert_output --partial "cannot download $OFFLINE/wmt10/training-giga-fren.tar"
}

@test "ready files in WMT14_DIR are used as they are: no archive is needed" {
    need_curl
    mkdir d
    printf 'a house\nthe dog\n' > d/train.en; printf 'ein Haus\nder Hund\n' > d/train.de
    printf 'a cat\n' > d/newstest2014.en; printf 'eine Katze\n' > d/newstest2014.de
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d W=w w/train.raw.src w/train.raw.tgt w/test.src w/test.tgt
    assert_success
    refute_output --partial wmt14-fetch
    assert_not_exist dl
    diff d/train.de w/train.raw.tgt
    diff d/newstest2014.en w/test.src
    # Made from the archives, then the archives newer, or deleted: nothing is redone.
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d2 d2/train.en d2/newstest2014.en
    assert_success
    touch -d '+1 hour' dl/*
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d2 d2/train.en d2/newstest2014.en
    assert_success
    refute_output --partial "pairs from"
    refute_output --partial "segments from"
    rm -r dl
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d2 W=w2 w2/train.raw.src w2/test.tgt
    assert_success
    refute_output --partial wmt14-fetch
    assert_not_exist dl
}

@test "corpus files named by the user and missing: the message of old, no download" {
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl TRAIN_SRC=none/train.en W=w
    assert_failure
    assert_line "wmt_ende.mk: none/train.en: no such file."
    assert_output --partial "CORPUS=wmt14 reads the files that TRAIN_SRC, TRAIN_TGT, TEST_SRC and TEST_TGT name:"
    refute_output --partial wmt14-fetch
    assert_not_exist w
}

@test "cleaning: pairs with an empty side, over CLEAN_LEN pieces or a ratio over CLEAN_RATIO are dropped" {
    need_tools tfm-tokenize
    need_curl
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d W=w VOCAB=300 THREADS=1 w/train.src w/train.tgt
    assert_success
    # the expected pairs, from the piece counts of the pipeline's model, by the rule
    local counts
    counts() { tfm-tokenize encode -m w/spm.model "$1" | tfm-tokenize decode --ids | awk '{ print NF }'; }
    paste <(counts w/train.raw.src) <(counts w/train.raw.tgt) > counts
    diff counts <(tr ' ' '\t' < w/train.len)
    local s t e=0 kept=0 empty=0 long=0 ratio=0
    while read -r s t; do
        e=$((e + 1))
        if [ "$s" -eq 0 ] || [ "$t" -eq 0 ]; then empty=$((empty + 1))
        elif [ "$s" -gt 250 ] || [ "$t" -gt 250 ]; then long=$((long + 1))
        elif [ $((2 * s)) -gt $((3 * t)) ] || [ $((2 * t)) -gt $((3 * s)) ]; then ratio=$((ratio + 1))
        else kept=$((kept + 1)); echo "$e"; fi
    done < counts > keep
    diff <(awk 'NR == FNR { k[$1]; next } FNR in k' keep w/train.raw.src) w/train.src
    diff <(awk 'NR == FNR { k[$1]; next } FNR in k' keep w/train.raw.tgt) w/train.tgt
    assert_output --partial "w/train: $kept of 304 pairs kept; dropped $empty empty, $long over 250 pieces, $ratio over ratio 1.5"
    # the fixture's four bad pairs: two empty sides, one of 300 words, one 'Yes.'
    [ "$empty" -eq 2 ]
    [ "$long" -eq 1 ]
    [ "$ratio" -ge 1 ]
    refute grep -qx 'Yes.' w/train.src
    refute grep -q 'word300' w/train.src
    [ "$(grep -c . w/train.src)" -eq "$kept" ]
    # other bounds in the same W: the cleaning again, not the SentencePiece model; and none
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d W=w VOCAB=300 THREADS=1 \
        CLEAN_LEN=20 CLEAN_RATIO=3 w/train.src
    assert_success
    assert_line "w/settings/clean: now CLEAN_LEN=20 CLEAN_RATIO=3: made again"
    refute_output --partial "tfm-tokenize train"
    long=$(awk '$1 > 0 && $2 > 0 && ($1 > 20 || $2 > 20)' w/train.len | wc -l)
    assert_output --regexp "w/train: [0-9]+ of 304 pairs kept; dropped 2 empty, $long over 20 pieces, [0-9]+ over ratio 3"
    [ "$(awk '{ print NF }' w/train.src | sort -n | tail -1)" -le 20 ]
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d W=w3 VOCAB=300 THREADS=1 CLEAN_LEN= CLEAN_RATIO= w3/spm.model
    assert_success
    diff d/train.en w3/train.src
    assert_file_not_exist w3/train.raw.src
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d W=w VOCAB=300 THREADS=1 CLEAN_LEN= CLEAN_RATIO= w/train.src
    assert_success
    diff d/train.en w/train.src
}

@test "tokenize-13a.pl writes the tokens that 13a BLEU counts: the n-gram statistics of WMT17 systems" {
    need_tools tfm-score
    local D="$TFM_ROOT/data/wmt17-ende-bleu" sys file stats
    perl "$TFM_ROOT/pipelines/tokenize-13a.pl" < "$D/newstest2017-ende.ref.de" > ref.tok
    # expected_scores.tsv: the 13a n-gram matches and totals (columns 7-14) per system,
    # whose BLEU is the published mteval-v13a score
    while read -r sys file m1 m2 m3 m4 t1 t2 t3 t4; do
        stats=$(perl "$TFM_ROOT/pipelines/tokenize-13a.pl" < "$D/$file" |
                tfm-score --tokenized --json -r ref.tok | tr -d ' \n')
        [[ $stats == *"\"counts\":[$m1,$m2,$m3,$m4]"* ]] || { echo "$sys: $stats"; false; }
        [[ $stats == *"\"totals\":[$t1,$t2,$t3,$t4]"* ]] || { echo "$sys: $stats"; false; }
    done < <(awk -F '\t' 'NR > 1 { print $1, $2, $7, $8, $9, $10, $11, $12, $13, $14 }' "$D/expected_scores.tsv")
    run bash -c "printf '%s\n' 'Er sagte: \"E-Mail-Adresse, 3.5-mal (ca.)\" &amp; 1,000.  ' ' <skipped>a&lt;b ' '' |
                 perl '$TFM_ROOT/pipelines/tokenize-13a.pl'"
    assert_success
    assert_line -n 0 'Er sagte : " E-Mail-Adresse , 3.5 - mal ( ca . ) " & 1,000 .'
    assert_line -n 1 'a < b'
    # an empty line stays one
    [ "$(printf 'a\n\n \nb\n' | perl "$TFM_ROOT/pipelines/tokenize-13a.pl" | paste -sd '|')" = 'a|||b' ]
    # text that is not UTF-8 is refused, as tfm-score refuses it, not written as "\xFF"
    run bash -c "printf 'ok\nabc \xff def.\n' | perl '$TFM_ROOT/pipelines/tokenize-13a.pl'"
    assert_failure 1
    assert_line "ok"
    assert_line "tokenize-13a: standard input: line 2: invalid UTF-8"
    refute_output --partial 'xFF'
    # a file named as an operand, which it would not read: usage, not a wait for stdin
    run timeout 10 perl "$TFM_ROOT/pipelines/tokenize-13a.pl" "$NT.de"
    assert_failure 2
    assert_output "usage: tokenize-13a.pl < TEXT > TOKENS"
    # a write that fails is said
    if [ -w /dev/full ]; then
        run bash -c "perl '$TFM_ROOT/pipelines/tokenize-13a.pl' < '$NT.de' > /dev/full"
        assert_failure 1
        assert_output "tokenize-13a: standard output: No space left on device"
    fi
}

@test "EN-DE end to end: score.txt holds sacreBLEU and the paper's BLEU, each labelled" {
    need_tools tfm-batch tfm-train tfm-avg tfm-decode tfm-score
    need_curl
    run $ENDE WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d W=w $TINY
    assert_success
    assert_line "sacreBLEU, detokenized text (20 sentences of d/newstest2014.de):"
    assert_line "paper's BLEU, tokenized by the mteval-v13a rules (pipelines/tokenize-13a.pl), not by Moses's tokenizer.perl; hyphens split as ##AT##-##AT## (tensor2tensor's get_ende_bleu.sh), multi-bleu.perl's BLEU:"
    run cat w/score.txt
    [ "${#lines[@]}" -eq 6 ]
    [[ ${lines[1]} =~ ^BLEU\ =\ [0-9]+\.[0-9]{2}\  ]]
    [[ ${lines[2]} == nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:tfm-* ]]
    [[ ${lines[4]} =~ ^BLEU\ =\ [0-9]+\.[0-9]{2}\  ]]
    [[ ${lines[5]} == nrefs:1\|case:mixed\|eff:no\|tok:tokenized+atat\|smooth:none\|version:tfm-* ]]
    # Scored again with known hypotheses: every other reference line, hyphens spaced out
    # in the rest, so that the two scores differ; each equals its direct computation.
    awk 'NR % 2 { print; next } { gsub(/-/, " - "); print }' w/test.tgt > w/test.hyp.txt
    sed -i '3s/.*/Nichts./' w/test.hyp.txt
    rm w/score.txt
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d W=w $TINY w/score.txt
    assert_success
    refute_output --partial tfm-decode
    local sacre paper
    sacre=$(tfm-score -r w/test.tgt w/test.hyp.txt)
    paper=$(tfm-score --tokenized --compound-split \
            -r <(perl "$TFM_ROOT/pipelines/tokenize-13a.pl" < w/test.tgt) \
            <(perl "$TFM_ROOT/pipelines/tokenize-13a.pl" < w/test.hyp.txt))
    [ "$(sed -n 2,3p w/score.txt)" = "$sacre" ]
    [ "$(sed -n 5,6p w/score.txt)" = "$paper" ]
    [ "$(sed -n 2p w/score.txt)" != "$(sed -n 5p w/score.txt)" ]
    # another tokenizer, named in the label
    rm w/score.txt
    run $ENDE WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d W=w $TINY PAPER_TOK=cat w/score.txt
    assert_success
    assert_line "paper's BLEU, tokenized by 'cat'; hyphens split as ##AT##-##AT## (tensor2tensor's get_ende_bleu.sh), multi-bleu.perl's BLEU:"
    [ "$(sed -n 5,6p w/score.txt)" = "$(tfm-score --tokenized --compound-split -r w/test.tgt w/test.hyp.txt)" ]
    diff w/test.tgt w/test.tgt.tok
}

@test "EN-FR end to end on the tiny archives: both scores" {
    need_tools tfm-batch tfm-train tfm-avg tfm-decode tfm-score
    need_curl
    run $ENFR WMT_MIRROR="file://$M" WMT_DL=dl WMT14_DIR=d W=w $TINY
    assert_success
    assert_output --regexp "w/train: [0-9]+ of 420 pairs kept; dropped 0 empty, 0 over 250 pieces, [0-9]+ over ratio 1.5"
    assert_line "sacreBLEU, detokenized text (20 sentences of d/newstest2014.fr):"
    assert_line --regexp "^paper's BLEU, tokenized by the mteval-v13a rules"
    [ "$(grep -c '^BLEU = ' w/score.txt)" -eq 2 ]
    diff d/newstest2014.fr w/test.tgt
    run $ENFR WMT_MIRROR="$OFFLINE" WMT_DL=dl WMT14_DIR=d W=w $TINY
    assert_success
    assert_output --partial "Nothing to be done"
}

@test "lock-file.sh: a file to lock that is a symbolic link (a work directory copied with cp -rs) is locked, not waited on forever" {
    command -v flock > /dev/null || skip "flock not installed"
    mkdir w
    echo "1 elsewhere" > w/real
    ln -s real w/.pipeline.lock
    run timeout 20 bash -c '. "$1"; lock_file w/.pipeline.lock w/.pipeline.lock checking && echo locked' \
        sh "$TFM_ROOT/pipelines/lock-file.sh"
    assert_success
    assert_output "locked"
}
