#!/bin/sh
# Install into a staging prefix and build examples/minimal.c as an outside
# consumer would: with nothing but `pkg-config --cflags --libs qwinfer`.
set -eu
build=${1:-build}
case "$build" in /*) stage="$build/pkgconfig-check" ;; *) stage="$(pwd)/$build/pkgconfig-check" ;; esac
rm -rf "$stage"
. tests/util/make_build.sh
make_build "$build" -s PREFIX="$stage/usr" install >/dev/null
export PKG_CONFIG_PATH="$stage/usr/lib/pkgconfig"
flags=$(pkg-config --cflags --libs qwinfer)
cc -std=c11 -o "$stage/minimal" examples/minimal.c $flags
model="$build/testmodels/pc-tiny"
[ -f "$model/config.json" ] || "$build/bin/qw-makemodel" --shape tiny --dtype f32 --seed 3 --out "$model" >/dev/null
out=$(LD_LIBRARY_PATH="$stage/usr/lib" "$stage/minimal" "$model")
echo "minimal printed: $out"
[ -n "$out" ]
# The program must have used the installed library, not the build tree's.
LD_LIBRARY_PATH="$stage/usr/lib" ldd "$stage/minimal" | grep -q "$stage/usr/lib/libqwinfer.so.0"
echo "pkg-config consumer ok"
