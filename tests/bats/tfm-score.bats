#!/usr/bin/env bats
# tfm-score: every option, pipes, streams, bad input, exit codes.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    W="$TFM_ROOT/data/wmt17-ende-bleu"
    REF="$W/newstest2017-ende.ref.de"
    FBK="$W/systems/newstest2017.FBK.4870.en-de"
    KIT="$W/systems/newstest2017.KIT.4950.en-de"
    E="$TFM_ROOT/data/evalb-fixtures"
    P="$TFM_ROOT/data/ptb-nltk-sample"
}

@test "BLEU of a WMT17 system: sacreBLEU's line and signature" {
    run tfm-score -r "$REF" "$FBK"
    assert_success
    assert_line -n 0 "BLEU = 26.33 59.3/32.3/19.9/12.6 (BP = 1.000 ratio = 1.003 hyp_len = 61450 ref_len = 61287)"
    assert_line -n 1 "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
}

@test "every system file equals its published mteval-v13a BLEU" {
    tail -n +2 "$W/expected_scores.tsv" | while IFS=$'\t' read -r sys file bleu rest; do
        got=$(tfm-score -r "$REF" "$W/$file" | sed -n '1s/^BLEU = \([0-9.]*\) .*/\1/p')
        [ "$got" = "$bleu" ] || { echo "$sys: $got != $bleu"; return 1; }
    done
}

@test "--confidence: sacreBLEU's bootstrap mean and interval, to the bit, and its line" {
    # sacreBLEU 2.6.0 (numpy 2.4): BLEU().corpus_score(hyp, [ref], n_bootstrap=1000);
    # score._mean, score._ci; and str(score) at width 2
    run tfm-score -r "$REF" --confidence "$FBK"
    assert_success
    assert_line -n 0 "BLEU = 26.33 (μ = 26.32 ± 0.66) 59.3/32.3/19.9/12.6 (BP = 1.000 ratio = 1.003 hyp_len = 61450 ref_len = 61287)"
    assert_line -n 1 "nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
    run tfm-score -r "$REF" --confidence --json "$FBK"
    assert_success
    assert_line ' "score": 26.3316213125408,'
    assert_line ' "confidence_mean": 26.321809022164633,'
    assert_line ' "confidence_var": 0.6550781007752402,'
    assert_line ' "confidence": "μ = 26.32 ± 0.66",'
    assert_line ' "bs": "1000",'
    assert_line ' "seed": "12345",'
    # another seed and count (SACREBLEU_SEED=7, n_bootstrap=200)
    run tfm-score -r "$REF" --confidence --confidence-n 200 --seed 7 --json "$FBK"
    assert_line ' "confidence_mean": 26.282739268646793,'
    assert_line ' "confidence_var": 0.5605950443814081,'
    assert_line ' "signature": "nrefs:1|bs:200|seed:7|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0",'
    # the score itself is the same with or without
    run bash -c "tfm-score -r '$REF' --json '$FBK' | grep '\"score\"'"
    assert_output ' "score": 26.3316213125408,'
    # a mean of 0 (no match in any resample) prints no interval, as sacreBLEU
    printf 'x\ny\n' > "$BATS_TEST_TMPDIR/h"; printf 'a\nb\n' > "$BATS_TEST_TMPDIR/r"
    run tfm-score -r "$BATS_TEST_TMPDIR/r" --confidence "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_line -n 0 "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 2 ref_len = 2)"
    assert_line -n 1 --partial "nrefs:1|bs:1000|seed:12345|"
    # no sentence: nothing to resample, no interval; the signature says how it was asked
    : > "$BATS_TEST_TMPDIR/e"
    run tfm-score -r "$BATS_TEST_TMPDIR/e" --confidence "$BATS_TEST_TMPDIR/e"
    assert_success
    assert_line -n 0 --partial "BLEU = 0.00 "
    assert_line -n 1 --partial "nrefs:1|bs:1000|seed:12345|"
}

@test "--confidence: its options' ranges, and where it does not apply" {
    run tfm-score -r "$REF" --confidence --confidence-n 1 "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --confidence-n: '1': expected an integer from 2 to 100000"
    run tfm-score -r "$REF" --confidence --seed -1 "$FBK"
    assert_failure 2
    assert_line -n 0 --partial "tfm-score: --seed: '-1': expected an integer from 0 to "
    run tfm-score -r "$REF" --seed 3 "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --seed is for --confidence, --paired-bs or --paired-ar"
    run tfm-score -r "$REF" --confidence-n 50 "$FBK"
    assert_failure 2
    run tfm-score -r "$REF" -m chrf --confidence "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --confidence is for --metric bleu (chrF's and F1's intervals are not there yet)"
    run tfm-score --oneline --confidence "$E/sample/sample.gld"
    assert_line -n 0 "tfm-score: --linearize, --restore and --oneline take one FILE and no -r, --metric, --json, --confidence or --paired-*"
    assert_failure 2
}

@test "--paired-bs: each system against the baseline, sacreBLEU's figures to the bit" {
    # sacreBLEU 2.6.0 (numpy 2.4): sacrebleu REF -i FBK KIT PROMT --paired-bs -f json
    PROMT="$W/systems/newstest2017.PROMT-Rule-based.4735.en-de"
    run tfm-score -r "$REF" --paired-bs "$FBK" "$KIT" "$PROMT"
    assert_success
    assert_equal "${#lines[@]}" 4
    assert_line -n 0 --regexp "^Baseline: .*/newstest2017.FBK.4870.en-de +BLEU = 26.33 \(μ = 26.32 ± 0.66\)$"
    assert_line -n 1 --regexp "^.*/newstest2017.KIT.4950.en-de +BLEU = 26.08 \(μ = 26.08 ± 0.67\) \(p = 0.0989\)$"
    assert_line -n 2 --regexp "^.*/newstest2017.PROMT-Rule-based.4735.en-de +BLEU = 16.61 \(μ = 16.61 ± 0.53\) \(p = 0.0010\)\*$"
    assert_line -n 3 "nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
    # the columns line up: every score starts at the same place
    [ "$(printf '%s\n' "${lines[@]:0:3}" | awk '{ print index($0, "BLEU =") }' | sort -u | wc -l)" -eq 1 ]
    run tfm-score -r "$REF" --paired-bs --json "$FBK" "$KIT"
    assert_success
    assert_line '  "system": "Baseline: '"$FBK"'",'
    assert_line '  "system": "'"$KIT"'",'
    assert_line '   "p_value": null,'
    assert_line '   "mean": 26.321809022164633,'
    assert_line '   "ci": 0.6550781007752402,'
    assert_line '   "score": 26.076033504662192,'
    assert_line '   "p_value": 0.0989010989010989,'
    assert_line '   "mean": 26.076321998569867,'
    assert_line '   "ci": 0.6667205894986648,'
    # a path of any length is named whole
    d="$BATS_TEST_TMPDIR"
    for i in 1 2 3 4 5 6; do d="$d/$(printf 'd%.0s' $(seq 200))"; done
    mkdir -p "$d" && cp "$KIT" "$d/k"
    run tfm-score -r "$REF" --paired-bs --paired-bs-n 20 --json "$FBK" "$d/k"
    assert_success
    assert_line '  "system": "'"$d/k"'",'
    # the baseline's interval is --confidence's draws (its mean by numpy's sum, not
    # statistics.mean: here the same double)
    run bash -c "tfm-score -r '$REF' --confidence --json '$FBK' | grep confidence_var"
    assert_output ' "confidence_var": 0.6550781007752402,'
}

