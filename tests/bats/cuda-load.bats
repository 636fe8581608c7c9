#!/usr/bin/env bats
# How a binary built with CUDA starts where CUDA cannot be used (src/cuda_plugin.h): no
# driver, a driver too old for the toolkit, a driver that sees no GPU, a driver whose GPU
# the CUDA runtime refuses, the plugin missing or foreign; and every tool starts under an
# address-space limit the CUDA libraries alone would not fit in.  Every case must compute on
# the CPU with --device auto, saying why, and fail with that reason under --device cuda.  Drivers are stand-ins: a tiny
# libcuda.so.1 found first through LD_LIBRARY_PATH, answering cuInit, cuDeviceGetCount
# and cuDriverGetVersion as told.

setup_file() {
    M="$BATS_FILE_TMPDIR"
    D="$TFM_ROOT/data/multi30k-ende"
    zcat "$D/train.en.gz" | head -n 200 > "$M/en.txt"
    zcat "$D/train.de.gz" | head -n 200 > "$M/de.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 300 "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de.tfm" "$M/de.txt"
    tfm-batch -q --tokens 1024 "$M/en.tfm" "$M/de.tfm" > "$M/b.tfm"
    cat > "$M/fake.c" <<'C'
int cuInit(unsigned flags) { (void)flags; return FAKE_INIT; }
int cuDeviceGetCount(int *n) { *n = FAKE_COUNT; return 0; }
int cuDriverGetVersion(int *v) { *v = FAKE_VERSION; return 0; }
int cuGetErrorName(int code, const char **s) { *s = code == 100 ? "CUDA_ERROR_NO_DEVICE" : "?"; return 0; }
C
    fake() {    # fake NAME INIT COUNT VERSION
        mkdir -p "$M/$1"
        cc -shared -fPIC -DFAKE_INIT="$2" -DFAKE_COUNT="$3" -DFAKE_VERSION="$4" \
            -o "$M/$1/libcuda.so.1" "$M/fake.c"
    }
    # a plugin whose GPUs are there and do not open (tfm_cuda_plugin_entry's table, probe
    # and backend only): the paths of device.c that need a GPU, on any machine
    cat > "$M/plugin.c" <<'C'
#include <stdio.h>
#include "cuda_plugin.h"
static void probe(int *count, char *msg, size_t n)
{
    *count = FAKE_GPUS;
    snprintf(msg, n, "stand-in plugin, %d GPU", FAKE_GPUS);
}
static struct tfm_backend *backend(int device, struct tfm_error *err)
{
    snprintf(err->msg, sizeof err->msg, "GPU %d will not open", device);
    return NULL;
}
#ifndef FAKE_ABI_SKEW
#define FAKE_ABI_SKEW 0
#endif
static const struct tfm_cuda_plugin table = {.abi = TFM_CUDA_PLUGIN_ABI + FAKE_ABI_SKEW,
                                             .probe = probe, .backend = backend};
const struct tfm_cuda_plugin *tfm_cuda_plugin_entry(void) { return &table; }
C
    cc -shared -fPIC -DFAKE_GPUS=1 -I"$TFM_ROOT/src" -o "$M/closed.so" "$M/plugin.c"
    cc -shared -fPIC -DFAKE_GPUS=1 -DFAKE_ABI_SKEW=1 -I"$TFM_ROOT/src" -o "$M/newer.so" "$M/plugin.c"
    fake old 0 1 12040
    fake none 0 0 13000
    fake broken 100 0 13000
    fake one 0 1 13000
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    M="$BATS_FILE_TMPDIR"
    PLUGIN="${TFM_BUILD:-$TFM_ROOT/build}/libtfm-cuda.so"
}

train() {   # train OUT [ARGS...]: one update of a tiny model
    local out=$1; shift
    tfm-train -c "$TFM_ROOT/configs/tiny.conf" --set layers=1 --set d_model=32 --set d_ff=64 \
        --set heads=2 -j 1 --max-steps 1 -o "$M/$out" "$@" "$M/b.tfm"
}

