#!/usr/bin/env bash
# bench_ct2: tfm-decode against CTranslate2 (a peer decoder, fp32 on the CPU) on the same
# model: a tfm checkpoint converted by tests/bench/ct2_convert.py.  Greedy and beam 4,
# interleaved rounds, the best of each:
#   tiny: a trained tiny model (real outputs), the 1000 sentences of Multi30k
#         test_2017_flickr.en;
#   base: configs/base.conf trained 1 step (untrained: every output runs to the length
#         limit in both), the first TFM_BENCH_CT2_BASE sentences; and the first sentence
#         alone with beam 4 (a single request's latency: model load and steps of 4 rows).
# tfm's time is the whole tfm-decode process; CTranslate2's is model load + translation,
# timed inside Python (ct2_translate.py: from before ctranslate2.Translator(...) to after
# translate_batch returns; interpreter start, imports and input reading excluded).  Both
# with TFM_BENCH_THREADS threads (CTranslate2: intra_threads, inter_threads 1), float32.
# Each case also prints the processor time (user + system of every thread) of both: on a
# machine shared with other jobs it changes far less than the elapsed time, in which a
# pool thread descheduled by other load stalls every op that waits for it.
# Also prints how many outputs agree token for token: the conversion check.
#   TFM_BENCH_VENV ($HOME/.cache/tfm-bench-ct2)  a venv for ctranslate2 (pip installs it)
#   TFM_BENCH_CT2_MODEL  a trained tfm checkpoint to use instead of training one
#   TFM_BENCH_CT2_TRAIN (3m)  training time of the tiny model (configs/tiny.conf on the
#                             bundled Multi30k, as pipelines/wmt_ende.mk prepares it)
#   TFM_BENCH_THREADS (2)  TFM_BENCH_CT2_ROUNDS (3)  TFM_BENCH_CT2_BASE (100 sentences)
#   TFM_BENCH_CT2_BASE_LEN (64: the base model's max_len, so outputs of 63 tokens)
#   TFM_BENCH_CT2_BATCH (64:examples): CTranslate2's max_batch_size:batch_type; it sorts
#     the input by length and cuts it into batches of 64 sentences (tfm plans about 60
#     sentences a batch for beam 4 here, 250 for greedy, from a 16384-token budget)
set -u
export PYTHONDONTWRITEBYTECODE=1        # no __pycache__ left in the tree
TFM_ROOT=${TFM_ROOT:-$PWD}
here="$TFM_ROOT/tests/bench"
threads=${TFM_BENCH_THREADS:-2}
rounds=${TFM_BENCH_CT2_ROUNDS:-3}
nbase=${TFM_BENCH_CT2_BASE:-100}
blen=${TFM_BENCH_CT2_BASE_LEN:-64}
batch=${TFM_BENCH_CT2_BATCH:-64:examples}
venv=${TFM_BENCH_VENV:-$HOME/.cache/tfm-bench-ct2}
data="$TFM_ROOT/data/multi30k-ende"
test_src="$data/test_2017_flickr.en.gz"
[ -x /usr/bin/time ] || { echo "   ct2: skipped (GNU time, /usr/bin/time, is missing)"; exit 0; }
for t in tfm-decode tfm-train tfm-tokenize tfm-batch tfm-cat; do
    command -v $t > /dev/null || { echo "   ct2: skipped ($t not on PATH)"; exit 0; }