@test "--paired-ar: approximate randomization, sacreBLEU's p to the bit; seeds and counts" {
    # sacrebleu REF -i FBK KIT --paired-ar -f json (10000 trials)
    run tfm-score -r "$REF" --paired-ar --json "$FBK" "$KIT"
    assert_success
    assert_line '   "p_value": 0.24087591240875914,'
    assert_line '   "mean": null,'
    assert_line '   "signature": "nrefs:1|ar:10000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"'
    run tfm-score -r "$REF" --paired-ar "$FBK" "$KIT"
    assert_line -n 0 --regexp "^Baseline: .*FBK.4870.en-de +BLEU = 26.33$"
    assert_line -n 1 --regexp "KIT.4950.en-de +BLEU = 26.08 \(p = 0.2409\)$"
    # SACREBLEU_SEED=7, --paired-ar-n 1000 and --paired-bs-n 200: other draws
    run tfm-score -r "$REF" --paired-ar --paired-ar-n 1000 --seed 7 "$FBK" "$KIT"
    assert_line -n 2 "nrefs:1|ar:1000|seed:7|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
    run tfm-score -r "$REF" --paired-bs --paired-bs-n 200 --seed 7 "$FBK" "$KIT"
    assert_line -n 2 "nrefs:1|bs:200|seed:7|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
    # a system against itself: no trial exceeds the real difference of 0 (sacreBLEU's count)
    run tfm-score -r "$REF" --paired-ar --paired-ar-n 99 "$FBK" "$FBK"
    assert_line -n 1 --regexp "BLEU = 26.33 \(p = 0.0100\)\*$"
    # a system on standard input (-) beside a file
    run bash -c "cat '$KIT' | tfm-score -r '$REF' --paired-ar --paired-ar-n 200 '$FBK' -"
    assert_success
    assert_line -n 1 --regexp "^- +BLEU = 26.08 \(p = "
}

@test "--paired-bs and --paired-ar: what they refuse" {
    run tfm-score -r "$REF" --paired-bs "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --paired-bs and --paired-ar need a BASELINE and at least one SYSTEM"
    run tfm-score -r "$REF" "$FBK" "$KIT"
    assert_failure 2
    assert_line -n 0 --partial "one input FILE at most ("
    run tfm-score -r "$REF" --paired-bs --paired-ar "$FBK" "$KIT"
    assert_failure 2
    assert_line -n 0 "tfm-score: --paired-bs and --paired-ar exclude each other"
    run tfm-score -r "$REF" --paired-bs -m chrf "$FBK" "$KIT"
    assert_failure 2
    assert_line -n 0 "tfm-score: --paired-bs and --paired-ar are for --metric bleu (chrF's and F1's tests are not there yet)"
    run tfm-score -r "$REF" --paired-bs --confidence "$FBK" "$KIT"
    assert_failure 2
    run tfm-score -r "$REF" --paired-ar --paired-bs-n 10 "$FBK" "$KIT"
    assert_failure 2
    assert_line -n 0 "tfm-score: --paired-bs-n is for --paired-bs"
    run tfm-score -r "$REF" --paired-bs --paired-bs-n 1 "$FBK" "$KIT"
    assert_failure 2
    assert_line -n 0 "tfm-score: --paired-bs-n: '1': expected an integer from 2 to 100000"
    run tfm-score -r "$REF" --paired-ar --paired-ar-n 0 "$FBK" "$KIT"
    assert_failure 2
    run bash -c "tfm-score -r '$REF' --paired-bs - - < '$FBK'"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both a system (FILE -) and another system (FILE -): give a file for one"
    # a system of another length, unreadable, bad text: named, exit 1, nothing on stdout
    head -n 3003 "$KIT" > "$BATS_TEST_TMPDIR/short"
    run bash -c "tfm-score -r '$REF' --paired-bs '$FBK' '$BATS_TEST_TMPDIR/short' 2> '$BATS_TEST_TMPDIR/err'"
    assert_failure 1
    assert_output ""
    assert_equal "$(cat "$BATS_TEST_TMPDIR/err")" "tfm-score: $BATS_TEST_TMPDIR/short: $REF: 3004 lines, hypotheses have 3003"
    run tfm-score -r "$REF" --paired-ar "$FBK" /nonexistent
    assert_failure 1
    assert_line -n 0 "tfm-score: /nonexistent: No such file or directory"
    : > "$BATS_TEST_TMPDIR/none"
    run tfm-score -r "$BATS_TEST_TMPDIR/none" --paired-ar "$BATS_TEST_TMPDIR/none" "$BATS_TEST_TMPDIR/none"
    assert_failure 1
    assert_line -n 0 "tfm-score: no sentence: nothing to resample"
}

@test "pipe: cat hyp | tfm-score -r ref, and - for stdin" {
    run bash -c "cat '$KIT' | tfm-score -r '$REF'"
    assert_success
    assert_line -n 0 --partial "BLEU = 26.08 "
    run bash -c "tfm-score -r '$REF' - < '$KIT'"
    assert_line -n 0 --partial "BLEU = 26.08 "
}

