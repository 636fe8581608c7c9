# report-lib.sh: reading the GPU report's logs into rows of report.md (sourced by
# tests/gpu/report.sh; unit-tested on recorded outputs in tests/bats/gpu-report.bats).
# Every function reads a log file and prints one line; none needs a GPU.

# tap_counts FILE: "P F S" = passed, failed, skipped TAP results in FILE.
tap_counts() {
    awk '/^ok [0-9]+/ { if (tolower($0) ~ /# skip/) s++; else p++ }
         /^not ok [0-9]+/ { f++ }
         END { printf "%d %d %d\n", p, f, s }' "$1" 2>/dev/null || echo "0 0 0"
}

# The skips that test_gpu_ops makes by design, GPU or not: its quick set's big shapes, at
# bf16 the model-level tests (they compare against the CPU at fp32 only), the paper's
# shapes where they run apart (TFM_GPU_OPS_PAPER=0), and the tests that a run of some
# (TFM_GPU_OPS_ONLY) leaves out.
BY_DESIGN='# skip (TFM_GPU_OPS_QUICK: small shapes only|TFM_GPU_OPS_PRECISION=bf16: op tests only|TFM_GPU_OPS_PAPER=0: the paper.s shapes run apart|not selected by TFM_GPU_OPS_ONLY)'

# tap_row NAME FILE RC [strict]: a row for a TAP log; RC the program's exit status (124:
# timed out).  pass: no failure and something passed; fail: a failure, no result at all, a
# non-zero exit without a failed test, or, with strict (a GPU is present, so nothing may be
# skipped), any skip but those BY_DESIGN; "not run": everything skipped (the first skip
# reason shown).
tap_row() {
    local name=$1 file=$2 rc=$3 strict=${4:-} p f s why odd
    read -r p f s < <(tap_counts "$file")
    local counts="$p passed, $f failed, $s skipped"
    why=$(grep -m1 -i '# skip' "$file" | sed 's/.*# [Ss][Kk][Ii][Pp] *//')
    odd=$(grep -i '^ok [0-9].*# skip' "$file" | grep -v -i -E "$BY_DESIGN" | head -1 |
        sed 's/.*# [Ss][Kk][Ii][Pp] *//')
    if [ "$rc" = 124 ]; then
        row "$name" fail "timed out ($counts)"
    elif [ "$f" -gt 0 ]; then
        row "$name" fail "$counts; first: $(grep -m1 '^not ok' "$file" | sed 's/^not ok [0-9]* - *//')"
    elif [ -n "$strict" ] && [ -n "$odd" ]; then
        row "$name" fail "$counts with a GPU present: $odd"
    elif [ "$p" -eq 0 ] && [ "$s" -gt 0 ]; then
        row "$name" "not run" "$counts: $why"
    elif [ "$p" -eq 0 ]; then
        row "$name" fail "no test result (exit $rc)"
    elif [ "$rc" != 0 ]; then
        row "$name" fail "$counts, but exit $rc"
    else
        row "$name" pass "$counts"
    fi
}

# sanitizer_row NAME FILE RC: compute-sanitizer's summary line ("ERROR SUMMARY: 0 errors",
# "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)").  A test of the quick
# set skipped for a reason not BY_DESIGN is a failure: the sanitizer watched no kernel of it.
sanitizer_row() {
    local name=$1 file=$2 rc=$3 summary skipped
    summary=$(grep -E -m1 '(ERROR|RACECHECK) SUMMARY' "$file" | sed 's/^========= *//')
    skipped=$(grep -i '^ok [0-9].*# skip' "$file" | grep -v -i -E "$BY_DESIGN" | head -1 |
        sed 's/.*# [Ss][Kk][Ii][Pp] *//')
    if [ -n "$skipped" ]; then
        row "$name" fail "tests skipped: $skipped${summary:+ ($summary)}"
    elif [ "$rc" = 124 ]; then
        row "$name" fail "timed out${summary:+ ($summary)}"
    elif [ -z "$summary" ]; then
        row "$name" fail "no summary (exit $rc)"
    elif echo "$summary" | grep -Eq '(SUMMARY: 0 errors|SUMMARY: 0 hazards)' && [ "$rc" = 0 ]; then
        row "$name" pass "$summary"
    else
        row "$name" fail "$summary (exit $rc)"
    fi
}

# kv FILE KEY: the value of the last "KEY=VALUE" word in FILE (empty when none).
kv() {
    grep -o "\\b$2=[^ ]*" "$1" 2>/dev/null | tail -1 | cut -d= -f2-
}

# ratio A B: A / B with two decimals, "-" when either is missing or B is 0.
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-";
                                      else printf "%.2f\n", a / b }'
}

# decode_tps FILE: target tokens/s from tfm-decode --progress's last line or from
# torch_decode.py's "sentences=N tokens=N seconds=X".
decode_tps() {
    local t
    t=$(grep -o '[0-9.]* tokens/s' "$1" 2>/dev/null | tail -1 | cut -d' ' -f1)
    if [ -z "$t" ]; then
        local n s
        n=$(kv "$1" tokens)
        s=$(kv "$1" seconds)
        [ -n "$n" ] && [ -n "$s" ] && t=$(awk -v n="$n" -v s="$s" 'BEGIN { if (s > 0) printf "%.1f\n", n / s }')
    fi
    echo "$t"
}

# build_error FILE: the line of a build log that says why the build failed: the first
# message of a compiler, ptxas or the linker, else make's "***" line, else the last line.
# Not merely a line with "error" in it: the build's own commands compile error.c into
# error.o.
build_error() {
    local l
    l=$(grep -m1 -E '(^|[ :])(fatal )?error:|nvcc fatal|ptxas (error|fatal)|undefined reference|cannot find -l' "$1" 2>/dev/null)
    [ -n "$l" ] || l=$(grep -m1 -E '^g?make(\[[0-9]+\])?: \*\*\*' "$1" 2>/dev/null)
    [ -n "$l" ] || l=$(grep -v -e '^(exit ' -e '^\$ ' "$1" 2>/dev/null | tail -1)
    printf '%s\n' "$l"
}

# row NAME STATUS DETAIL: one table row of report.md.
row() {
    printf '| %s | %s | %s |\n' "$1" "$2" "$(printf '%s' "$3" | tr '|\n' '/ ')"
}

# speed_row NAME TFM_TPS TORCH_EAGER TORCH_COMPILE EXTRA: a benchmark row with tfm's target
# tokens/s and its ratios to PyTorch eager and compiled (fail without tfm's figure: the
# benchmark ran and gave none).
speed_row() {
    local name=$1 t=$2 e=$3 c=$4 extra=${5:-}
    if [ -z "$t" ]; then
        row "$name" fail "${extra:-no result}"
        return
    fi
    row "$name" "$t tok/s" "$(ratio "$t" "$e")x PyTorch eager (${e:--}), $(ratio "$t" "$c")x torch.compile (${c:--})${extra:+; $extra}"
}
