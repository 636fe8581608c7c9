#!/usr/bin/env bash
# tests/gpu/report.sh (make gpu-report): every GPU check and benchmark of tfm, for the first
# minutes on a GPU machine, as stages that can run in one command or in several:
#   build      make for sm_90 on every core (the library, tools, tests, train_step), with
#              what the image lacks of the libraries from GPU_DEPS (.gpu-deps: make
#              gpu-deps, carried) or python3's CUDA wheels (tests/gpu/deps.sh)
#   ops        test_gpu_ops (every op and the startup check, small and the big model's
#              shapes), then again with both backends in bf16
#   paper      test_gpu_ops's "cuda paper" test alone, at fp32 and at bf16: the paper's
#              shapes (25000-token batches, logits of 25000 x 37000, attention over 1024
#              tokens, beam 21), apart from ops so that neither run's time limit costs the
#              other's results
#   sanitizer  compute-sanitizer memcheck, racecheck, synccheck, initcheck on test_gpu_ops's
#              quick set (TFM_GPU_OPS_QUICK=1), and memcheck again at bf16
#   tools      the tools on the GPU against the CPU (tests/gpu/tools.sh)
#   train      the training step of base and big at 10240+10240 tokens, fp32 and bf16
#              (tokens/s, TFLOP/s, each op's share; big at bf16 again with
#              TFM_CUDA_ATTN=flash), beside PyTorch (bf16 autocast + SDPA,
#              eager and torch.compile) when python3 can import torch with CUDA
#   decode     decoding base, beam 4, about 128 sentences a batch, beside PyTorch's cached
#              beam search
#   report.sh [STAGE...]       (make gpu-report STAGES='STAGE...'); no stage: all of them
# Before the first run, on a machine with apt: `make gpu-deps`, and carry .gpu-deps to the
# GPU machine with the tree (the build takes from it what the image lacks).
# Every run records the machine and its libraries (system.log) and, unless
# GPU_REPORT_BUILD=0, runs the build stage first (seconds when the build is up to date), so
# each command works on a fresh machine too.  A run stays inside REPORT_SECONDS (540; every
# command has a time limit), so one command never passes a 10-minute limit: a stage left
# without time says "not run: no time left" in its rows, and names the command that runs
# it.  The rows of every stage run so far into GPU_REPORT_DIR stay there (a stage run again
# replaces its own), so a report run as several commands is one report.md: one table of
# every check and speed, one of every command run (stage, exit status, seconds, limit), and
# the raw logs (system.log and one per stage).  report.md is rewritten after every command,
# so it exists, complete up to the last command, even when a run is killed.  Never stops at
# a failure, but exits 1 after the report when a row of a stage it ran failed (0 when
# every row passed or was not run).  Needs neither bats nor mandoc, nor the network; without PyTorch the PyTorch
# columns say "-" and one row says why.  Without a GPU every GPU row says "not run: no GPU".
# Env: GPU_REPORT_DIR (gpu-report); GPU_REPORT_STAGES (the stages when none is named);
# GPU_REPORT_BUILD=0 skips the build; REPORT_SECONDS; PYTHON (python3); CUDA_ARCH (sm_90
# only); BENCH_STEPS (10); GPU_REPORT_GPUS=0 takes the path of a machine without GPU
# whatever nvidia-smi says (for tests); GPU_REPORT_DEV, the directory of the device nodes
# counted when nvidia-smi is missing or lists nothing (/dev; for tests).
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
. tests/gpu/report-lib.sh

ALL="build ops paper sanitizer tools train decode"
if [ $# -gt 0 ]; then STAGES="$*"; else STAGES=${GPU_REPORT_STAGES:-$ALL}; fi
for s in $STAGES; do
    case " $ALL " in
    *" $s "*) ;;
    *) echo "report.sh: $s: not a stage ($ALL)" >&2; exit 2 ;;
    esac
done
[ -n "$(echo $STAGES)" ] || { echo "report.sh: no stage given ($ALL)" >&2; exit 2; }
# Every run builds first (make: seconds when the build is up to date), unless told not to,
# so that each command also works on a fresh machine, and never tests a stale build.
if [ "${GPU_REPORT_BUILD:-1}" != 0 ]; then
    case " $STAGES " in *" build "*) ;; *) STAGES="build $STAGES" ;; esac
fi

