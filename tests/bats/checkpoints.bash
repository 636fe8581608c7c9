# checkpoints.bash: helpers for Bats files that compare checkpoints (`load checkpoints`).

# The parameter records of a checkpoint as text (tfm-cat, the independent dumper).
params() {
    tfm-cat --values "$1" | awk '/^record/ { p = ($3 ~ /^param\./) } p'
}

# Largest absolute difference between the parameters of two checkpoints.
max_diff() {
    paste -d ' ' <(params "$1" | tr ' \t' '\n\n') <(params "$2" | tr ' \t' '\n\n') |
        awk 'NF == 2 && $1 + 0 == $1 { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
             END { printf "%.3g\n", m }'
}

# Mean absolute difference between the parameters of two checkpoints.
mean_diff() {
    paste -d ' ' <(params "$1" | tr ' \t' '\n\n') <(params "$2" | tr ' \t' '\n\n') |
        awk 'NF == 2 && $1 + 0 == $1 { d = $1 - $2; if (d < 0) d = -d; s += d; k++ }
             END { printf "%.3g\n", k ? s / k : 0 }'
}
