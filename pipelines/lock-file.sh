# pipelines/lock-file.sh, sourced by bash: lock_file, the turns that runs writing the same
# file take (wmt14-fetch.sh for an archive's NAME.part, wmt14.mk's corpus rules for their
# first .tmp file), and hold_lock, a run's lock of its work directory (common.mk).  The lock is a file's, not its directory's: the jobs of one make -j
# that write other files of the same directory (two archives; the training text and the
# test set) go on side by side, where a directory's lock made each wait for the other.
#
# lock_file FILE WHO WHAT: make FILE's directory, open FILE for appending on descriptor 9
# (an empty FILE is made when there is none), and hold its lock (flock(1)) for the rest of
# the calling shell, or until descriptor 9 is opened again.  flock -n exits 1 when another
# run holds the lock: say so ("WHO: another run is WHAT: waiting for it") and wait.  The
# run waited for may have renamed FILE (made whole) or removed it: the lock is then of a
# file by another name or none, and FILE is opened and locked again.  Any other failure of
# flock (a file system without it: Lustre mounted without flock; or no flock at all) is
# said, and the run goes on alone, as it would without a second run.  Returns 1, saying
# why, when FILE cannot be opened for writing.
lock_file() {
    local rc why
    mkdir -p "$(dirname "$1")" || return 1
    while :; do
        if ! why=$( (: >> "$1") 2>&1 ); then
            echo "$2: cannot write it: ${why##*: }" >&2
            return 1
        fi
        exec 9>> "$1" || return 1
        rc=0
        flock -n 9 || rc=$?
        if [ $rc -eq 1 ]; then
            echo "$2: another run is $3: waiting for it" >&2
            flock 9 || return 1
        elif [ $rc -ne 0 ]; then
            echo "$2: cannot lock it (flock exit status $rc): going on without taking turns" \
                 "with other runs" >&2
            return 0
        fi
        # (both through a symbolic link: descriptor 9 is its target's, and one that named
        # itself would never agree with it, a wait without end)
        [ "$(stat -L -c %d:%i /dev/fd/9)" = "$(stat -L -c %d:%i "$1" 2> /dev/null)" ] && return 0
    done
}

# hold_lock PID FILE: make process PID (a make) the holder of FILE, unless a live make on
# this machine already is: FILE holds the holder's process id and host ("PID HOST"), and
# a holder that has ended (or crashed) is replaced; a holder on another host, which this
# one cannot see, is taken as live.  The check and the write take turns (lock_file).
# Nothing holds a descriptor for the holder: the lock ends with the process, at once.
# Exit status: 0 held; 1 held by another (said on standard output: "pid N on HOST");
# 2 FILE cannot be written (said).
hold_lock() {
    local pid host here comm
    lock_file "$2" "$2" "checking it" || return 2
    read -r pid host < "$2" || true
    case $pid in *[!0-9]*) pid= ;; esac        # not a process id: no holder
    here=$(hostname 2> /dev/null || uname -n)
    if [ -n "$pid" ] && [ "$pid" != "$1" ]; then
        if [ "$host" != "$here" ]; then
            echo "pid $pid on $host"
            return 1
        fi
        comm=$(cat "/proc/$pid/comm" 2> /dev/null || ps -p "$pid" -o comm= 2> /dev/null) || comm=
        case $comm in
        *make*) echo "pid $pid"; return 1 ;;
        esac
    fi
    printf '%s %s\n' "$1" "$here" > "$2"
    exec 9>&-
}
