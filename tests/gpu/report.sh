#!/usr/bin/env bash
# tests/gpu/report.sh (make gpu-report): every GPU check and benchmark of tfm in one run,
# for the first minutes on a GPU machine.  In order: the machine and its libraries; the
# build (sm_90 only, every core); test_gpu_ops (every op and the startup check, small and
# paper-sized shapes; again with both backends in bf16); compute-sanitizer memcheck and
# racecheck on its quick set (memcheck again at bf16); the tools on the GPU against the
# CPU (tests/gpu/tools.sh); the training step of base and big at 10240+10240 tokens at fp32 and at bf16 (tokens/s,
# TFLOP/s, the time of each op; big at bf16 again with TFM_CUDA_ATTN=flash); decoding base, beam
# 4, about 128 sentences a batch; the same benchmarks in PyTorch on the same GPU (bf16
# autocast + SDPA, eager and torch.compile; a cached beam search).
# Writes $GPU_REPORT_DIR (default gpu-report/): report.md, one table of every check and
# speed, and the raw logs (7 files).  Never stops at a failure; every stage has a time
# limit and the whole stays inside REPORT_SECONDS (530).  Needs neither bats nor mandoc.
# Without a GPU it runs through, every GPU row "not run: no GPU".
# Env: GPU_REPORT_DIR; GPU_REPORT_BUILD=0 uses the build as it is; REPORT_SECONDS;
# PYTHON (python3); CUDA_ARCH (sm_90 only); BENCH_STEPS (10); GPU_REPORT_GPUS=0 takes the
# path of a machine without GPU whatever nvidia-smi says (for tests).
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
. tests/gpu/report-lib.sh

OUT=${GPU_REPORT_DIR:-gpu-report}
mkdir -p "$OUT" || exit 2
rm -f "$OUT"/report.md "$OUT"/*.log
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tfm-gpu-report.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
START=$(date +%s)
LIMIT=${REPORT_SECONDS:-530}
PY=${PYTHON:-python3}
STEPS=${BENCH_STEPS:-10}
BUILD=${BUILD:-build}
export TFM_BIN=$ROOT/bin PATH=$ROOT/bin:$PATH TFM_ROOT=$ROOT
ROWS=$TMP/rows

add() { "$@" >> "$ROWS"; }

# run SECONDS LOG CMD...: CMD with a time limit (never past the report's own), its output
# appended to LOG; sets RC (124: timed out or no time left).
run() {
    local cap=$1 log=$2 left
    shift 2
    left=$((START + LIMIT - $(date +%s)))
    [ "$cap" -lt "$left" ] || cap=$left
    if [ "$cap" -le 0 ]; then
        echo "(not started: the report's ${LIMIT} s are spent)" >> "$log"
        RC=124
        return
    fi
    echo "\$ $*  (limit ${cap} s)" >> "$log"
    timeout -k 5 "$cap" "$@" >> "$log" 2>&1
    RC=$?
    echo "(exit $RC)" >> "$log"
}

# ---- 1. the machine ---------------------------------------------------------------------
SYS=$OUT/system.log
GPU=0
if [ -n "${GPU_REPORT_GPUS:-}" ]; then
    GPU=$GPU_REPORT_GPUS        # tests: 0 forces the machine-without-GPU path
    echo "GPU $GPU_REPORT_GPUS: (GPU_REPORT_GPUS)" > "$TMP/gpus"
elif command -v nvidia-smi > /dev/null && nvidia-smi -L > "$TMP/gpus" 2>&1 && grep -q '^GPU ' "$TMP/gpus"; then
    GPU=$(grep -c '^GPU ' "$TMP/gpus")
fi
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "host: $(uname -srm), $(nproc) CPUs"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    command -v nvidia-smi > /dev/null && nvidia-smi 2>&1
    command -v nvcc > /dev/null && nvcc --version 2>&1 | tail -2
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1
} > "$SYS"
if [ "$GPU" -gt 0 ]; then
    add row "GPU" pass "$GPU: $(grep -m1 '^GPU ' "$TMP/gpus" | sed 's/ (UUID.*//')"
