# plot-lib.sh: what plot-train and plot-attention share, sourced by both after they set
# prog.  It makes tmp, a directory of this run's own, and gives start_part.
#
# part: the picture being drawn, under a name of this run's own (mktemp), beside where it
# goes: two runs at once each write their own and rename it whole.  A signal ends the run
# as it would have without the trap, and the exit trap removes what it leaves.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$prog.XXXXXX") || exit 1
part=
trap 'rm -rf "$tmp"; [ -z "$part" ] || rm -f "$part"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# start_part FILE: part, a new empty file FILE.tmp.XXXXXX, with the mode a new FILE would have
start_part() {
    part=$(mktemp "$1.tmp.XXXXXX") || exit 1
    chmod "$(umask -S)" "$part" && chmod a-x "$part"
}
