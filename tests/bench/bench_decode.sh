#!/usr/bin/env bash
# bench_decode: tfm-decode throughput (sentences/s, target tokens/s) with beam 4 on 200
# sentences of newstest2013 (EN), for the tiny and base configs, each model trained for one
# step (its outputs are long: this measures the decoder at full length, not translation).
# The ratio to the PyTorch reference decoder is printed when tests/ref provides one
# (tests/ref/decode_ref.py, same checkpoint, same beam search); until then: "n/a".
set -u
TFM_ROOT=${TFM_ROOT:-$PWD}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-decode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$(ls "$TFM_ROOT"/data/newstest2013/*en* 2>/dev/null | head -n 1)
if [ -z "$src" ] || ! command -v tfm-batch > /dev/null || ! command -v tfm-train > /dev/null; then
    echo "   decode: skipped (needs data/newstest2013, tfm-batch and tfm-train)"
    exit 0
fi
cat_src() { case "$src" in *.gz) zcat "$src" ;; *) cat "$src" ;; esac; }
cat_src | head -n 3000 > "$tmp/train.txt"
head -n 200 "$tmp/train.txt" > "$tmp/test.txt"
tfm-tokenize train -q -m "$tmp/spm.model" --vocab 8000 "$tmp/train.txt" || exit 1
tfm-tokenize encode -m "$tmp/spm.model" --eos < "$tmp/train.txt" > "$tmp/train.tfm"
tfm-tokenize encode -m "$tmp/spm.model" < "$tmp/test.txt" > "$tmp/test.tfm"
tfm-batch --tokens 2000 "$tmp/train.tfm" "$tmp/train.tfm" > "$tmp/batches.tfm" || exit 1
for cfg in tiny base; do
    conf="$TFM_ROOT/configs/$cfg.conf"
    [ -e "$conf" ] || { echo "   decode $cfg: skipped ($conf missing)"; continue; }
    tfm-train -q -c "$conf" --set max_len=256 -o "$tmp/$cfg" --max-steps 1 "$tmp/batches.tfm" || exit 1
    start=$(date +%s.%N)
    tfm-decode -q -m "$tmp/$cfg/last.tfm" --beam 4 "$tmp/test.tfm" > "$tmp/$cfg.hyp" || exit 1
    end=$(date +%s.%N)
    tokens=$(tfm-cat --values "$tmp/$cfg.hyp" |
        awk '/^record .* hyp.index/ { exit } /^record .* tokens.ids/ { on = 1; next }
             on && /^\t/ { n += NF } END { print n + 0 }')
    awk -v s="$start" -v e="$end" -v n=200 -v t="$tokens" -v c="$cfg" 'BEGIN {
        d = e - s; printf "   decode %s beam 4: %.1f sentences/s, %.0f target tokens/s (%.1f s)\n", c, n / d, t / d, d }'
    if [ -x "$TFM_ROOT/tests/ref/decode_ref.py" ]; then
        "$TFM_ROOT/tests/ref/decode_ref.py" --bench -m "$tmp/$cfg/last.tfm" --beam 4 "$tmp/test.tfm"
    else
        echo "   decode $cfg: ratio to PyTorch: n/a (no tests/ref/decode_ref.py yet)"
    fi
done