need_plugin() {
    [ -e "$PLUGIN" ] || skip "built without CUDA"
}

real_driver() {
    ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '
}

@test "no driver: auto computes on the CPU saying why; --device cuda fails saying why" {
    need_plugin
    real_driver && skip "this machine has an NVIDIA driver"
    run train a
    assert_success
    assert_output --partial "device: cpu, no GPU found (no NVIDIA driver (libcuda.so.1 not found))"
    [ -e "$M/a/step-000001.tfm" ]
    run train b --device cuda
    assert_failure 1
    assert_output --partial "--device cuda: no CUDA device (no NVIDIA driver (libcuda.so.1 not found))"
}

@test "a driver too old for the toolkit is named with both versions" {
    need_plugin
    LD_LIBRARY_PATH="$M/old" run train c
    assert_success
    assert_output --regexp "the NVIDIA driver supports CUDA 12\.4; this build needs [0-9]+\.0 or newer"
    LD_LIBRARY_PATH="$M/old" run train d --device cuda
    assert_failure 1
    assert_output --partial "supports CUDA 12.4"
}

@test "a driver that sees no GPU, and one that does not start" {
    need_plugin
    LD_LIBRARY_PATH="$M/none" run train e
    assert_success
    assert_output --partial "no GPU (the NVIDIA driver sees none)"
    LD_LIBRARY_PATH="$M/broken" run train f
    assert_success
    assert_output --partial "the NVIDIA driver did not start: cuInit: CUDA_ERROR_NO_DEVICE"
}

@test "the toolkit's stub found for the driver, and a driver that cannot name its error: named all the same" {
    need_plugin
    # the stub answers every call, cuGetErrorName too, with CUDA_ERROR_STUB_LIBRARY (34)
    mkdir -p "$M/stub" "$M/mismatch"
    printf '%s\n' 'int cuInit(unsigned f) { (void)f; return 34; }' \
        'int cuDeviceGetCount(int *n) { *n = 0; return 34; }' \
        'int cuDriverGetVersion(int *v) { *v = 0; return 34; }' \
        'int cuGetErrorName(int c, const char **s) { (void)c; *s = 0; return 34; }' \
        'int cuGetErrorString(int c, const char **s) { (void)c; *s = 0; return 34; }' > "$M/stub.c"
    cc -shared -fPIC -o "$M/stub/libcuda.so.1" "$M/stub.c"
    LD_LIBRARY_PATH="$M/stub" run train s1 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver: cuDriverGetVersion: CUDA_ERROR_STUB_LIBRARY ($M/stub/libcuda.so.1 is the CUDA toolkit's stub library, not a driver))"
    # a user-space driver of another version than the kernel's, without cuGetErrorName
    printf '%s\n' 'int cuInit(unsigned f) { (void)f; return 803; }' \
        'int cuDeviceGetCount(int *n) { *n = 0; return 3; }' \
        'int cuDriverGetVersion(int *v) { *v = 13000; return 0; }' > "$M/mismatch.c"
    cc -shared -fPIC -o "$M/mismatch/libcuda.so.1" "$M/mismatch.c"
    LD_LIBRARY_PATH="$M/mismatch" run train s2
    assert_success
    assert_output --partial "the NVIDIA driver did not start: cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: libcuda.so.1 and the loaded kernel module are of different driver versions"
}

@test "the plugin loads, and the CUDA runtime's refusal is reported with its name" {
    need_plugin
    LD_LIBRARY_PATH="$M/one" run train g
    assert_success
    assert_output --regexp "device: cpu, GPU not usable \(CUDA runtime [0-9.]+ \(driver 13\.0\), cuBLAS [0-9.]+, NCCL [0-9.]+: no GPU \(cudaGetDeviceCount: cuda[A-Za-z]+: "
    [ -e "$M/g/step-000001.tfm" ]
}

@test "a driver library cut short or not a library: the CPU, saying which file, not a crash" {
    need_plugin
    mkdir -p "$M/cut" "$M/text"
    head -c 3000 "$M/one/libcuda.so.1" > "$M/cut/libcuda.so.1"
    echo "not a library" > "$M/text/libcuda.so.1"
    local size
    size=$(stat -c %s "$M/one/libcuda.so.1")
    # the loader would map its segments and die of SIGBUS reading them
    LD_LIBRARY_PATH="$M/cut" run train v
    assert_success
    assert_output --partial "device: cpu, GPU not usable (the NVIDIA driver library $M/cut/libcuda.so.1: truncated (3000 bytes, its headers describe $size or more))"
    LD_LIBRARY_PATH="$M/nowhere::$M/cut" run train w --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library $M/cut/libcuda.so.1: truncated (3000 bytes, its headers describe $size or more))"
    # a whole one first on the path is the one taken
    LD_LIBRARY_PATH="$M/one:$M/cut" run train x
    assert_success
    assert_output --regexp "device: cpu, GPU not usable \(CUDA runtime [0-9.]+ \(driver 13\.0\)"
    # not a library: the loader's own words, not 'not found'
    LD_LIBRARY_PATH="$M/text:$M/one" run train y
    assert_success
    assert_output --partial "device: cpu, GPU not usable (the NVIDIA driver library cannot be loaded: $M/text/libcuda.so.1: "
    refute_output --partial "not found"
}

