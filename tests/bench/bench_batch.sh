#!/usr/bin/env bash
# bench_batch.sh: tfm-batch at WMT EN-DE scale: 4.5M synthetic pairs (gen_pairs: lengths
# of mean about 27 tokens and a tail) batched with --tokens 25000.  Prints wall time and
# peak RSS, the bytes of token data tfm-batch must hold (ids and offsets of both sides),
# and the ratio peak RSS / token data, which is the memory model of tfm-batch(1):
#   - inputs as pipes: about 1.05 (the data, plus 16 bytes a pair for the order);
#   - inputs as regular files: the reader memory-maps them, and the pages of the target
#     file, read while the source data is held, count in RSS (clean page cache that the
#     kernel can drop, not memory tfm-batch allocates): about 1.5.
# Reference measured in the same run: tfm-cat reading both inputs (every record read and
# CRC-checked, nothing kept), the floor for a tool that reads the data once.
# TFM_BENCH_PAIRS=N changes the size (the disk needs about 480 bytes a pair).
# Not a test: nothing fails on speed or size.
set -eu
N=${TFM_BENCH_PAIRS:-4500000}
gen=${TFM_BENCH_BIN:-}/gen_pairs
[ -x "$gen" ] || { echo "   gen_pairs not built (make bench builds it): skipped"; exit 0; }
[ -x /usr/bin/time ] || { echo "   /usr/bin/time not found: skipped"; exit 0; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-batch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

t0=$(date +%s.%N)
read -r _ pairs _ stok _ ttok _ data < <("$gen" "$N" 1 "$tmp/src.tfm" "$tmp/tgt.tfm")
t1=$(date +%s.%N)
mb() { echo "scale=1; $1 / 1000000" | bc -l; }
echo "   $pairs pairs, $stok + $ttok tokens; token data (ids + offsets) $(mb "$data") MB;" \
     "streams $(mb "$(stat -c %s "$tmp/src.tfm")") + $(mb "$(stat -c %s "$tmp/tgt.tfm")") MB;" \
     "generated in $(printf '%.1f' "$(echo "$t1 - $t0" | bc -l)") s; $(nproc) cores"

# run LABEL CMD...: wall seconds and peak RSS of CMD
run() {
    local label=$1
    shift
    /usr/bin/time -o "$tmp/time" -f "%e %M" "$@"
    read -r sec kb < "$tmp/time"
    printf '   %-34s %7.2f s  peak RSS %7.1f MB  %5.2fx token data\n' "$label" "$sec" \
        "$(echo "$kb * 1024 / 1000000" | bc -l)" "$(echo "$kb * 1024 / $data" | bc -l)"
    last=$sec
}

run "tfm-cat (reference)" sh -c 'tfm-cat "$1" "$2" > /dev/null' sh "$tmp/src.tfm" "$tmp/tgt.tfm"
ref=$last
run "tfm-batch --tokens 25000, pipes" bash -c \
    'tfm-batch --tokens 25000 -o "$1/out.tfm" <(cat "$1/src.tfm") <(cat "$1/tgt.tfm") 2> "$1/log"' \
    bash "$tmp"
pipe=$last
sed 's/^/   /' "$tmp/log"
rm -f "$tmp/out.tfm"
run "tfm-batch --tokens 25000, files" tfm-batch -q --tokens 25000 -o "$tmp/out.tfm" \
    "$tmp/src.tfm" "$tmp/tgt.tfm"
echo "   output $(mb "$(stat -c %s "$tmp/out.tfm")") MB;" \
     "tfm-batch (pipes) takes $(printf '%.2f' "$(echo "$pipe / $ref" | bc -l)")x the time of tfm-cat"