else
    add row "GPU" "not run" "no GPU (nvidia-smi -L lists none)"
fi
nogpu() { add row "$1" "not run" "no GPU"; }

# ---- 2. the build -----------------------------------------------------------------------
BLD=$OUT/build.log
if [ "${GPU_REPORT_BUILD:-1}" != 0 ]; then
    run 150 "$BLD" make -j"$(nproc)" BUILD="$BUILD" \
        CUDA_ARCH="${CUDA_ARCH:--gencode arch=compute_90,code=sm_90}" all "$BUILD"/bench/train_step
    if [ $RC = 0 ]; then add row "build (sm_90)" pass "$(grep -c ' -c ' "$BLD") compilations"
    else add row "build (sm_90)" fail "exit $RC: $(grep -m1 -E 'error|Error' "$BLD")"; fi
else
    echo "(the build as it is: GPU_REPORT_BUILD=0)" > "$BLD"
    add row "build" "not run" "GPU_REPORT_BUILD=0: the build as it is"
fi

# ---- 3. test_gpu_ops ------------------------------------------------------------------------
OPS=$OUT/ops.log
if [ "$GPU" -gt 0 ]; then
    run 120 "$TMP/ops.tap" "$BUILD"/tests/test_gpu_ops
    add tap_row "test_gpu_ops (all shapes)" "$TMP/ops.tap" "$RC" strict
    cat "$TMP/ops.tap" > "$OPS"
    # bf16: both backends in bf16 (the CUDA kernels' bf16 instantiations, the CPU
    # emulating bf16); a skip with a GPU present is a failure, as above
    run 120 "$TMP/ops16.tap" env TFM_GPU_OPS_PRECISION=bf16 "$BUILD"/tests/test_gpu_ops
    add tap_row "test_gpu_ops bf16 (all shapes)" "$TMP/ops16.tap" "$RC" strict
    { echo "== TFM_GPU_OPS_PRECISION=bf16"; cat "$TMP/ops16.tap"; } >> "$OPS"
else
    echo "no GPU: not run" > "$OPS"
    nogpu "test_gpu_ops (all shapes)"
    nogpu "test_gpu_ops bf16 (all shapes)"
fi

# ---- 4. compute-sanitizer on the quick set ------------------------------------------------
SAN=$OUT/sanitizer.log
: > "$SAN"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
# memcheck again with the kernels' bf16 instantiations (2-byte activations, the fp32
# accumulators of the attention's rows form); racecheck once: the bf16 kernels share the
# fp32 ones' shared memory and barriers (their tiles hold fp32 at both precisions).
for tool in memcheck racecheck memcheck-bf16; do
    if [ "$GPU" -eq 0 ]; then
        nogpu "compute-sanitizer $tool"
    elif [ -z "$CS" ]; then
        add row "compute-sanitizer $tool" "not run" "compute-sanitizer not found"
    else
        prec=fp32 cap=75
        [ "$tool" = memcheck-bf16 ] && prec=bf16 cap=60
        run $cap "$TMP/$tool" env TFM_GPU_OPS_QUICK=1 TFM_GPU_OPS_PRECISION=$prec "$CS" \
            --tool "${tool%-bf16}" --error-exitcode 1 "$BUILD"/tests/test_gpu_ops
        add sanitizer_row "compute-sanitizer $tool" "$TMP/$tool" "$RC"
        cat "$TMP/$tool" >> "$SAN"
    fi
done
[ -s "$SAN" ] || echo "not run" > "$SAN"

# ---- 5. the tools on the GPU against the CPU ----------------------------------------------
TOOLS=$OUT/tools.log
if [ "$GPU" -eq 0 ]; then
    echo "no GPU: not run" > "$TOOLS"
    nogpu "tools on the GPU (tools.sh)"
