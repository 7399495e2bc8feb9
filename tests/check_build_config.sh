#!/bin/sh
# A change of build configuration rebuilds what it affects (the Makefile's
# config stamp): in a scratch build dir, one object and one program built
# under one configuration are up to date under the same one, and out of date
# (then really rebuilt, with the new flags) after OPT, SANITIZE or CUDA
# changes. No nvcc needed: the CUDA flip is checked on a C object, which
# only gains -DQW_HAVE_CUDA=1. Runs in a few seconds.
#   tests/check_build_config.sh BUILD    (scratch dir: BUILD/config-check)
set -eu
build=${1:-build}
s="$build/config-check"
rm -rf "$s"
obj="$s/obj/lib/error.o"
# The caller's make flags (a parent `make BUILD=... test`) must not leak in.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory BUILD="$s" CUDA=0 "$@"; }
fail() { echo "check_build_config: $*"; exit 1; }

# uptodate ARGS...: make -q says the goal (last argument) needs nothing.
uptodate() { mk -q "$@" >/dev/null 2>&1; }

mk OPT=-O0 "$obj" >/dev/null
[ -f "$obj" ] || fail "could not build $obj"
uptodate OPT=-O0 "$obj" || fail "same configuration, yet $obj is out of date (stamp rewritten needlessly?)"

# Each change makes the object out of date; a dry run (-q) must not write.
uptodate OPT=-O1 "$obj" && fail "OPT -O0 -> -O1 left $obj up to date"
uptodate OPT=-O0 "$obj" || fail "a make -q run rewrote the config stamp"
uptodate OPT=-O0 SANITIZE=-fsanitize=undefined "$obj" && fail "a SANITIZE change left $obj up to date"
uptodate OPT=-O0 CFLAGS=-DQW_CONFIG_CHECK "$obj" && fail "a CFLAGS change left $obj up to date"
# CUDA=1 with a stand-in nvcc: only C objects are asked for, nvcc never runs.
uptodate OPT=-O0 CUDA=1 NVCC=/bin/true "$obj" && fail "CUDA=0 -> CUDA=1 left $obj up to date"

# And a real rebuild happens, with the new flags, then settles.
out=$(mk OPT=-O0 CUDA=1 NVCC=/bin/true "$obj")
echo "$out" | grep -q -- '-DQW_HAVE_CUDA=1 .*-c lib/error.c' || fail "CUDA=1 did not recompile $obj with -DQW_HAVE_CUDA=1: $out"
uptodate OPT=-O0 CUDA=1 NVCC=/bin/true "$obj" || fail "CUDA=1 twice: $obj rebuilt again"
out=$(mk OPT=-O0 "$obj")
echo "$out" | grep -q -- '-c lib/error.c' || fail "CUDA=1 -> CUDA=0 did not recompile $obj"
echo "$out" | grep -q -- '-DQW_HAVE_CUDA' && fail "CUDA=0 still compiled with -DQW_HAVE_CUDA: $out"
uptodate OPT=-O0 "$obj" || fail "after the rebuild $obj is still out of date"

# Bare `make` (no goal) builds the library, tools and examples: the stamp's
# rule must not become the default goal. A dry run lists what it would do.
out=$(mk -n OPT=-O0 2>&1)
echo "$out" | grep -q -- "-o $s/libqwinfer.so.0.1.0 " || fail "bare make would not build the shared library: $out"
echo "$out" | grep -q -- "-o $s/bin/qw-bench " || fail "bare make would not build the tools: $out"

# Linked products depend on the stamp too: an example program (the shared
# library and every object under it) at -O0, then a LDFLAGS-only change must
# relink both (one stamp for all: it recompiles the objects as well). The
# relink is a dry run (-n lists the commands without running them): a real
# one rebuilt the whole library a second time (half of this check's 30 s),
# and that a rebuild settles is checked on the object above.
prog="$s/bin/minimal"
mk -j2 OPT=-O0 "$prog" >/dev/null
uptodate OPT=-O0 "$prog" || fail "$prog out of date right after its build"
uptodate OPT=-O0 LDFLAGS=-Wl,-O1 "$prog" && fail "a LDFLAGS change left $prog up to date"
out=$(mk -n OPT=-O0 LDFLAGS=-Wl,-O1 "$prog")
echo "$out" | grep -q -- "-o $prog .*-Wl,-O1\|-Wl,-O1.*-o $prog " || fail "a LDFLAGS change would not relink $prog with it: $out"
echo "$out" | grep -q -- "-o $s/libqwinfer.so.0.1.0 " || fail "a LDFLAGS change would not relink the shared library: $out"
uptodate OPT=-O0 "$prog" || fail "the dry run (make -n) rewrote the config stamp"
rm -rf "$s"
echo "build config ok: OPT, SANITIZE, CFLAGS, CUDA and LDFLAGS changes rebuild; unchanged ones do not"
