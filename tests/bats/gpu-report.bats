#!/usr/bin/env bats
# make gpu-report (tests/gpu/report.sh): its reading of each stage's output into rows, on
# recorded outputs (tests/gpu/samples/), and whole runs here: without a GPU every GPU row
# is "not run: no GPU"; with a GPU listed but unusable (a stand-in nvidia-smi on a machine
# without a driver) every GPU row fails, none passes or is quietly skipped; stages run as
# separate commands add up to one report; a stage without time left says how to run it.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    . "$TFM_ROOT/tests/gpu/report-lib.sh"
    S="$TFM_ROOT/tests/gpu/samples"
}

# A stand-in nvidia-smi in $BATS_TEST_TMPDIR/fake that lists one H100 (and nothing else of
# NVIDIA's): the test is skipped on a machine with NVIDIA software, which would not let the
# stand-in be alone.
fake_gpu() {
    if command -v nvidia-smi > /dev/null || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
        skip "this machine has NVIDIA software: the stand-in would not be alone"
    fi
    mkdir -p "$BATS_TEST_TMPDIR/fake"
    printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)"\nexit 0\n' \
        > "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    chmod +x "$BATS_TEST_TMPDIR/fake/nvidia-smi"
}

@test "TAP logs: counts, the first failure, skips, time-outs, exits" {
    run tap_counts "$S/ops-gpu.tap"
    assert_output "5 1 0"
    run tap_row "ops" "$S/ops-gpu.tap" 1
    assert_output "| ops | fail | 5 passed, 1 failed, 0 skipped; first: cuda: attention forward, dk 320, rows form, against the CPU |"
    run tap_row "tools" "$S/tools-ok.tap" 0
    assert_output "| tools | pass | 3 passed, 0 failed, 2 skipped |"
    run tap_row "tools" "$S/tools-ok.tap" 124
    assert_output "| tools | fail | timed out (3 passed, 0 failed, 2 skipped) |"
    run tap_row "tools" "$S/tools-ok.tap" 2
    assert_output "| tools | fail | 3 passed, 0 failed, 2 skipped, but exit 2 |"
    # with a GPU present a skip is a failure (strict); without, all skipped is "not run"
    run tap_row "ops" "$S/ops-nogpu.tap" 0 strict
    assert_output "| ops | fail | 2 passed, 0 failed, 2 skipped with a GPU present: the CUDA backend: no NVIDIA driver (libcuda.so.1 not found) |"
    run tap_row "ops" "$S/tools-ok.tap" 0 strict
    assert_output --partial "| ops | fail | 3 passed, 0 failed, 2 skipped with a GPU present: 1 GPU listed |"
    # at bf16 test_gpu_ops skips its model-level tests by design: not a failure when strict
    { printf 'ok 1 - a\nok 2 - b # SKIP TFM_GPU_OPS_PRECISION=bf16: op tests only\n'
      printf 'ok 3 - c # SKIP TFM_GPU_OPS_QUICK: small shapes only\n'; } > "$BATS_TEST_TMPDIR/b.tap"
    run tap_row "ops bf16" "$BATS_TEST_TMPDIR/b.tap" 0 strict
    assert_output "| ops bf16 | pass | 1 passed, 0 failed, 2 skipped |"
    # so are the paper's shapes where they run apart, and the tests a run of some leaves out
    { printf "ok 1 - a\nok 2 - b # SKIP TFM_GPU_OPS_PAPER=0: the paper's shapes run apart\n"
      printf 'ok 3 - c # SKIP not selected by TFM_GPU_OPS_ONLY\n'; } > "$BATS_TEST_TMPDIR/p.tap"
    run tap_row "paper" "$BATS_TEST_TMPDIR/p.tap" 0 strict
    assert_output "| paper | pass | 1 passed, 0 failed, 2 skipped |"
    printf 'ok 4 - d # SKIP the CUDA backend: no GPU\n' >> "$BATS_TEST_TMPDIR/b.tap"
    run tap_row "ops bf16" "$BATS_TEST_TMPDIR/b.tap" 0 strict
    assert_output "| ops bf16 | fail | 1 passed, 0 failed, 3 skipped with a GPU present: the CUDA backend: no GPU |"
    printf 'ok 1 - a # SKIP no GPU\nok 2 - b # SKIP no GPU\n' > "$BATS_TEST_TMPDIR/s.tap"
    run tap_row "x" "$BATS_TEST_TMPDIR/s.tap" 0
    assert_output "| x | not run | 0 passed, 0 failed, 2 skipped: no GPU |"
    : > "$BATS_TEST_TMPDIR/empty.tap"
    run tap_row "x" "$BATS_TEST_TMPDIR/empty.tap" 139
    assert_output "| x | fail | no test result (exit 139) |"
}