@test "--tok intl, --tok none, --lowercase change the signature and the score" {
    run tfm-score -r "$REF" --tok intl "$FBK"
    assert_line -n 0 --partial "BLEU = 26.56 "
    assert_line -n 1 "nrefs:1|case:mixed|eff:no|tok:intl|smooth:exp|version:tfm-0.1.0"
    run tfm-score -r "$REF" -t none "$KIT"
    assert_line -n 0 --partial "BLEU = 21.15 "
    run tfm-score -r "$REF" --lowercase "$FBK"
    assert_line -n 1 "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
    run tfm-score -r "$REF" -l --smooth none "$FBK"
    assert_line -n 1 "nrefs:1|case:lc|eff:no|tok:13a|smooth:none|version:tfm-0.1.0"
    run tfm-score -r "$REF" --smooth floor --smooth-value 0.2 "$FBK"
    assert_line -n 1 --partial "smooth:floor[0.20]"
}

@test "several references: nrefs and closest length" {
    run tfm-score -r "$REF" -r "$FBK" "$KIT"
    assert_success
    assert_line -n 1 "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-0.1.0"
}

@test "exp smoothing and zero matches by hand" {
    printf 'the cat sat the mat on\n' > "$BATS_TEST_TMPDIR/h"
    printf 'the cat sat on the mat\n' > "$BATS_TEST_TMPDIR/r"
    run tfm-score -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h"
    # p = 100, 60, 25, 100/(2*3): exp(mean(log p)) = 39.76
    assert_line -n 0 "BLEU = 39.76 100.0/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)"
    printf 'x y\n' > "$BATS_TEST_TMPDIR/h2"
    run tfm-score -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h2"
    assert_line -n 0 "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.135 ratio = 0.333 hyp_len = 2 ref_len = 6)"
}

@test "--tokenized --compound-split: ##AT## splitting, whitespace tokens, no smoothing" {
    printf 'Das Über-Ich ist gut .\n' > "$BATS_TEST_TMPDIR/r"
    printf 'Das Über-Ich ist schlecht .\n' > "$BATS_TEST_TMPDIR/h"
    run tfm-score --tokenized --compound-split -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h"
    assert_success
    # 7 tokens each (Über ##AT##-##AT## Ich); matches 6/7 4/6 3/5 2/4
    assert_line -n 0 "BLEU = 64.35 85.7/66.7/60.0/50.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)"
    assert_line -n 1 "nrefs:1|case:mixed|eff:no|tok:tokenized+atat|smooth:none|version:tfm-0.1.0"
    run tfm-score --tokenized -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h"
    assert_line -n 0 "BLEU = 0.00 80.0/50.0/33.3/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 5 ref_len = 5)"  # no 4-gram match: 0, as multi-bleu.perl
    assert_line -n 1 --partial "tok:tokenized|smooth:none"
}

@test "chrF, chrF++ and their options" {
    run tfm-score -m chrf -r "$REF" "$FBK"
    assert_success
    assert_line -n 0 "chrF2 = 54.72"
    assert_line -n 1 "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:tfm-0.1.0"
    run tfm-score --metric chrf --chrf-word-order 2 --chrf-eps-smoothing -r "$REF" "$FBK"
    assert_line -n 0 "chrF2++ = 52.23"
    assert_line -n 1 "nrefs:1|case:mixed|eff:no|nc:6|nw:2|space:no|version:tfm-0.1.0"
    run tfm-score -m chrf --chrf-char-order 4 --chrf-beta 1 --chrf-whitespace -l -r "$REF" "$FBK"
    assert_success
    assert_line -n 0 --regexp '^chrF1 = [0-9]+\.[0-9]{2}$'
    assert_line -n 1 "nrefs:1|case:lc|eff:yes|nc:4|nw:0|space:yes|version:tfm-0.1.0"
}

@test "--json is valid JSON with the figures" {
    run bash -c "tfm-score --json -r '$REF' '$FBK' | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[\"name\"], round(d[\"score\"], 2), d[\"counts\"], d[\"tok\"])'"
    assert_success
    assert_output "BLEU 26.33 [36411, 18895, 11007, 6629] 13a"
    tfm-score -j -m chrf -r "$REF" "$FBK" | python3 -m json.tool > /dev/null
    tfm-score -j -m f1 -v -r "$E/sample/sample.gld" -p "$E/sample/sample.prm" "$E/sample/sample.tst" 2> /dev/null | python3 -m json.tool > /dev/null
}