@test "a driver library there that cannot load (its own dependency missing, another machine's, unreadable) is named with the loader's words, not 'not found'" {
    need_plugin
    mkdir -p "$M/missdep" "$M/depdir" "$M/arch" "$M/unread"
    echo 'int tfm_dep(void) { return 1; }' > "$M/dep.c"
    cc -shared -fPIC -o "$M/depdir/libtfmcudadep.so" "$M/dep.c"
    cc -shared -fPIC -DFAKE_INIT=0 -DFAKE_COUNT=1 -DFAKE_VERSION=13000 -o "$M/missdep/libcuda.so.1" \
        "$M/fake.c" -Wl,--no-as-needed -L"$M/depdir" -ltfmcudadep
    # the dependency is nowhere the loader looks: its "No such file" is not the driver's
    LD_LIBRARY_PATH="$M/missdep" run train md
    assert_success
    assert_output --partial "device: cpu, GPU not usable (the NVIDIA driver library cannot be loaded: $M/missdep/libcuda.so.1: libtfmcudadep.so: cannot open shared object file: No such file or directory)"
    refute_output --partial "not found"
    LD_LIBRARY_PATH="$M/missdep" run train md2 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library cannot be loaded: $M/missdep/libcuda.so.1: libtfmcudadep.so: cannot open shared object file: No such file or directory)"
    # another machine's (e_machine 183, AArch64 on x86-64, x86-64 elsewhere): the loader
    # passes over it and says "libcuda.so.1: ... No such file"; the search names it
    cp "$M/one/libcuda.so.1" "$M/arch/libcuda.so.1"
    if [ "$(uname -m)" = x86_64 ]; then printf '\267\000'; else printf '\076\000'; fi |
        dd of="$M/arch/libcuda.so.1" bs=1 seek=18 conv=notrunc status=none
    LD_LIBRARY_PATH="$M/arch" run train ar --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library cannot be loaded: $M/arch/libcuda.so.1: not a 64-bit shared object for this machine)"
    # a whole one after it is the one taken
    LD_LIBRARY_PATH="$M/arch:$M/one" run train ar2
    assert_success
    assert_output --regexp "device: cpu, GPU not usable \(CUDA runtime [0-9.]+ \(driver 13\.0\)"
    # unreadable (root reads it all the same)
    cp "$M/one/libcuda.so.1" "$M/unread/libcuda.so.1"
    chmod 000 "$M/unread/libcuda.so.1"
    if [ "$(id -u)" != 0 ]; then
        LD_LIBRARY_PATH="$M/unread" run train ur --device cuda
        assert_failure 1
        assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library cannot be loaded: $M/unread/libcuda.so.1: Permission denied)"
    fi
    # nothing there at all is the only "not found"
    if ! real_driver; then
        mkdir -p "$M/empty"
        LD_LIBRARY_PATH="$M/empty" run train nf --device cuda
        assert_failure 1
        assert_output "tfm-train: --device cuda: no CUDA device (no NVIDIA driver (libcuda.so.1 not found))"
    fi
}

