#!/bin/sh
# The shared library exports only qw_* functions, has SONAME libqwinfer.so.0,
# and its links are in place.
set -eu
build=${1:-build}
lib="$build/libqwinfer.so.0.1.0"
[ -f "$lib" ] || { echo "missing $lib"; exit 1; }
[ -L "$build/libqwinfer.so.0" ] && [ -L "$build/libqwinfer.so" ] || { echo "missing symlinks"; exit 1; }
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libqwinfer.so.0" ] || { echo "SONAME is '$soname'"; exit 1; }
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -v '^qw_' | grep -v '^QWINFER_0$' || true)
if [ -n "$bad" ]; then echo "non-qw_ exports:"; echo "$bad"; exit 1; fi
n=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -c '^qw_')
[ "$n" -gt 20 ] || { echo "only $n qw_ exports"; exit 1; }
# Every function the header declares is exported.
for f in $(grep '^QW_API' include/qwinfer.h | grep -o 'qw_[a-z_]*(' | tr -d '(' | sort -u); do
    nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -qx "$f" || { echo "header declares $f but the library does not export it"; exit 1; }
done
echo "exports ok: $n qw_* symbols, SONAME $soname"
