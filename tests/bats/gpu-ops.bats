#!/usr/bin/env bats
# tests/unit/test_gpu_ops.c through the stand-in for a GPU (TFM_GPU_OPS_DEVICE=sim, the
# CPU's bits on memory the host cannot touch), at fp32 and at bf16, on its small shapes:
# every comparison, upload and download of that program runs on any machine, so a change
# to it that breaks it is caught here and not first on a GPU.  (On a GPU, make check-gpu
# and make gpu-report run it on the CUDA backend.)

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    OPS="${TFM_BUILD:-$TFM_ROOT/build}/tests/test_gpu_ops"
}

@test "test_gpu_ops on sim at fp32: every op test and the startup check pass" {
    TFM_GPU_OPS_DEVICE=sim TFM_GPU_OPS_QUICK=1 run "$OPS"
    echo "$output"
    assert_success
    # by name, not number: a test added before them moves the numbers
    assert_line --regexp '^ok [0-9]+ - cuda: gemm against the CPU$'
    assert_line --regexp '^ok [0-9]+ - cuda: gemm_bias .* against the CPU$'
    assert_line --regexp '^ok [0-9]+ - cuda: a model.s training batch, Adam step and decoding against the CPU$'
    assert_line --regexp "^ok [0-9]+ - cuda: the step's statistics .* against the CPU$"
    refute_line --partial 'not ok'
}

@test "test_gpu_ops on sim at bf16: every op test passes, and the tools' bf16 check" {
    TFM_GPU_OPS_DEVICE=sim TFM_GPU_OPS_QUICK=1 TFM_GPU_OPS_PRECISION=bf16 run "$OPS"
    echo "$output"
    assert_success
    refute_line --partial 'not ok'
    # the op tests, every "cuda: " test but log_softmax_top (which the sim backend does not
    # have): none skipped
    local n=0 line
    while IFS= read -r line; do
        case "$line" in
        "ok "*" - cuda: log_softmax_top"*) ;;
        "ok "*" - cuda: "*)
            n=$((n + 1))
            [[ "$line" != *"# SKIP"* ]] || fail "an op test skipped: $line" ;;
        esac
    done <<< "$output"
    assert [ "$n" -ge 13 ]
    assert_line --regexp '^ok [0-9]+ - cuda: gemm_bias .* against the CPU$'
    # the model's test runs the tools' bf16 pass (on sim: the same bits as the emulation)
    assert_line --regexp '^ok [0-9]+ - cuda: a model.s .* against the CPU$'
    assert_line "#   sim: at bf16 against the CPU's emulation: within 0, 0, 0, 0"
}

@test "test_gpu_ops: a precision other than fp32 or bf16 is a usage error" {
    TFM_GPU_OPS_DEVICE=sim TFM_GPU_OPS_PRECISION=fp16 run "$OPS"
    assert_equal "$status" 2
    assert_output --partial 'TFM_GPU_OPS_PRECISION=fp16: fp32 or bf16'
}
