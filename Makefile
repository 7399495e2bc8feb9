# qwinfer - root Makefile (the only build system).
#
#   make                 library (shared + static), examples, tools
#   make demo            build, generate the tiny model, run concurrent generations
#   make test            every test (Criterion, reference, ABI, pkg-config, ASan+UBSan)
#   make check-asan      the Criterion suite under AddressSanitizer + UBSan only
#   make install PREFIX=/usr/local DESTDIR=
#   make deps            check/install build and test dependencies
#   CUDA=0               build without the CUDA backend (auto-detected from nvcc)
#   BUILD=dir            out-of-tree build directory (default: build)

VERSION_MAJOR := 0
VERSION_MINOR := 1
VERSION_PATCH := 0
VERSION       := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin

BUILD   ?= build
CC      ?= cc
PKG_CONFIG ?= pkg-config

DEP_PKGS  := jansson libxxhash libpcre2-8 libutf8proc
DEP_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(DEP_PKGS) 2>/dev/null)
DEP_LIBS   := $(shell $(PKG_CONFIG) --libs $(DEP_PKGS) 2>/dev/null)

OPT      ?= -O2
SANITIZE ?=
WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes
# -ffp-contract=off: the kernels' determinism contracts (lib/cpu/kernels.h)
# say where a multiply and an add are fused; GCC in ISO C mode already never
# contracts on its own, clang would (and aarch64 has FMA in its baseline).
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -ffp-contract=off -fPIC -fvisibility=hidden -pthread \
              -Iinclude -iquote lib $(DEP_CFLAGS) $(SANITIZE) $(CFLAGS)
LDLIBS_ALL := $(DEP_LIBS) -lm -pthread $(LDLIBS)

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
LDLIBS_ALL  += -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lnccl -lstdc++
PC_CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lnccl -lstdc++
endif
endif

# ---- sources -----------------------------------------------------------------
LIB_SRCS  := $(wildcard lib/*.c lib/cpu/*.c)
LIB_OBJS  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(CU_OBJS)
TOOL_SRCS := $(wildcard tools/*.c)
EX_SRCS   := $(wildcard examples/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
TESTUTIL_SRCS := $(wildcard tests/util/*.c)

SONAME    := libqwinfer.so.$(VERSION_MAJOR)
SHLIB     := $(BUILD)/libqwinfer.so.$(VERSION)
STLIB     := $(BUILD)/libqwinfer.a
TOOLS     := $(patsubst tools/%.c,$(BUILD)/bin/%,$(TOOL_SRCS))
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/bin/%,$(EX_SRCS))
TESTS     := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
TESTUTIL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TESTUTIL_SRCS))

.PHONY: all lib tools examples tests test check check-asan demo install uninstall deps clean abi-check
all: lib tools examples

lib: $(SHLIB) $(STLIB)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -MMD -MP -c $< -o $@

$(BUILD)/obj/cuda/%.o: cuda/%.cu $(wildcard cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(SHLIB): $(LIB_OBJS) lib/qwinfer.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/qwinfer.map \
	      -Wl,--no-undefined $(SANITIZE) -o $@ $(LIB_OBJS) $(LDLIBS_ALL)
	ln -sf libqwinfer.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libqwinfer.so

$(STLIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $(LIB_OBJS)

# Tools and tests link the static library: they may use internal qwi_ helpers.
$(BUILD)/bin/%: tools/%.c $(STLIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(STLIB) $(LDLIBS_ALL)

# Examples are API consumers: they link the shared library like a host would.
$(BUILD)/bin/%: examples/%.c $(SHLIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< -L$(BUILD) -lqwinfer -Wl,-rpath,'$$ORIGIN/..' $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/%.c $(TESTUTIL_OBJS) $(STLIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -iquote tests -o $@ $< $(TESTUTIL_OBJS) $(STLIB) -lcriterion $(LDLIBS_ALL)

tools: $(TOOLS)
examples: $(EXAMPLES)
tests: $(TESTS) $(TOOLS) $(EXAMPLES)

# ---- running -------------------------------------------------------------------
deps:
	@sh tools/deps.sh

demo: all
	@sh tools/demo.sh $(BUILD)

# The whole suite: Criterion binaries, export/pkg-config checks, then the same
# Criterion binaries under ASan+UBSan. Ends with "N passed, M failed".
test: deps
	@$(MAKE) --no-print-directory tests
	@$(MAKE) --no-print-directory BUILD=$(BUILD)-asan OPT=-O1 \
	    SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" CUDA=0 tests
	@sh tests/run.sh $(BUILD) $(BUILD)-asan

check: tests
	@sh tests/run.sh $(BUILD)

check-asan:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)-asan OPT=-O1 \
	    SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" CUDA=0 tests
	@QW_ASAN_ONLY=1 sh tests/run.sh $(BUILD)-asan

install: lib qwinfer.pc
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 644 include/qwinfer.h $(DESTDIR)$(INCDIR)/qwinfer.h
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libqwinfer.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libqwinfer.so
	install -m 644 $(STLIB) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(BUILD)/qwinfer.pc $(DESTDIR)$(LIBDIR)/pkgconfig/qwinfer.pc

qwinfer.pc: pkgconfig/qwinfer.pc.in
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' -e 's|@REQUIRES@|$(DEP_PKGS)|g' \
	    -e 's|@LIBS_PRIVATE@|-lm -pthread $(PC_CUDA_LIBS)|g' $< > $(BUILD)/qwinfer.pc

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/qwinfer.h $(DESTDIR)$(LIBDIR)/libqwinfer.* $(DESTDIR)$(LIBDIR)/pkgconfig/qwinfer.pc

clean:
	rm -rf $(BUILD) $(BUILD)-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
