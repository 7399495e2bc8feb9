#!/bin/sh
# Link a library only when code calls it. For the shared library and the
# example programs of BUILD: every NEEDED entry (readelf -d) must define at
# least one symbol the binary takes from it. Debian's gcc links with
# --as-needed, which would hide an unneeded -l (-lnccl, say), so the same
# link lines, read back from BUILD/config.stamp, are also relinked here with
# --no-as-needed (as clang, sanitizer builds and other distributions link)
# and held to the same rule. A CUDA build must need libcudart and
# libcublasLt, and never NCCL or plain cuBLAS (nothing calls them).
#   tests/check_linked_libs.sh BUILD
set -eu
build=${1:-build}
stamp="$build/config.stamp"
fail() { echo "check_linked_libs: $*"; exit 1; }
[ -f "$stamp" ] || fail "missing $stamp (build with this Makefile first)"
[ -f "$build/libqwinfer.so.0.1.0" ] || fail "missing $build/libqwinfer.so.0.1.0"
field() { sed -n "s/^$1=//p" "$stamp"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# needed_ok BINARY [LIBPATH]: each NEEDED library of BINARY defines a symbol
# BINARY leaves undefined. LIBPATH lets ldd find libqwinfer.so of the build.
needed_ok() {
    nm -D --undefined-only "$1" | awk '{print $NF}' | sed 's/@.*//' | sort -u > "$tmp/undef"
    needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    [ -n "$needed" ] || fail "$1 has no NEEDED entries?"
    for n in $needed; do
        path=$(LD_LIBRARY_PATH="${2:-}" ldd "$1" | awk -v n="$n" '
            $2 == "=>" && $1 == n { print $3 }
            $2 != "=>" { b = $1; sub(".*/", "", b); if (b == n) print $1 }' | head -n 1)
        [ -n "$path" ] && [ -f "$path" ] || fail "$1: cannot resolve NEEDED $n (ldd)"
        nm -D --defined-only "$path" | awk '{print $NF}' | sed 's/@.*//' | sort -u > "$tmp/def"
        used=$(comm -12 "$tmp/undef" "$tmp/def" | head -n 1)
        [ -n "$used" ] || fail "$1 links $n ($path) but calls nothing in it: drop it from the link line"
    done
    echo "$1: NEEDED $(echo $needed | tr '\n' ' ')- each one used"
}

lib="$build/libqwinfer.so.0.1.0"
needed_ok "$lib"
for ex in "$build"/bin/minimal "$build"/bin/qw-generate; do
    [ -x "$ex" ] && needed_ok "$ex" "$build"
done

# The same link lines without --as-needed.
sanitize=$(field SANITIZE)
ldflags=$(field LDFLAGS)
# shellcheck disable=SC2046,SC2086 # flag lists are word lists on purpose
cc -shared $sanitize $ldflags -o "$tmp/libqwinfer.so.0" -Wl,-soname,libqwinfer.so.0 \
   -Wl,--whole-archive "$build/libqwinfer.a" -Wl,--no-whole-archive \
   -Wl,--no-as-needed $(field LDLIBS_ALL) || fail "relink of $build/libqwinfer.a failed"
needed_ok "$tmp/libqwinfer.so.0"
# shellcheck disable=SC2046,SC2086
cc $(field CFLAGS_ALL) $ldflags -o "$tmp/qw-generate" examples/qw-generate.c -L"$build" -lqwinfer \
   -Wl,--no-as-needed $(field EX_LDLIBS) || fail "relink of qw-generate failed"
needed_ok "$tmp/qw-generate" "$build"

needed=$(readelf -d "$tmp/libqwinfer.so.0" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if echo "$needed" | grep -q '^libcudart'; then
    echo "$needed" | grep -q '^libcublasLt' || fail "CUDA build without libcublasLt"
    echo "$needed" | grep -qE '^libnccl|^libcublas\.' && fail "CUDA build links NCCL or cuBLAS: $needed"
    echo "CUDA build: cudart and cublasLt only"
else
    echo "CPU-only build: no CUDA library linked"
fi
echo "linked libraries ok"
