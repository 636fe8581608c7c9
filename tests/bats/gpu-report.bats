#!/usr/bin/env bats
# make gpu-report (tests/gpu/report.sh): its reading of each stage's output into rows, on
# recorded outputs (tests/gpu/samples/), and whole runs here: without a GPU every GPU row
# is "not run: no GPU"; with a GPU listed but unusable (a stand-in nvidia-smi on a machine
# without a driver) every GPU row fails, none passes or is quietly skipped.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    . "$TFM_ROOT/tests/gpu/report-lib.sh"
    S="$TFM_ROOT/tests/gpu/samples"
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

@test "a whole run without a GPU: every GPU row not run, at most 8 files, quickly" {
    GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 GPU_REPORT_GPUS=0 \
        run "$TFM_ROOT/tests/gpu/report.sh"
    assert_success
    assert_output --partial "| GPU | not run | no GPU"
    for r in "test_gpu_ops (all shapes)" "test_gpu_ops bf16 (all shapes)" \
        "compute-sanitizer memcheck" "compute-sanitizer racecheck" \
        "tools on the GPU (tools.sh)" "train base 10240+10240 (tfm fp32)" \
        "train big 10240+10240 (tfm fp32)" "train base 10240+10240 (tfm bf16)" \
        "train big 10240+10240 (tfm bf16)" \
        "train big 10240+10240 (tfm bf16, TFM_CUDA_ATTN=flash)" "decode base beam 4 (tfm)"; do
        assert_output --partial "| $r | not run | no GPU |"
    done
    refute_output --partial "| pass |"
    [ -s "$BATS_TEST_TMPDIR/r/report.md" ]
    [ "$(ls "$BATS_TEST_TMPDIR/r" | wc -l)" -le 8 ]
}

@test "a GPU listed but unusable: every GPU row fails, none passes" {
    if command -v nvidia-smi > /dev/null || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
        skip "this machine has NVIDIA software: the stand-in would not be alone"
    fi
    mkdir -p "$BATS_TEST_TMPDIR/fake"
    printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)"\nexit 0\n' \
        > "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    chmod +x "$BATS_TEST_TMPDIR/fake/nvidia-smi"
    PATH="$BATS_TEST_TMPDIR/fake:$PATH" GPU_REPORT_DIR="$BATS_TEST_TMPDIR/r" GPU_REPORT_BUILD=0 \
        BENCH_STEPS=1 run "$TFM_ROOT/tests/gpu/report.sh"
    assert_success
    assert_output --partial "| GPU | pass | 1: GPU 0: NVIDIA H100 80GB HBM3 |"
    assert_output --regexp "\| test_gpu_ops \(all shapes\) \| fail \| .* skipped with a GPU present: the CUDA backend: (no NVIDIA driver|built without CUDA)"
    assert_output --regexp "\| test_gpu_ops bf16 \(all shapes\) \| fail \| .* skipped with a GPU present: the CUDA backend: (no NVIDIA driver|built without CUDA)"
    assert_output --regexp "\| tools on the GPU \(tools.sh\) \| fail \|"
    # no CUDA device, or (in a build without the benchmarks) no train_step: a failure either way
    assert_output --regexp "\| train base 10240\+10240 \(tfm fp32\) \| fail \| (train_step: --device cuda: no CUDA device|[^|]*train_step[^|]*No such file)"
    assert_output --regexp "\| train base 10240\+10240 \(tfm bf16\) \| fail \| (train_step: --device cuda: no CUDA device|[^|]*train_step[^|]*No such file)"
    assert_output --partial "| decode base beam 4 (tfm) | fail |"
    refute_output --regexp "\| (test_gpu_ops|tools|train|decode)[^|]*\| pass \|"
}
