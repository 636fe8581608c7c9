#!/usr/bin/env bats
# What every tool shares (src/cli.h): --help and --version print to standard output and
# fail, saying so, when it cannot be written; library errors are "TOOL: message".

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    command -v tfm-train > /dev/null || skip "the tools are not built yet"
}

TOOLS="tfm-avg tfm-batch tfm-cat tfm-decode tfm-score tfm-tokenize tfm-train"

@test "--help and --version: usage first, then the help; the name and version" {
    for t in $TOOLS; do
        run "$t" --help
        assert_success
        assert_line --index 0 --partial "usage: $t"
        run "$t" --version
        assert_success
        assert_output --regexp "^$t [0-9]+\.[0-9]+\.[0-9]+$"
    done
}

@test "--help and --version into a full device: exit 1 with a write error, never a silent 0" {
    [ -w /dev/full ] || skip "no /dev/full"
    for t in $TOOLS; do
        for opt in --help --version; do
            run bash -c "$t $opt > /dev/full"
            [ "$status" -eq 1 ] || { echo "$t $opt exited $status"; false; }
            assert_output --partial "$t: write error"
        done
    done
}

@test "getopt's own messages name the tool as the tools' do, not the path it was run by" {
    for t in $TOOLS; do
        sub=; [ "$t" != tfm-tokenize ] || sub=encode
        exe=$(command -v "$t")
        run "$exe" $sub -Z
        assert_failure 2
        assert_line --index 0 "$t: invalid option -- 'Z'"
        assert_line --index 1 --partial "usage: $t"
        run "$exe" $sub --no-such-option
        assert_failure 2
        assert_line --index 0 "$t: unrecognized option '--no-such-option'"
        run "$exe" $sub --help=x
        assert_failure 2
        assert_line --index 0 "$t: option '--help' doesn't allow an argument"
    done
    run "$(command -v tfm-batch)" --tokens
    assert_failure 2
    assert_line --index 0 "tfm-batch: option '--tokens' requires an argument"
    run "$(command -v tfm-batch)" -t
    assert_failure 2
    assert_line --index 0 "tfm-batch: option requires an argument -- 't'"
}

@test "a failure the library reports is one line: the tool's name, then the message" {
    for t in tfm-cat tfm-batch tfm-decode; do
        run "$t" $([ "$t" = tfm-decode ] && echo "-m /nonexistent/model.tfm") /nonexistent/x.tfm
        assert_failure
        assert_equal "${#lines[@]}" 1
        assert_output --regexp "^$t: .*/nonexistent/"
    done
}

@test "a stream that cannot be read says why, not that its magic is bad" {
    mkdir "$BATS_TEST_TMPDIR/dir.tfm"
    for t in tfm-cat tfm-batch tfm-avg; do
        run "$t" "$BATS_TEST_TMPDIR/dir.tfm" < /dev/null
        assert_failure
        refute_output --partial "magic"
    done
    run tfm-cat "$BATS_TEST_TMPDIR/dir.tfm"
    assert_output "tfm-cat: $BATS_TEST_TMPDIR/dir.tfm: at byte 0: Is a directory"
    run tfm-decode -m "$BATS_TEST_TMPDIR/dir.tfm" < /dev/null
    assert_failure 1
    assert_output --partial "$BATS_TEST_TMPDIR/dir.tfm: at byte 0: Is a directory"
}

@test "an empty output path is refused before any work, naming the flag" {
    for cmd in "tfm-avg -o '' /nonexistent" "tfm-batch -o '' /nonexistent" \
               "tfm-decode -m /nonexistent -o '' /nonexistent" \
               "tfm-decode -m /nonexistent --attention '' -o x /nonexistent" \
               "tfm-tokenize encode -m /nonexistent -o '' /nonexistent" \
               "tfm-tokenize train -m '' /nonexistent"; do
        run bash -c "$cmd"
        [ "$status" -eq 2 ] || { echo "$cmd: exit $status"; false; }
        assert_line --index 0 --regexp "^tfm-[a-z]+: --(output|attention|model): an empty path$"
    done
}

@test "the tools that write files catch SIGINT, SIGTERM and SIGHUP (to remove their temporaries)" {
    [ -r /proc/self/status ] || skip "no /proc"
    env --default-signal=INT true 2> /dev/null || skip "env has no --default-signal"
    T="$BATS_TEST_TMPDIR"
    mkfifo "$T/in"
    # each blocks opening its input, a FIFO no one writes, with its outputs not yet begun
    for cmd in "tfm-avg -o $T/o.tfm $T/in" "tfm-batch -q -o $T/o.tfm $T/in" \
               "tfm-decode -q -m $T/in -o $T/o.txt" \
               "tfm-tokenize encode -q -m $T/in -o $T/o.tfm"; do
        env --default-signal=INT,TERM,HUP $cmd 3>&- &
        p=$!
        caught=0
        for _ in $(seq 50); do
            cgt=$(awk '/^SigCgt:/ { print $2 }' "/proc/$p/status" 2> /dev/null)
            (( (0x${cgt:-0} & 0x4003) == 0x4003 )) && { caught=1; break; }     # HUP INT TERM
            sleep 0.1
        done
        kill -TERM "$p"
        st=0
        wait "$p" || st=$?
        [ "$caught" = 1 ] || { echo "$cmd: SigCgt ${cgt:-?}"; false; }
        [ "$st" -eq 143 ] || { echo "$cmd: exit $st after SIGTERM"; false; }
    done
}
