#!/bin/sh
# `make install` into a staging DESTDIR installs the header, the libraries,
# the .pc file and the tools; the installed tools run from there with no
# LD_LIBRARY_PATH (qw-generate finds the installed libqwinfer.so through its
# $ORIGIN-relative rpath, never the build tree's); and a CPU-only build links
# examples/minimal.c fully static from `pkg-config --static` alone, and it
# runs. A CUDA build instead must say in its .pc what it needs.
#   tests/check_install.sh BUILD
set -eu
build=${1:-build}
case "$build" in /*) abs="$build" ;; *) abs="$(pwd)/$build" ;; esac
dest="$abs/install-check"
prefix=/opt/qwinfer
root="$dest$prefix"
fail() { echo "check_install: $*"; exit 1; }
. tests/util/make_build.sh
rm -rf "$dest"
make_build "$build" -s PREFIX="$prefix" DESTDIR="$dest" install >/dev/null || fail "make install failed"

for f in include/qwinfer.h include/qwinfer_cdef.h lib/libqwinfer.so.0.1.0 lib/libqwinfer.so.0 lib/libqwinfer.so \
         lib/libqwinfer.a lib/pkgconfig/qwinfer.pc \
         bin/qw-generate bin/qw-makemodel bin/qw-bench bin/qw-tokbench; do
    [ -e "$root/$f" ] || fail "not installed: $prefix/$f"
done
for t in qw-generate qw-makemodel qw-bench qw-tokbench; do
    [ -x "$root/bin/$t" ] || fail "$prefix/bin/$t is not executable"
done
# Only the public header (and its cffi rendering) is installed.
[ "$(ls "$root/include" | tr '\n' ' ')" = "qwinfer.h qwinfer_cdef.h " ] ||
    fail "headers other than qwinfer.h and qwinfer_cdef.h installed: $(ls "$root/include")"

# The installed programs need neither the build tree nor the sources: run
# them from a directory outside the checkout, with no LD_LIBRARY_PATH.
unset LD_LIBRARY_PATH
work="$dest/run"
mkdir -p "$work"
(
    cd "$work"
    "$root/bin/qw-makemodel" --shape tiny --dtype f32 --seed 5 --out model >/dev/null
    out=$("$root/bin/qw-generate" --model model --prompt "Hello there" --max-tokens 6 --temperature 0 2>&1) ||
        { echo "$out"; exit 1; }
    echo "installed qw-generate printed: $(echo "$out" | head -n 3)"
    "$root/bin/qw-tokbench" --dir model --encode "Hello world" >/dev/null
    "$root/bin/qw-bench" --model model --num-requests 2 --input-len 8 --output-len 4 --no-limits >/dev/null
) || fail "an installed tool failed (see above)"
# qw-generate resolves the installed library, through its relative rpath.
got=$(ldd "$root/bin/qw-generate" | awk '$1 == "libqwinfer.so.0" { print $3 }')
[ -n "$got" ] && [ "$(realpath "$got")" = "$(realpath "$root/lib/libqwinfer.so.0")" ] ||
    fail "installed qw-generate does not resolve $prefix/lib/libqwinfer.so.0: $(ldd "$root/bin/qw-generate" | grep qwinfer)"
readelf -d "$root/bin/qw-generate" | grep -q 'R.*PATH.*\$ORIGIN/\.\./lib' || fail "qw-generate has no \$ORIGIN/../lib rpath"

# Static linking from the .pc file alone.
# pc ROOT ARGS...: pkg-config on the staged copy (the .pc carries the real
# prefix; point its variables at the staging directory).
pc() {
    pc_root=$1
    shift
    PKG_CONFIG_PATH="$pc_root/lib/pkgconfig" pkg-config --define-variable=prefix="$pc_root" \
        --define-variable=libdir="$pc_root/lib" --define-variable=includedir="$pc_root/include" "$@" qwinfer
}
# static_link ROOT: a CPU-only install links examples/minimal.c fully static
# from `pkg-config --static` alone, and the program runs.
static_link() {
    grep -q '^# This build has NO CUDA backend' "$1/lib/pkgconfig/qwinfer.pc" ||
        fail "CPU build: the .pc does not say it is CPU-only"
    flags="$(pc "$1" --static --cflags) $(pc "$1" --static --libs)"
    # shellcheck disable=SC2086
    cc -static -std=c11 -o "$dest/minimal-static" examples/minimal.c $flags ||
        fail "static link failed: cc -static examples/minimal.c $flags"
    readelf -l "$dest/minimal-static" | grep -q INTERP && fail "minimal-static is not fully static"
    readelf -d "$dest/minimal-static" | grep -q NEEDED && fail "minimal-static has NEEDED entries"
    out=$("$dest/minimal-static" "$work/model") || fail "the static program failed: $out"
    [ -n "$out" ] || fail "the static program printed nothing"
    echo "static minimal (cc -static \$(pkg-config --static ...)) printed: $out"
}
if pc "$root" --static --libs | grep -q -- '-lcudart'; then
    grep -q '^# This build HAS the CUDA backend' "$root/lib/pkgconfig/qwinfer.pc" ||
        fail "CUDA build: the .pc does not say what a CUDA link needs"
    pc "$root" --static --libs | grep -q -- '-lcublasLt' || fail "CUDA build: Libs.private lacks -lcublasLt"
    echo "CUDA build: the .pc lists and explains the CUDA libraries (no fully static link from it)"
    # The static promise is about CPU-only builds: check it on a scratch one
    # (-O0: a few seconds).
    cpu="$build/install-check-cpu"
    make_build "$cpu" -s -j2 CUDA=0 OPT=-O0 PREFIX="$prefix" DESTDIR="$dest/cpu" install >/dev/null ||
        fail "make install of a CPU-only scratch build failed"
    static_link "$dest/cpu$prefix"
    rm -rf "$cpu"
elif grep -q -- '-fsanitize' "$build/config.stamp" 2>/dev/null; then
    echo "sanitizer build: no static link check (sanitizers cannot link -static)"
else
    static_link "$root"
fi
rm -rf "$dest"
echo "install ok: header, libraries, .pc and 4 tools installed and run from $prefix"
