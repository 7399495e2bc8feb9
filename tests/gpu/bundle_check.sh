#!/bin/sh
# tests/gpu/bundle_check.sh [BUILD_DIR] - proves that a machine without our
# -dev packages and without pkg-config (the lent GPU machine) builds and runs
# qwinfer from gpu-deps/ alone, and that tests/gpu/run.sh gets through its
# whole path there (the device steps fail as they do without a GPU).
#
# In a private mount namespace, overlays hide the system's jansson, xxhash,
# pcre2 and utf8proc headers, unversioned .so links, static archives and .pc
# files (whiteouts), and pkg-config itself; then it builds the library with
# the CUDA backend (sm_90a only) plus the tools against the bundle, checks
# that the programs resolve the bundled .so files, generates a token, and
# runs tests/gpu/run.sh. Needs root (unshare, overlayfs) and apt for
# `make gpu-bundle`; prints SKIP and exits 77 where it cannot run.
# Not part of `make test` (minutes, network): `make check-gpu-bundle`.
set -eu
B=${1:-build-bundle-check}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null || { echo "SKIP: needs root and unshare"; exit 77; }
[ -f gpu-deps/PACKAGES ] || sh tools/gpu-bundle.sh gpu-deps

if [ "${QW_IN_MASKED_NS:-}" != 1 ]; then
    W=$(mktemp -d)
    trap 'rm -rf "$W"' EXIT
    MA=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    mkdir -p "$W/inc/u" "$W/inc/w" "$W/lib/u/pkgconfig" "$W/lib/w" "$W/bin/u" "$W/bin/w"
    for h in jansson.h jansson_config.h xxhash.h xxh3.h pcre2.h pcre2posix.h utf8proc.h; do
        [ -e "/usr/include/$h" ] && mknod "$W/inc/u/$h" c 0 0
    done
    for f in libjansson.so libjansson.a libxxhash.so libxxhash.a libpcre2-8.so libpcre2-8.a \
             libutf8proc.so libutf8proc.a; do
        [ -e "/usr/lib/$MA/$f" ] && mknod "$W/lib/u/$f" c 0 0
    done
    for f in jansson.pc libxxhash.pc libpcre2-8.pc libutf8proc.pc; do
        [ -e "/usr/lib/$MA/pkgconfig/$f" ] && mknod "$W/lib/u/pkgconfig/$f" c 0 0
    done
    for f in pkg-config pkgconf "$MA-pkg-config"; do
        [ -e "/usr/bin/$f" ] && mknod "$W/bin/u/$f" c 0 0
    done
    exec unshare -m sh -c "
        mount -t overlay overlay -o lowerdir=/usr/include,upperdir=$W/inc/u,workdir=$W/inc/w /usr/include &&
        mount -t overlay overlay -o lowerdir=/usr/lib/$MA,upperdir=$W/lib/u,workdir=$W/lib/w /usr/lib/$MA &&
        mount -t overlay overlay -o lowerdir=/usr/bin,upperdir=$W/bin/u,workdir=$W/bin/w /usr/bin &&
        QW_IN_MASKED_NS=1 sh '$0' '$B'"
fi

# --- inside the namespace ---------------------------------------------------
fail() { echo "bundle_check: FAIL: $*"; exit 1; }
! command -v pkg-config >/dev/null 2>&1 || fail "pkg-config is still visible"
[ ! -e /usr/include/jansson.h ] || fail "the system's jansson.h is still visible"
[ "$(make -s BUILD="$B" print-DEP_OK)" = bundle ] || fail "the Makefile did not choose gpu-deps/"

ARCH='-gencode arch=compute_90a,code=sm_90a'
CUDA_FLAG=CUDA=0
command -v nvcc >/dev/null 2>&1 && CUDA_FLAG=CUDA=1
make -s -j2 BUILD="$B" $CUDA_FLAG CUDA_ARCHS="$ARCH" lib "$B/bin/qw-makemodel" "$B/bin/qw-generate" \
    >"$B.log" 2>&1 || { tail -n 20 "$B.log"; fail "build against gpu-deps/"; }
for p in "$B/libqwinfer.so" "$B/bin/qw-generate"; do
    ldd "$p" | grep -q "libjansson.so.4 => $PWD/gpu-deps/" || { ldd "$p"; fail "$p does not load gpu-deps/'s libjansson"; }
done
"$B/bin/qw-makemodel" --shape tiny --out "$B/tiny" >/dev/null || fail "qw-makemodel"
"$B/bin/qw-generate" --model "$B/tiny" --max-tokens 4 --prompt-ids 1,2,3 >"$B/gen.txt" 2>&1 ||
    { cat "$B/gen.txt"; fail "qw-generate"; }
echo "bundle_check: built ($CUDA_FLAG) and ran against gpu-deps/ with the system packages and pkg-config hidden"

if [ "$CUDA_FLAG" = CUDA=1 ] && [ -z "${QW_BUNDLE_SKIP_RUNSH:-}" ]; then
    # run.sh's own build dir is build-gpu; keep it out of the way of the caller's
    rm -rf "$B/gpu-out"
    OUT="$B/gpu-out" E2E_8B_LAYERS=0 JOBS=2 bash tests/gpu/run.sh >"$B/runsh.txt" 2>&1 || true
    cat "$B/runsh.txt" | tail -n 15
    grep -q '^deps  *gpu-deps/ bundle' "$B/gpu-out/table.txt" || fail "run.sh did not use the bundle"
    grep -q '^build  *ok' "$B/gpu-out/table.txt" || fail "run.sh did not build"
    echo "bundle_check: tests/gpu/run.sh went through its whole path (device steps fail without a GPU)"
fi
