# qwinfer - root Makefile (the only build system).
#
#   make                 library (shared + static), examples, tools
#   make demo            build deps, build, generate the tiny model, run concurrent generations
#   make test            every test (Criterion, reference, ABI, pkg-config, ASan+UBSan)
#   make check-asan      the Criterion suite under AddressSanitizer + UBSan only
#   make install PREFIX=/usr/local DESTDIR=   header, libraries, qwinfer.pc, tools
#   make deps            check/install build and test dependencies (tools/deps.sh)
#   make fresh-check     the two commands above in a clean Debian 12 root (root only)
#   make tokbench        tokenizer throughput on varied real text (Debian packages)
#   make serve-bench     qw-serve under aiperf (PyPI, into BUILD/serve-bench-venv) at
#                        several Poisson rates beside qw-bench --request-rate
#   make cdef            regenerate include/qwinfer_cdef.h (cffi's view of qwinfer.h)
#   make api-reference   regenerate docs/api-reference.md from qwinfer.h
#   make gpu-bundle      unpack the link dependencies' .debs into gpu-deps/ for a
#                        machine without apt (the lent GPU machine, docs/cuda.md)
#   CUDA=0               build without the CUDA backend (auto-detected from nvcc)
#   BUILD=dir            out-of-tree build directory (default: build)
# Changing any setting (CUDA, OPT, SANITIZE, CC, CFLAGS...) rebuilds: see the
# config stamp below and docs/build.md.

VERSION_MAJOR := 0
VERSION_MINOR := 1
VERSION_PATCH := 0
VERSION       := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin

# Bare `make` builds `all`: the config stamp rule below comes first in the
# file and would otherwise be the default goal (and build nothing else).
.DEFAULT_GOAL := all

BUILD   ?= build
CC      ?= cc
PKG_CONFIG ?= pkg-config

DEP_PKGS  := jansson libxxhash libpcre2-8 libutf8proc
DEP_OK     := $(shell $(PKG_CONFIG) --exists $(DEP_PKGS) 2>/dev/null && echo yes)
DEP_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(DEP_PKGS) 2>/dev/null)
DEP_LIBS   := $(shell $(PKG_CONFIG) --libs $(DEP_PKGS) 2>/dev/null)