@test "sanitizer logs: a clean memcheck passes, a race fails with its summary" {
    run sanitizer_row "memcheck" "$S/memcheck-ok.txt" 0
    assert_output "| memcheck | pass | ERROR SUMMARY: 0 errors |"
    run sanitizer_row "racecheck" "$S/racecheck-hazard.txt" 1
    assert_output "| racecheck | fail | RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings) (exit 1) |"
    run sanitizer_row "memcheck" "$S/torch-compile-timeout.txt" 124
    assert_output "| memcheck | fail | timed out |"
    # a clean summary over tests that skipped (no usable GPU) watched no kernel: a failure
    { printf 'ok 1 - a\nok 2 - b # SKIP TFM_GPU_OPS_QUICK: small shapes only\n'
      printf 'ok 3 - c # SKIP the CUDA backend: no GPU\n'; cat "$S/memcheck-ok.txt"; } \
        > "$BATS_TEST_TMPDIR/m.txt"
    run sanitizer_row "memcheck" "$BATS_TEST_TMPDIR/m.txt" 0
    assert_output "| memcheck | fail | tests skipped: the CUDA backend: no GPU (ERROR SUMMARY: 0 errors) |"
    { printf 'ok 1 - a\nok 2 - b # SKIP TFM_GPU_OPS_QUICK: small shapes only\n'
      cat "$S/memcheck-ok.txt"; } > "$BATS_TEST_TMPDIR/m.txt"
    run sanitizer_row "memcheck" "$BATS_TEST_TMPDIR/m.txt" 0
    assert_output "| memcheck | pass | ERROR SUMMARY: 0 errors |"
}

@test "speeds: figures, ratios to PyTorch, a missing reference, a failed benchmark" {
    run kv "$S/train-base.txt" tokens_per_s
    assert_output "41234.5"
    run kv "$S/train-base.txt" sgemm_gflops
    assert_output "51234.9"
    run kv "$S/torch-compile-timeout.txt" tokens_per_s
    assert_output ""
    run ratio 41234.5 195012.3
    assert_output "0.21"
    run ratio 1 ""
    [ "$output" = "-" ]
    run speed_row "train base" 41234.5 "$(kv "$S/torch-eager.txt" tokens_per_s)" \
        "$(kv "$S/torch-compile-timeout.txt" tokens_per_s)" "18.4 TFLOP/s"
    assert_output "| train base | 41234.5 tok/s | 0.21x PyTorch eager (195012.3), -x torch.compile (-); 18.4 TFLOP/s |"
    run speed_row "train big" "" 1 1 "train_step: out of memory"
    assert_output "| train big | fail | train_step: out of memory |"
    run decode_tps "$S/decode-tfm.txt"
    assert_output "28878.7"
    run decode_tps "$S/decode-torch.txt"
    assert_output "15995.2"
}