done
for f in "$test_src" "$data/train.en.gz" "$data/train.de.gz"; do
    [ -e "$f" ] || { echo "   ct2: skipped ($f missing)"; exit 0; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-ct2.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- CTranslate2 in a virtual environment ---------------------------------------------------
py="$venv/bin/python"
if ! "$py" -c 'import ctranslate2, numpy' 2> /dev/null; then
    base_py=/usr/bin/python3
    [ -x "$base_py" ] || base_py=$(command -v python3) || base_py=
    if [ -z "$base_py" ] || ! "$base_py" -m venv "$venv" > "$tmp/venv.log" 2>&1; then
        echo "   ct2: skipped (cannot create a Python venv in $venv: python3 -m venv failed)"
        exit 0
    fi
    if ! "$venv/bin/pip" install -q --retries 1 --timeout 30 ctranslate2 numpy \
            > "$tmp/pip.log" 2>&1; then
        echo "   ct2: skipped (pip install ctranslate2 failed: no network or no pip?" \
            "$(tail -n 1 "$tmp/pip.log"))"
        exit 0
    fi
fi
ct2_ver=$("$py" -c 'import ctranslate2; print(ctranslate2.__version__)') || exit 1

# ---- the tiny model, its vocabulary, and the input ------------------------------------------
zcat "$data/train.en.gz" > "$tmp/train.en"
zcat "$data/train.de.gz" > "$tmp/train.de"
zcat "$test_src" > "$tmp/test.en"
ntest=$(wc -l < "$tmp/test.en")
if [ -n "${TFM_BENCH_CT2_MODEL:-}" ]; then
    tiny=$TFM_BENCH_CT2_MODEL
    spm=$tiny                                   # a checkpoint embeds its vocabulary
    [ -r "$tiny" ] || { echo "   ct2: $tiny: cannot read"; exit 1; }
    tiny_note="$tiny"
else
    spm="$tmp/spm.model"
    tfm-tokenize train -q -m "$spm" --vocab 8000 --type bpe --max-sentences 2000000 \
        --coverage 1 --threads "$threads" "$tmp/train.en" "$tmp/train.de" 2> /dev/null || exit 1
fi
tfm-tokenize encode -q -m "$spm" --eos -o "$tmp/test.tfm" "$tmp/test.en" || exit 1
head -n "$nbase" "$tmp/test.en" > "$tmp/base.en"
tfm-tokenize encode -q -m "$spm" --eos -o "$tmp/base.tfm" "$tmp/base.en" || exit 1
head -n 1 "$tmp/test.en" > "$tmp/one.en"
tfm-tokenize encode -q -m "$spm" --eos -o "$tmp/one.tfm" "$tmp/one.en" || exit 1
if [ -z "${TFM_BENCH_CT2_MODEL:-}" ]; then
    train_time=${TFM_BENCH_CT2_TRAIN:-3m}
    for f in train.en train.de; do
        tfm-tokenize encode -q -m "$spm" --eos --threads "$threads" -o "$tmp/$f.tfm" \
            "$tmp/$f" || exit 1
    done
    tfm-batch -q --tokens 2048 --max-len 128 --seed 1 -o "$tmp/train.batches.tfm" \
        "$tmp/train.en.tfm" "$tmp/train.de.tfm" || exit 1
    echo "   ct2: training the tiny model for $train_time (configs/tiny.conf, Multi30k," \
        "$threads threads)"
    tfm-train -q -c "$TFM_ROOT/configs/tiny.conf" -o "$tmp/tiny" --max-time "$train_time" \
        --threads "$threads" "$tmp/train.batches.tfm" || exit 1
    tiny="$tmp/tiny/last.tfm"
    step=$(tfm-cat "$tiny" | sed -n 's/^meta step=//p')
    tiny_note="configs/tiny.conf trained $train_time here (step ${step:-?})"
fi
tiny_len=$("$py" -c "
import sys
sys.path.insert(0, sys.argv[1])
import tfmstream
for line in bytes(tfmstream.read(sys.argv[2])[1]['config']).decode().splitlines():
    k, _, v = line.partition('=')
    if k.strip() == 'max_len':
        print(v.strip())" "$TFM_ROOT/tests/ref" "$tiny") && [ -n "$tiny_len" ] ||
    { echo "   ct2: $tiny: no max_len in its config"; exit 1; }

# ---- the base model: 1 step, max_len blen ---------------------------------------------------
head -n 3000 "$tmp/train.en" > "$tmp/b.en"
head -n 3000 "$tmp/train.de" > "$tmp/b.de"
tfm-tokenize encode -q -m "$spm" --eos -o "$tmp/b.en.tfm" "$tmp/b.en" &&
    tfm-tokenize encode -q -m "$spm" --eos -o "$tmp/b.de.tfm" "$tmp/b.de" &&
    tfm-batch -q --tokens 2048 --max-len "$blen" -o "$tmp/b.batches.tfm" "$tmp/b.en.tfm" \
        "$tmp/b.de.tfm" || exit 1
tfm-train -q -c "$TFM_ROOT/configs/base.conf" --set max_len="$blen" --set tokens=2048 \
    -o "$tmp/base" --max-steps 1 --threads "$threads" "$tmp/b.batches.tfm" || exit 1
base="$tmp/base/last.tfm"

# ---- conversion -----------------------------------------------------------------------------
"$py" "$here/ct2_convert.py" "$tiny" "$tmp/tiny.ct2" 2> "$tmp/convert.log" &&
    "$py" "$here/ct2_convert.py" "$base" "$tmp/base.ct2" 2>> "$tmp/convert.log" ||
    { cat "$tmp/convert.log"; exit 1; }
isa=$("$py" -c "
import ctranslate2, logging
ctranslate2.set_log_level(logging.INFO)
ctranslate2.Translator('$tmp/tiny.ct2', device='cpu', compute_type='float32')" 2>&1 |
    sed -n 's/.*Selected ISA: \(.*\)/\1/p; s/.*SGEMM backend: \([^ ]*\).*/sgemm \1/p' |
    paste -sd, -)

mbs=${batch%%:*} btype=${batch#*:}
ct2() {     # ct2 OUT MODEL SRC MAXLEN BEAM LP [--ref FILE]...: prints its result line
    local out=$1 model=$2 src=$3 len=$4 beam=$5 lp=$6 limit=()
    shift 6
    [ -n "${CT2_TIMEOUT:-}" ] && limit=(timeout "$CT2_TIMEOUT")
    "${limit[@]}" "$py" "$here/ct2_translate.py" --threads "$threads" --beam "$beam" --length-penalty "$lp" \
        --max-len "$len" --max-decoding-length $((len - 1)) --max-batch-size "$mbs" \
        --batch-type "$btype" --out "$out" "$@" "$model" "$src"
}
tfm() {     # tfm OUT MODEL SRC BEAM [tfm-decode options]: prints the whole process's
            # seconds and its processor seconds (user + system, every thread)
    local out=$1 model=$2 src=$3 beam=$4 s e
    shift 4
    s=$(date +%s.%N)
    /usr/bin/time -f '%U %S' -o "$tmp/tfm.time" \
        tfm-decode -q -m "$model" --beam "$beam" --threads "$threads" "$@" -o "$out" "$src" ||
        return 1
    e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" '{ printf "%.4f %.2f\n", e - s, $1 + $2 }' "$tmp/tfm.time"
}
tokens() {  # output tokens (eos excluded) of a tfm-decode stream
    tfm-cat --values "$1" |
        awk '/^record .* hyp.index/ { exit } /^record .* tokens.ids/ { on = 1; next }
             on && /^\t/ { n += NF } END { print n + 0 }'
}
field() { echo "$2" | sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }
min() { awk -v a="${1:-1e30}" -v b="$2" 'BEGIN { print (b < a ? b : a) }'; }

echo "   ct2: CTranslate2 $ct2_ver ($isa), float32, intra_threads $threads," \
    "inter_threads 1, max_batch_size $mbs ($btype); tfm-decode --threads $threads;" \
    "best of $rounds rounds, interleaved"
echo "   ct2: tiny model: $tiny_note; $ntest sentences (test_2017_flickr.en);" \
    "base: 1 step, max_len $blen, $nbase sentences and 1 alone"
echo "   ct2: load before: $(uptime | sed 's/.*load average: //') (shared machine: numbers" \
    "are noisy)"

# Untimed agreement checks: tfm at CTranslate2's length limit (max_len - 1 tokens for
# every sentence, where tfm's default is source + max_len_b), and beam 4 without a length
# penalty in either (the same objective; CTranslate2 then stops when the best beam ends).
tfm "$tmp/g.eq.tfm" "$tiny" "$tmp/test.tfm" 1 --max-len-b "$tiny_len" > /dev/null || exit 1
tfm "$tmp/b0.tfm" "$tiny" "$tmp/test.tfm" 4 --alpha 0 --max-len-b "$tiny_len" > /dev/null ||
    exit 1
r=$(ct2 "$tmp/b0.ct2" "$tmp/tiny.ct2" "$tmp/test.tfm" "$tiny_len" 4 0 --ref "$tmp/b0.tfm") ||
    exit 1
agree_b0=$(field agree "$r")

# CTranslate2 runs twice a case: with OMP_WAIT_POLICY=PASSIVE and as shipped (libgomp's
# default wait policy: threads spin between parallel regions, which collapses when other
# jobs share the cores; such a run is stopped past 5x the passive time + 10 s and not
# tried again); the ratio takes the faster.
declare -A best cpu tok agree gaveup
cases="tiny:1 tiny:4 base:1 base:4 one:4"
for ((i = 0; i < rounds; i++)); do
    for c in $cases; do
        m=${c%:*} beam=${c#*:}
        if [ "$m" = tiny ]; then
            model=$tiny ct2m="$tmp/tiny.ct2" src="$tmp/test.tfm" len=$tiny_len opt=()
        else
            # untrained: both run to max_len - 1 tokens (tfm: max-len-b past it); one: the
            # first sentence alone (the latency of a single request: load and 63 steps of
            # 4 rows)
            model=$base ct2m="$tmp/base.ct2" src="$tmp/$m.tfm" len=$blen
            opt=(--max-len-b "$blen")
        fi
        d=$(tfm "$tmp/$c.tfm" "$model" "$src" "$beam" --alpha 0.6 "${opt[@]}") || exit 1
        best[tfm:$c]=$(min "${best[tfm:$c]:-}" "${d% *}")
        cpu[tfm:$c]=$(min "${cpu[tfm:$c]:-}" "${d#* }")
        tok[tfm:$c]=$(tokens "$tmp/$c.tfm")
        refs=(--ref "$tmp/$c.tfm")
        [ "$c" = tiny:1 ] && refs+=(--ref "$tmp/g.eq.tfm")
        for w in passive spin; do
            if [ $w = passive ]; then
                r=$(OMP_WAIT_POLICY=PASSIVE ct2 "$tmp/$c.ct2" "$ct2m" "$src" "$len" "$beam" \
                    0.6 "${refs[@]}") || exit 1
            else
                # spinning threads under load can take 20x longer: give up past 5x passive
                [ -n "${gaveup[$c]:-}" ] && continue
                lim=$(awk -v p="${best[passive:$c]}" 'BEGIN { printf "%d", 5 * p + 10 }')
                r=$(CT2_TIMEOUT=$lim ct2 "$tmp/$c.ct2" "$ct2m" "$src" "$len" "$beam" 0.6 \
                    "${refs[@]}")
                rc=$?
                if [ $rc = 124 ]; then
                    gaveup[$c]=$lim
                    continue
                fi
                [ $rc = 0 ] || exit 1
            fi
            best[$w:$c]=$(min "${best[$w:$c]:-}" "$(field seconds "$r")")
            [ $w = passive ] && cpu[ct2:$c]=$(min "${cpu[ct2:$c]:-}" "$(field cpu "$r")")
            tok[ct2:$c]=$(field tokens "$r")
            agree[$c]=$(field agree "$r")
        done
    done
done
for c in $cases; do
    m=${c%:*} beam=${c#*:}
    [ "$beam" = 1 ] && what=greedy || what="beam 4"
    [ "$m" = one ] && m="base, 1 sentence,"
    spin=${best[spin:$c]:-}
    [ -n "$spin" ] || spin=">${gaveup[$c]}"
    awk -v m="$m" -v w="$what" -v t="${best[tfm:$c]}" -v s="${best[spin:$c]:-1e30}" \
        -v sp="$spin" -v p="${best[passive:$c]}" -v tt="${tok[tfm:$c]}" \
        -v kt="${tok[ct2:$c]}" -v tc="${cpu[tfm:$c]}" -v kc="${cpu[ct2:$c]}" 'BEGIN {
        k = s < p ? s : p
        if (sp !~ /^>/) sp = sprintf("%.3f", sp)
        printf "   ct2 %s %s: tfm %.3f s (%d tokens), CTranslate2 %.3f s (%d tokens; passive %.3f s, as shipped %s s), ratio CTranslate2/tfm %.2fx; processor time tfm %.2f s, CTranslate2 (passive) %.2f s, ratio %.2fx\n", m, w, t, tt, k, kt, p, sp, k / t, tc, kc, kc / tc }'
done
IFS=, read -r g_def g_eq <<< "${agree[tiny:1]}"
echo "   ct2 tiny agreement (outputs identical token for token, of $ntest):" \
    "greedy $g_eq at the same length limit ($g_def with tfm's default source + max_len_b);" \
    "beam 4 without length penalty $agree_b0; beam 4 alpha 0.6 ${agree[tiny:4]} (tfm divides" \
    "by GNMT's ((5 + |Y|) / 6)^0.6 with eos counted, CTranslate2 by |Y|^0.6 without it," \
    "and stops after 4 finished hypotheses, tfm when none can win)"
echo "   ct2 base agreement (of $nbase): greedy ${agree[base:1]}, beam 4 ${agree[base:4]}"
echo "   ct2: load after: $(uptime | sed 's/.*load average: //')"
