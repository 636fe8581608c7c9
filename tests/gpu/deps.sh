#!/usr/bin/env bash
# tests/gpu/deps.sh: the libraries tfm builds against, brought to a GPU machine whose image
# lacks them and can fetch nothing (make gpu-report's build stage calls `env`).
#   deps.sh fetch DIR   here, on a Debian machine with apt (make gpu-deps: DIR .gpu-deps):
#                       download the .deb files of OpenBLAS (pthread build), SentencePiece
#                       and zlib, headers and libraries, with OpenBLAS's Fortran runtime:
#                       about 15 MB, carried to the GPU machine with the working tree.
#   deps.sh env DIR     there: print the shell assignments (CPPFLAGS, LDFLAGS) a build needs
#                       for what the machine lacks, and one line `# deps: ...` saying what
#                       came from where.  The packages of DIR are unpacked (dpkg -x) into a
#                       private prefix, TFM_DEPS_PREFIX (/tmp/tfm-deps), never into /; NCCL
#                       and cuBLAS come from the CUDA wheels of the machine's python3 (the
#                       nvidia.nccl and nvidia.cublas packages PyTorch depends on) when the
#                       toolkit beside nvcc has none.  Every library directory used is also
#                       an rpath of what the build links, so the tools run as built.
#                       TFM_DEPS_FORCE (for tests): "packages", "wheels" or both, used even
#                       where the machine has its own.
# Exit status: fetch 1 when a package cannot be downloaded; env 1 when something is still
# missing (its line says what), the assignments printed all the same.
set -u

PKGS="libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
      libsentencepiece0 libsentencepiece-dev zlib1g zlib1g-dev"

