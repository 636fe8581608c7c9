#!/usr/bin/env bats
# tests/gpu/deps.sh (make gpu-deps, and gpu-report's build stage): the Debian packages a GPU
# image may lack, downloaded here and unpacked there into a private prefix; NCCL and cuBLAS
# from python3's CUDA wheels.  A machine lacking them is played by TFM_DEPS_FORCE.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    D="$TFM_ROOT/tests/gpu/deps.sh"
    export TFM_DEPS_PREFIX="$BATS_TEST_TMPDIR/prefix"
}

# The packages, downloaded once for the file (skips where apt cannot download).
packages() {
    P="$BATS_FILE_TMPDIR/debs"
    if [ ! -e "$P/ok" ]; then
        command -v apt-get > /dev/null || skip "no apt-get here"
        "$D" fetch "$P" > "$BATS_FILE_TMPDIR/fetch.log" 2>&1 || skip "apt-get download failed (no network?): $(tail -1 "$BATS_FILE_TMPDIR/fetch.log")"
        touch "$P/ok"
    fi
}

@test "usage: fetch and env take one directory" {
    run "$D"
    assert_failure 2
    assert_output --partial "usage: deps.sh fetch DIR | deps.sh env DIR"
    run "$D" env
    assert_failure 2
    run "$D" fetch a b
    assert_failure 2
}

@test "a machine with every library: nothing to add" {
    run "$D" env "$BATS_TEST_TMPDIR/none"
    assert_success
    assert_output "# deps: the machine's own"
    [ ! -e "$TFM_DEPS_PREFIX" ]
}

@test "packages needed and none carried: a failure that says make gpu-deps" {
    TFM_DEPS_FORCE=packages run "$D" env "$BATS_TEST_TMPDIR/none"
    assert_failure 1
    assert_output --partial "# deps: missing: OpenBLAS, SentencePiece or zlib, and no packages in $BATS_TEST_TMPDIR/none (make gpu-deps)"
    refute_output --partial "export "
}

@test "fetch, then env: programs build against the unpacked OpenBLAS, SentencePiece and zlib, and run" {
    packages
    for p in libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 \
        libsentencepiece0 libsentencepiece-dev zlib1g zlib1g-dev; do
        ls "$P/${p}"_*.deb
    done
    TFM_DEPS_FORCE=packages run "$D" env "$P"
    assert_success
    assert_output --partial "export CPPFLAGS='-I$TFM_DEPS_PREFIX/usr/include/x86_64-linux-gnu/openblas-pthread -I$TFM_DEPS_PREFIX/usr/include'"
    assert_output --partial "-Wl,-rpath,$TFM_DEPS_PREFIX/usr/lib/x86_64-linux-gnu/openblas-pthread"
    assert_output --partial "# deps: OpenBLAS, SentencePiece, zlib from $P (in $TFM_DEPS_PREFIX)"
    eval "$(grep '^export ' <<< "$output")"
    # zlib-dev's absolute link now points into the prefix
    run readlink "$TFM_DEPS_PREFIX/usr/lib/x86_64-linux-gnu/libz.so"
    assert_output --regexp "^$TFM_DEPS_PREFIX/"
    cd "$BATS_TEST_TMPDIR"
    cat > g.c <<'EOF'
#include <cblas.h>
#include <stdio.h>
#include <zlib.h>
int main(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    printf("%g %g %g %g %lu\n", c[0], c[1], c[2], c[3], crc32(0, (const Bytef *)"a", 1));
    return 0;
}
EOF
    cat > s.cc <<'EOF'
#include <sentencepiece_processor.h>
#include <cstdio>
int main() { sentencepiece::SentencePieceProcessor sp; std::printf("%d\n", sp.GetPieceSize()); }
EOF
    cc $CPPFLAGS -o g g.c $LDFLAGS -lopenblas -lz
    c++ $CPPFLAGS -o s s.cc $LDFLAGS -lsentencepiece
    run ./g
    assert_output "19 22 43 50 3904355907"
    run ldd ./g
    assert_output --regexp "libopenblas\.so\.0 => $TFM_DEPS_PREFIX/"
    run ldd ./s
    assert_output --regexp "libsentencepiece\.so\.0 => $TFM_DEPS_PREFIX/"
    run ./s
    assert_success
    # a second env finds the prefix unpacked and says the same
    TFM_DEPS_FORCE=packages run "$D" env "$P"
    assert_output --partial "# deps: OpenBLAS, SentencePiece, zlib from $P (in $TFM_DEPS_PREFIX)"
}

@test "NCCL and cuBLAS from python3's wheels: headers, links to their libraries, rpaths" {
    command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || skip "no CUDA toolkit: the wheels are looked for beside nvcc only"
    W="$BATS_TEST_TMPDIR/site/nvidia"
    mkdir -p "$W/nccl/include" "$W/nccl/lib" "$W/cublas/include" "$W/cublas/lib"
    echo 'int ncclStub(void);' > "$W/nccl/include/nccl.h"
    echo 'int cublasStub(void); int cublasLtStub(void);' > "$W/cublas/include/cublasLt.h"
    # stand-ins with the sonames of the real ones, which a program then asks for by name
    echo 'int ncclStub(void) { return 7; }' |
        cc -x c -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$W/nccl/lib/libnccl.so.2" -
    echo 'int cublasStub(void) { return 8; }' |
        cc -x c -shared -fPIC -Wl,-soname,libcublas.so.13 -o "$W/cublas/lib/libcublas.so.13" -
    echo 'int cublasLtStub(void) { return 9; }' |
        cc -x c -shared -fPIC -Wl,-soname,libcublasLt.so.13 -o "$W/cublas/lib/libcublasLt.so.13" -
    # a python3 that knows the two modules and where they are
    printf '#!/bin/sh\ncase "$2" in *nvidia.nccl*) echo %s/nccl ;; *nvidia.cublas*) echo %s/cublas ;; *) exit 1 ;; esac\n' "$W" "$W" > "$BATS_TEST_TMPDIR/py"
    chmod +x "$BATS_TEST_TMPDIR/py"
    PYTHON="$BATS_TEST_TMPDIR/py" TFM_DEPS_FORCE=wheels run "$D" env "$BATS_TEST_TMPDIR/none"
    assert_success
    assert_output --partial "# deps: NCCL from python3's nvidia.nccl ($W/nccl); cuBLAS from python3's nvidia.cublas ($W/cublas)"
    eval "$(grep '^export ' <<< "$output")"
    cd "$BATS_TEST_TMPDIR"
    printf '#include <nccl.h>\n#include <cublasLt.h>\nint main(void) { return ncclStub() + cublasStub() + cublasLtStub() == 24 ? 0 : 1; }\n' > w.c
    cc $CPPFLAGS -o w w.c $LDFLAGS -lnccl -lcublas -lcublasLt
    run ./w
    assert_success
    run ldd ./w
    assert_output --partial "libnccl.so.2 => $W/nccl/lib/libnccl.so.2"
    assert_output --partial "libcublasLt.so.13 => $W/cublas/lib/libcublasLt.so.13"
    # without such a python3 the wheels are missing, and it says so
    PYTHON=false TFM_DEPS_FORCE=wheels run "$D" env "$BATS_TEST_TMPDIR/none"
    assert_failure 1
    assert_output --partial "# deps: missing: NCCL (neither beside nvcc nor python3's nvidia.nccl); cuBLAS/cuBLASLt (neither beside nvcc nor python3's nvidia.cublas)"
}
