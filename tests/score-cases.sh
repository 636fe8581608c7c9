#!/usr/bin/env bash
# tests/score-cases.sh: tfm-score (the one on PATH) run on the bundled data in many ways --
# BLEU, chrF and F1 as text and JSON, EVALB's per-sentence report, --linearize, --restore,
# and the errors -- with everything it printed: for each case a line "### N: ARGS", its
# stdout, "### stderr", its stderr, "### exit RC".  Paths are relative to the repository;
# the version in signatures reads "VERSION" and the scratch directory "$TMP", so the
# output is the same on any machine and across versions.
#
#   tests/score-cases.sh [--hash] [--streams]
#
# --hash prints one "SHA256 N: ARGS" line per case instead: tfm-score.bats compares them
# with tests/fixtures/score-cases.sha256, so a change to any byte that tfm-score prints
# names its case.  After a deliberate change, record them again:
#     PATH=$PWD/bin:$PATH tests/score-cases.sh --hash > tests/fixtures/score-cases.sha256
# --streams adds cases that read tfm streams (tokens and n-best hypotheses, made here with
# tfm-tokenize, tfm-train and tfm-decode, which must be on PATH) and the other readers of
# such streams (tfm-tokenize decode, tfm-decode --text).  Their bytes depend on the
# SentencePiece build, so they are for comparing two builds on one machine:
#     diff <(PATH=/old/bin:$PATH tests/score-cases.sh --streams) \
#          <(PATH=$PWD/bin:$PATH tests/score-cases.sh --streams)
set -u
export LC_ALL=C
cd "$(dirname "$0")/.." || exit 2
hash=0 streams=0
for a in "$@"; do
    case $a in
    --hash) hash=1 ;;
    --streams) streams=1 ;;
    *) echo "usage: tests/score-cases.sh [--hash] [--streams]" >&2; exit 2 ;;
    esac
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/score-cases.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT
VERSION=$(cat VERSION)
n=0

normalize() {
    sed -e "s|$TMP|\$TMP|g" -e "s|tfm-$VERSION|tfm-VERSION|g" -e "s|tfm-score $VERSION|tfm-score VERSION|g"
}

