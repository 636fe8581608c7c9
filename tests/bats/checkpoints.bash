# checkpoints.bash: helpers for Bats files that compare checkpoints (`load checkpoints`).
# None of them can pass on nothing: a checkpoint that tfm-cat cannot read, or one without
# parameters, fails params; two whose parameters do not pair up value for value make
# max_diff and mean_diff print "none" and fail, which no bound accepts.

# The parameter records of a checkpoint as text (tfm-cat, the independent dumper).
params() {
    tfm-cat --values "$1" | awk '/^record/ { p = ($3 ~ /^param\./); n += p } p { print }
                                 END { exit !n }'
    local st=("${PIPESTATUS[@]}")
    [ "${st[0]}" -eq 0 ] || { echo "params: $1: tfm-cat failed" >&2; return 1; }
    [ "${st[1]}" -eq 0 ] || { echo "params: $1: no parameter records" >&2; return 1; }
}

# The parameter values of two checkpoints side by side, "a b" a line (a line of one value
# where one has fewer), for the awk programs below.
paired_values() {
    paste -d ' ' <(params "$1" | tr ' \t' '\n\n') <(params "$2" | tr ' \t' '\n\n')
}

# Largest absolute difference between the parameters of two checkpoints.
max_diff() {
    paired_values "$1" "$2" |
        awk 'NF == 2 && $1 + 0 == $1 { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; k++ }
             NF == 1 { odd = 1 }
             END { if (!k || odd) { print "none"; exit 1 } printf "%.3g\n", m }'
}

# Mean absolute difference between the parameters of two checkpoints.
mean_diff() {
    paired_values "$1" "$2" |
        awk 'NF == 2 && $1 + 0 == $1 { d = $1 - $2; if (d < 0) d = -d; s += d; k++ }
             NF == 1 { odd = 1 }
             END { if (!k || odd) { print "none"; exit 1 } printf "%.3g\n", s / k }'
}
