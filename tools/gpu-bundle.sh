#!/bin/sh
# tools/gpu-bundle.sh - unpack the Debian packages qwinfer links against into
# one folder of the repository, for a machine that has a compiler and the
# CUDA toolkit but none of our -dev packages, no apt and no internet (the lent
# GPU machine, docs/cuda.md). Run here, where apt works; the folder then
# travels with the working tree and the Makefile uses it when pkg-config cannot
# find the packages (see "bundled dependencies" in the Makefile).
#
#   sh tools/gpu-bundle.sh [DIR]     default DIR: gpu-deps (git-ignored)
#
# Nothing is installed: `apt-get download` fetches the .debs of this
# machine's release and `dpkg-deb -x` unpacks them (headers, .so links and
# the shared objects themselves, ~2 MB). The bundle is for the same CPU
# architecture and a glibc at least as new as this Debian release's.
set -eu
DIR=${1:-gpu-deps}
# headers + the unversioned .so link (-dev) and the shared objects (runtime)
# plus GNU make, in case the machine's image lacks it (tests/gpu/run.sh then
# runs gpu-deps/usr/bin/make; it needs only libc)
PKGS="libjansson-dev libjansson4 libxxhash-dev libxxhash0 libpcre2-dev libpcre2-8-0
libutf8proc-dev libutf8proc2 make"

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
    echo "gpu-bundle: needs apt-get and dpkg-deb (a Debian or Ubuntu machine)" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck disable=SC2086
if ! (cd "$TMP" && apt-get download $PKGS >"$TMP/apt.log" 2>&1); then
    # a machine whose package lists were never fetched: fetch them once
    if [ "$(id -u)" = 0 ] && apt-get update >/dev/null 2>&1 &&
       (cd "$TMP" && apt-get download $PKGS >"$TMP/apt.log" 2>&1); then :; else
        cat "$TMP/apt.log" >&2
        echo "gpu-bundle: apt-get download failed (run 'apt-get update' as root first?)" >&2
        exit 1
    fi
fi
rm -rf "$DIR.new"
mkdir -p "$DIR.new"
for deb in "$TMP"/*.deb; do dpkg-deb -x "$deb" "$DIR.new"; done
# documentation and static archives are not needed to build or run
rm -rf "$DIR.new/usr/share"
find "$DIR.new" -name '*.a' -delete
# What the Makefile's bundle branch expects to find (fail here, not there).
LIBDIR=$(dirname "$(find "$DIR.new/usr/lib" -name 'libjansson.so' | head -n 1)")
for f in include/jansson.h include/xxhash.h include/pcre2.h include/utf8proc.h; do
    [ -f "$DIR.new/usr/$f" ] || { echo "gpu-bundle: $f missing from the packages" >&2; exit 1; }
done
[ -x "$DIR.new/usr/bin/make" ] || { echo "gpu-bundle: make missing from the packages" >&2; exit 1; }
for l in jansson xxhash pcre2-8 utf8proc; do
    [ -e "$LIBDIR/lib$l.so" ] || { echo "gpu-bundle: lib$l.so missing from the packages" >&2; exit 1; }
done
ls "$TMP"/*.deb | sed 's|.*/||' >"$DIR.new/PACKAGES"
rm -rf "$DIR"
mv "$DIR.new" "$DIR"
echo "gpu-bundle: $(wc -l <"$DIR/PACKAGES") packages in $DIR ($(du -sh "$DIR" | cut -f1)); carry '$DIR' with the working tree"