# case ARGS...: run one command line (a string for bash -c, run in the repository root)
case_() {
    n=$((n + 1))
    local out err rc
    out=$(bash -c "$1" 2> "$TMP/.err"; echo "### exit $?")
    err=$(cat "$TMP/.err")
    rc=${out##*### exit }
    out=${out%### exit *}
    local text args
    text=$(printf '%s### stderr\n%s\n### exit %s\n' "$out" "$err" "$rc" | normalize)
    args=$(printf '%s\n' "$1" | normalize)
    if [ $hash = 1 ]; then
        printf '%s %d: %s\n' "$(printf '%s\n' "$text" | sha256sum | cut -c1-64)" "$n" "$args"
    else
        printf '### %d: %s\n%s\n' "$n" "$args" "$text"
    fi
}

W=data/wmt17-ende-bleu
REF=$W/newstest2017-ende.ref.de
FBK=$W/systems/newstest2017.FBK.4870.en-de
KIT=$W/systems/newstest2017.KIT.4950.en-de
E=data/evalb-fixtures
P=data/ptb-nltk-sample
DEV=$P/wsj_0150-0169.dev

# ---- BLEU and chrF: every system, text and JSON ----------------------------------------
for sys in $W/systems/*; do
    case_ "tfm-score -r $REF $sys"
    case_ "tfm-score -j -r $REF $sys"
    case_ "tfm-score -m chrf -r $REF $sys"
    case_ "tfm-score -j -m chrf --chrf-word-order 2 -r $REF $sys"
done
for o in "--tok intl" "--tok none" "-l" "-l --tok intl" "--smooth none" "--smooth floor" \
         "--smooth floor --smooth-value 0.2" "--smooth add-k" "--smooth add-k --smooth-value 2" \
         "--tokenized" "--tokenized --compound-split" "--tokenized --smooth exp"; do
    case_ "tfm-score $o -r $REF $KIT"
    case_ "tfm-score --json $o -r $REF $KIT"
done
for o in "--chrf-word-order 2 --chrf-eps-smoothing" "--chrf-char-order 4 --chrf-beta 1 --chrf-whitespace -l" \
         "--chrf-char-order 1 --chrf-word-order 6" "--chrf-beta 3 --chrf-eps-smoothing -l"; do
    case_ "tfm-score -m chrf $o -r $REF $FBK"
    case_ "tfm-score -m chrf --json $o -r $REF $FBK"
done
case_ "tfm-score -r $REF -r $FBK $KIT"
case_ "tfm-score -j -r $REF -r $FBK -r $KIT $W/systems/newstest2017.online-A.0.en-de"
case_ "tfm-score -m chrf -r $REF -r $FBK $KIT"
case_ "tfm-score -m chrf -j -r $REF -r $FBK $KIT"
case_ "tfm-score -r $REF - < $KIT"
case_ "cat $FBK | tfm-score -m chrf -r $REF"
case_ "tfm-score -r data/newstest2013/newstest2013.de data/newstest2013/newstest2013.de"
case_ "zcat data/multi30k-ende/val.de.gz | head -n 500 | tfm-score -r data/multi30k-ende/val.de.gz"
printf 'the cat sat the mat on\n' > "$TMP/h1"
printf 'the cat sat on the mat\n' > "$TMP/r1"
printf 'x y\n' > "$TMP/h2"
printf '\n' > "$TMP/empty"
: > "$TMP/none"
printf 'a "quoted"\\ \ttab\n' > "$TMP/q"
for m in bleu chrf; do
    case_ "tfm-score -m $m -r $TMP/r1 $TMP/h1"
    case_ "tfm-score -m $m -j -r $TMP/r1 $TMP/h2"
    case_ "tfm-score -m $m -j -r $TMP/empty $TMP/empty"
    case_ "tfm-score -m $m -j -r $TMP/none $TMP/none"
    case_ "tfm-score -m $m -r $TMP/q $TMP/q"
done

# ---- F1: EVALB's files, text, per sentence, JSON ---------------------------------------
for o in "" "-v" "-j" "-j -v" "-q" "-q -v"; do
    case_ "tfm-score -m f1 $o -p $E/sample/sample.prm -r $E/sample/sample.gld $E/sample/sample.tst"
    case_ "tfm-score -m f1 $o -p $E/new.prm -r $E/bug/bug.gld $E/bug/bug.tst"
    case_ "tfm-score -m f1 $o -r $E/bug/bug.gld $E/bug/bug.tst"
    case_ "tfm-score -m f1 $o -p $E/nk.prm -r $E/sample/sample.gld $E/sample/sample.tst"
done
case_ "tfm-score -m f1 -r $DEV.oneline.txt $DEV.oneline.txt"
case_ "tfm-score -m f1 -j -v -r $DEV.oneline.txt $DEV.oneline.txt"
case_ "tfm-score -m f1 --max-error 0 -v -r $E/sample/sample.gld $E/sample/sample.tst"
case_ "tfm-score -m f1 --max-error 2 -j -v -r $E/sample/sample.gld $E/sample/sample.tst"
case_ "tfm-score -m f1 --max-error 100 -p $E/sample/sample.prm -r $E/sample/sample.gld $E/sample/sample.tst"
printf '(S (NN a) (NN b))\n(S (NN c) (NN d))\n' > "$TMP/g"
printf '(S (NN a) (NN b))\n(S (NN c) (NN d)\n' > "$TMP/t"
case_ "tfm-score -m f1 -r $TMP/g $TMP/t"
case_ "tfm-score -m f1 -j -v -r $TMP/g $TMP/t"
case_ "tfm-score -m f1 -r $TMP/t $TMP/g"
case_ "tfm-score -m f1 -v -r $TMP/t $TMP/g"
case_ "tfm-score -m f1 -j -v -r $TMP/none $TMP/none"
case_ "tfm-score -m f1 -v -r $TMP/none $TMP/none"

# ---- trees: --linearize, --restore, F1 of linearized output -----------------------------
for o in "" "--keep-tags" "--keep-function-tags" "--keep-tags --keep-function-tags"; do
    case_ "tfm-score --linearize $o $DEV.mrg"
    case_ "tfm-score --linearize $o < $DEV.oneline.txt"
done
case_ "tfm-score --linearize $E/sample/sample.gld"
tfm-score --linearize $DEV.mrg > "$TMP/lin" 2> /dev/null
cut -f1 "$TMP/lin" > "$TMP/src"
cut -f2 "$TMP/lin" > "$TMP/tgt"
sed 's/ )NP//g; s/(VP //' "$TMP/tgt" > "$TMP/tgt2"
tfm-score --linearize --keep-tags $DEV.mrg 2> /dev/null | cut -f2 > "$TMP/tagged"
for t in tgt tgt2 tagged; do
    for o in "" "-v" "-j -v" "--root FRAG" "--keep-tags"; do
        case_ "tfm-score -m f1 $o -r $DEV.oneline.txt --source $TMP/src $TMP/$t"
        case_ "tfm-score -m f1 $o -r $DEV.oneline.txt --linearized $TMP/$t"
    done
    case_ "tfm-score --restore --source $TMP/src $TMP/$t"
    case_ "tfm-score --restore --root FRAG --source $TMP/src < $TMP/$t"
done
printf '%s\n' '(S (NP XX XX )NP )S (VP XX XX (NP XX XX )NP )VP XX' \
    'XX XX (VP XX XX (NP XX XX )NP )VP XX' ')S ( ( XX' '' > "$TMP/h"
printf 'The cat sat on the mat .\nThe cat sat on the mat .\na b\nc d\n' > "$TMP/s"
case_ "tfm-score --restore --source $TMP/s $TMP/h"
case_ "tfm-score --restore --root X --source $TMP/s $TMP/h"
printf '(S (NP (DT The) (NN cat)) (VP (VBD sat)))\n(S\n  (NP (DT The) (NN cat)) x)\n' > "$TMP/t.mrg"
printf '(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) (X y) z\n' > "$TMP/one.mrg"
printf '(S (NN a)\n\n\n' > "$TMP/open.mrg"
printf '(S (NN a))\n  )\n' > "$TMP/close.mrg"
for f in t one open close; do
    case_ "tfm-score --linearize $TMP/$f.mrg"
done
case_ "tfm-score --linearize < $TMP/open.mrg"
case_ "tfm-score --linearize $TMP/none"

# ---- paired tests: bootstrap and approximate randomization, text and JSON ---------------
PROMT=$W/systems/newstest2017.PROMT-Rule-based.4735.en-de
case_ "tfm-score --paired-bs -r $REF $FBK $KIT $PROMT"
case_ "tfm-score --paired-bs -j --paired-bs-n 200 --seed 7 --tok intl -r $REF $KIT $FBK"
case_ "tfm-score --paired-ar --paired-ar-n 1000 -l -r $REF $FBK $KIT $PROMT"
case_ "tfm-score --paired-ar -j --paired-ar-n 500 --smooth add-k --smooth-value 0.5 -r $REF $FBK $KIT"
case_ "tfm-score --paired-ar --paired-ar-n 100 -r $TMP/r1 $TMP/h1 $TMP/h2"

# ---- errors -----------------------------------------------------------------------------
head -n 3003 "$REF" > "$TMP/short"
printf 'ok\n\xff bad\n' > "$TMP/utf"
printf 'ok\nfine\n' > "$TMP/ok"
case_ "tfm-score -r $TMP/short $FBK"
case_ "tfm-score -r $REF -r $TMP/short $FBK"
case_ "tfm-score -m f1 -r $TMP/short --linearized $FBK"
case_ "tfm-score -r /nonexistent/ref $FBK"
case_ "tfm-score -r $REF /nonexistent/hyp"
case_ "tfm-score -r $TMP/ok $TMP/utf"
case_ "tfm-score -m chrf -r $TMP/utf $TMP/ok"
case_ "tfm-score -m f1 -r $TMP/g --source $TMP/short $TMP/g"
case_ "tfm-score -m f1 -r $TMP/g --source /nonexistent $TMP/g"
case_ "tfm-score -m f1 -r $TMP/g -p /nonexistent.prm $TMP/g"
case_ "tfm-score --restore --source $TMP/short $TMP/g"
case_ "tfm-score --restore --source /nonexistent $TMP/g"
case_ "tfm-score -r $REF tests/fixtures/good.tfm"
case_ "tfm-score -r $REF tests/fixtures/bad/crc.tfm"
for o in "" "--metric bogus" "--tok 14" "--compound-split" "--tokenized --tok 13a" \
         "-m chrf --tok intl" "--chrf-word-order 9 -m chrf" "--chrf-beta 2" "--per-sentence" \
         "-m f1 -r $REF" "-m f1 -l" "-m f1 --source x --linearized" "--keep-tags -m f1" \
         "--keep-function-tags -m f1 --linearized" "--smooth-value x" "--smooth bogus" \
         "--max-error -1 -m f1" "--root 'A B' -m f1 --linearized" "--paired-bs" \
         "--paired-ar -m chrf" "--paired-bs --paired-ar" "--paired-bs-n 5" "--paired-ar-n 0 --paired-ar" \
         "--paired-bs --confidence"; do
    case_ "tfm-score $o -r $TMP/ok $TMP/ok $TMP/ok"
    case_ "tfm-score $o -r $TMP/ok $TMP/ok"
done
for o in "--linearize -r x" "--linearize -j" "--linearize -m chrf" "--restore" \
         "--restore --keep-tags --source x" "--linearize --root S" "--linearize --source x" \
         "--bogus" "-h" "--version"; do
    case_ "tfm-score $o $TMP/ok"
done

# ---- streams ------------------------------------------------------------------------------
if [ $streams = 1 ]; then
    S=$TMP/streams
    mkdir -p "$S"
    head -n 1000 "$REF" > "$S/r"
    head -n 1000 "$FBK" > "$S/h"
    tfm-tokenize train -q -m "$S/m.model" --vocab 800 -O hard_vocab_limit=false "$S/r" "$S/h"
    tfm-tokenize encode -m "$S/m.model" -o "$S/h.tfm" "$S/h"
    tfm-tokenize train -q -m "$S/t.model" --vocab 300 -O hard_vocab_limit=false "$TMP/tgt"
    tfm-tokenize encode -m "$S/t.model" -o "$S/tgt.tfm" "$TMP/tgt"
    spm_encode --model="$S/m.model" --output_format=id < "$S/h" > "$S/ids"
    head -c 300 "$S/h.tfm" > "$S/cut.tfm"
    # a tiny copy model, for n-best hypothesis streams
    head -n 600 data/onmt-toy-ende/src-val.txt | cut -d ' ' -f 1-6 > "$S/copy"
    tfm-tokenize train -q -m "$S/c.model" --vocab 300 -O hard_vocab_limit=false "$S/copy"
    tfm-tokenize encode -m "$S/c.model" --eos -o "$S/copy.tfm" "$S/copy"
    head -n 40 "$S/copy" > "$S/copy40"
    tfm-tokenize encode -m "$S/c.model" --eos -o "$S/test.tfm" "$S/copy40"
    tfm-batch --tokens 400 --seed 1 "$S/copy.tfm" "$S/copy.tfm" > "$S/b.tfm" 2> /dev/null
    printf 'layers = 1\nd_model = 32\nd_ff = 64\nheads = 2\nmax_len = 32\ndropout = 0\nlabel_smoothing = 0\nwarmup = 50\nbeam = 3\nmax_len_b = 4\ntokens = 400\n' > "$S/c.conf"
    tfm-train -q -c "$S/c.conf" -o "$S/ck" --max-steps 60 --threads 1 --device cpu "$S/b.tfm" > /dev/null 2>&1
    tfm-avg -n 1 -o "$S/model.tfm" "$S/ck" > /dev/null 2>&1
    tfm-decode -q -m "$S/model.tfm" --threads 1 --device cpu --nbest 3 "$S/test.tfm" > "$S/nbest.tfm"
    tfm-decode -q -m "$S/model.tfm" --threads 1 --device cpu "$S/test.tfm" > "$S/best.tfm"
    for o in "" "-j" "-m chrf" "-j -m chrf --chrf-word-order 2"; do
        case_ "tfm-score $o -r $S/r $S/h.tfm"
        case_ "tfm-score $o -r $S/r < $S/h.tfm"
        case_ "tfm-score $o -r $S/copy40 $S/nbest.tfm"
        case_ "tfm-score $o -r $S/copy40 $S/best.tfm"
    done
    case_ "tfm-score -r $S/r $S/cut.tfm"
    case_ "tfm-score -r $S/r $S/b.tfm"
    case_ "tfm-score -r $S/copy $S/nbest.tfm"
    case_ "tfm-score --restore --source $TMP/src $S/tgt.tfm"
    case_ "tfm-score -m f1 -r $DEV.oneline.txt --source $TMP/src $S/tgt.tfm"
    case_ "tfm-score -m f1 -r $DEV.oneline.txt --linearized < $S/tgt.tfm"
    case_ "tfm-tokenize decode $S/h.tfm"
    case_ "tfm-tokenize decode --ids $S/h.tfm"
    case_ "tfm-tokenize decode -m $S/m.model $S/h.tfm"
    case_ "tfm-tokenize decode -m $S/t.model $S/h.tfm"
    case_ "tfm-tokenize decode -m $S/m.model $S/ids"
    case_ "tfm-tokenize decode -m $S/m.model --ids < $S/ids"
    case_ "tfm-tokenize decode $S/ids"
    case_ "tfm-tokenize decode $S/nbest.tfm"
    case_ "tfm-tokenize decode --ids $S/nbest.tfm"
    case_ "tfm-tokenize decode $S/cut.tfm"
    case_ "tfm-tokenize decode $S/b.tfm"
    case_ "tfm-tokenize decode $S/h.tfm > /dev/full"
    case_ "tfm-tokenize decode -m $S/m.model $S/ids > /dev/full"
    case_ "tfm-score -r $S/r $S/h.tfm > /dev/full"
    case_ "tfm-tokenize decode tests/fixtures/good.tfm"
    case_ "tfm-tokenize decode --ids tests/fixtures/good.tfm"
    case_ "tfm-decode -q -m $S/model.tfm --threads 1 --device cpu --text $S/test.tfm"
    case_ "tfm-decode -q -m $S/model.tfm --threads 1 --device cpu --nbest 3 --text $S/test.tfm"
    case_ "tfm-decode -q -m $S/model.tfm --threads 1 --device cpu --nbest 2 --text -o $S/o.txt $S/test.tfm; cat $S/o.txt"
fi
