#!/usr/bin/env bats
# The tools on a GPU against the CPU: training, resuming, decoding, two ranks, two
# processes, bf16.  The checks themselves are tests/gpu/tools.sh (plain bash, for GPU machines
# without bats); this file runs it once and reports each of its TAP lines as a test.  The
# device rule is tools.sh's: with a GPU present (nvidia-smi -L lists one, a /dev/nvidiaN
# exists, or nvidia-smi is installed but fails) every check runs on cuda or fails; only
# without one through sim, where the results must be the CPU's bit for bit.  The last
# tests put stand-ins for nvidia-smi on PATH to show that rule failing where it must.

setup_file() {
    bash "$TFM_ROOT/tests/gpu/tools.sh" > "$BATS_FILE_TMPDIR/tools.tap" 2> "$BATS_FILE_TMPDIR/tools.err"
    echo $? > "$BATS_FILE_TMPDIR/tools.rc"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    TAP="$BATS_FILE_TMPDIR/tools.tap"
}

# The result of check N of tools.sh: passes on "ok N", skips on "ok N ... # skip", fails
# on anything else; prints the check's lines (shown when it fails).
tools_check() {
    local line
    line=$(grep -E "^(not )?ok $1 - " "$TAP")
    awk -v n="$1" '$0 ~ "^(not )?ok " n " - " { show = 1; print; next }
                   /^(not )?ok / { show = 0 } show' "$TAP"
    [ -n "$line" ] || { echo "no result for check $1 in:"; cat "$TAP" "$BATS_FILE_TMPDIR/tools.err"; return 1; }
    case $line in
        "ok $1 - "*"# skip "*) skip "${line#*# skip }" ;;
        "ok $1 - "*) return 0 ;;
        *) return 1 ;;
    esac
}

@test "gpu tools: the plan, the device by the rule, the exit status" {
    cat "$TAP"
    assert_equal "$(grep -c '^1\.\.6$' "$TAP")" 1
    # no nvidia-smi and no /dev/nvidiaN: sim; else tools.sh's rule (the stand-ins below)
    if ! command -v nvidia-smi > /dev/null && ! ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
        grep -q '^# device: sim ' "$TAP"
    fi
    # exit status 0 exactly when no check failed
    if grep -q '^not ok' "$TAP"; then
        [ "$(cat "$BATS_FILE_TMPDIR/tools.rc")" != 0 ]
    else
        assert_equal "$(cat "$BATS_FILE_TMPDIR/tools.rc")" 0
    fi
}

@test "gpu tools: 40 updates follow the CPU's" {
    tools_check 1
}

@test "gpu tools: 20 updates and 20 resumed equal 40, bit for bit" {
    tools_check 2
}

@test "gpu tools: decoding gives the CPU's translations" {
    tools_check 3
}

@test "gpu tools: two ranks in one process follow the CPU's two ranks" {
    tools_check 4
}

@test "gpu tools: two processes, one device each, follow the CPU's two ranks" {
    tools_check 5
}

@test "gpu tools: bf16: 40 updates follow the CPU's emulation (and, on CUDA only, auto is bf16)" {
    tools_check 6
}

# Stand-ins for nvidia-smi on a machine without a GPU: tools.sh must take cuda and fail.
no_gpu_here() {
    if command -v nvidia-smi > /dev/null || ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
        skip "a GPU (or its driver) is here: the checks above run on it"
    fi
}

@test "gpu tools: a GPU that nvidia-smi lists but the tools cannot use fails every check" {
    # a stand-in nvidia-smi listing two: no fallback to sim, no "fewer than 2 GPUs"
    no_gpu_here
    mkdir -p "$BATS_TEST_TMPDIR/fake"
    printf '#!/bin/sh\necho "GPU 0: Stand-in (UUID: GPU-0)"\necho "GPU 1: Stand-in (UUID: GPU-1)"\n' \
        > "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    chmod +x "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    PATH="$BATS_TEST_TMPDIR/fake:$PATH" run bash "$TFM_ROOT/tests/gpu/tools.sh"
    echo "$output"
    assert_failure
    assert_line --regexp '^# device: cuda \(2 GPU'
    assert_line '1..6'
    for n in 1 2 3 4 5 6; do
        assert_line --regexp "^not ok $n - tools on cuda: "
    done
    refute_line --partial '# skip'
}

@test "gpu tools: nvidia-smi installed but failing (a broken driver) is a GPU: the checks fail" {
    no_gpu_here
    mkdir -p "$BATS_TEST_TMPDIR/fake"
    printf '#!/bin/sh\necho "NVIDIA-SMI has failed: no driver" >&2\nexit 9\n' \
        > "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    chmod +x "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    PATH="$BATS_TEST_TMPDIR/fake:$PATH" run bash "$TFM_ROOT/tests/gpu/tools.sh"
    echo "$output"
    assert_failure
    assert_line --regexp '^# device: cuda \(0 GPU.*nvidia-smi: failed: NVIDIA-SMI has failed'
    for n in 1 2 3; do
        assert_line --regexp "^not ok $n - tools on cuda: "
    done
    assert_line --regexp '^ok 4 - .* # skip fewer than 2 GPUs \(0 listed, 0 usable\)$'
    assert_line --regexp '^ok 5 - .* # skip fewer than 2 GPUs'
    assert_line --regexp "^not ok 6 - tools on cuda: "
}
