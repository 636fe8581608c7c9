#!/usr/bin/env bash
# pipelines/wmt14-fetch.sh: make a WMT archive present in a directory, and checked.
#   wmt14-fetch.sh DIR NAME...
# For each NAME, DIR/NAME is checked when it is there: its size and SHA-256 must be those
# that the list gives for NAME (WMT_SUMS, pipelines/wmt14.sums beside this script by
# default; lines "NAME SIZE SHA-256 ADDRESS", # comments).  When it is not there, it is
# downloaded into DIR/NAME.part, continuing what an interrupted run left there (curl -C -),
# checked, and only then renamed DIR/NAME: a file of that name is whole and right.  A
# partial file that the check refuses is removed, so that the next run starts afresh.
#
# The address is WMT_MIRROR/NAME when WMT_MIRROR is set (an http://, https:// or file://
# URL, or a local directory), else the list's.  The connection to the server must open
# within WMT_CONNECT_TIMEOUT seconds (20); a transfer that stalls (under 1 byte a second
# for 120 seconds) stops, and the next run continues it.  Without a network the run stops
# at once, saying which archive it needs from where, and the ways out.
#
# One run at a time downloads an archive: it holds the lock (flock(1)) of NAME.part while
# it writes it, and a second run that needs the same archive meanwhile (another pipeline
# sharing WMT_DL) waits, then finds NAME there and checks it, rather than writing the same
# NAME.part at once; runs (or jobs of one make -j) fetching other archives go on.  An
# archive that is there is checked without the lock: NAME appears only whole, by rename.
# Where NAME.part cannot be locked, the run says so and goes on without the lock.
#
# Exit status: 0 when every archive is there and right, 1 otherwise, 2 on a usage error.
set -u -o pipefail
prog=wmt14-fetch
here=$(cd "$(dirname "$0")" && pwd)
sums=${WMT_SUMS:-$here/wmt14.sums}
mirror=${WMT_MIRROR:-}
timeout=${WMT_CONNECT_TIMEOUT:-20}

if [ $# -lt 2 ]; then
    echo "usage: $prog DIR NAME..." >&2
    exit 2
fi
dir=$1; shift
[ -r "$sums" ] || { echo "$prog: $sums: cannot read the list of archives" >&2; exit 1; }
# A local directory becomes a file:// URL.
case $mirror in
    '' | *://*) ;;
    *) [ -d "$mirror" ] || { echo "$prog: WMT_MIRROR=$mirror: no such directory" >&2; exit 1; }
       mirror=file://$(cd "$mirror" && pwd) ;;
esac

# check FILE SIZE SHA256: empty output when FILE has that size and digest, else the reason.
check() {
    local have
    have=$(stat -c %s "$1") || { echo "cannot read it"; return; }
    if [ "$have" -ne "$2" ]; then echo "$have bytes, not $2"; return; fi
    have=$(sha256sum < "$1" | cut -d ' ' -f 1) || { echo "cannot read it"; return; }
    [ "$have" = "$3" ] || echo "SHA-256 $have, not $3"
}

fetch() {   # NAME
    local name=$1 size sha url line file part why have rc
    line=$(awk -v n="$name" '$1 == n && !/^#/ { print $2, $3, $4; exit }' "$sums")
    [ -n "$line" ] || { echo "$prog: $name: not in $sums" >&2; return 1; }
    read -r size sha url <<< "$line"
    file=$dir/$name
    part=$file.part
    if [ ! -e "$file" ]; then
        lock_file "$part" "$prog: $part" "downloading $name" || return 1
        # made by the run waited for: the empty NAME.part of the lock is not needed
        [ -e "$file" ] && rm -f "$part"
    fi
    if [ -e "$file" ]; then
        why=$(check "$file" "$size" "$sha")
        [ -z "$why" ] && return 0
        echo "$prog: $file: $why (as $sums lists it): not the archive expected;" \
             "remove it, and make again to download it" >&2
        return 1
    fi
    [ -n "$mirror" ] && url=${mirror%/}/$name
    have=0
    [ -e "$part" ] && have=$(stat -c %s "$part")
    if [ "$have" -gt "$size" ]; then
        echo "$prog: $part: $have bytes, more than the $size of $name: emptied" >&2
        : > "$part"; have=0
    fi
    if [ "$have" -lt "$size" ]; then
        command -v curl > /dev/null ||
            { echo "$prog: $name: curl, which downloads the archives, is not installed" >&2
              [ -s "$part" ] || rm -f "$part"; return 1; }
        if [ "$have" -gt 0 ]; then
            echo "$prog: $name: continuing at byte $have of $size from $url" >&2
        else
            echo "$prog: $name: downloading $size bytes from $url" >&2
        fi
        curl --fail --location --silent --show-error --connect-timeout "$timeout" \
             --speed-limit 1 --speed-time 120 -C - -o "$part" "$url"
        rc=$?
        if [ $rc -ne 0 ]; then
            [ -s "$part" ] || rm -f "$part"
            echo "$prog: $name: cannot download $url (curl exit status $rc)." >&2
            echo "$prog: it needs $name ($size bytes, SHA-256 $sha)." >&2
            echo "$prog: Set WMT_MIRROR to a mirror or a local directory that holds it," \
                 "or WMT14_DIR to a directory with the ready files;" \
                 "an interrupted download continues when make runs again." >&2
            return 1
        fi
    fi
    have=$(stat -c %s "$part")
    if [ "$have" -lt "$size" ]; then
        echo "$prog: $part: $have of $size bytes: the transfer ended early;" \
             "make again to continue it" >&2
        return 1
    fi
    why=$(check "$part" "$size" "$sha")
    if [ -n "$why" ]; then
        rm -f "$part"
        echo "$prog: $name from $url: $why (as $sums lists it): refused and removed" >&2
        return 1
    fi
    mv "$part" "$file"
}

. "$(dirname "${BASH_SOURCE[0]}")/lock-file.sh"
status=0
for name; do
    fetch "$name" || status=1
done
exit $status
