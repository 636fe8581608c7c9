# tfm: the Transformer of Vaswani et al. (2017) as composable Unix tools.
#
#   make                 library and bin/tfm-* (CPU backend; CUDA too when nvcc is found)
#   make CUDA=0          CPU only
#   make check           unit tests, Bats suite, man page lint; ends "N passed, N failed"
#   make check-ref       agreement with reference tools (PyTorch, sacrebleu)
#   make check-gpu       CUDA ops and the tools on a GPU against the CPU (needs a GPU)
#   make gpu-report      on a GPU machine: build for sm_90, every GPU check and benchmark
#                        (PyTorch beside), one report in $(GPU_REPORT_DIR) (tests/gpu/report.sh)
#   make bench           throughput and memory against references measured in the same run
#   make fuzz            libFuzzer on the stream reader (clang, ASan, UBSan)
#   make install PREFIX=/usr/local
#
# Layout: src/*.c and src/*.cc form libtfm.a; bin/tfm-X.c is the main of tool tfm-X;
# kernels/*.cu is the CUDA backend; tests/unit/test_X.c is a unit test program.
# New files are picked up by the wildcards below: no list to keep in step.

PREFIX   ?= /usr/local
# BUILD holds objects and test programs, BINDIR the tools; both can be moved so that
# several builds of one tree run side by side (make BUILD=/tmp/b BINDIR=/tmp/b/bin).
BUILD    ?= build
BINDIR   ?= bin
CC       ?= cc
CXX      ?= c++
OPT      ?= -O2 -g
CPPFLAGS += -Isrc -D_GNU_SOURCE
# -fopenmp-simd: the `omp simd` loop hints only; the threads are our own (src/pool.c)
CFLAGS   += -std=c11 $(OPT) -Wall -Wextra -fopenmp-simd -MMD -MP
CXXFLAGS += -std=c++17 $(OPT) -Wall -Wextra -MMD -MP
SPM_LIBS := $(shell pkg-config --libs sentencepiece 2>/dev/null || echo -lsentencepiece -lsentencepiece_train)
LDLIBS   += $(SPM_LIBS) -lopenblas -lz -lpthread -lm -lstdc++

VERSION  := $(shell cat VERSION)
CPPFLAGS += -DTFM_VERSION='"$(VERSION)"'

# CUDA is built when nvcc is on PATH, unless CUDA=0.  kernels/*.cu become one shared
# object, libtfm-cuda.so, linked against the CUDA runtime, cuBLAS and NCCL; the tools are
# not: they load it with dlopen only once the driver reports a GPU (src/cuda_plugin.h), so a
# binary built with CUDA starts, and uses the CPU saying why, on any machine.
NVCC     ?= $(shell command -v nvcc 2>/dev/null)
CUDA     ?= $(if $(NVCC),1,0)
CUDA_PLUGIN :=
ifeq ($(CUDA),1)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O2 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-fPIC,-fvisibility=hidden -MMD -MP
# the toolkit's version (13000 for 13.0): a driver of an older major version is refused
CUDA_TOOLKIT_VERSION := $(shell sed -n 's/^\#define CUDA_VERSION \([0-9]*\).*/\1/p' \
                          $(CUDA_HOME)/include/cuda.h 2>/dev/null)