@test "CUDA turned off or its code missing: 'not usable' where the driver counts a GPU, 'no GPU' where it counts none" {
    need_plugin
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB= run train to1
    assert_success
    assert_output --partial "device: cpu, GPU not usable (CUDA turned off (TFM_CUDA_LIB is empty))"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB= run train to2 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (CUDA turned off (TFM_CUDA_LIB is empty))"
    LD_LIBRARY_PATH="$M/none" TFM_CUDA_LIB= run train to3
    assert_success
    assert_output --partial "device: cpu, no GPU found (CUDA turned off (TFM_CUDA_LIB is empty))"
    LD_LIBRARY_PATH="$M/none" TFM_CUDA_LIB= run train to4 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: no CUDA device (CUDA turned off (TFM_CUDA_LIB is empty))"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/nowhere.so" run train to5 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (cannot load the CUDA code: $M/nowhere.so: No such file or directory)"
    LD_LIBRARY_PATH="$M/none" TFM_CUDA_LIB="$M/nowhere.so" run train to6 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: no CUDA device (no GPU (the NVIDIA driver sees none))"
    # a driver whose cuInit says CUDA_ERROR_NO_DEVICE sees none either
    LD_LIBRARY_PATH="$M/broken" run train to7 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: no CUDA device (the NVIDIA driver did not start: cuInit: CUDA_ERROR_NO_DEVICE)"
}

@test "a FIFO for the plugin or the driver library, the working directory as the library path's last entry, glibc-hwcaps: refused, not a hang or SIGBUS" {
    need_plugin
    local size
    size=$(stat -c %s "$M/one/libcuda.so.1")
    mkdir -p "$M/fifo" "$M/cwd" "$M/hw/glibc-hwcaps/x86-64-v2"
    mkfifo "$M/fifo/libcuda.so.1" "$M/fifo/plugin.so"
    head -c 3000 "$M/one/libcuda.so.1" > "$M/cwd/libcuda.so.1"
    head -c 3000 "$M/one/libcuda.so.1" > "$M/hw/glibc-hwcaps/x86-64-v2/libcuda.so.1"
    # open(2) of a FIFO waits for a writer: the check before dlopen must not
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/fifo/plugin.so" run timeout -s KILL 60 \
        tfm-train -c "$TFM_ROOT/configs/tiny.conf" -o "$M/f1" --device cuda "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (cannot load the CUDA code: $M/fifo/plugin.so: not a regular file)"
    LD_LIBRARY_PATH="$M/fifo:$M/one" run timeout -s KILL 60 \
        tfm-train -c "$TFM_ROOT/configs/tiny.conf" -o "$M/f2" --device cuda "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library $M/fifo/libcuda.so.1: not a regular file)"
    # a trailing separator is the working directory to the loader, as a leading one is
    cd "$M/cwd"
    LD_LIBRARY_PATH="$M/nowhere:" run tfm-train -c "$TFM_ROOT/configs/tiny.conf" -o "$M/f3" --device cuda "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library ./libcuda.so.1: truncated (3000 bytes, its headers describe $size or more))"
    cd "$M"
    # the loader looks in DIR/glibc-hwcaps/LEVEL before DIR
    if [ "$(uname -m)" = x86_64 ]; then
        LD_LIBRARY_PATH="$M/hw:$M/one" run tfm-train -c "$TFM_ROOT/configs/tiny.conf" -o "$M/f4" --device cuda "$M/b.tfm"
        assert_failure 1
        assert_output "tfm-train: --device cuda: the GPU cannot be used (the NVIDIA driver library $M/hw/glibc-hwcaps/x86-64-v2/libcuda.so.1: truncated (3000 bytes, its headers describe $size or more))"
    fi
}

