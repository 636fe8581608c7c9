# tfm: the Transformer of Vaswani et al. (2017) as composable Unix tools.
#
#   make                 library and bin/tfm-* (CPU backend; CUDA too when nvcc is found)
#   make CUDA=0          CPU only
#   make check           unit tests, Bats suite, man page lint; ends "N passed, N failed[, N skipped]"
#   make check-asan      the same built with ASan and UBSan (gcc) in build-asan, CPU only
#   make check-ref       agreement with reference tools (PyTorch, sacrebleu; EVALB=path/evalb)
#   make check-gpu       CUDA ops and the tools on a GPU against the CPU (needs a GPU)
#   make gpu-report      on a GPU machine: build for sm_90, every GPU check and benchmark
#                        (PyTorch beside), one report in $(GPU_REPORT_DIR) (tests/gpu/report.sh);
#                        STAGES='build ops' some of them; a run stops within 9 minutes
#   make gpu-deps        here, before a GPU session: the Debian packages of OpenBLAS,
#                        SentencePiece and zlib into .gpu-deps, for an image that lacks them
#   make bench           throughput and memory against references measured in the same run
#   make fuzz            libFuzzer on the readers: streams, configs, text lines, trees,
#                        EVALB parameter files (clang, ASan, UBSan; FUZZ_TIME in all)
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
# -fopenmp-simd: the `omp simd` loop hints only; the threads are our own (src/pool.c).
# A function called without its declaration is an error: with another library's header of
# the same name (the reference BLAS's cblas.h for OpenBLAS's), the call would take an int for
# a pointer and the binary crash at run time.
CFLAGS   += -std=c11 $(OPT) -Wall -Wextra -Werror=implicit-function-declaration -fopenmp-simd -MMD -MP
CXXFLAGS += -std=c++17 $(OPT) -Wall -Wextra -MMD -MP
SPM_LIBS := $(shell pkg-config --libs sentencepiece 2>/dev/null || echo -lsentencepiece -lsentencepiece_train)
LDLIBS   += $(SPM_LIBS) -lopenblas -lz -lpthread -lm -lstdc++

VERSION  := $(shell cat VERSION)
CPPFLAGS += -DTFM_VERSION='"$(VERSION)"'

# CUDA is built when nvcc is on PATH, unless CUDA=0.  kernels/*.cu become one shared
# object, libtfm-cuda.so, linked against the CUDA runtime, cuBLAS, cuBLASLt and NCCL; the
# tools are not: they load it with dlopen only once the driver reports a GPU
# (src/cuda_plugin.h), so a binary built with CUDA starts, and uses the CPU saying why, on
# any machine.
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
# a toolkit laid out otherwise (Debian's nvidia-cuda-toolkit: no include/ beside bin/):
# nvcc's own "release 12.4" as 12040
ifeq ($(CUDA_TOOLKIT_VERSION),)
CUDA_TOOLKIT_VERSION := $(shell $(NVCC) --version 2>/dev/null | awk '/release/ { \
                          split($$0, a, "release "); split(a[2], v, "[.,]"); \
                          print v[1] * 1000 + v[2] * 10; exit }')