fetch() {
    local dir=$1 p
    mkdir -p "$dir" || return 1
    rm -f "$dir"/*.deb
    for p in $PKGS; do
        # as root, apt's sandbox user may not write here: download as root (quietly)
        (cd "$dir" && apt-get download -q "$p" 2>&1 | grep -v '^W: Download is performed unsandboxed') ||
            true
        ls "$dir"/"${p}"_*.deb > /dev/null 2>&1 || { echo "deps.sh: cannot download $p" >&2; return 1; }
    done
    du -sh "$dir" | awk -v n="$(ls "$dir"/*.deb | wc -l)" '{ print "deps.sh: " n " packages, " $1 " in " $2 }'
}

CPPF=() LDF=() USED=() MISSING=()
CHK=()      # flags for the checks only: the toolkit's directories (the Makefile adds its own)
CC=${CC:-cc}
CXX=${CXX:-c++}

# has_header LANG HEADER: the compiler finds HEADER with the flags so far.
has_header() {
    printf '#include <%s>\n' "$2" |
        { [ "$1" = c++ ] && "$CXX" -x c++ -E - "${CPPF[@]}" "${CHK[@]}" ||
            "$CC" -x c -E - "${CPPF[@]}" "${CHK[@]}"; } \
            > /dev/null 2>&1
}

# has_lib NAME: the linker finds -lNAME with the flags so far.
has_lib() {
    local t
    t=$(mktemp "${TMPDIR:-/tmp}/deps.XXXXXX") || return 1
    printf 'int main(void) { return 0; }\n' | "$CC" -x c - -o "$t" "${LDF[@]}" "${CHK[@]}" -l"$1" \
        > /dev/null 2>&1
    local rc=$?
    rm -f "$t"
    return $rc
}

# The arguments joined by "; ".
join() {
    local out=$1
    shift
    for x in "$@"; do out="$out; $x"; done
    printf '%s' "$out"
}

# libdir DIR: link from DIR and find its libraries there at run time.
libdir() { LDF+=("-L$1" "-Wl,-rpath,$1"); }

unpack() {
    local dir=$1 prefix=$2 f
    [ -d "$prefix/usr" ] && return 0
    ls "$dir"/*.deb > /dev/null 2>&1 || return 1
    mkdir -p "$prefix" || return 1
    for f in "$dir"/*.deb; do dpkg -x "$f" "$prefix" || return 1; done
    # a package's absolute links (zlib1g-dev: libz.so -> /lib/.../libz.so.1.2.13) would
    # name the machine's own files: point them into the prefix, where their targets are
    local l t
    while IFS= read -r l; do
        t=$(readlink "$l")
        case $t in /*) [ -e "$prefix$t" ] && ln -sfn "$prefix$t" "$l" ;; esac
    done < <(find "$prefix" -type l)
}

# A module of python3's (nvidia.nccl, nvidia.cublas): its directory, or nothing.
wheel_dir() {
    "${PYTHON:-python3}" -c "import os, $1 as m; print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])" 2> /dev/null
}

# link_wheel DIR NAME...: -lNAME from a wheel's lib/ (which holds libNAME.so.N only): a
# libNAME.so beside the prefix's other links, and DIR/lib as an rpath.
link_wheel() {
    local dir=$1 n so
    shift
    mkdir -p "$PREFIX/links" || return 1
    for n in "$@"; do
        so=$(ls "$dir"/lib/lib"$n".so.* 2> /dev/null | head -1)
        [ -n "$so" ] || return 1
        ln -sf "$so" "$PREFIX/links/lib$n.so"
    done
    LDF+=("-L$PREFIX/links" "-Wl,-rpath,$dir/lib")
}

env_for() {
    local dir=$1 fp=0 fw=0 need=0 cuda_home nvcc w
    case " ${TFM_DEPS_FORCE:-} " in *" packages "*) fp=1 ;; esac
    case " ${TFM_DEPS_FORCE:-} " in *" wheels "*) fw=1 ;; esac
    PREFIX=${TFM_DEPS_PREFIX:-/tmp/tfm-deps}
    # ---- the Debian packages: OpenBLAS, SentencePiece, zlib
    if [ $fp = 1 ] || ! has_header c cblas.h || ! has_lib openblas ||
        ! has_header c++ sentencepiece_processor.h || ! has_lib sentencepiece ||
        ! has_header c zlib.h || ! has_lib z; then
        need=1
    fi
    if [ $need = 1 ]; then
        if unpack "$dir" "$PREFIX"; then
            local u=$PREFIX/usr
            CPPF=("-I$u/include/x86_64-linux-gnu/openblas-pthread" "-I$u/include" "${CPPF[@]}")
            libdir "$u/lib/x86_64-linux-gnu/openblas-pthread"
            libdir "$u/lib/x86_64-linux-gnu"
            libdir "$PREFIX/lib/x86_64-linux-gnu"
            USED+=("OpenBLAS, SentencePiece, zlib from $dir (in $PREFIX)")
        else
            MISSING+=("OpenBLAS, SentencePiece or zlib, and no packages in $dir (make gpu-deps)")
        fi
    fi
    # ---- NCCL and cuBLAS: the toolkit's, else python3's CUDA wheels
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null)
    cuda_home=${CUDA_HOME:-$( [ -n "$nvcc" ] && dirname "$(dirname "$(readlink -f "$nvcc")")")}
    if [ -n "$cuda_home" ]; then
        CHK=("-I$cuda_home/include" "-L$cuda_home/lib64")
        if [ $fw = 1 ] || ! has_header c nccl.h || ! has_lib nccl; then
            w=$(wheel_dir nvidia.nccl)
            if [ -n "$w" ] && [ -f "$w/include/nccl.h" ] && link_wheel "$w" nccl; then
                CPPF=("-I$w/include" "${CPPF[@]}")
                USED+=("NCCL from python3's nvidia.nccl ($w)")
            else
                MISSING+=("NCCL (neither beside nvcc nor python3's nvidia.nccl)")
            fi
        fi
        if [ $fw = 1 ] || ! has_header c cublasLt.h || ! has_lib cublasLt || ! has_lib cublas; then
            w=$(wheel_dir nvidia.cublas)
            if [ -n "$w" ] && [ -f "$w/include/cublasLt.h" ] && link_wheel "$w" cublas cublasLt; then
                CPPF=("-I$w/include" "${CPPF[@]}")
                USED+=("cuBLAS from python3's nvidia.cublas ($w)")
            else
                MISSING+=("cuBLAS/cuBLASLt (neither beside nvcc nor python3's nvidia.cublas)")
            fi
        fi
    fi
    local cpp ld
    cpp=$(printf '%s ' "${CPPF[@]}")
    ld=$(printf '%s ' "${LDF[@]}")
    cpp=$(echo $cpp)
    ld=$(echo $ld)
    if [ -n "$cpp$ld" ]; then
        printf "export CPPFLAGS='%s'\n" "$cpp${CPPFLAGS:+ $CPPFLAGS}"
        printf "export LDFLAGS='%s'\n" "$ld${LDFLAGS:+ $LDFLAGS}"
    fi
    if [ ${#MISSING[@]} -gt 0 ]; then
        echo "# deps: missing: $(join "${MISSING[@]}")${USED[*]:+; used: $(join "${USED[@]}")}"
        return 1
    fi
    if [ ${#USED[@]} -gt 0 ]; then
        echo "# deps: $(join "${USED[@]}")"
    else
        echo "# deps: the machine's own"
    fi
}

case ${1:-} in
fetch) [ $# = 2 ] || { echo "usage: deps.sh fetch DIR" >&2; exit 2; }; fetch "$2" ;;
env) [ $# = 2 ] || { echo "usage: deps.sh env DIR" >&2; exit 2; }; env_for "$2" ;;
*) echo "usage: deps.sh fetch DIR | deps.sh env DIR" >&2; exit 2 ;;
esac