@test "a library the plugin needs, cut short (a wheel or toolkit copied in part): refused, named, not SIGBUS" {
    need_plugin
    local size
    mkdir -p "$M/deps/lib" "$M/wholedep"
    printf 'int tfm_dep_value(void) { return 7; }\nchar tfm_dep_pad[65536] = {1};\n' > "$M/dep.c"
    cc -shared -fPIC -Wl,-soname,libtfmdep.so.1 -o "$M/wholedep/libtfmdep.so.1" "$M/dep.c"
    # the stand-in plugin of a GPU that will not open, needing it through $ORIGIN/lib
    cc -shared -fPIC -DFAKE_GPUS=1 -I"$TFM_ROOT/src" -o "$M/deps/plugin.so" "$M/plugin.c" \
        -Wl,--no-as-needed -L"$M/wholedep" -l:libtfmdep.so.1 -Wl,--enable-new-dtags,-rpath,'$ORIGIN/lib'
    cp "$M/wholedep/libtfmdep.so.1" "$M/deps/lib/"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/deps/plugin.so" run train d1 --device cuda
    assert_failure 1
    assert_output --partial "GPU 0 will not open"
    size=$(stat -c %s "$M/wholedep/libtfmdep.so.1")
    head -c 3000 "$M/wholedep/libtfmdep.so.1" > "$M/deps/lib/libtfmdep.so.1"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/deps/plugin.so" run train d2 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used (cannot load the CUDA code: its library $M/deps/lib/libtfmdep.so.1: truncated (3000 bytes, its headers describe $size or more))"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/deps/plugin.so" run train d3
    assert_success
    assert_output --partial "its library $M/deps/lib/libtfmdep.so.1: truncated"
    # LD_LIBRARY_PATH comes before a DT_RUNPATH: a whole copy there is the one taken
    LD_LIBRARY_PATH="$M/one:$M/wholedep" TFM_CUDA_LIB="$M/deps/plugin.so" run train d4 --device cuda
    assert_failure 1
    assert_output --partial "GPU 0 will not open"
}

@test "a missing, a foreign and a turned-off plugin" {
    need_plugin
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/nowhere.so" run train h
    assert_success
    assert_output --partial "cannot load the CUDA code: $M/nowhere.so: No such file or directory"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/one/libcuda.so.1" run train i
    assert_success
    assert_output --partial "$M/one/libcuda.so.1: not a tfm CUDA plugin"
    # the entry point there, answering NULL: a broken plugin, not a foreign one
    echo 'const void *tfm_cuda_plugin_entry(void) { return 0; }' > "$M/nulltable.c"
    cc -shared -fPIC -o "$M/nulltable.so" "$M/nulltable.c"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/nulltable.so" run train i2 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used ($M/nulltable.so: its tfm_cuda_plugin_entry returned no table (a broken plugin: reinstall tfm))"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/one/libcuda.so.1" run train i3 --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: the GPU cannot be used ($M/one/libcuda.so.1: not a tfm CUDA plugin (no tfm_cuda_plugin_entry))"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB= run train j --device cuda
    assert_failure 1
    assert_output --partial "CUDA turned off (TFM_CUDA_LIB is empty)"
    # a plugin of another build's interface: refused before any of its calls
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/newer.so" run train j2
    assert_success
    assert_output --regexp "device: cpu, GPU not usable \($M/newer.so: interface version ([0-9]+), not this build's [0-9]+ \(reinstall tfm\)\)"
}