OUT=${GPU_REPORT_DIR:-gpu-report}
PARTS=$OUT/parts                # each stage's rows and runs, kept for later runs
mkdir -p "$OUT" "$PARTS" || exit 2
rm -f "$PARTS"/rows-system "$PARTS"/runs-system "$OUT"/system.log "$OUT"/report.md
for s in $STAGES; do rm -f "$PARTS/rows-$s" "$PARTS/runs-$s" "$OUT/$s.log"; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tfm-gpu-report.XXXXXX") || exit 2
START=$(date +%s)
LIMIT=${REPORT_SECONDS:-540}
PY=${PYTHON:-python3}
STEPS=${BENCH_STEPS:-10}
BUILD=${BUILD:-build}
export TFM_BIN=$ROOT/bin PATH=$ROOT/bin:$PATH TFM_ROOT=$ROOT
# the toolkit where it is usually installed, when it is not on PATH (make finds nvcc there)
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=$PATH:/usr/local/cuda/bin
fi
STAGE=system

# add CMD...: CMD's row into the current stage's rows.
add() { "$@" >> "$PARTS/rows-$STAGE"; }

# report.md from the rows and runs of every stage so far, in stage order.
assemble() {
    local s
    {
        echo "# tfm GPU report"
        echo
        echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs; this run: $STAGES, $(($(date +%s) - START)) s."
        echo
        echo "| check | result | detail |"
        echo "|---|---|---|"
        for s in system $ALL; do [ -f "$PARTS/rows-$s" ] && cat "$PARTS/rows-$s"; done
        echo
        echo "| stage | command | started (UTC) | exit | seconds | limit |"
        echo "|---|---|---|---|---|---|"
        for s in system $ALL; do [ -f "$PARTS/runs-$s" ] && cat "$PARTS/runs-$s"; done
        cat "$PARTS"/runs-* 2>/dev/null | grep -q . || echo "| - | (no command run) | | | | |"
        echo
        echo "Logs: system.log and one per stage ($ALL).log."
    } > "$OUT/report.md.tmp" && mv "$OUT/report.md.tmp" "$OUT/report.md"
}

# A signal (the caller's time limit) still leaves report.md, with what was done; the
# command running then (run: CHILD) is stopped with it.
CHILD=
trap 'rm -rf "$TMP"' EXIT
trap '[ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
printf "| %s | (report.sh stopped by a signal) | %s | - | - | - |\n" "$STAGE" "$(date -u +%H:%M:%S)" >> "$PARTS/runs-$STAGE"; assemble; exit 143' INT TERM HUP

# left: the seconds of REPORT_SECONDS left.
left() { echo $((START + LIMIT - $(date +%s))); }

# run SECONDS LOG CMD...: CMD with a time limit (never past the report's own), its output
# appended to LOG; sets RC (124: timed out or no time left) and records the command, when
# it started, its exit status and time in the runs table; report.md is rewritten after it.
run() {
    local cap=$1 log=$2 l t0 secs what at
    shift 2
    at=$(date -u +%H:%M:%S)
    l=$(left)
    [ "$cap" -lt "$l" ] || cap=$l
    what=$(printf '%s ' "$@" | tr -s ' \n' ' ' |
        sed "s|$TMP/||g; s|$ROOT/||g; s|[^ ]*/compute-sanitizer|compute-sanitizer|; s| *\$||" |
        cut -c1-110)
    if [ "$cap" -le 0 ]; then
        echo "(not started: the report's ${LIMIT} s are spent)" >> "$log"
        RC=124
        printf '| %s | %s | %s | not started | 0 | %s |\n' "$STAGE" "$what" "$at" "$LIMIT" >> "$PARTS/runs-$STAGE"
        return
    fi
    echo "\$ $*  (limit ${cap} s)" >> "$log"
    t0=$(date +%s)
    # in the background, so that a signal's trap runs at once, not after the command
    timeout -k 5 "$cap" "$@" >> "$log" 2>&1 < /dev/null &
    CHILD=$!
    wait "$CHILD"
    RC=$?
    CHILD=
    secs=$(($(date +%s) - t0))
    echo "(exit $RC, $secs s)" >> "$log"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$STAGE" "$(echo "$what" | tr '|' '/')" "$at" "$RC" \
        "$secs" "$cap" >> "$PARTS/runs-$STAGE"
    assemble
}

# skip_rows WHY NAME...: a "not run" row for each check.
skip_rows() {
    local why=$1 n
    shift
    for n in "$@"; do add row "$n" "not run" "$why"; done
}

