#!/usr/bin/env bash
# bench_decode: tfm-decode throughput (sentences/s, target tokens/s) with beam 4 (alpha 0.6,
# max length source + 50) on sentences of newstest2013 (EN), for the tiny and base configs,
# each model trained for one step, against the PyTorch reference decoder
# tests/bench/torch_decode.py (same checkpoint, same input, same search rules, same thread
# count, float32), run interleaved in the same run.  An untrained model emits (nearly)
# max-length outputs: this measures the decoder at full length, not translation; compare
# target tokens/s.  Times: tfm's is the whole process; PyTorch's excludes Python and torch
# start-up (it covers checkpoint load, input read and search).
#   TFM_BENCH_THREADS (nproc)  TFM_BENCH_DECODE_TINY (200)  TFM_BENCH_DECODE_BASE (20)
#   TFM_BENCH_DECODE_ROUNDS (1; best of N rounds, each tfm then PyTorch)
set -u
TFM_ROOT=${TFM_ROOT:-$PWD}
threads=${TFM_BENCH_THREADS:-$(nproc)}
rounds=${TFM_BENCH_DECODE_ROUNDS:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-decode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$(ls "$TFM_ROOT"/data/newstest2013/*en* 2>/dev/null | head -n 1)
if [ -z "$src" ] || ! command -v tfm-batch > /dev/null || ! command -v tfm-train > /dev/null; then
    echo "   decode: skipped (needs data/newstest2013, tfm-batch and tfm-train)"
    exit 0
fi
# PyTorch as docs/ENVIRONMENT advises: Debian's torch, OpenMP OpenBLAS (pthread fights torch)
py=/usr/bin/python3
torch_ok=0
"$py" -c 'import torch' 2> /dev/null && torch_ok=1
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
. "$TFM_ROOT/tests/bench/blas_env.sh"
cat_src() { case "$src" in *.gz) zcat "$src" ;; *) cat "$src" ;; esac; }
cat_src | head -n 3000 > "$tmp/train.txt"
tfm-tokenize train -q -m "$tmp/spm.model" --vocab 8000 "$tmp/train.txt" || exit 1
tfm-tokenize encode -m "$tmp/spm.model" --eos < "$tmp/train.txt" > "$tmp/train.tfm"
tfm-batch --tokens 2000 "$tmp/train.tfm" "$tmp/train.tfm" > "$tmp/batches.tfm" 2> /dev/null || exit 1
echo "   decode: untrained models (1 step) give max-length outputs; $threads threads;" \
    "load before: $(uptime | sed 's/.*load average: //') (shared machine: numbers are noisy)"
for cfg in tiny base; do
    conf="$TFM_ROOT/configs/$cfg.conf"
    [ -e "$conf" ] || { echo "   decode $cfg: skipped ($conf missing)"; continue; }
    if [ $cfg = tiny ]; then n=${TFM_BENCH_DECODE_TINY:-200}; else n=${TFM_BENCH_DECODE_BASE:-20}; fi
    [ "$n" -gt 0 ] 2> /dev/null || continue
    head -n "$n" "$tmp/train.txt" > "$tmp/test.txt"
    tfm-tokenize encode -m "$tmp/spm.model" < "$tmp/test.txt" > "$tmp/test.tfm"
    tfm-train -q -c "$conf" --set max_len=256 -o "$tmp/$cfg" --max-steps 1 "$tmp/batches.tfm" || exit 1
    best_t= best_p= tok_t= tok_p=
    for ((r = 0; r < rounds; r++)); do
        start=$(date +%s.%N)
        tfm-decode -q -m "$tmp/$cfg/last.tfm" --beam 4 --alpha 0.6 --max-len-b 50 \
            --threads "$threads" "$tmp/test.tfm" > "$tmp/$cfg.hyp" || exit 1
        end=$(date +%s.%N)
        d=$(awk -v s="$start" -v e="$end" 'BEGIN { print e - s }')
        best_t=$(awk -v a="${best_t:-1e30}" -v b="$d" 'BEGIN { print (b < a ? b : a) }')
        tok_t=$(tfm-cat --values "$tmp/$cfg.hyp" |
            awk '/^record .* hyp.index/ { exit } /^record .* tokens.ids/ { on = 1; next }
                 on && /^\t/ { n += NF } END { print n + 0 }')
        [ $torch_ok = 1 ] || continue
        out=$(LD_LIBRARY_PATH="$omp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$py" \
            "$TFM_ROOT/tests/bench/torch_decode.py" "$tmp/$cfg/last.tfm" "$tmp/test.tfm" \
            "$threads" 4 0.6 50) || exit 1
        d=$(echo "$out" | sed -n 's/.*seconds=\([0-9.]*\).*/\1/p')
        tok_p=$(echo "$out" | sed -n 's/.*tokens=\([0-9]*\).*/\1/p')
        best_p=$(awk -v a="${best_p:-1e30}" -v b="$d" 'BEGIN { print (b < a ? b : a) }')
    done
    awk -v d="$best_t" -v n="$n" -v t="$tok_t" -v c="$cfg" 'BEGIN {
        printf "   decode %s beam 4, tfm:     %.2f sentences/s, %.0f target tokens/s (%d sentences, %d tokens, %.1f s)\n", c, n / d, t / d, n, t, d }'
    if [ $torch_ok = 1 ]; then
        awk -v d="$best_p" -v n="$n" -v t="$tok_p" -v c="$cfg" -v dt="$best_t" -v tt="$tok_t" 'BEGIN {
            printf "   decode %s beam 4, PyTorch: %.2f sentences/s, %.0f target tokens/s (%d sentences, %d tokens, %.1f s)\n", c, n / d, t / d, n, t, d
            printf "   decode %s: ratio tfm/PyTorch: %.2fx target tokens/s, %.2fx sentences/s\n", c, (tt / dt) / (t / d), d / dt }'
    else
        echo "   decode $cfg: ratio to PyTorch: n/a (no torch in $py)"
    fi
done
echo "   decode: load after: $(uptime | sed 's/.*load average: //')"