@test "a truncated, empty or directory plugin is an error naming it, not a crash; TFM_CUDA_LIB without a slash is in the working directory" {
    need_plugin
    local size
    size=$(stat -c %s "$PLUGIN")
    head -c 100000 "$PLUGIN" > "$M/cut.so"          # its segments lie past the end
    head -c $((size - 100)) "$PLUGIN" > "$M/tail.so"  # its section headers do
    : > "$M/empty.so"
    mkdir -p "$M/dir.so"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/cut.so" run train k
    assert_success
    assert_output --partial "device: cpu, GPU not usable (cannot load the CUDA code: $M/cut.so: truncated (100000 bytes, its headers describe "
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/cut.so" run train l --device cuda
    assert_failure 1
    assert_output --partial "--device cuda: the GPU cannot be used (cannot load the CUDA code: $M/cut.so: truncated (100000 bytes"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/tail.so" run train m --device cuda
    assert_failure 1
    assert_output --partial "$M/tail.so: truncated ($((size - 100)) bytes, its headers describe $size or more)"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/empty.so" run train n --device cuda
    assert_failure 1
    assert_output --partial "$M/empty.so: not a shared object (0 bytes, no ELF header)"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/dir.so" run train o --device cuda
    assert_failure 1
    assert_output --partial "$M/dir.so: not a regular file"
    # a name without a slash is a file here, as any file a tool is given, not one of the
    # library path's
    cp "$PLUGIN" "$M/dir.so/libtfm-cuda.so"
    cd "$M/dir.so"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB=cut.so run train p --device cuda
    assert_failure 1
    assert_output --partial "cannot load the CUDA code: ./cut.so: No such file or directory"
    LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB=libtfm-cuda.so run train q
    assert_success
    assert_output --regexp "device: cpu, GPU not usable \(CUDA runtime [0-9.]+ \(driver 13\.0\)"
}