# time_for STAGE SECONDS NAME...: true when SECONDS are left for the stage; otherwise its
# checks' rows say so and how to run it later.
time_for() {
    local s=$1 need=$2
    shift 2
    [ "$(left)" -ge "$need" ] && return 0
    skip_rows "no time left in this run's ${LIMIT} s (REPORT_SECONDS): run make gpu-report STAGES=$s" "$@"
    return 1
}

# ---- the machine (every run) --------------------------------------------------------------
SYS=$OUT/system.log
# The GPUs: nvidia-smi's list (on PATH, or where a driver install or a container's driver
# mount puts it, often off a non-login shell's PATH); without a usable nvidia-smi, the
# driver's device nodes (/dev/nvidia0 ...; GPU_REPORT_DEV names another directory, for
# tests), so that a machine with GPUs is never reported as without one for want of a tool.
GPU=0
SMI=$(command -v nvidia-smi || ls /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi 2>/dev/null | head -1)
GPU_SEEN= NO_GPU="nvidia-smi -L lists none"
if [ -n "${GPU_REPORT_GPUS:-}" ]; then
    GPU=$GPU_REPORT_GPUS        # tests: 0 forces the machine-without-GPU path
    echo "GPU $GPU_REPORT_GPUS: (GPU_REPORT_GPUS)" > "$TMP/gpus"
    NO_GPU="GPU_REPORT_GPUS=$GPU_REPORT_GPUS"
elif [ -n "$SMI" ] && timeout 30 "$SMI" -L > "$TMP/gpus" 2>&1 && grep -q '^GPU ' "$TMP/gpus"; then
    GPU=$(grep -c '^GPU ' "$TMP/gpus")
else
    GPU_SEEN="nvidia-smi: $([ -n "$SMI" ] && echo "$SMI -L lists none: $(grep -m1 . "$TMP/gpus")" || echo "not found")"
    # shellcheck disable=SC2012
    GPU=$(ls "${GPU_REPORT_DEV:-/dev}" 2>/dev/null | grep -c '^nvidia[0-9][0-9]*$')
    [ "$GPU" -gt 0 ] && echo "GPU 0: device node ${GPU_REPORT_DEV:-/dev}/nvidia0 ($GPU_SEEN)" > "$TMP/gpus"
    NO_GPU="$GPU_SEEN; no device node nvidia0 in ${GPU_REPORT_DEV:-/dev}"
fi
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "host: $(uname -srm), $(nproc) CPUs"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2> /dev/null | head -n 1)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "stages: $STAGES"
    [ -n "$SMI" ] && timeout 20 "$SMI" 2>&1
    [ -n "$GPU_SEEN" ] && echo "$GPU_SEEN; device nodes: $GPU"
    command -v nvcc > /dev/null && nvcc --version 2>&1 | tail -2
} > "$SYS"
if [ "$GPU" -gt 0 ]; then
    add row "GPU" pass "$GPU: $(grep -m1 '^GPU ' "$TMP/gpus" | sed 's/ (UUID.*//')"
else
    add row "GPU" "not run" "no GPU ($NO_GPU)"
fi
assemble