@test "--json numbers are unrounded: each reads back as the double computed" {
    # a precision is 100. * counts / totals in C and in Python alike: the same double, if
    # printed whole (10 digits gave 59.25305126 for 59.253051261187956)
    run bash -c "tfm-score --json -r '$REF' '$FBK' | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert all(p == 100. * c / t for p, c, t in zip(d[\"precisions\"], d[\"counts\"], d[\"totals\"])), d
assert d[\"ratio\"] == d[\"hyp_len\"] / d[\"ref_len\"], d
print(d[\"score\"])'"
    assert_success
    assert_output --regexp '^26\.33162131[0-9]{3,}$'
    # numbers that need fewer digits take no more
    printf 'the cat sat on the mat\n' > "$BATS_TEST_TMPDIR/r"
    run tfm-score --json -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/r"
    assert_line ' "precisions": [100, 100, 100, 100],'
    assert_line ' "bp": 1,'
}

@test "standard input feeds one input: naming it for two is a usage error" {
    printf 'a b c\n' > "$BATS_TEST_TMPDIR/t"
    run bash -c "tfm-score -r - - < '$BATS_TEST_TMPDIR/t'"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the references (-r -) and the hypotheses (FILE - or none): give a file for one"
    run bash -c "tfm-score -r - < '$BATS_TEST_TMPDIR/t'"
    assert_failure 2
    run bash -c "tfm-score -r - -r - '$BATS_TEST_TMPDIR/t' < '$BATS_TEST_TMPDIR/t'"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the references (-r -) and another reference (-r -): give a file for one"
    run bash -c "tfm-score -m f1 -r '$BATS_TEST_TMPDIR/t' --source - < '$BATS_TEST_TMPDIR/t'"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the source sentences (--source -) and the hypotheses (FILE - or none): give a file for one"
    run bash -c "tfm-score --restore --source - - < '$BATS_TEST_TMPDIR/t'"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the source sentences (--source -) and the linearized trees (FILE - or none): give a file for one"
    # /dev/stdin on a pipe is standard input; on a regular file, a reader of its own
    run bash -c "cat '$BATS_TEST_TMPDIR/t' | tfm-score -r /dev/stdin"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the references (-r /dev/stdin) and the hypotheses (FILE - or none): give a file for one"
    run bash -c "cat '$BATS_TEST_TMPDIR/t' | tfm-score -r - /dev/stdin"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the references (-r -) and the hypotheses (FILE /dev/stdin): give a file for one"
    run bash -c "tfm-score -r /dev/stdin < '$BATS_TEST_TMPDIR/t'"
    assert_success
    assert_line -n 0 --partial "BLEU = 0.00 100.0/100.0/100.0/0.0 "
    # one of them from standard input is fine
    run bash -c "tfm-score -r - '$BATS_TEST_TMPDIR/t' < '$BATS_TEST_TMPDIR/t'"
    assert_success
    assert_line -n 0 --partial "BLEU = 0.00 100.0/100.0/100.0/0.0 "
}

@test "line counts must agree: REF: N lines, hypotheses have M" {
    head -n 3003 "$REF" > "$BATS_TEST_TMPDIR/short"
    run tfm-score -r "$BATS_TEST_TMPDIR/short" "$FBK"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/short: 3003 lines, hypotheses have 3004"
}

@test "missing reference or input file: exit 1 naming it" {
    run tfm-score -r /nonexistent/ref "$FBK"
    assert_failure 1
    assert_output --partial "tfm-score: /nonexistent/ref: No such file or directory"
    run tfm-score -r "$REF" /nonexistent/hyp
    assert_failure 1
    assert_output --partial "/nonexistent/hyp: No such file or directory"
}

@test "invalid UTF-8 is an error naming the line" {
    printf 'ok\n\xff bad\n' > "$BATS_TEST_TMPDIR/h"
    printf 'ok\nfine\n' > "$BATS_TEST_TMPDIR/r"
    run tfm-score -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h"
    assert_failure 1
    assert_output --partial "line 2: invalid UTF-8"
}

@test "usage errors exit 2" {
    run tfm-score "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: no reference: give -r REF"
    run tfm-score -r "$REF" --metric bogus "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --metric: 'bogus': expected bleu, chrf or f1"
    run tfm-score -r "$REF" --tok 14 "$FBK"
    assert_failure 2
    run tfm-score -r "$REF" --compound-split "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --compound-split needs --tokenized"
    run tfm-score -r "$REF" --chrf-word-order 9 -m chrf "$FBK"
    assert_failure 2
    assert_line -n 0 "tfm-score: --chrf-word-order: '9': expected an integer from 0 to 6"
    run tfm-score -r "$REF" --per-sentence "$FBK"
    assert_failure 2
    run tfm-score -r "$REF" "$FBK" "$KIT"
    assert_failure 2
    run tfm-score --bogus
    assert_failure 2
}

@test "--tokenized and --tok exclude each other in either order" {
    printf 'a b c d\n' > "$BATS_TEST_TMPDIR/h"
    for args in "--tok intl --tokenized" "--tokenized --tok intl" "--tokenized --compound-split --tok 13a"; do
        run tfm-score $args -r "$BATS_TEST_TMPDIR/h" "$BATS_TEST_TMPDIR/h"
        assert_failure 2
        assert_line -n 0 "tfm-score: --tokenized and --tok exclude each other"
    done
}

@test "--smooth-value only with --smooth floor or add-k, which use it" {
    printf 'a b c d\n' > "$BATS_TEST_TMPDIR/h"
    for args in "" "--smooth exp" "--smooth none" "--tokenized" "-m chrf" "-m f1"; do
        run tfm-score $args --smooth-value 7 -r "$BATS_TEST_TMPDIR/h" "$BATS_TEST_TMPDIR/h"
        assert_failure 2
        assert_line -n 0 "tfm-score: --smooth-value is for --smooth floor or add-k"
    done
    for s in floor add-k; do
        run tfm-score --smooth $s --smooth-value 7 -r "$BATS_TEST_TMPDIR/h" "$BATS_TEST_TMPDIR/h"
        assert_success
    done
}

@test "--help and --version" {
    run tfm-score --help
    assert_success
    assert_line -n 0 --partial "usage: tfm-score -r REF"
    run tfm-score -h
    assert_success
    run tfm-score --version
    assert_success
    assert_output "tfm-score $(cat "$TFM_ROOT/VERSION")"
}

@test "f1: sample.rsl reproduced with --param sample.prm --per-sentence" {
    run bash -c "tfm-score -m f1 -p '$E/sample/sample.prm' --per-sentence -r '$E/sample/sample.gld' '$E/sample/sample.tst' 2> /dev/null"
    assert_success
    # every line but the totals row (column widths) and FMeasure (older evalb) is identical
    diff <(echo "$output" | grep -v FMeasure | grep -v '^      *87.76') \
         <(grep -v '^      *87.76' "$E/sample/sample.rsl")
    assert_line "                 87.76  90.53     86    98    95     16    108   106    98.15"
}

@test "f1: bug.rsl-new reproduced with new.prm (the quote fix)" {
    run tfm-score -m f1 -p "$E/new.prm" -v -r "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_success
    diff <(echo "$output" | sed 's/^ *//' | grep -v '^62.83') <(grep -v '62.83  57.72' "$E/bug/bug.rsl-new")
}

@test "f1 default output: F1 P R, counts, cutoff, signature; errors on stderr" {
    run tfm-score -q -m f1 -p "$E/sample/sample.prm" -r "$E/sample/sample.gld" "$E/sample/sample.tst"
    assert_success
    assert_line -n 0 "F1 = 89.12 P = 90.53 R = 87.76 (sentences = 24 valid = 17 errors = 5 skipped = 2 matched = 86 gold = 98 test = 95)"
    assert_line -n 1 "len<=40: F1 = 83.20 P = 85.25 R = 81.25 (sentences = 23 valid = 16 errors = 5 skipped = 2 matched = 52 gold = 64 test = 61)"
    assert_line -n 2 "evalb:sample|labeled:yes|cutoff:40|version:tfm-0.1.0"
    run bash -c "tfm-score -m f1 -p '$E/sample/sample.prm' -r '$E/sample/sample.gld' '$E/sample/sample.tst' 2>&1 >/dev/null"
    assert_line -n 0 "tfm-score: $E/sample/sample.tst: line 12: word mismatch (is|was)"
    run bash -c "tfm-score -q -m f1 -p '$E/sample/sample.prm' -r '$E/sample/sample.gld' '$E/sample/sample.tst' 2>&1 >/dev/null"
    assert_output ""
}

@test "f1 with COLLINS built in, and LABELED 0 from a .prm" {
    run tfm-score -q -m f1 -r "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_success
    assert_line -n 2 "evalb:COLLINS|labeled:yes|cutoff:40|version:tfm-0.1.0"
    { grep -v LABELED "$E/COLLINS.prm"; echo "LABELED 0"; echo "CUTOFF_LEN 30"; } > "$BATS_TEST_TMPDIR/u.prm"
    run tfm-score -m f1 --param "$BATS_TEST_TMPDIR/u.prm" -r "$P/wsj_0150-0169.dev.oneline.txt" "$P/wsj_0150-0169.dev.oneline.txt"
    assert_line -n 0 --partial "F1 = 100.00 P = 100.00 R = 100.00 (sentences = 248 valid = 248"
    assert_line -n 1 --partial "len<=30: "
    assert_line -n 2 "evalb:u|labeled:no|cutoff:30|version:tfm-0.1.0"
    echo "BOGUS 3" > "$BATS_TEST_TMPDIR/bad.prm"
    run tfm-score -m f1 -p "$BATS_TEST_TMPDIR/bad.prm" -r "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/bad.prm: line 1: unknown keyword 'BOGUS'"
}

@test "f1: malformed trees name the line; a bad gold tree is fatal" {
    printf '(S (NN a) (NN b))\n(S (NN c) (NN d))\n' > "$BATS_TEST_TMPDIR/g"
    printf '(S (NN a) (NN b))\n(S (NN c) (NN d)\n' > "$BATS_TEST_TMPDIR/t"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_success
    assert_line "tfm-score: $BATS_TEST_TMPDIR/t: line 2: malformed tree: column 17: unbalanced brackets: 1 left open at the end"
    assert_line --partial "(sentences = 2 valid = 1 errors = 1 skipped = 0"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/t" "$BATS_TEST_TMPDIR/g"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/t: line 2: column 17: unbalanced brackets: 1 left open at the end"
}

@test "f1: \"(X )\" is a preterminal with an empty word, as EVALB reads it" {
    # the expected rows and counts are EVALB's own output for these lines
    printf '(S (NP (NN x)) (VP (VB y)))\n(S (NP (NN x)) (NP (NN )) (VP (VB y)))\n' > "$BATS_TEST_TMPDIR/g"
    printf '( )\n(S (NP (NN x)) (NP (NN )) (VP (VB y)))\n' > "$BATS_TEST_TMPDIR/t"
    run tfm-score -m f1 -v -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_success
    assert_line "tfm-score: $BATS_TEST_TMPDIR/t: line 1: length mismatch (2|1)"
    assert_line "   2    3    0  100.00 100.00     4      4    4      0      3     3   100.00"
    assert_line "Number of sentence        =      2"
    assert_line "Number of Error sentence  =      1"
    assert_line "Number of Skip  sentence  =      0"
    # "(X)" without the space stays a bracket over nothing: the test has no words
    printf '(S (NP (NN x)) (VP (VB y)))\n' > "$BATS_TEST_TMPDIR/g"
    printf '(S (X))\n' > "$BATS_TEST_TMPDIR/t"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_line -n 0 --partial "(sentences = 1 valid = 0 errors = 0 skipped = 1"
}

@test "f1: labels that differ only after 255 bytes are different labels" {
    # EVALB gives matched 1 of 2 for labels of 21 bytes that differ in the last; labels
    # of 301 bytes score the same
    for n in 20 300; do
        a=$(printf 'A%.0s' $(seq $n))
        printf '(S (%sX (NN a) (NN b)) (VB c))\n' "$a" > "$BATS_TEST_TMPDIR/g"
        printf '(S (%sY (NN a) (NN b)) (VB c))\n' "$a" > "$BATS_TEST_TMPDIR/t"
        run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
        assert_success
        assert_line -n 0 "F1 = 50.00 P = 50.00 R = 50.00 (sentences = 1 valid = 1 errors = 0 skipped = 0 matched = 1 gold = 2 test = 2)"
    done
    # and the function tag is still cut from a long label
    printf '(S (%s-SBJ (NN a) (NN b)) (VB c))\n' "$a" > "$BATS_TEST_TMPDIR/t"
    printf '(S (%s-TMP (NN a) (NN b)) (VB c))\n' "$a" > "$BATS_TEST_TMPDIR/g"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_line -n 0 --partial "F1 = 100.00 "
}

@test "f1: a word mismatch quotes the words whole and escaped, in the message and the JSON" {
    a=$(printf 'a%.0s' $(seq 99))
    # byte 100 of each word is the first of a two-byte character, and a control character
    printf '(S (NN %s\303\251x) (NN \001b))\n' "$a" > "$BATS_TEST_TMPDIR/g"
    printf '(S (NN %s\303\251y) (NN \001b))\n(S (NN a) (NN \001b))\n' "$a" > "$BATS_TEST_TMPDIR/t"
    printf '(S (NN a) (NN \001c))\n' >> "$BATS_TEST_TMPDIR/g"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_success
    assert_line "tfm-score: $BATS_TEST_TMPDIR/t: line 1: word mismatch ($a$(printf '\303\251')x|$a$(printf '\303\251')y)"
    assert_line "tfm-score: $BATS_TEST_TMPDIR/t: line 2: word mismatch (\\x01c|\\x01b)"
    run bash -c "tfm-score -m f1 --json -v -r '$BATS_TEST_TMPDIR/g' '$BATS_TEST_TMPDIR/t' 2> /dev/null | iconv -f UTF-8 -t UTF-8"
    assert_success
    assert_output --partial '"reason": "word mismatch (\\x01c|\\x01b)"'
}

@test "f1: the parameter file's name in the signature and JSON is whole characters, escaped" {
    a=$(printf 'a%.0s' $(seq 62))
    e=$(printf '\303\251')
    cp "$E/COLLINS.prm" "$BATS_TEST_TMPDIR/$a$e$e$e.prm"
    printf '(S (NN a))\n' > "$BATS_TEST_TMPDIR/g"
    run tfm-score -m f1 -p "$BATS_TEST_TMPDIR/$a$e$e$e.prm" -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/g"
    assert_line -n 2 "evalb:$a$e$e$e|labeled:yes|cutoff:40|version:tfm-0.1.0"
    p="$BATS_TEST_TMPDIR/x$(printf '\001')y.prm"
    cp "$E/COLLINS.prm" "$p"
    run bash -c 'tfm-score -m f1 --json -p "$1" -r "$2" "$2" | iconv -f UTF-8 -t UTF-8' _ "$p" "$BATS_TEST_TMPDIR/g"
    assert_success
    assert_line ' "param": "x\\x01y",'
    # --param - reads standard input (it was a file named '-'), named <stdin>; with the
    # trees from there too, a usage error
    cd "$BATS_TEST_TMPDIR"
    run bash -c 'tfm-score -m f1 -p - -r "$1" "$1" < "$2"' _ "$BATS_TEST_TMPDIR/g" "$E/COLLINS.prm"
    assert_success
    assert_line -n 2 "evalb:<stdin>|labeled:yes|cutoff:40|version:tfm-0.1.0"
    run bash -c 'tfm-score -m f1 -p - -r "$1" < "$2"' _ "$BATS_TEST_TMPDIR/g" "$E/COLLINS.prm"
    assert_failure 2
    assert_line -n 0 "tfm-score: standard input cannot feed both the parameter file (--param -) and the hypotheses (FILE - or none): give a file for one"
}

@test "f1: more than MAX_ERROR errors gives up (exit 1); --max-error raises it" {
    for i in $(seq 12); do echo "(S (NN a) (NN b))"; done > "$BATS_TEST_TMPDIR/g"
    for i in $(seq 12); do echo "(S (NN a) (NN c))"; done > "$BATS_TEST_TMPDIR/t"
    run tfm-score -m f1 -q -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/t: line 12: more than MAX_ERROR 10 errors, giving up"
    run tfm-score -m f1 -q --max-error 20 -r "$BATS_TEST_TMPDIR/g" "$BATS_TEST_TMPDIR/t"
    assert_success
    assert_line -n 0 --partial "errors = 12"
}

@test "--linearize (.mrg and one-line agree, --keep-words), --restore, and f1 from linearized output" {
    tfm-score --linearize "$P/wsj_0150-0169.dev.mrg" > "$BATS_TEST_TMPDIR/lin"
    run bash -c "tfm-score --linearize < '$P/wsj_0150-0169.dev.oneline.txt' | cmp - '$BATS_TEST_TMPDIR/lin'"
    assert_success
    [ "$(wc -l < "$BATS_TEST_TMPDIR/lin")" -eq 248 ]
    cut -f1 "$BATS_TEST_TMPDIR/lin" > "$BATS_TEST_TMPDIR/src"
    cut -f2 "$BATS_TEST_TMPDIR/lin" > "$BATS_TEST_TMPDIR/tgt"
    run bash -c "head -1 '$BATS_TEST_TMPDIR/tgt'"
    assert_output --partial "(S (S (NP XX XX XX )NP (VP XX (VP XX (PP XX"
    run tfm-score -m f1 -r "$P/wsj_0150-0169.dev.oneline.txt" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/tgt"
    assert_line -n 0 "F1 = 100.00 P = 100.00 R = 100.00 (sentences = 248 valid = 248 errors = 0 skipped = 0 matched = 5013 gold = 5013 test = 5013)"
    # drop every ")NP": restoration repairs; precision and recall fall
    run bash -c "sed 's/ )NP//g' '$BATS_TEST_TMPDIR/tgt' | tfm-score -m f1 -r '$P/wsj_0150-0169.dev.oneline.txt' --linearized"
    assert_success
    assert_line -n 0 --partial "errors = 0 skipped = 0"
    refute_line -n 0 --partial "F1 = 100.00"
    # --keep-words: the words where XX stood; restored and scored as well, 100
    tfm-score --linearize --keep-words "$P/wsj_0150-0169.dev.oneline.txt" > "$BATS_TEST_TMPDIR/linw"
    run bash -c "head -1 '$BATS_TEST_TMPDIR/linw' | cut -f2"
    assert_output --partial "(S (S (NP A.L. Williams Corp. )NP (VP was (VP merged (PP into"
    run bash -c "cut -f1 '$BATS_TEST_TMPDIR/linw' | cmp - '$BATS_TEST_TMPDIR/src'"
    assert_success
    cut -f2 "$BATS_TEST_TMPDIR/linw" > "$BATS_TEST_TMPDIR/tgtw"
    run tfm-score -m f1 -r "$P/wsj_0150-0169.dev.oneline.txt" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/tgtw"
    assert_line -n 0 "F1 = 100.00 P = 100.00 R = 100.00 (sentences = 248 valid = 248 errors = 0 skipped = 0 matched = 5013 gold = 5013 test = 5013)"
    echo "(S (NP XX XX )NP (VP XX" > "$BATS_TEST_TMPDIR/l1"
    echo "The cat sat down" > "$BATS_TEST_TMPDIR/s1"
    run tfm-score --restore --source "$BATS_TEST_TMPDIR/s1" "$BATS_TEST_TMPDIR/l1"
    assert_output "(S (NP (XX The) (XX cat)) (VP (XX sat) (XX down)))"
    run tfm-score --restore "$BATS_TEST_TMPDIR/l1"
    assert_failure 2
    run tfm-score --linearize -r x
    assert_failure 2
    printf '(S (NN a)\n' > "$BATS_TEST_TMPDIR/bad"
    run tfm-score --linearize "$BATS_TEST_TMPDIR/bad"
    assert_failure 1
    assert_output --partial "tree starting on line 1: column"
}

@test "f1 restoration: every preterminal takes the gold tag; --keep-tags only XX ones" {
    # An imperfect model writes words and stray labels where XX goes.  The gold trees have
    # punctuation (. and ,), which COLLINS.prm deletes by its tag.
    printf '%s\n' '(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))' \
        '(S (NP (PRP It)) (VP (VBD ran) (, ,) (ADVP (RB fast))) (. !))' > "$BATS_TEST_TMPDIR/g"
    printf '%s\n' 'The cat sat .' 'It ran , fast !' > "$BATS_TEST_TMPDIR/src"
    # "." takes the tag "sat" in line 1, "," the tag "ran" in line 2
    printf '%s\n' '(S (NP The cat )NP (VP sat )VP sat )S' \
        '(S (NP XX )NP (VP XX ran (ADVP NP )ADVP )VP XX )S' > "$BATS_TEST_TMPDIR/h"
    # By default all take the gold tags: punctuation is deleted alike, the brackets match.
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_line -n 0 "F1 = 100.00 P = 100.00 R = 100.00 (sentences = 2 valid = 2 errors = 0 skipped = 0 matched = 7 gold = 7 test = 7)"
    refute_output --partial "mismatch"
    run tfm-score -m f1 -v -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_line "   1    4    0  100.00 100.00     3      3    3      0      3     3   100.00"
    assert_line "   2    5    0  100.00 100.00     4      4    4      0      3     3   100.00"
    # --keep-tags (the model writes real tags): only XX is retagged, as before; "sat" and
    # "ran" are no punctuation tags, so the test keeps a word the gold deletes.
    run tfm-score -m f1 --keep-tags -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_line "tfm-score: $BATS_TEST_TMPDIR/h: line 1: length mismatch (3|4)"
    assert_line "tfm-score: $BATS_TEST_TMPDIR/h: line 2: length mismatch (3|4)"
    assert_line --partial "(sentences = 2 valid = 0 errors = 2 skipped = 0"
    run tfm-score -m f1 -q -v --keep-tags -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_line "   1    4    1    0.00   0.00     0      0    0      0      3     0     0.00"
}

@test "restoration: brackets nested too deep are dropped, so the tree reads back and scores" {
    # 100000 openings (a model's output without --tree): the restored tree keeps the
    # deepest nesting the tree reader takes (4096 brackets with the preterminal and an
    # outer wrapper); scoring it crashed, and --restore printed an error
    awk 'BEGIN { for (i = 0; i < 100000; i++) printf "(S "; printf "XX"; \
                 for (i = 0; i < 100000; i++) printf " )S"; print "" }' > "$BATS_TEST_TMPDIR/h"
    echo w > "$BATS_TEST_TMPDIR/src"
    echo '( (S (NN w)) )' > "$BATS_TEST_TMPDIR/g"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_line -n 0 --partial "(sentences = 1 valid = 1 errors = 0 skipped = 0 matched = 2 gold = 2 test = 4095)"
    tfm-score --restore --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h" > "$BATS_TEST_TMPDIR/t"
    run tfm-score --linearize "$BATS_TEST_TMPDIR/t"
    assert_success
    [ "$(grep -o '(S' <<< "$output" | wc -l)" -eq 4094 ]
}

@test "restoration: a label or tag ends at its first bracket, so the tree reads back" {
    # a model's output without --tree, or with count (a leaf "XX" then ")"): the restored
    # tree printed "(S (NP) (XX a)) (XX) b) ...", which no tree reader takes
    echo '(S (NP) XX )NP XX) (A(B XX )S' > "$BATS_TEST_TMPDIR/h"
    echo 'a b c' > "$BATS_TEST_TMPDIR/src"
    run tfm-score --restore --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_output "(S (NP (XX a)) (XX b) (A (XX c)))"
    echo "$output" > "$BATS_TEST_TMPDIR/t"
    run tfm-score --linearize "$BATS_TEST_TMPDIR/t"
    assert_success
    assert_output "$(printf 'a b c\t(S (NP XX )NP XX (A XX )A )S')"
}

@test "--oneline: each tree on a line, as --linearize reads the file" {
    printf '(S (NP a)\r\n  (VP b)) (S (NP c) (VP d))\r\n\r\n( (X (-NONE- *)))\n' > "$BATS_TEST_TMPDIR/t"
    gzip -c "$BATS_TEST_TMPDIR/t" > "$BATS_TEST_TMPDIR/t.gz"
    run tfm-score --oneline "$BATS_TEST_TMPDIR/t.gz"
    assert_success
    assert_output "$(printf '%s\n' '(S (NP a) (VP b))' '(S (NP c) (VP d))' '( (X (-NONE- *)))')"
    [ "$(tfm-score --linearize "$BATS_TEST_TMPDIR/t" | wc -l)" -eq 3 ]
    run tfm-score --oneline --linearize "$BATS_TEST_TMPDIR/t"
    assert_failure 2
    assert_line -n 0 "tfm-score: --linearize and --oneline exclude each other"
    run tfm-score --oneline --keep-words "$BATS_TEST_TMPDIR/t"
    assert_failure 2
    echo '(S (a b' > "$BATS_TEST_TMPDIR/bad"
    run tfm-score --oneline "$BATS_TEST_TMPDIR/bad"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/bad: tree starting on line 1: column 8: unbalanced brackets: 2 left open at the end"
}

@test "f1 restoration: a forest output scores as one tree" {
    printf '%s\n%s\n' '(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))' \
        '(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))' > "$BATS_TEST_TMPDIR/g"
    printf 'The cat sat on the mat .\nThe cat sat on the mat .\n' > "$BATS_TEST_TMPDIR/src"
    # Line 1 closes S early and goes on; line 2 opens no constituent before its first words.
    printf '%s\n' '(S (NP XX XX )NP )S (VP XX XX (NP XX XX )NP )VP XX' \
        'XX XX (VP XX XX (NP XX XX )NP )VP XX' > "$BATS_TEST_TMPDIR/h"
    run tfm-score --restore --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_line -n 0 "(S (NP (XX The) (XX cat)) (VP (XX sat) (XX on) (NP (XX the) (XX mat))) (XX .))"
    assert_line -n 1 "(S (XX The) (XX cat) (VP (XX sat) (XX on) (NP (XX the) (XX mat))) (XX .))"
    run tfm-score --restore --root FRAG --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_line -n 1 "(FRAG (XX The) (XX cat) (VP (XX sat) (XX on) (NP (XX the) (XX mat))) (XX .))"
    # Gold brackets without "." (deleted): S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6), 5 each.
    # Line 1 restores to S(0,6) NP(0,2) VP(2,6) NP(4,6): 4 test, 4 matched: R 80, P 100.
    # Line 2 to S(0,6) VP(2,6) NP(4,6) (S the root opened): 3 and 3: R 60, P 100.
    # Together 7 matched of 10 gold and 7 test: R 70.00, P 100.00, F1 2*.7/1.7 = 82.35.
    # (As the forests (S NP) VP (XX .) and XX XX VP XX they scored 60/75 and 40/100.)
    run tfm-score -m f1 -v -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_success
    assert_line "   1    7    0   80.00 100.00     4      5    4      0      6     6   100.00"
    assert_line "   2    7    0   60.00 100.00     3      5    3      0      6     6   100.00"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_line -n 0 "F1 = 82.35 P = 100.00 R = 70.00 (sentences = 2 valid = 2 errors = 0 skipped = 0 matched = 7 gold = 10 test = 7)"
    # --root FRAG: line 2's root no longer matches the gold S: 6 matched, 7 test.
    run tfm-score -m f1 --root FRAG -r "$BATS_TEST_TMPDIR/g" --source "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/h"
    assert_line -n 0 --partial "P = 85.71 R = 60.00 (sentences = 2 valid = 2 errors = 0 skipped = 0 matched = 6 gold = 10 test = 7)"
    # An output without any opening token: the root holds every word.
    printf '\n' > "$BATS_TEST_TMPDIR/empty"
    printf 'a b\n' > "$BATS_TEST_TMPDIR/ab"
    run tfm-score --restore --source "$BATS_TEST_TMPDIR/ab" "$BATS_TEST_TMPDIR/empty"
    assert_output "(S (XX a) (XX b))"
}

@test "--keep-tags, --keep-words, --root, --keep-function-tags: usage errors where they mean nothing" {
    run tfm-score -m f1 --keep-tags -r "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_failure 2
    assert_line -n 0 "tfm-score: --keep-tags and --root are for --linearize, --restore or --metric f1 with --source or --linearized"
    run tfm-score -r "$REF" --root S "$FBK"
    assert_failure 2
    run tfm-score -m f1 --keep-function-tags --linearized -r "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_failure 2
    assert_line -n 0 "tfm-score: --keep-function-tags and --keep-words are for --linearize"
    run tfm-score -r "$REF" --keep-words "$FBK"
    assert_failure 2
    run tfm-score --linearize --keep-words --keep-tags "$E/bug/bug.gld"
    assert_failure 2
    assert_line -n 0 "tfm-score: --keep-tags and --keep-words exclude each other"
    # one mode: neither option overrides the other, in either order
    run tfm-score --linearize --restore --source "$E/bug/bug.gld" "$E/bug/bug.gld"
    assert_failure 2
    assert_line -n 0 "tfm-score: --linearize and --restore exclude each other"
    run tfm-score --restore --source "$E/bug/bug.gld" --linearize "$E/bug/bug.gld"
    assert_failure 2
    assert_line -n 0 "tfm-score: --linearize and --restore exclude each other"
    run tfm-score --restore --keep-words --source "$E/bug/bug.gld" "$E/bug/bug.gld"
    assert_failure 2
    run tfm-score --restore --keep-tags --source "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_failure 2
    run tfm-score --linearize --root S "$E/bug/bug.gld"
    assert_failure 2
    run tfm-score --restore --root 'A B' --source "$E/bug/bug.gld" "$E/bug/bug.tst"
    assert_failure 2
    assert_line -n 0 "tfm-score: --root: 'A B': expected a label (no space or bracket)"
}

@test "a token stream is detokenized with its embedded model" {
    command -v tfm-tokenize > /dev/null || skip "tfm-tokenize not built"
    head -n 300 "$REF" > "$BATS_TEST_TMPDIR/r"
    head -n 300 "$FBK" > "$BATS_TEST_TMPDIR/h"
    tfm-tokenize train -m "$BATS_TEST_TMPDIR/m.model" --vocab 500 -O hard_vocab_limit=false \
        "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h" 2> /dev/null
    tfm-tokenize encode -m "$BATS_TEST_TMPDIR/m.model" -o "$BATS_TEST_TMPDIR/h.tfm" "$BATS_TEST_TMPDIR/h"
    tfm-tokenize decode "$BATS_TEST_TMPDIR/h.tfm" > "$BATS_TEST_TMPDIR/h.txt"
    want=$(tfm-score -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h.txt")
    run tfm-score -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/h.tfm"
    assert_success
    assert_output "$want"
    run bash -c "tfm-score -r '$BATS_TEST_TMPDIR/r' < '$BATS_TEST_TMPDIR/h.tfm'"
    assert_output "$want"
    head -c 100 "$BATS_TEST_TMPDIR/h.tfm" > "$BATS_TEST_TMPDIR/cut.tfm"
    run tfm-score -r "$BATS_TEST_TMPDIR/r" "$BATS_TEST_TMPDIR/cut.tfm"
    assert_failure 1
    assert_output --partial "tfm-score: $BATS_TEST_TMPDIR/cut.tfm"
}

@test "a binary -p file: its bytes are escaped in the message, never echoed raw" {
    printf '(S (NP (NN x)))\n' > "$BATS_TEST_TMPDIR/g"
    printf '\177ELF\002\001\033[2J 1\n' > "$BATS_TEST_TMPDIR/bin.prm"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" -p "$BATS_TEST_TMPDIR/bin.prm" "$BATS_TEST_TMPDIR/g"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/bin.prm: line 1: unknown keyword '\\x7fELF\\x02\\x01\\x1b[2J'"
    printf 'CUTOFF_LEN \001\n' > "$BATS_TEST_TMPDIR/ctl.prm"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" -p "$BATS_TEST_TMPDIR/ctl.prm" "$BATS_TEST_TMPDIR/g"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/ctl.prm: line 1: CUTOFF_LEN: '\\x01' is not a number in 0..1000000"
    head -c 4096 "$(command -v tfm-score)" > "$BATS_TEST_TMPDIR/exe.prm"
    run tfm-score -m f1 -r "$BATS_TEST_TMPDIR/g" -p "$BATS_TEST_TMPDIR/exe.prm" "$BATS_TEST_TMPDIR/g"
    assert_failure 1
    assert_output "tfm-score: $BATS_TEST_TMPDIR/exe.prm: line 1: a NUL byte (not a parameter file)"
}

@test "--linearize: an error is placed at its own line and column" {
    printf '(S (NP (DT The) (NN cat)) (VP (VBD sat)))\n(S\n  (NP (DT The) (NN cat)) x)\n' > "$BATS_TEST_TMPDIR/t.mrg"
    run tfm-score --linearize "$BATS_TEST_TMPDIR/t.mrg"
    assert_failure 1
    assert_line "tfm-score: $BATS_TEST_TMPDIR/t.mrg: tree starting on line 2: line 3, column 26: a word beside brackets"
    printf '(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) (X y) z\n' > "$BATS_TEST_TMPDIR/one.mrg"
    run tfm-score --linearize "$BATS_TEST_TMPDIR/one.mrg"
    assert_failure 1
    assert_line "tfm-score: $BATS_TEST_TMPDIR/one.mrg: tree starting on line 1: column 55: a word outside brackets"
}

@test "every output on the bundled data is byte for byte the recorded one (tests/score-cases.sh)" {
    # 238 invocations: BLEU, chrF, F1, text and JSON, per sentence, --linearize, --restore,
    # errors.  A deliberate change is recorded again as the script's header says.
    run bash -c "'$TFM_ROOT/tests/score-cases.sh' --hash | diff '$TFM_ROOT/tests/fixtures/score-cases.sha256' -"
    assert_success
    assert_output ""
}