@test "a GPU that will not open: auto computes on the CPU saying why, in tfm-decode too without --progress; cuda fails" {
    need_plugin
    export LD_LIBRARY_PATH="$M/one" TFM_CUDA_LIB="$M/closed.so"
    run train r
    assert_success
    assert_line --index 0 "tfm-train: device: cuda (stand-in plugin, 1 GPU); computing on the cpu instead: GPU 0 will not open"
    [ -e "$M/r/step-000001.tfm" ]
    run train s --device cuda
    assert_failure 1
    assert_output "tfm-train: --device cuda: GPU 0 will not open"
    # GPUs from the process's place on the node: --ranks, TFM_LOCAL_RANK
    run train t --ranks 2
    assert_failure 1
    assert_output --partial "tfm-train: --device auto: 2 GPUs wanted from GPU 0 on, 1 visible"
    # local rank 1 of a node: GPU 1 of 2; GPU 0 when the process sees 1, its own (a
    # launcher's per-task binding); no GPU 2 of 2
    cc -shared -fPIC -DFAKE_GPUS=2 -I"$TFM_ROOT/src" -o "$M/closed2.so" "$M/plugin.c"
    TFM_CUDA_LIB="$M/closed2.so" TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_LOCAL_RANK=1 \
        TFM_RENDEZVOUS="$M/rv" run train u --device cuda
    assert_failure 1
    assert_output "tfm-train: process 1 of 2, local rank 1: --device cuda: GPU 1 will not open"
    CUDA_VISIBLE_DEVICES=1 TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_LOCAL_RANK=1 TFM_RENDEZVOUS="$M/rv" \
        run train u --device cuda
    assert_failure 1
    assert_output "tfm-train: process 1 of 2, local rank 1: --device cuda: GPU 0 will not open"
    # nothing bound it (no CUDA_VISIBLE_DEVICES): the node's GPU 0 is process 0's, not its
    unset CUDA_VISIBLE_DEVICES
    TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_LOCAL_RANK=1 TFM_RENDEZVOUS="$M/rv" run train u --device cuda
    assert_failure 1
    assert_output "tfm-train: process 1 of 2, local rank 1: --device cuda: 1 GPU wanted from GPU 1 on, 0 visible"
    TFM_CUDA_LIB="$M/closed2.so" TFM_RANK=1 TFM_WORLD_SIZE=3 TFM_LOCAL_RANK=2 \
        TFM_RENDEZVOUS="$M/rv" run train u
    assert_failure 1
    assert_output "tfm-train: process 1 of 3, local rank 2: --device auto: 1 GPU wanted from GPU 2 on, 0 visible"
    # a process but 0, which logs nothing else, says that auto left its GPU for the CPU
    # (its layout then differs from GPU processes'); -q keeps it quiet
    TFM_CUDA_LIB="$M/closed2.so" TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_LOCAL_RANK=1 \
        TFM_RENDEZVOUS="$M/rv" TFM_RENDEZVOUS_TIMEOUT=1 run train u2
    assert_failure 1
    assert_line --index 0 "tfm-train: process 1 of 2: device: cuda (stand-in plugin, 2 GPU); computing on the cpu instead: GPU 1 will not open"
    TFM_CUDA_LIB="$M/closed2.so" TFM_RANK=1 TFM_WORLD_SIZE=2 TFM_LOCAL_RANK=1 \
        TFM_RENDEZVOUS="$M/rv" TFM_RENDEZVOUS_TIMEOUT=1 run train u3 -q
    assert_failure 1
    refute_output --partial "computing on the cpu instead"
    head -n 3 "$M/en.txt" | tfm-tokenize encode -q -m "$M/spm.model" --eos > "$M/three.tfm"
    # stderr is no terminal and there is no --progress: the fallback is still said, once
    tfm-decode -m "$M/r/last.tfm" --max-len-b 2 "$M/three.tfm" > "$M/h.tfm" 2> "$M/err"
    run cat "$M/err"
    assert_output "tfm-decode: device: cuda (stand-in plugin, 1 GPU); computing on the cpu instead: GPU 0 will not open"
    run tfm-cat "$M/h.tfm"
    assert_success
    tfm-decode -q -m "$M/r/last.tfm" --max-len-b 2 "$M/three.tfm" > /dev/null 2> "$M/err"
    [ ! -s "$M/err" ]
    # CUDA turned off is no fallback: nothing said without --progress
    TFM_CUDA_LIB= tfm-decode -m "$M/r/last.tfm" --max-len-b 2 "$M/three.tfm" > /dev/null 2> "$M/err"
    [ ! -s "$M/err" ]
    run tfm-decode --device cuda -m "$M/r/last.tfm" --max-len-b 2 "$M/three.tfm"
    assert_failure 1
    assert_output "tfm-decode: --device cuda: GPU 0 will not open"
}

@test "under ulimit -v 1000000 every tool starts (no CUDA library is mapped at start)" {
    [ -z "${TFM_SANITIZE:-}" ] || skip "ASan's shadow memory needs more address space"
    for t in tokenize batch train avg decode score cat; do
        run timeout -s KILL 60 bash -c "ulimit -v 1000000 && tfm-$t --version"
        assert_success
        assert_output --partial "tfm-$t "
    done
}

@test "the tools do not link CUDA; the plugin exports one symbol and links what it uses" {
    need_plugin
    for t in tokenize batch train avg decode score cat; do
        run readelf -d "$(command -v tfm-$t)"
        assert_success
        refute_output --regexp "libcudart|libcublas|libnccl"
    done
    run nm -D --defined-only "$PLUGIN"
    assert_success
    assert_output --regexp "^[0-9a-f]+ T tfm_cuda_plugin_entry$"
    run readelf -d "$PLUGIN"
    assert_output --partial "libcudart"
    assert_output --partial "libcublas"
    assert_output --partial "libcublasLt"
}