elif [ ! -f tests/gpu/tools.sh ]; then
    echo "tests/gpu/tools.sh missing" > "$TOOLS"
    add row "tools on the GPU (tools.sh)" "not run" "tests/gpu/tools.sh missing"
else
    run 150 "$TMP/tools.tap" bash tests/gpu/tools.sh
    add tap_row "tools on the GPU (tools.sh)" "$TMP/tools.tap" "$RC"
    cat "$TMP/tools.tap" > "$TOOLS"
fi

# ---- 6. benchmarks: tfm and PyTorch on the same GPU -----------------------------------------
BENCH=$OUT/bench.log
: > "$BENCH"
B=320 S=32 T=32     # 10240 source + 10240 target tokens a step
if [ "$GPU" -eq 0 ]; then
    for m in base big; do
        for p in fp32 bf16; do nogpu "train $m 10240+10240 (tfm $p)"; done
    done
    nogpu "train big 10240+10240 (tfm bf16, TFM_CUDA_ATTN=flash)"
    nogpu "decode base beam 4 (tfm)"
else
    for m in base big; do
        run 60 "$TMP/train-$m" "$BUILD"/bench/train_step "configs/$m.conf" $B $S $T "$STEPS" 0 cuda 3 fp32
        run 60 "$TMP/train16-$m" "$BUILD"/bench/train_step "configs/$m.conf" $B $S $T "$STEPS" 0 cuda 3 bf16
        for mode in eager compile; do
            run $([ $mode = compile ] && echo 120 || echo 45) "$TMP/torch-$m-$mode" \
                env TORCH_DEVICE=cuda TORCH_MODE=$mode "$PY" tests/bench/torch_train.py \
                "configs/$m.conf" $B $S $T "$STEPS" "$(nproc)"
        done
        t=$(kv "$TMP/train-$m" tokens_per_s)
        tf=$(kv "$TMP/train-$m" gflops)
        pk=$(kv "$TMP/train-$m" sgemm_gflops)
        split=$(grep '^op ' "$TMP/train-$m" | head -4 | awk '{ sub("share=", "", $5); printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $5 }')
        extra=""
        [ -n "$tf" ] && extra="$(awk -v g="$tf" -v p="$pk" 'BEGIN { printf "%.1f TFLOP/s (fp32 gemm peak here %.1f)", g / 1000, p / 1000 }'); top ops: $split"
        [ -z "$t" ] && extra="$(grep -v '^(exit\|^\$ ' "$TMP/train-$m" | tail -1)"
        add speed_row "train $m 10240+10240 (tfm fp32)" "$t" "$(kv "$TMP/torch-$m-eager" tokens_per_s)" \
            "$(kv "$TMP/torch-$m-compile" tokens_per_s)" "$extra"
        t=$(kv "$TMP/train16-$m" tokens_per_s)
        tf=$(kv "$TMP/train16-$m" gflops)
        extra=""
        [ -n "$tf" ] && extra="$(awk -v g="$tf" 'BEGIN { printf "%.1f TFLOP/s", g / 1000 }'); precision $(kv "$TMP/train16-$m" precision)"
        [ -z "$t" ] && extra="$(grep -v '^(exit\|^\$ ' "$TMP/train16-$m" | tail -1)"
        add speed_row "train $m 10240+10240 (tfm bf16)" "$t" "$(kv "$TMP/torch-$m-eager" tokens_per_s)" \
            "$(kv "$TMP/torch-$m-compile" tokens_per_s)" "$extra"
        if [ "$m" = big ]; then
            # bf16 with the attention's other path (the online-softmax kernels instead of
            # the tensor-core products, kernels/cuda_attn.cu): what the products gain
            run 60 "$TMP/train16f-$m" env TFM_CUDA_ATTN=flash "$BUILD"/bench/train_step \
                "configs/$m.conf" $B $S $T "$STEPS" 0 cuda 3 bf16
            t=$(kv "$TMP/train16f-$m" tokens_per_s)
            extra=""
            [ -z "$t" ] && extra="$(grep -v '^(exit\|^\$ ' "$TMP/train16f-$m" | tail -1)"
            add speed_row "train $m 10240+10240 (tfm bf16, TFM_CUDA_ATTN=flash)" "$t" \
                "$(kv "$TMP/torch-$m-eager" tokens_per_s)" "$(kv "$TMP/torch-$m-compile" tokens_per_s)" \
                "$extra"
            { echo "== train16f-$m"; cat "$TMP/train16f-$m"; } >> "$BENCH"
        fi
        for f in "$TMP/train-$m" "$TMP/train16-$m" "$TMP/torch-$m-eager" "$TMP/torch-$m-compile"; do
            echo "== $(basename "$f")"; cat "$f"
        done >> "$BENCH"
    done
    # decoding: a base model (one update from random) on real sentences, beam 4
    D=$TMP/dec
    mkdir -p "$D"
    zcat data/multi30k-ende/train.en.gz | head -n 3000 > "$D/en.txt"
    zcat data/multi30k-ende/train.de.gz | head -n 3000 > "$D/de.txt"
    zcat data/multi30k-ende/val.en.gz > "$D/test.txt"
    run 90 "$TMP/decode-prep" bash -c "
        tfm-tokenize train -q -m '$D/spm.model' --vocab 8000 '$D/en.txt' '$D/de.txt' &&
        tfm-tokenize encode -q -m '$D/spm.model' --eos -o '$D/en.tfm' '$D/en.txt' &&
        tfm-tokenize encode -q -m '$D/spm.model' --eos -o '$D/de.tfm' '$D/de.txt' &&
        tfm-tokenize encode -q -m '$D/spm.model' -o '$D/test.tfm' '$D/test.txt' &&
        tfm-batch -q --tokens 4096 '$D/en.tfm' '$D/de.tfm' > '$D/b.tfm' &&
        tfm-train -q -c configs/base.conf --max-steps 1 --device cuda -o '$D/ck' '$D/b.tfm'"
    # 46080 positions: 128 sentences of up to 40 tokens, each with 4 beams of source + 50
    run 60 "$TMP/decode-tfm" tfm-decode --progress --device cuda -m "$D/ck/last.tfm" --beam 4 \
        --tokens 46080 -o "$D/hyp.tfm" "$D/test.tfm"
    run 90 "$TMP/decode-torch" env TORCH_DEVICE=cuda TORCH_DECODE_BUDGET=46080 "$PY" \
        tests/bench/torch_decode.py "$D/ck/last.tfm" "$D/test.tfm" "$(nproc)" 4
    t=$(decode_tps "$TMP/decode-tfm")
    tt=$(decode_tps "$TMP/decode-torch")
    if [ -n "$t" ]; then
        add row "decode base beam 4 (tfm)" "$t tok/s" "$(ratio "$t" "$tt")x PyTorch beam search (${tt:--} tok/s); goal 30000"
    else
        add row "decode base beam 4 (tfm)" fail "$(tail -2 "$TMP/decode-tfm" | head -1)"
    fi
    for f in "$TMP/decode-prep" "$TMP/decode-tfm" "$TMP/decode-torch"; do
        echo "== $(basename "$f")"; cat "$f"
    done >> "$BENCH"
fi
[ -s "$BENCH" ] || echo "no GPU: not run" > "$BENCH"

# ---- report.md -------------------------------------------------------------------------------
{
    echo "# tfm GPU report"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, $((($(date +%s) - START))) s."
    echo
    echo "| check | result | detail |"
    echo "|---|---|---|"
    cat "$ROWS"
    echo
    echo "Logs: system.log, build.log, ops.log, sanitizer.log, tools.log, bench.log."
} > "$OUT/report.md"
cat "$OUT/report.md"
