# Sourced by the benches that run a PyTorch reference.  tfm has OpenBLAS choose its kernels
# again where its own choice is older than the CPU (tfm-train(1), OPENBLAS_CORETYPE); the
# references get the same kernels through OPENBLAS_CORETYPE, so that both sides of a ratio
# run the same sgemm.  A value already set is kept, and then tfm uses it too.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    bench_core=$("${TFM_BENCH_BIN:-${TFM_ROOT:-$PWD}/build/bench}/train_step" --blas-core \
        2> /dev/null) && [ -n "$bench_core" ] && export OPENBLAS_CORETYPE="$bench_core"
    unset bench_core
fi
echo "   OpenBLAS kernels (tfm and PyTorch): ${OPENBLAS_CORETYPE:-OpenBLAS's own choice}"