@test "a failed build: the compiler's or linker's message, not a command compiling error.c" {
    run build_error "$S/build-nvcc-error.txt"
    assert_output 'kernels/cuda_ops.cu(41): error: identifier "undefined_name" is undefined'
    run build_error "$S/build-link-error.txt"
    assert_output "/usr/bin/ld: cannot find -lnccl: No such file or directory"
    printf '%s\n' 'cc -c -o build/src/error.o src/error.c' 'make: *** [Makefile:9: all] Error 2' \
        '(exit 2, 1 s)' > "$BATS_TEST_TMPDIR/make.txt"
    run build_error "$BATS_TEST_TMPDIR/make.txt"
    assert_output "make: *** [Makefile:9: all] Error 2"
    printf '%s\n' '$ make -j16 all  (limit 240 s)' 'cc -c -o build/src/error.o src/error.c' \
        'Killed' '(exit 137, 3 s)' > "$BATS_TEST_TMPDIR/killed.txt"
    run build_error "$BATS_TEST_TMPDIR/killed.txt"
    assert_output "Killed"
    # the build stage's row, with a stand-in make that fails as a kernel's compilation does
    mkdir -p "$BATS_TEST_TMPDIR/fake"
    printf '#!/bin/sh\ncat "%s"\nexit 2\n' "$S/build-nvcc-error.txt" > "$BATS_TEST_TMPDIR/fake/make"
    chmod +x "$BATS_TEST_TMPDIR/fake/make"
    PATH="$BATS_TEST_TMPDIR/fake:$PATH" GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_GPUS=0 \
        run "$TFM_ROOT/tests/gpu/report.sh" build
    assert_failure 1                  # a row failed: the report is printed, and says which
    assert_output --partial '| build (sm_90) | fail | exit 2: kernels/cuda_ops.cu(41): error: identifier "undefined_name" is undefined |'
}

@test "a whole run without a GPU: every GPU row not run, a log a stage, quickly" {
    GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 GPU_REPORT_GPUS=0 \
        run "$TFM_ROOT/tests/gpu/report.sh"
    assert_success
    assert_output --partial "| GPU | not run | no GPU"
    for r in "test_gpu_ops (small and big shapes)" "test_gpu_ops bf16 (small and big shapes)" \
        "test_gpu_ops paper shapes" "test_gpu_ops bf16 paper shapes" \
        "compute-sanitizer memcheck" "compute-sanitizer racecheck" \
        "compute-sanitizer synccheck" "compute-sanitizer initcheck" \
        "compute-sanitizer memcheck bf16" \
        "tools on the GPU (tools.sh)" "train base 10240+10240 (tfm fp32)" \
        "train big 10240+10240 (tfm fp32)" "train base 10240+10240 (tfm bf16)" \
        "train big 10240+10240 (tfm bf16)" \
        "train big 10240+10240 (tfm bf16, TFM_CUDA_ATTN=flash)" "decode base beam 4 (tfm)"; do
        assert_output --partial "| $r | not run | no GPU |"
    done
    refute_output --partial "| pass |"
    assert_output --partial "| - | (no command run) | | | | |"
    [ -s "$BATS_TEST_TMPDIR/r/report.md" ]
    # report.md, system.log, a log for each of the 7 stages, parts/
    [ "$(ls "$BATS_TEST_TMPDIR/r" | wc -l)" -eq 10 ]
}