# PyTorch on the GPU, asked once a run (train and decode): TORCH=1 when usable; otherwise
# one row says why, and the PyTorch benchmarks are not started.
TORCH=
torch_ready() {
    if [ -z "$TORCH" ]; then
        local msg
        msg=$(timeout 60 "$PY" -c 'import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1)
        echo "$msg" >> "$SYS"
        if echo "$msg" | grep -q ' gpu True$'; then
            TORCH=1
        else
            TORCH=0
            add row "PyTorch" "not run" "$PY: $(echo "${msg:-no output}" | tail -1): the PyTorch columns say -"
        fi
    fi
    [ "$TORCH" = 1 ]
}

# ---- build ------------------------------------------------------------------------------------
stage_build() {
    local BLD=$OUT/build.log
    if [ "${GPU_REPORT_BUILD:-1}" = 0 ]; then
        echo "(the build as it is: GPU_REPORT_BUILD=0)" > "$BLD"
        add row "build" "not run" "GPU_REPORT_BUILD=0: the build as it is"
        return
    fi
    time_for build 60 "build (sm_90)" || return
    # what the image lacks of OpenBLAS, SentencePiece, zlib (the Debian packages of
    # GPU_DEPS, made here by `make gpu-deps` and carried), NCCL and cuBLAS (python3's CUDA
    # wheels): tests/gpu/deps.sh
    local deps drc
    deps=$(tests/gpu/deps.sh env "${GPU_DEPS:-$ROOT/.gpu-deps}" 2>&1)
    drc=$?
    eval "$(grep '^export ' <<< "$deps")"
    { echo "\$ tests/gpu/deps.sh env ${GPU_DEPS:-$ROOT/.gpu-deps}  (exit $drc)"; echo "$deps"; } >> "$BLD"
    add row "libraries" "$([ $drc = 0 ] && echo pass || echo fail)" \
        "$(grep -m1 '^# deps: ' <<< "$deps" | sed 's/^# deps: //')"
    run 240 "$BLD" make -j"$(nproc)" BUILD="$BUILD" \
        CUDA_ARCH="${CUDA_ARCH:--gencode arch=compute_90,code=sm_90}" all "$BUILD"/bench/train_step
    # a build without nvcc succeeds without the CUDA backend: that is a failure here
    if [ $RC = 124 ]; then
        add row "build (sm_90)" fail "timed out: make gpu-report STAGES=build goes on from where it stopped"
    elif [ $RC != 0 ]; then add row "build (sm_90)" fail "exit $RC: $(build_error "$BLD")"
    elif [ ! -f "$BUILD/libtfm-cuda.so" ]; then
        add row "build (sm_90)" fail "built without CUDA: no nvcc on PATH or in /usr/local/cuda/bin"
    else
        local n
        n=$(grep -c ' -c ' "$BLD")
        add row "build (sm_90)" pass "$([ "$n" = 0 ] && echo "up to date" || echo "$n compilations")"
        # the CPU reference's products: OpenBLAS's kernels as tfm chose them (src/blas.h)
        add row "CPU BLAS kernels" pass "$("$BUILD"/bench/train_step --blas-core 2>&1 | head -n 1)"
    fi
}

# missing PROGRAM NAME...: true (each check's row a failure) when PROGRAM is not built.
missing() {
    local p=$1 n
    shift
    [ -x "$p" ] && return 1
    for n in "$@"; do add row "$n" fail "$p not built (make gpu-report STAGES=build)"; done
    return 0
}

# ---- ops: test_gpu_ops --------------------------------------------------------------------------
stage_ops() {
    local OPS=$OUT/ops.log
    local names=("test_gpu_ops (small and big shapes)" "test_gpu_ops bf16 (small and big shapes)")
    if [ "$GPU" -eq 0 ]; then
        echo "no GPU: not run" > "$OPS"
        skip_rows "no GPU" "${names[@]}"
        return
    fi
    missing "$BUILD/tests/test_gpu_ops" "${names[@]}" && return
    time_for ops 60 "${names[@]}" || return
    # the paper's shapes have a stage of their own (paper)
    run 200 "$TMP/ops.tap" env TFM_GPU_OPS_PAPER=0 "$BUILD"/tests/test_gpu_ops
    add tap_row "${names[0]}" "$TMP/ops.tap" "$RC" strict
    cat "$TMP/ops.tap" > "$OPS"
    # bf16: both backends in bf16 (the CUDA kernels' bf16 instantiations, the CPU
    # emulating bf16); a skip with a GPU present is a failure, as above
    if time_for ops 60 "${names[1]}"; then
        run 200 "$TMP/ops16.tap" env TFM_GPU_OPS_PAPER=0 TFM_GPU_OPS_PRECISION=bf16 \
            "$BUILD"/tests/test_gpu_ops
        add tap_row "${names[1]}" "$TMP/ops16.tap" "$RC" strict
        { echo "== TFM_GPU_OPS_PRECISION=bf16"; cat "$TMP/ops16.tap"; } >> "$OPS"
    fi
}

# ---- paper: test_gpu_ops at the paper's shapes ---------------------------------------------------
# Its "cuda paper" test alone (TFM_GPU_OPS_ONLY: the others skip by design), at fp32, then
# with both backends in bf16; some 12 GB of host memory and up to 16 GB of the GPU's a run.
stage_paper() {
    local PAP=$OUT/paper.log names=("test_gpu_ops paper shapes" "test_gpu_ops bf16 paper shapes")
    local i prec
    if [ "$GPU" -eq 0 ]; then
        echo "no GPU: not run" > "$PAP"
        skip_rows "no GPU" "${names[@]}"
        return
    fi
    missing "$BUILD/tests/test_gpu_ops" "${names[@]}" && return
    : > "$PAP"
    for i in 0 1; do
        prec=fp32
        [ "$i" = 1 ] && prec=bf16
        time_for paper 60 "${names[$i]}" || continue
        run 240 "$TMP/paper-$prec.tap" env TFM_GPU_OPS_ONLY="cuda paper" \
            TFM_GPU_OPS_PRECISION=$prec "$BUILD"/tests/test_gpu_ops
        add tap_row "${names[$i]}" "$TMP/paper-$prec.tap" "$RC" strict
        { echo "== TFM_GPU_OPS_PRECISION=$prec"; cat "$TMP/paper-$prec.tap"; } >> "$PAP"
    done
}

# ---- sanitizer: compute-sanitizer on the quick set ----------------------------------------------
# memcheck (out-of-bounds and misaligned accesses, leaks of device memory), racecheck
# (shared-memory hazards), synccheck (barriers in divergent code, warp-synchronous calls with
# lanes missing from their mask), initcheck (device memory read before it is written); then
# memcheck again with the kernels' bf16 instantiations (2-byte activations).
stage_sanitizer() {
    local SAN=$OUT/sanitizer.log cs tool prec cap
    : > "$SAN"
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
    for tool in memcheck racecheck synccheck initcheck memcheck-bf16; do
        local name="compute-sanitizer $tool"
        [ "$tool" = memcheck-bf16 ] && name="compute-sanitizer memcheck bf16"
        if [ "$GPU" -eq 0 ]; then
            skip_rows "no GPU" "$name"
        elif [ -z "$cs" ]; then
            add row "$name" "not run" "compute-sanitizer not found"
        elif ! missing "$BUILD/tests/test_gpu_ops" "$name" && time_for sanitizer 30 "$name"; then
            prec=fp32 cap=90
            [ "$tool" = memcheck-bf16 ] && prec=bf16 cap=75
            run $cap "$TMP/$tool" env TFM_GPU_OPS_QUICK=1 TFM_GPU_OPS_PRECISION=$prec "$cs" \
                --tool "${tool%-bf16}" --error-exitcode 1 "$BUILD"/tests/test_gpu_ops
            add sanitizer_row "$name" "$TMP/$tool" "$RC"
            { echo "== $name"; cat "$TMP/$tool"; } >> "$SAN"
        fi
    done
    [ -s "$SAN" ] || echo "not run" > "$SAN"
}

# ---- tools: the tools on the GPU against the CPU --------------------------------------------------
stage_tools() {
    local TOOLS=$OUT/tools.log name="tools on the GPU (tools.sh)"
    if [ "$GPU" -eq 0 ]; then
        echo "no GPU: not run" > "$TOOLS"
        skip_rows "no GPU" "$name"
        return
    fi
    time_for tools 60 "$name" || return
    run 240 "$TMP/tools.tap" bash tests/gpu/tools.sh
    add tap_row "$name" "$TMP/tools.tap" "$RC"
    cat "$TMP/tools.tap" > "$TOOLS"
}

# ---- train: the training step, tfm and PyTorch on the same GPU ---------------------------------
stage_train() {
    local BENCH=$OUT/train.log B=320 S=32 T=32 m p mode t tf pk split extra f   # 10240 + 10240 tokens
    local FLASH="train big 10240+10240 (tfm bf16, TFM_CUDA_ATTN=flash)"
    : > "$BENCH"
    if [ "$GPU" -eq 0 ]; then
        for m in base big; do
            for p in fp32 bf16; do skip_rows "no GPU" "train $m 10240+10240 (tfm $p)"; done
        done
        skip_rows "no GPU" "$FLASH"
        echo "no GPU: not run" > "$BENCH"
        return
    fi
    missing "$BUILD/bench/train_step" "train base 10240+10240 (tfm fp32)" \
        "train base 10240+10240 (tfm bf16)" "train big 10240+10240 (tfm fp32)" \
        "train big 10240+10240 (tfm bf16)" "$FLASH" && return
    torch_ready
    for m in base big; do
        if ! time_for train 60 "train $m 10240+10240 (tfm fp32)" "train $m 10240+10240 (tfm bf16)"; then
            continue
        fi
        run 75 "$TMP/train-$m" "$BUILD"/bench/train_step "configs/$m.conf" $B $S $T "$STEPS" 0 cuda 3 fp32
        run 75 "$TMP/train16-$m" "$BUILD"/bench/train_step "configs/$m.conf" $B $S $T "$STEPS" 0 cuda 3 bf16
        : > "$TMP/torch-$m-eager"
        : > "$TMP/torch-$m-compile"
        if [ "$TORCH" = 1 ]; then
            for mode in eager compile; do
                run $([ $mode = compile ] && echo 120 || echo 60) "$TMP/torch-$m-$mode" \
                    env TORCH_DEVICE=cuda TORCH_MODE=$mode "$PY" tests/bench/torch_train.py \
                    "configs/$m.conf" $B $S $T "$STEPS" "$(nproc)"
            done
        fi
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
        for f in "$TMP/train-$m" "$TMP/train16-$m" "$TMP/torch-$m-eager" "$TMP/torch-$m-compile"; do
            echo "== $(basename "$f")"; cat "$f"
        done >> "$BENCH"
        # big at bf16 with the attention's other path (the online-softmax kernels instead
        # of the tensor-core products, kernels/cuda_attn.cu): what the products gain
        if [ "$m" = big ] && time_for train 30 "$FLASH"; then
            run 75 "$TMP/train16f-$m" env TFM_CUDA_ATTN=flash "$BUILD"/bench/train_step \
                "configs/$m.conf" $B $S $T "$STEPS" 0 cuda 3 bf16
            t=$(kv "$TMP/train16f-$m" tokens_per_s)
            extra=""
            [ -z "$t" ] && extra="$(grep -v '^(exit\|^\$ ' "$TMP/train16f-$m" | tail -1)"
            add speed_row "$FLASH" "$t" "$(kv "$TMP/torch-$m-eager" tokens_per_s)" \
                "$(kv "$TMP/torch-$m-compile" tokens_per_s)" "$extra"
            { echo "== train16f-$m"; cat "$TMP/train16f-$m"; } >> "$BENCH"
        fi
        assemble
    done
}

# ---- decode: a base model (one update from random) on real sentences, beam 4 -----------------
stage_decode() {
    local BENCH=$OUT/decode.log D=$TMP/dec name="decode base beam 4 (tfm)" t tt f
    if [ "$GPU" -eq 0 ]; then
        echo "no GPU: not run" > "$BENCH"
        skip_rows "no GPU" "$name"
        return
    fi
    : > "$BENCH"
    torch_ready
    time_for decode 90 "$name" || return
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
    local prep=$RC
    run 90 "$TMP/decode-tfm" tfm-decode --progress --device cuda -m "$D/ck/last.tfm" --beam 4 \
        --tokens 46080 -o "$D/hyp.tfm" "$D/test.tfm"
    : > "$TMP/decode-torch"
    if [ "$TORCH" = 1 ]; then
        run 120 "$TMP/decode-torch" env TORCH_DEVICE=cuda TORCH_DECODE_BUDGET=46080 "$PY" \
            tests/bench/torch_decode.py "$D/ck/last.tfm" "$D/test.tfm" "$(nproc)" 4
    fi
    t=$(decode_tps "$TMP/decode-tfm")
    tt=$(decode_tps "$TMP/decode-torch")
    if [ -n "$t" ]; then
        add row "$name" "$t tok/s" "$(ratio "$t" "$tt")x PyTorch beam search (${tt:--} tok/s); goal 30000"
    else
        [ "$prep" = 0 ] && f=$TMP/decode-tfm || f=$TMP/decode-prep
        add row "$name" fail "$(grep -v '^(exit\|^\$ ' "$f" | tail -1)"
    fi
    for f in "$TMP/decode-prep" "$TMP/decode-tfm" "$TMP/decode-torch"; do
        echo "== $(basename "$f")"; cat "$f"
    done >> "$BENCH"
}

for s in $ALL; do
    case " $STAGES " in
    *" $s "*)
        STAGE=$s
        : > "$PARTS/rows-$s"
        "stage_$s"
        assemble ;;
    esac
    # The plugin this build made, by its path here: the path compiled into the library is
    # the build directory's where it was built, wrong for a build copied from elsewhere.
    if [ "$s" = build ] && [ -f "$BUILD/libtfm-cuda.so" ] && [ -z "${TFM_CUDA_LIB+set}" ]; then
        TFM_CUDA_LIB=$(cd "$BUILD" && pwd)/libtfm-cuda.so
        export TFM_CUDA_LIB
        echo "TFM_CUDA_LIB=$TFM_CUDA_LIB" >> "$SYS"
    fi
done
cat "$OUT/report.md"
# The exit status: 1 when a row of a stage this command ran failed, else 0.  A row not
# run (every GPU row on a machine without a GPU) is no failure: the rows say what ran.
for s in $STAGES; do
    grep -q '^| [^|]* | fail |' "$PARTS/rows-$s" 2> /dev/null && exit 1
done
exit 0