endif
CUDA_PLUGIN := $(BUILD)/libtfm-cuda.so
CPPFLAGS   += -DTFM_CUDA
KERNEL_OBJ := $(patsubst kernels/%.cu,$(BUILD)/kernels/%.o,$(wildcard kernels/*.cu))
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcublasLt -lcublas -lcudart
$(BUILD)/src/cuda_load.o: CPPFLAGS += -DTFM_CUDA_PLUGIN_PATH='"$(abspath $(CUDA_PLUGIN))"' \
                                      -DTFM_CUDA_TOOLKIT_VERSION=$(CUDA_TOOLKIT_VERSION)
# Those two are compiled into cuda_load.o: it is rebuilt when either changes (a build copied
# to another directory or machine would otherwise look for the plugin where it was built).
CUDA_LOAD_STAMP := $(BUILD)/cuda-load.flags
CUDA_LOAD_FLAGS := $(abspath $(CUDA_PLUGIN)) $(CUDA_TOOLKIT_VERSION)
# The kernels likewise with nvcc's flags, the architectures among them: a build for other
# GPUs (gpu-report's sm_90 only, then the default's sm_80 too) compiles them again.
NVCC_STAMP := $(BUILD)/nvcc.flags
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(CUDA_LOAD_STAMP) 2>/dev/null)" = '$(CUDA_LOAD_FLAGS)' ] || \
        echo '$(CUDA_LOAD_FLAGS)' > $(CUDA_LOAD_STAMP); })
$(shell { [ "$$(cat $(NVCC_STAMP) 2>/dev/null)" = '$(NVCCFLAGS)' ] || \
        echo '$(NVCCFLAGS)' > $(NVCC_STAMP); })
endif
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

ifeq ($(CUDA),1)
$(BUILD)/src/cuda_load.o: $(CUDA_LOAD_STAMP)
endif

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# The plugin carries its own copies of error.c, cuda_hint.c and cuda_env.c (built
# position-independent); it exports tfm_cuda_plugin_entry only (-fvisibility=hidden), and
# -z defs proves it complete.
$(CUDA_PLUGIN): $(KERNEL_OBJ) $(BUILD)/pic/error.o $(BUILD)/pic/cuda_hint.o $(BUILD)/pic/cuda_env.o
	$(CXX) -shared -Wl,-z,defs $(LDFLAGS) -o $@ $^ $(CUDA_LIBS) -lstdc++

$(BUILD)/pic/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(BUILD)/src/%.o: src/%.c VERSION
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/src/%.o: src/%.cc VERSION
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c -o $@ $<

$(BUILD)/kernels/%.o: kernels/%.cu $(NVCC_STAMP)
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

# make check again, built with gcc's AddressSanitizer and UndefinedBehaviorSanitizer into
# ASAN_BUILD (CPU only), the same tests/run.  A sanitizer's report goes to a file in
# ASAN_BUILD/reports, never to the stderr that tests compare, so a report from a tool that
# was expected to fail is caught too: any report fails the target.  TFM_SANITIZE=1 tells a
# test what cannot work under the sanitizers (ulimit -v: the shadow memory is terabytes).
ASAN_BUILD ?= build-asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
              -fno-omit-frame-pointer
ASAN_REPORTS = $(abspath $(ASAN_BUILD))/reports
check-asan:
	@rm -rf $(ASAN_REPORTS) && mkdir -p $(ASAN_REPORTS)
	$(MAKE) BUILD=$(ASAN_BUILD) BINDIR=$(ASAN_BUILD)/bin CUDA=0 OPT='-O1 -g $(ASAN_FLAGS)' all
	@TFM_SANITIZE=1 \
	ASAN_OPTIONS=log_path=$(ASAN_REPORTS)/asan:detect_leaks=1 \
	UBSAN_OPTIONS=log_path=$(ASAN_REPORTS)/ubsan:print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) BINDIR=$(ASAN_BUILD)/bin CUDA=0 \
	    OPT='-O1 -g $(ASAN_FLAGS)' check; rc=$$?; \
	if [ -n "$$(ls $(ASAN_REPORTS))" ]; then \
	    echo "sanitizer reports in $(ASAN_REPORTS):"; head -n 40 $(ASAN_REPORTS)/*; exit 1; \
	fi; exit $$rc

check-ref: all $(REFPROGS)
	@TFM_BIN=$(abspath $(BINDIR)) TFM_REF_BIN=$(abspath $(BUILD)/ref) tests/ref/run

check-gpu: all
	@TFM_BIN=$(abspath $(BINDIR)) TFM_BUILD=$(abspath $(BUILD)) tests/run --gpu $(TESTS)

# Builds by itself (sm_90, every core), so it can be the first command on a fresh machine.
# STAGES='build ops' runs some stages (tests/gpu/report.sh); each run stays inside
# REPORT_SECONDS, and the stages' rows add up in one $(GPU_REPORT_DIR)/report.md.
# The Debian packages of the libraries a GPU machine's image may lack (it can fetch nothing),
# downloaded here into .gpu-deps to travel with the tree: gpu-report's build uses them
# where needed (tests/gpu/deps.sh).
gpu-deps:
	@tests/gpu/deps.sh fetch .gpu-deps

GPU_REPORT_DIR ?= gpu-report
STAGES ?=
gpu-report:
	@GPU_REPORT_DIR=$(GPU_REPORT_DIR) BUILD=$(BUILD) tests/gpu/report.sh $(STAGES)

bench: all $(BENCHES)
	@TFM_BIN=$(abspath $(BINDIR)) TFM_BENCH_BIN=$(abspath $(BUILD)/bench) tests/bench/run

# libFuzzer needs clang.  Each reader (tests/fuzz/fuzz_NAME.c) is built again with the
# sanitizers, with the sources it needs, and run for FUZZ_TIME/5 seconds on its corpus:
# tests/fuzz/corpus/NAME (grown by the runs, not in git) and tests/fuzz/seeds/NAME (seeds
# and the inputs of past findings).  A finding is saved as $(BUILD)/fuzz/crash-*.
# make fuzz FUZZ_TARGETS=tree FUZZ_TIME=60 runs one for a minute.
FUZZ_TIME    ?= 600
FUZZ_TARGETS ?= stream config lines tree evalb
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_IO      := src/stream.c src/output.c src/error.c src/util.c
FUZZ_SRC_stream := src/corpus.c $(FUZZ_IO)
FUZZ_SRC_config := src/config.c src/lines.c $(FUZZ_IO)
FUZZ_SRC_lines  := src/lines.c $(FUZZ_IO)
FUZZ_SRC_tree   := src/tree.c src/error.c
FUZZ_SRC_evalb  := src/evalb.c src/tree.c src/lines.c src/text.c src/score.c src/json.c $(FUZZ_IO)
define fuzz_one
	@mkdir -p $(BUILD)/fuzz tests/fuzz/corpus/$(1)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(CPPFLAGS) -o $(BUILD)/fuzz/fuzz_$(1) tests/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) -lz
	$(BUILD)/fuzz/fuzz_$(1) -max_total_time=$$(($(FUZZ_TIME) / $(words $(FUZZ_TARGETS)))) \
	    -max_len=4096 -artifact_prefix=$(BUILD)/fuzz/ tests/fuzz/corpus/$(1) tests/fuzz/seeds/$(1)

endef
fuzz:
	$(foreach t,$(FUZZ_TARGETS),$(call fuzz_one,$(t)))

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin
	$(if $(CUDA_PLUGIN),install -d $(DESTDIR)$(PREFIX)/lib/tfm && \
	    install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/tfm)
	install -m 644 $(filter %.1,$(MANPAGES)) $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 $(filter %.5,$(MANPAGES)) $(DESTDIR)$(PREFIX)/share/man/man5

clean:
	rm -rf build build-asan $(TOOLS)

.PHONY: all check check-asan check-ref check-gpu gpu-report gpu-deps bench fuzz install clean
.DELETE_ON_ERROR:
.SECONDARY:

-include $(wildcard $(BUILD)/*/*.d $(BUILD)/*/*/*.d)