# ---- bundled dependencies (make gpu-bundle) ------------------------------------
# A machine without our -dev packages and without pkg-config (the lent GPU
# machine: no apt, no internet) builds against the .debs that `make
# gpu-bundle` unpacked into DEPS_BUNDLE here and that travelled with the tree.
# Used only when pkg-config cannot find the packages; the rpath lets the
# library and programs find the bundled .so files at run time.
DEPS_BUNDLE ?= $(CURDIR)/gpu-deps
ifneq ($(DEP_OK),yes)
BUNDLE_LIBDIR := $(patsubst %/libjansson.so,%,$(firstword $(wildcard $(DEPS_BUNDLE)/usr/lib/*/libjansson.so $(DEPS_BUNDLE)/usr/lib/libjansson.so)))
ifneq ($(BUNDLE_LIBDIR),)
DEP_OK     := bundle
DEP_CFLAGS := -isystem $(DEPS_BUNDLE)/usr/include
DEP_LIBS   := -L$(BUNDLE_LIBDIR) -Wl,-rpath,$(BUNDLE_LIBDIR) -ljansson -lxxhash -lpcre2-8 -lutf8proc
endif
endif

OPT      ?= -O2
SANITIZE ?=
WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes
# -ffp-contract=off: the kernels' determinism contracts (lib/cpu/kernels.h)
# say where a multiply and an add are fused; GCC in ISO C mode already never
# contracts on its own, clang would (and aarch64 has FMA in its baseline).
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -ffp-contract=off -fPIC -fvisibility=hidden -pthread \
              -Iinclude -iquote lib $(DEP_CFLAGS) $(SANITIZE) $(CFLAGS)
LDLIBS_ALL := $(DEP_LIBS) -lm -pthread $(LDLIBS)
# KERNEL_CFLAGS: added for the SIMD kernel objects only (the lib/cpu files
# with functions built for a CPU target, __attribute__((target(...)))).
# make fuzz passes -fno-sanitize=undefined: clang's UBSan instrumentation
# of their unrolled intrinsics took over ten minutes a file at -O1 on a
# 2-core Zen 1 (under a minute with ASan alone, which stays on them; gcc's
# ASan+UBSan tree is not slowed this way).
KERNEL_CFLAGS ?=
SIMD_SRCS := $(shell grep -l '__attribute__..target' $(wildcard lib/cpu/*.c))

# ---- CUDA detection: cuda/ objects join the library here --------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null)
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif
CU_SRCS := $(wildcard cuda/*.cu)
ifeq ($(CUDA),1)
ifneq ($(CU_SRCS),)
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS  ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=compute_90
NVCCFLAGS   ?= -O3 -std=c++17 $(CUDA_ARCHS) -Xcompiler -fPIC,-fvisibility=hidden -Iinclude -Ilib
# cuda/*.c: the backend's plain-C host code (no CUDA headers), built with cc
# and linked only together with the .cu objects.
CU_HOST_SRCS := $(wildcard cuda/*.c)
CU_OBJS     := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CU_SRCS)) $(patsubst %.c,$(BUILD)/obj/%.o,$(CU_HOST_SRCS))
CFLAGS_ALL  += -DQW_HAVE_CUDA=1
# Only what cuda/ calls: the CUDA runtime, cuBLASLt, and libstdc++ for the
# host code nvcc generates (__cxa_guard_*). No cuBLAS, no NCCL until code
# uses them: tests/check_linked_libs.sh holds every NEEDED entry to a symbol
# the library takes from it.
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lstdc++
LDLIBS_ALL  += $(CUDA_LIBS)
endif
endif

# ---- build configuration stamp -----------------------------------------------
# Everything that decides what an object, library or binary contains, one
# setting a line. The stamp is rewritten only when this text changes, and
# every build product depends on it, so `make CUDA=0` then `make`, or a new
# OPT, SANITIZE, CC, arch list... rebuilds what it affects instead of mixing
# configurations. tests/check_build_config.sh proves it; check_linked_libs.sh
# reads the link lines back from it.
EX_LDLIBS := -pthread $(LDLIBS)
CONFIG_STAMP := $(BUILD)/config.stamp
define CONFIG_TEXT :=
CC=$(CC)
CC_VERSION=$(shell $(CC) --version 2>/dev/null | head -n 1)
CFLAGS_ALL=$(CFLAGS_ALL)
SANITIZE=$(SANITIZE)
KERNEL_CFLAGS=$(KERNEL_CFLAGS)
LDFLAGS=$(LDFLAGS)
LDLIBS_ALL=$(LDLIBS_ALL)
EX_LDLIBS=$(EX_LDLIBS)
AR=$(AR)
CUDA=$(CUDA)
CU_OBJS=$(CU_OBJS)
NVCC=$(if $(CU_OBJS),$(NVCC))
NVCCFLAGS=$(NVCCFLAGS)
endef
# Read at parse time, written only by the rule below, so goals that build
# nothing (clean, print-*...) never touch it, and a dry run (-n/-q) reports
# the rebuild without writing.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))$(findstring q,$(firstword -$(MAKEFLAGS)))
ifneq ($(file <$(CONFIG_STAMP)),$(CONFIG_TEXT))
$(CONFIG_STAMP): config-changed
	@echo "qwinfer: $(BUILD) has a new build configuration (recorded in $(BUILD)/config.stamp): everything in it rebuilds"
	@$(if $(DRY_RUN),,$(shell mkdir -p $(@D))$(file >$@,$(CONFIG_TEXT)))true
.PHONY: config-changed
config-changed: ;
else
$(CONFIG_STAMP): ;
endif

# ---- sources -----------------------------------------------------------------
LIB_SRCS  := $(wildcard lib/*.c lib/cpu/*.c)
LIB_OBJS  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(CU_OBJS)
TOOL_SRCS := $(wildcard tools/*.c)
EX_SRCS   := $(wildcard examples/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
# qw-serve (tools/qw-serve/, docs/serve.md): an API consumer like the
# examples (links the shared library), plus libmicrohttpd and jansson. Built
# only where pkg-config finds libmicrohttpd: the lent GPU machine has only
# gpu-deps/ and skips it, and `make` still works there.
SERVE_OK     := $(shell $(PKG_CONFIG) --exists libmicrohttpd jansson 2>/dev/null && echo yes)
SERVE_SRCS   := $(wildcard tools/qw-serve/*.c)
SERVE_OBJS   := $(patsubst %.c,$(BUILD)/obj/%.o,$(SERVE_SRCS))
SERVE_CFLAGS := $(shell $(PKG_CONFIG) --cflags libmicrohttpd jansson 2>/dev/null)
SERVE_LIBS   := $(shell $(PKG_CONFIG) --libs libmicrohttpd jansson 2>/dev/null)
SERVE_BIN    := $(if $(SERVE_OK),$(if $(SERVE_SRCS),$(BUILD)/bin/qw-serve))
TESTUTIL_SRCS := $(wildcard tests/util/*.c)

SONAME    := libqwinfer.so.$(VERSION_MAJOR)
SHLIB     := $(BUILD)/libqwinfer.so.$(VERSION)
STLIB     := $(BUILD)/libqwinfer.a
TOOLS     := $(patsubst tools/%.c,$(BUILD)/bin/%,$(TOOL_SRCS))
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/bin/%,$(EX_SRCS))
TESTS     := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
TESTUTIL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TESTUTIL_SRCS))

.PHONY: all lib tools examples tests test test-trees test-tree-main test-tree-asan check check-asan demo install uninstall deps clean abi-check \
        depcheck qwinfer.pc fresh-check tokbench gpu-bundle check-gpu-bundle check-hf-oracle cdef api-reference
all: lib tools examples

lib: $(SHLIB) $(STLIB)

# A missing library dependency fails here, once and clearly, not as a missing
# header in the first object that includes it.
depcheck:
ifeq ($(DEP_OK),)
	@echo "qwinfer: the build dependencies are missing (pkg-config packages: $(DEP_PKGS))." >&2
	@echo "qwinfer: run 'make deps' (as root it installs them), or 'sh tools/deps.sh' to see what to install;" >&2
	@echo "qwinfer: on a machine without apt, carry the folder 'make gpu-bundle' makes elsewhere ($(DEPS_BUNDLE))." >&2
	@exit 1
endif

$(patsubst %.c,$(BUILD)/obj/%.o,$(SIMD_SRCS)): OBJ_CFLAGS = $(KERNEL_CFLAGS)

$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP) | depcheck
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(OBJ_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c $(CONFIG_STAMP) | depcheck
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -MMD -MP -c $< -o $@

$(BUILD)/obj/cuda/%.o: cuda/%.cu $(wildcard cuda/*.h) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(SHLIB): $(LIB_OBJS) lib/qwinfer.map $(CONFIG_STAMP)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/qwinfer.map \
	      -Wl,--no-undefined $(SANITIZE) $(LDFLAGS) -o $@ $(LIB_OBJS) $(LDLIBS_ALL)
	ln -sf libqwinfer.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libqwinfer.so

$(STLIB): $(LIB_OBJS) $(CONFIG_STAMP)
	@rm -f $@
	$(AR) rcs $@ $(LIB_OBJS)

# Tools and tests link the static library: they may use internal qwi_ helpers.
$(BUILD)/bin/%: tools/%.c $(STLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $< $(STLIB) $(LDLIBS_ALL)

# Examples are API consumers: they link the shared library like a host would,
# and nothing else the library uses (its own NEEDED entries bring those).
$(BUILD)/bin/%: examples/%.c $(SHLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $< -L$(BUILD) -lqwinfer -Wl,-rpath,'$$ORIGIN/..' $(EX_LDLIBS)

# Only a pattern rule names the test helpers' objects, which would make them
# intermediate files: make would delete them after each build and relink
# every test binary the next time.
.SECONDARY: $(TESTUTIL_OBJS)
$(BUILD)/tests/%: tests/%.c $(TESTUTIL_OBJS) $(STLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -iquote tests -o $@ $< $(TESTUTIL_OBJS) $(STLIB) -lcriterion $(LDLIBS_ALL)

# qw-serve's self-contained modules (public API + jansson only), unit-tested
# by tests/test_serve_*.c: those tests link these objects too (the more
# specific pattern wins over the generic test rule above).
SERVE_MODULE_SRCS := tools/qw-serve/params.c tools/qw-serve/metrics.c tools/qw-serve/reply_parser.c
SERVE_MODULE_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(SERVE_MODULE_SRCS))
.SECONDARY: $(SERVE_MODULE_OBJS)
$(BUILD)/tests/test_serve_%: tests/test_serve_%.c $(SERVE_MODULE_OBJS) $(TESTUTIL_OBJS) $(STLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -iquote tests -iquote tools/qw-serve -o $@ $< $(SERVE_MODULE_OBJS) \
	      $(TESTUTIL_OBJS) $(STLIB) -lcriterion $(LDLIBS_ALL)

$(BUILD)/obj/tools/qw-serve/%.o: tools/qw-serve/%.c $(CONFIG_STAMP) | depcheck
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(SERVE_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/bin/qw-serve: $(SERVE_OBJS) $(SHLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(SANITIZE) $(LDFLAGS) -o $@ $(SERVE_OBJS) -L$(BUILD) -lqwinfer -Wl,-rpath,'$$ORIGIN/..' \
	      $(SERVE_LIBS) -lm $(EX_LDLIBS)

tools: $(TOOLS) $(SERVE_BIN)
examples: $(EXAMPLES)
tests: $(TESTS) $(TOOLS) $(EXAMPLES) $(SERVE_BIN)

# ---- running -------------------------------------------------------------------
deps:
	@sh tools/deps.sh

# The README's `make demo` and `make test` carry no -j: their builds then run
# one job per core (TEST_JOBS, default the CPU count; one file at a time, the
# two trees are about 11 minutes of compiling on a 2-core Zen 1). A -j on the
# command line wins.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
JOBS_UNLESS_GIVEN = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(TEST_JOBS))

# The first command on a fresh machine: install the build dependencies
# (the demo needs no test tools), then build in a new make, which reads
# pkg-config's flags now that the packages are there.
demo:
	@sh tools/deps.sh --build
	@$(MAKE) --no-print-directory $(JOBS_UNLESS_GIVEN) all
	@sh tools/demo.sh $(BUILD)

# A clean Debian 12 root (debootstrap, cached in $(BUILD)/fresh-check) runs the
# README's two commands on a clone of HEAD, in both orders. Needs root and the
# Debian mirror; not part of `make test` (it takes minutes: docs/build.md).
fresh-check:
	@sh tools/fresh-check.sh $(BUILD)

# The link dependencies as unpacked .debs in gpu-deps/, for a machine without
# apt or pkg-config (docs/cuda.md: the lent GPU machine). Needs apt here.
gpu-bundle:
	@sh tools/gpu-bundle.sh $(DEPS_BUNDLE)

# Proves the bundle: builds and runs with the system's packages and pkg-config
# hidden, then walks tests/gpu/run.sh (root only; minutes; not in `make test`).
check-gpu-bundle:
	@sh tests/gpu/bundle_check.sh $(BUILD)-bundle-check

# The CUDA backend on the CPU (tests/cudasim/, docs/cuda.md): cuda/ translated
# and built with g++ + ASan/UBSan over an emulated runtime and cuBLASLt, a
# block's threads as fibers; the kernel checks of tests/gpu/ in thread order
# and reversed, and e2e's parity with the CPU engine on tiny models. make test
# runs it with the checks' --small shapes (tests/check_cudasim.sh, ~2 min);
# cudasim-full with the full shapes and more models (tens of minutes). Needs
# the CUDA toolkit's headers, not a GPU.
.PHONY: cudasim cudasim-full
cudasim:
	@sh tests/cudasim/run.sh $(BUILD)
cudasim-full:
	@sh tests/cudasim/run.sh $(BUILD) --full

# Hugging Face transformers as an independent oracle of the CPU engine
# (tests/gpu/hf_oracle.py); needs PYTHON with torch and transformers.
PYTHON ?= python3
check-hf-oracle: lib $(BUILD)/bin/qw-makemodel
	@sh tests/gpu/hf_oracle_check.sh $(BUILD) $(PYTHON)

# include/qwinfer_cdef.h: the public header as cffi's cdef() takes it, for
# bindings (tools/gen-cdef.sh); tests/check_cdef.sh fails when it is stale.
cdef:
	@sh tools/gen-cdef.sh include/qwinfer.h include/qwinfer_cdef.h

# docs/api-reference.md: every constant, enum value, struct field and function
# of qwinfer.h (tools/gen-api-reference.py); tests/check_api_reference.sh
# fails when it is stale.
api-reference:
	@python3 tools/gen-api-reference.py include/qwinfer.h docs/api-reference.md

# The flags a script outside make needs to link against the library the way
# make does (tests/gpu/run.sh): `make -s print-DEP_LIBS`. Reads, builds nothing.
print-%:
	@printf '%s\n' '$($*)'

# Tokenizer throughput on varied real text from Debian packages, beside
# Hugging Face tokenizers (docs/tokenizer-benchmarks.md). Not part of test.
tokbench: $(BUILD)/bin/qw-tokbench
	@sh tools/tokbench-real.sh $(BUILD)

# The HTTP serving benchmark: qw-serve driven by aiperf at the rates of RATES,
# the same workload in-process through qw-bench, one table of both
# (tools/serve-bench.sh says the settings; docs/benchmarks.md). Not part of test.
.PHONY: serve-bench
serve-bench: $(BUILD)/bin/qw-serve $(BUILD)/bin/qw-bench $(BUILD)/bin/qw-makemodel
	@sh tools/serve-bench.sh $(BUILD)

# The quantized-checkpoint and KV-dtype benchmark (issue 16; docs/benchmarks.md):
# bf16 vs AWQ/GPTQ/FP8 decode and prefill on the 0.6B shape, 4K decode per KV
# dtype (tools/quant-bench.sh makes its models in /tmp/qbench). Not part of test.
.PHONY: quant-bench
quant-bench: $(BUILD)/bin/qw-bench $(BUILD)/bin/qw-makemodel
	@sh tools/quant-bench.sh $(BUILD)

# The whole suite: Criterion binaries, export/pkg-config checks, then the same
# Criterion binaries under ASan+UBSan. Ends with "N passed, M failed".
# The two trees build side by side (test-trees), so that with -j the one
# jobserver keeps every core busy until both are done: built one after the
# other, each tree's last big kernel file left a core idle (the ASan tree
# took 240 s on 2 cores for 208 s of work per core).
test: deps
	@$(MAKE) --no-print-directory $(JOBS_UNLESS_GIVEN) test-trees
	@sh tests/run.sh $(BUILD) $(BUILD)-asan

test-trees: test-tree-main test-tree-asan
test-tree-main:
	@$(MAKE) --no-print-directory tests
test-tree-asan:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)-asan OPT=-O1 SANITIZE="$(QW_ASAN_FLAGS)" CUDA=0 tests

check: tests
	@sh tests/run.sh $(BUILD)

check-asan: test-tree-asan
	@QW_ASAN_ONLY=1 sh tests/run.sh $(BUILD)-asan

# Installed programs: the tools keep the static library linked in (they use
# internal qwi_ helpers; no header is needed at run time), and qw-generate,
# an API consumer, is relinked against the installed shared library with an
# rpath relative to its own directory ($$ORIGIN/<BINDIR to LIBDIR>), so it
# finds that library without LD_LIBRARY_PATH, also when staged in DESTDIR or
# the tree is moved as a whole.
INSTALL_TOOLS := qw-makemodel qw-bench qw-tokbench
INSTALL_DYN   := qw-generate
install: lib $(addprefix $(BUILD)/bin/,$(INSTALL_TOOLS)) $(SERVE_BIN) qwinfer.pc
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 644 include/qwinfer.h $(DESTDIR)$(INCDIR)/qwinfer.h
	install -m 644 include/qwinfer_cdef.h $(DESTDIR)$(INCDIR)/qwinfer_cdef.h
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libqwinfer.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libqwinfer.so
	install -m 644 $(STLIB) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(BUILD)/qwinfer.pc $(DESTDIR)$(LIBDIR)/pkgconfig/qwinfer.pc
	install -m 755 $(addprefix $(BUILD)/bin/,$(INSTALL_TOOLS)) $(DESTDIR)$(BINDIR)/
	@mkdir -p $(BUILD)/install
	rel=$$(realpath -m --relative-to='$(BINDIR)' '$(LIBDIR)') && \
	for p in $(INSTALL_DYN); do \
	    $(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $(BUILD)/install/$$p examples/$$p.c -L$(BUILD) -lqwinfer \
	          -Wl,-rpath,"\$$ORIGIN/$$rel" $(EX_LDLIBS) && \
	    install -m 755 $(BUILD)/install/$$p $(DESTDIR)$(BINDIR)/ || exit 1; \
	done
ifneq ($(SERVE_BIN),)
	rel=$$(realpath -m --relative-to='$(BINDIR)' '$(LIBDIR)') && \
	$(CC) $(SANITIZE) $(LDFLAGS) -o $(BUILD)/install/qw-serve $(SERVE_OBJS) -L$(BUILD) -lqwinfer \
	      -Wl,-rpath,"\$$ORIGIN/$$rel" $(SERVE_LIBS) -lm $(EX_LDLIBS) && \
	install -m 755 $(BUILD)/install/qw-serve $(DESTDIR)$(BINDIR)/
endif

# The .pc file says how this build was configured: the template's @CPU@
# lines stay in a CPU-only build (it links fully static), its @CUDA@ lines in
# a CUDA build (Libs.private adds the toolkit's shared libraries).
ifeq ($(CUDA_LIBS),)
PC_KEEP := CPU
PC_DROP := CUDA
else
PC_KEEP := CUDA
PC_DROP := CPU
endif
qwinfer.pc: pkgconfig/qwinfer.pc.in
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' -e 's|@REQUIRES@|$(DEP_PKGS)|g' \
	    -e 's|@LIBS_PRIVATE@|-lm -pthread $(CUDA_LIBS)|g' -e 's|@CUDA_LIBS@|$(CUDA_LIBS)|g' \
	    -e '/^@$(PC_DROP)@/d' -e 's|^@$(PC_KEEP)@||' $< > $(BUILD)/qwinfer.pc

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/qwinfer.h $(DESTDIR)$(INCDIR)/qwinfer_cdef.h $(DESTDIR)$(LIBDIR)/libqwinfer.* $(DESTDIR)$(LIBDIR)/pkgconfig/qwinfer.pc
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALL_TOOLS) $(INSTALL_DYN) qw-serve)

clean:
	rm -rf $(BUILD) $(BUILD)-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- fuzzing and thread sanitizer ------------------------------------------------
# docs/testing.md says what each piece covers and how long it takes.
#   make fuzz          clang + libFuzzer (tools/fuzz.sh installs what it lacks): each
#                      harness of tests/fuzz/ for FUZZ_SECONDS, corpus kept in
#                      $(BUILD)-fuzz/fuzz/corpus/<name>, crashes in .../crashes/<name>
#   make fuzz-regress  every harness once over its seed corpus, gcc + ASan/UBSan in
#                      $(BUILD)-asan (make test runs it: tests/check_fuzz_regress.sh)
#   make check-tsan    tests/stress/ under ThreadSanitizer for STRESS_SECONDS
#                      ($(BUILD)-tsan; make test runs a few seconds: tests/check_tsan.sh)
# The scripts call this Makefile back with BUILD set to the tree they need; the
# targets below then build in that tree with its flags.
FUZZ_NAMES     := safetensors config tokenizer serve_request
FUZZ_SECONDS   ?= 60
STRESS_SECONDS ?= 60
# The sanitizer flags of `make test`'s $(BUILD)-asan tree (test-tree-asan;
# fuzz-regress builds in that tree with them too) and of the TSan tree.
QW_ASAN_FLAGS  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
QW_TSAN_FLAGS  := -fsanitize=thread
# Harness model: tiny, so that seeds stay a few KB and engines start in microseconds.
FUZZ_MODEL_ARGS := --shape tiny --hidden 8 --layers 1 --heads 2 --kv-heads 1 --head-dim 4 \
                   --intermediate 8 --vocab 300 --max-pos 256 --dtype bf16 --seed 7
# Quantized seed models (fuzz_safetensors' quant-* seeds): kv heads and
# widths of 8 and 16, so int4 packs whole int32s and down_proj has two groups.
FUZZ_QMODEL_ARGS := --shape tiny --hidden 16 --layers 1 --heads 2 --kv-heads 2 --head-dim 4 \
                    --intermediate 16 --vocab 300 --max-pos 256 --dtype bf16 --seed 7 --no-tokenizer
FUZZ_QUANTS    := gptq:--quant,gptq,--group-size,8 gptq8:--quant,gptq,--bits,8,--group-size,8 \
                  gptq-desc:--quant,gptq,--group-size,8,--gptq-desc-act \
                  gptq-asym:--quant,gptq,--group-size,8,--gptq-asym,--gptq-format,gptq_v2 \
                  gptq-head:--quant,gptq,--group-size,8,--gptq-lm-head,--vocab,304 \
                  awq:--quant,awq,--group-size,8 fp8:--quant,fp8,--fp8-block,8
FUZZ_UTIL_OBJ  := $(BUILD)/obj/tests/fuzz/fuzz_util.o
.SECONDARY: $(FUZZ_UTIL_OBJ)
# FUZZ_ENGINE=libfuzzer links clang's libFuzzer main; otherwise tests/fuzz/driver.c.
ifeq ($(FUZZ_ENGINE),libfuzzer)
FUZZ_MAIN      := -fsanitize=fuzzer
else
FUZZ_MAIN      := tests/fuzz/driver.c
endif

.PHONY: fuzz fuzz-regress check-tsan fuzz-seeds fuzz-build stress-build fuzz-clean \
        print-asan-flags print-tsan-flags

fuzz:
	@sh tools/fuzz.sh $(BUILD) $(FUZZ_SECONDS)

fuzz-regress:
	@sh tests/check_fuzz_regress.sh $(BUILD)

check-tsan:
	@sh tests/check_tsan.sh $(BUILD) $(STRESS_SECONDS)

print-asan-flags: ; @echo '$(QW_ASAN_FLAGS)'
print-tsan-flags: ; @echo '$(QW_TSAN_FLAGS)'

# In the tree the scripts name: harness binaries, the stress program, seeds.
fuzz-build: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_NAMES))

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h tests/fuzz/driver.c $(FUZZ_UTIL_OBJ) \
                      $(STLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -o $@ $< $(FUZZ_MAIN) $(FUZZ_UTIL_OBJ) $(STLIB) $(LDLIBS_ALL)

# qw-serve's request and reply parsers: the harness links those modules.
$(BUILD)/fuzz/fuzz_serve_request: tests/fuzz/fuzz_serve_request.c tests/fuzz/fuzz_util.h tests/fuzz/driver.c \
                                  $(FUZZ_UTIL_OBJ) $(SERVE_MODULE_OBJS) $(STLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -iquote tools/qw-serve -o $@ $< $(FUZZ_MAIN) $(FUZZ_UTIL_OBJ) \
	      $(SERVE_MODULE_OBJS) $(STLIB) $(LDLIBS_ALL)

stress-build: $(BUILD)/stress/stress_threads

$(BUILD)/stress/%: tests/stress/%.c $(STLIB) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -o $@ $< $(STLIB) $(LDLIBS_ALL)

# Seeds come from the project's own generator: a tiny model, single file and
# two shards, with its tokenizer, and make_seeds' variants of those files.
fuzz-seeds: $(BUILD)/fuzz/seeds/.stamp

$(BUILD)/fuzz/make_seeds: tests/fuzz/make_seeds.c tests/fuzz/fuzz_util.h $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -o $@ $< $(LDLIBS_ALL)

# (Makefile: FUZZ_MODEL_ARGS; regenerating takes milliseconds.)
$(BUILD)/fuzz/seeds/.stamp: $(BUILD)/fuzz/make_seeds $(BUILD)/bin/qw-makemodel Makefile
	@rm -rf $(BUILD)/fuzz/model $(BUILD)/fuzz/seeds
	@$(BUILD)/bin/qw-makemodel $(FUZZ_MODEL_ARGS) --out $(BUILD)/fuzz/model/single >/dev/null
	@$(BUILD)/bin/qw-makemodel $(FUZZ_MODEL_ARGS) --shards 2 --no-tokenizer \
	    --out $(BUILD)/fuzz/model/sharded >/dev/null
	@for q in $(FUZZ_QUANTS); do \
	    $(BUILD)/bin/qw-makemodel $(FUZZ_QMODEL_ARGS) $$(echo "$${q#*:}" | tr , ' ') \
	        --out $(BUILD)/fuzz/model/quant/$${q%%:*} >/dev/null || exit 1; done
	$(BUILD)/fuzz/make_seeds $(BUILD)/fuzz/model/single $(BUILD)/fuzz/model/sharded \
	    $(BUILD)/fuzz/model/quant $(BUILD)/fuzz/seeds
	@touch $@

fuzz-clean:
	rm -rf $(BUILD)-fuzz $(BUILD)-tsan $(BUILD)/fuzz $(BUILD)-asan/fuzz
clean: fuzz-clean