CUDA_PLUGIN := $(BUILD)/libtfm-cuda.so
CPPFLAGS   += -DTFM_CUDA
KERNEL_OBJ := $(patsubst kernels/%.cu,$(BUILD)/kernels/%.o,$(wildcard kernels/*.cu))
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcublas -lcudart
$(BUILD)/src/cuda_load.o: CPPFLAGS += -DTFM_CUDA_PLUGIN_PATH='"$(abspath $(CUDA_PLUGIN))"' \
                                      -DTFM_CUDA_TOOLKIT_VERSION=$(CUDA_TOOLKIT_VERSION)
endif
LDLIBS   += -ldl

LIB_C    := $(wildcard src/*.c)
LIB_CC   := $(wildcard src/*.cc)
LIB_OBJ  := $(patsubst src/%.c,$(BUILD)/src/%.o,$(LIB_C)) $(patsubst src/%.cc,$(BUILD)/src/%.o,$(LIB_CC))
TOOLS    := $(patsubst bin/%.c,$(BINDIR)/%,$(wildcard bin/tfm-*.c))
TESTS    := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
BENCHES  := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/*.c))
REFPROGS := $(patsubst tests/ref/%.c,$(BUILD)/ref/%,$(wildcard tests/ref/*.c))
MANPAGES := $(wildcard man/*.1 man/*.5)
LIB      := $(BUILD)/libtfm.a

all: $(TOOLS) $(TESTS) $(CUDA_PLUGIN)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# The plugin carries its own copy of error.c (built position-independent); it exports
# tfm_cuda_plugin_entry only (-fvisibility=hidden), and -z defs proves it complete.
$(CUDA_PLUGIN): $(KERNEL_OBJ) $(BUILD)/pic/error.o
	$(CXX) -shared -Wl,-z,defs -o $@ $^ $(CUDA_LIBS) -lstdc++

$(BUILD)/pic/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(BUILD)/src/%.o: src/%.c VERSION
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/src/%.o: src/%.cc VERSION
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c -o $@ $<

$(BUILD)/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) -c -o $@ $<

$(BUILD)/main/%.o: bin/%.c VERSION
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BINDIR)/tfm-%: $(BUILD)/main/tfm-%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%.o: tests/unit/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Itests/unit $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: tests/bench/%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

$(BUILD)/ref/%: tests/ref/%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

check: all
	@TFM_BIN=$(abspath $(BINDIR)) TFM_BUILD=$(abspath $(BUILD)) tests/run $(TESTS)

check-ref: all $(REFPROGS)
	@TFM_BIN=$(abspath $(BINDIR)) TFM_REF_BIN=$(abspath $(BUILD)/ref) tests/ref/run

check-gpu: all
	@TFM_BIN=$(abspath $(BINDIR)) TFM_BUILD=$(abspath $(BUILD)) tests/run --gpu $(TESTS)

# Builds by itself (sm_90, every core), so it can be the first command on a fresh machine.
GPU_REPORT_DIR ?= gpu-report
gpu-report:
	@GPU_REPORT_DIR=$(GPU_REPORT_DIR) BUILD=$(BUILD) tests/gpu/report.sh

bench: all $(BENCHES)
	@TFM_BIN=$(abspath $(BINDIR)) TFM_BENCH_BIN=$(abspath $(BUILD)/bench) tests/bench/run

# libFuzzer needs clang; the reader is built again with the sanitizers.
FUZZ_TIME ?= 600
fuzz:
	@mkdir -p $(BUILD)/fuzz tests/fuzz/corpus
	clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    $(CPPFLAGS) -o $(BUILD)/fuzz/fuzz_stream tests/fuzz/fuzz_stream.c src/stream.c src/corpus.c src/error.c -lz
	$(BUILD)/fuzz/fuzz_stream -max_total_time=$(FUZZ_TIME) -max_len=4096 \
	    tests/fuzz/corpus tests/fuzz/seeds

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin
	$(if $(CUDA_PLUGIN),install -d $(DESTDIR)$(PREFIX)/lib/tfm && \
	    install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/tfm)
	install -m 644 $(filter %.1,$(MANPAGES)) $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 $(filter %.5,$(MANPAGES)) $(DESTDIR)$(PREFIX)/share/man/man5

clean:
	rm -rf build $(TOOLS)

.PHONY: all check check-ref check-gpu gpu-report bench fuzz install clean
.DELETE_ON_ERROR:
.SECONDARY:

-include $(wildcard $(BUILD)/*/*.d $(BUILD)/*/*/*.d)