@test "stages run one command at a time add up to one report; a bad stage is a usage error" {
    export GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 GPU_REPORT_GPUS=0
    run "$TFM_ROOT/tests/gpu/report.sh" ops
    assert_success
    assert_output --partial "| test_gpu_ops (small and big shapes) | not run | no GPU |"
    refute_output --partial "compute-sanitizer"
    run "$TFM_ROOT/tests/gpu/report.sh" sanitizer decode
    assert_success
    assert_output --partial "| test_gpu_ops (small and big shapes) | not run | no GPU |"
    assert_output --partial "| compute-sanitizer memcheck | not run | no GPU |"
    assert_output --partial "| decode base beam 4 (tfm) | not run | no GPU |"
    refute_output --partial "tools.sh"
    # a stage run again replaces its rows, not adds to them
    GPU_REPORT_STAGES=ops run "$TFM_ROOT/tests/gpu/report.sh"
    assert_success
    [ "$(grep -c '| test_gpu_ops (small and big shapes) |' "$GPU_REPORT_DIR/report.md")" -eq 1 ]
    assert_output --partial "| compute-sanitizer memcheck | not run | no GPU |"
    run "$TFM_ROOT/tests/gpu/report.sh" opz
    assert_failure 2
    assert_output --partial "opz: not a stage"
    # without GPU_REPORT_BUILD=0 every run builds first (a stand-in make here)
    mkdir -p "$BATS_TEST_TMPDIR/fake"
    printf '#!/bin/sh\necho "make $*" >> "%s/make.log"\n' "$BATS_TEST_TMPDIR" \
        > "$BATS_TEST_TMPDIR/fake/make"
    chmod +x "$BATS_TEST_TMPDIR/fake/make"
    PATH="$BATS_TEST_TMPDIR/fake:$PATH" GPU_REPORT_BUILD=1 BUILD="$BATS_TEST_TMPDIR/b" \
        run "$TFM_ROOT/tests/gpu/report.sh" ops
    assert_failure 1
    grep -q "^make -j[0-9]* BUILD=$BATS_TEST_TMPDIR/b .* all $BATS_TEST_TMPDIR/b/bench/train_step" \
        "$BATS_TEST_TMPDIR/make.log"
    # a build without the CUDA plugin (no nvcc) fails its row
    assert_output --partial "| build (sm_90) | fail | built without CUDA"
    assert_output --partial "| test_gpu_ops (small and big shapes) | not run | no GPU |"
}

@test "a run stopped by a signal still leaves report.md, and stops its command" {
    mkdir -p "$BATS_TEST_TMPDIR/b/tests"
    printf '#!/bin/sh\necho "ok 1 - started"\n: > "%s/started"\nsleep 30\necho "ok 2 - not reached"\n' \
        "$BATS_TEST_TMPDIR" > "$BATS_TEST_TMPDIR/b/tests/test_gpu_ops"
    chmod +x "$BATS_TEST_TMPDIR/b/tests/test_gpu_ops"
    GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 GPU_REPORT_GPUS=1 \
        BUILD="$BATS_TEST_TMPDIR/b" "$TFM_ROOT/tests/gpu/report.sh" ops > /dev/null 2>&1 &
    local pid=$! i
    for i in $(seq 100); do [ -e "$BATS_TEST_TMPDIR/started" ] && break; sleep 0.2; done
    [ -e "$BATS_TEST_TMPDIR/started" ]                # the command runs: now the signal
    local t0=$SECONDS
    kill -TERM "$pid"
    wait "$pid" || [ $? = 143 ]
    [ $((SECONDS - t0)) -lt 10 ]                      # not after the command's 30 s
    run cat "$BATS_TEST_TMPDIR/r/report.md"
    assert_output --partial "| GPU | pass | 1: GPU 1: (GPU_REPORT_GPUS) |"
    assert_output --regexp "\| ops \| \(report.sh stopped by a signal\) \| [0-9:]{8} \|"
    run pgrep -f "$BATS_TEST_TMPDIR/b/tests/test_gpu_ops"
    assert_failure                                    # the command was stopped too
}

