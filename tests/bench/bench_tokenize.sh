#!/usr/bin/env bash
# bench_tokenize.sh: tfm-tokenize encode against spm_encode --output_format=id, the same
# model and the same input: the onmt-toy-ende training text (10k English + 10k German
# lines) repeated to 100k lines.  Prints the best of TFM_BENCH_RUNS runs (3) of each, in
# seconds, and the speed of tfm-tokenize relative to spm_encode (above 1: faster).
# Not a test: nothing fails on speed.
set -eu
TFM_ROOT=${TFM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
runs=${TFM_BENCH_RUNS:-3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-tokenize.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
command -v spm_encode > /dev/null || { echo "   spm_encode not found: skipped"; exit 0; }

D="$TFM_ROOT/data/onmt-toy-ende"
for _ in 1 2 3 4 5; do cat "$D/src-train.txt" "$D/tgt-train.txt"; done > "$tmp/in.txt"
tfm-tokenize train -q -m "$tmp/m.model" --vocab 8000 --coverage 1 "$D/src-train.txt" "$D/tgt-train.txt"

# best wall time of $runs runs of "$@" (stdout to /dev/null), in seconds
best() {
    local b="" t0 t1 t
    for _ in $(seq "$runs"); do
        t0=$(date +%s.%N)
        "$@" > /dev/null
        t1=$(date +%s.%N)
        t=$(echo "$t1 - $t0" | bc -l)
        if [ -z "$b" ] || [ "$(echo "$t < $b" | bc -l)" = 1 ]; then b=$t; fi
    done
    printf '%.3f' "$b"
}

spm=$(best spm_encode --model="$tmp/m.model" --output_format=id --input="$tmp/in.txt")
t1=$(best tfm-tokenize encode -q -m "$tmp/m.model" "$tmp/in.txt")
t2=$(best tfm-tokenize encode -q -m "$tmp/m.model" --threads 2 "$tmp/in.txt")
lines=$(wc -l < "$tmp/in.txt")
mb=$(echo "scale=1; $(stat -c %s "$tmp/in.txt") / 1000000" | bc -l)
echo "   input: $lines lines, $mb MB; model: bpe, 8000 pieces; best of $runs; $(nproc) cores"
printf '   %-36s %7s s\n' "spm_encode --output_format=id" "$spm"
printf '   %-36s %7s s   %5.2fx spm_encode\n' "tfm-tokenize encode --threads 1" "$t1" \
    "$(echo "$spm / $t1" | bc -l)"
printf '   %-36s %7s s   %5.2fx spm_encode   %5.2fx --threads 1\n' \
    "tfm-tokenize encode --threads 2" "$t2" "$(echo "$spm / $t2" | bc -l)" \
    "$(echo "$t1 / $t2" | bc -l)"
