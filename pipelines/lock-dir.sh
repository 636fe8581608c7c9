# pipelines/lock-dir.sh, sourced by bash: lock_dir, the turns that runs sharing a directory
# take (wmt14-fetch.sh for WMT_DL, wmt14.mk's corpus rules for WMT14_DIR).
#
# lock_dir DIR WHO WHAT: make DIR and hold its lock (flock(1) on descriptor 9) for the rest
# of the calling shell.  flock -n exits 1 when another run holds the lock: say so
# ("WHO: another run is WHAT there: waiting for it") and wait.  Any other failure (a file
# system that cannot lock a directory: NFSv4, whose flock needs a descriptor open for
# writing, Lustre mounted without flock; or no flock at all) is said, and the run goes on
# alone, as it would without a second run.  Returns 1 when DIR cannot be made or opened.
lock_dir() {
    mkdir -p "$1" && exec 9< "$1" || return 1
    local rc=0
    flock -n 9 || rc=$?
    if [ $rc -eq 1 ]; then
        echo "$2: another run is $3 there: waiting for it" >&2
        flock 9 || return 1
    elif [ $rc -ne 0 ]; then
        echo "$2: cannot lock it (flock exit status $rc): going on without taking turns" \
             "with other runs" >&2
    fi
}