@test "no time left: a stage's rows say so and how to run it; PyTorch absent is one row" {
    fake_gpu
    export PATH="$BATS_TEST_TMPDIR/fake:$PATH" GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0
    REPORT_SECONDS=20 run "$TFM_ROOT/tests/gpu/report.sh" ops tools
    assert_success
    assert_output --partial "| test_gpu_ops (small and big shapes) | not run | no time left in this run's 20 s (REPORT_SECONDS): run make gpu-report STAGES=ops |"
    assert_output --partial "| tools on the GPU (tools.sh) | not run | no time left in this run's 20 s (REPORT_SECONDS): run make gpu-report STAGES=tools |"
    PYTHON=/nonexistent/python3 BENCH_STEPS=1 run "$TFM_ROOT/tests/gpu/report.sh" decode
    assert_failure 1
    assert_output --regexp "\| PyTorch \| not run \| /nonexistent/python3: .*: the PyTorch columns say - \|"
    refute_output --partial "torch_decode.py"
    # every command with its exit status, seconds and limit
    assert_output --regexp "\| decode \| tfm-decode --progress --device cuda [^|]*\| [0-9:]{8} \| 1 \| [0-9]+ \| 90 \|"
}

@test "a GPU listed but unusable: every GPU row fails, none passes" {
    fake_gpu
    PATH="$BATS_TEST_TMPDIR/fake:$PATH" GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 \
        BENCH_STEPS=1 run "$TFM_ROOT/tests/gpu/report.sh"
    assert_failure 1
    assert_output --partial "| GPU | pass | 1: GPU 0: NVIDIA H100 80GB HBM3 |"
    assert_output --regexp "\| test_gpu_ops \(small and big shapes\) \| fail \| .* skipped with a GPU present: the CUDA backend: (no NVIDIA driver|built without CUDA)"
    assert_output --regexp "\| test_gpu_ops bf16 \(small and big shapes\) \| fail \| .* skipped with a GPU present: the CUDA backend: (no NVIDIA driver|built without CUDA)"
    assert_output --regexp "\| test_gpu_ops paper shapes \| fail \| .* skipped with a GPU present: the CUDA backend: (no NVIDIA driver|built without CUDA)"
    assert_output --regexp "\| test_gpu_ops bf16 paper shapes \| fail \| .* skipped with a GPU present: the CUDA backend: (no NVIDIA driver|built without CUDA)"
    assert_output --regexp "\| tools on the GPU \(tools.sh\) \| fail \|"
    # no CUDA device, or (in a build without the benchmarks) no train_step: a failure either way
    assert_output --regexp "\| train base 10240\+10240 \(tfm fp32\) \| fail \| (train_step: --device cuda: no CUDA device|[^|]*train_step not built)"
    assert_output --regexp "\| train base 10240\+10240 \(tfm bf16\) \| fail \| (train_step: --device cuda: no CUDA device|[^|]*train_step not built)"
    assert_output --partial "| decode base beam 4 (tfm) | fail |"
    refute_output --regexp "\| (test_gpu_ops|tools|train|decode)[^|]*\| pass \|"
}

@test "no nvidia-smi: the GPUs are counted by the driver's device nodes, not reported absent" {
    if command -v nvidia-smi > /dev/null || [ -e /usr/local/nvidia/bin/nvidia-smi ] ||
        [ -e /usr/bin/nvidia-smi ]; then
        skip "this machine has nvidia-smi"
    fi
    local dev="$BATS_TEST_TMPDIR/dev"
    mkdir -p "$dev"
    : > "$dev/nvidiactl"
    : > "$dev/nvidia-uvm"
    export GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 GPU_REPORT_DEV="$dev"
    run "$TFM_ROOT/tests/gpu/report.sh" build
    assert_success
    assert_output --partial "| GPU | not run | no GPU (nvidia-smi: not found; no device node nvidia0 in $dev) |"
    : > "$dev/nvidia0"
    : > "$dev/nvidia1"
    run "$TFM_ROOT/tests/gpu/report.sh" build
    assert_success
    assert_output --partial "| GPU | pass | 2: GPU 0: device node $dev/nvidia0 (nvidia-smi: not found) |"
    run cat "$GPU_REPORT_DIR/system.log"
    assert_output --partial "nvidia-smi: not found; device nodes: 2"
}
