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

@test "a failure the library reports is one line: the tool's name, then the message" {
    for t in tfm-cat tfm-batch tfm-decode; do
        run "$t" $([ "$t" = tfm-decode ] && echo "-m /nonexistent/model.tfm") /nonexistent/x.tfm
        assert_failure
        assert_equal "${#lines[@]}" 1
        assert_output --regexp "^$t: .*/nonexistent/"
    done
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
