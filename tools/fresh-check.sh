#!/bin/sh
# make fresh-check: prove that the README's two commands work as the very
# first commands on a fresh Debian 12 (bookworm) machine, in either order.
#
#   sh tools/fresh-check.sh BUILD [ORDER...]
#     ORDER  demo-first (`make demo` then `make test`) and/or test-first
#            (`make test` then `make demo`); default: both, each on its own
#            fresh copy of the root.
#   sh tools/fresh-check.sh BUILD --root-only   only make the cached root
#
# A clean root is made once with debootstrap (minbase plus `make` and `git`,
# what a user needs to clone and type the command; no compiler, no
# pkg-config, no python: `make deps` must bring them) and cached as a tarball
# in BUILD/fresh-check/, so reruns skip the download. For each order the
# tarball is unpacked, the repository is cloned into /root/qwinfer, and the
# commands run in a chroot with /proc, /sys and /dev mounted and the host's
# resolv.conf (and the host's locally added CA certificates), so apt-get and
# pip inside reach the Debian mirror and PyPI.
#
# What is tested is the COMMITTED HEAD of this checkout (git clone), not the
# working tree: commit first. FRESH_CHECK_MIRROR overrides the Debian
# mirror; FRESH_CHECK_KEEP=1 keeps the unpacked roots for inspection.
#
# Needs root (debootstrap, chroot, mount) and network access to the mirror.
# Prints each command's exit status and wall time, and ends with
# "fresh-check: N passed, M failed".
set -u
build=${1:-build}
[ $# -gt 0 ] && shift
orders=${*:-demo-first test-first}
mirror=${FRESH_CHECK_MIRROR:-http://deb.debian.org/debian}
repo=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "fresh-check: run inside the git checkout" >&2; exit 2; }
case "$build" in /*) work="$build/fresh-check" ;; *) work="$repo/$build/fresh-check" ;; esac
mkdir -p "$work" 2>/dev/null && work=$(cd "$work" && pwd -P)   # as /proc/mounts spells it
cache="$work/bookworm-root.tar.gz"
passed=0
failed=0

if [ "$(id -u)" != 0 ]; then
    echo "fresh-check: needs root (debootstrap, chroot, mount); run it as root or under sudo" >&2
    exit 2
fi
for o in $orders; do
    case "$o" in demo-first|test-first|--root-only) ;; *) echo "fresh-check: unknown order '$o' (demo-first, test-first)" >&2; exit 2 ;; esac
done
mkdir -p "$work"

# ---- the cached clean root ---------------------------------------------------
if [ ! -s "$cache" ]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "fresh-check: installing debootstrap"
        apt-get update -qq >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 || {
            echo "fresh-check: cannot install debootstrap (apt-get install debootstrap)" >&2
            exit 1
        }
    fi
    stage="$work/bootstrap"
    rm -rf --one-file-system "$stage"
    echo "fresh-check: debootstrap bookworm (minbase + make, git) from $mirror"
    t0=$(date +%s)
    if ! debootstrap --variant=minbase --include=make,git,ca-certificates bookworm "$stage" "$mirror" \
            >"$work/debootstrap.log" 2>&1; then
        echo "fresh-check: debootstrap failed; last lines of $work/debootstrap.log:" >&2
        tail -n 20 "$work/debootstrap.log" >&2
        exit 1
    fi
    # The apt cache of the bootstrap is not part of a fresh machine.
    rm -rf "$stage"/var/cache/apt/archives/*.deb "$stage"/var/lib/apt/lists/*_Packages
    tar -C "$stage" -czf "$cache.tmp" . && mv "$cache.tmp" "$cache"
    rm -rf --one-file-system "$stage"
    echo "fresh-check: root cached in $cache ($(du -h "$cache" | cut -f1), $(($(date +%s) - t0)) s)"
else
    echo "fresh-check: using cached root $cache"
fi

# ---- one order on one fresh copy --------------------------------------------
mounted=""
unmount_all() {
    for m in $mounted; do umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    mounted=""
}
trap 'unmount_all' EXIT
trap 'unmount_all; exit 130' INT TERM

# remove_root DIR: only once nothing is mounted below it (never follow a
# bind mount of the host's /dev into a recursive delete).
remove_root() {
    if grep -q " $1/" /proc/mounts; then
        echo "fresh-check: $1 still has mounts; not removing it" >&2
        return 1
    fi
    rm -rf --one-file-system "$1"
}

[ "$orders" = --root-only ] && exit 0
head_rev=$(git -C "$repo" rev-parse --short HEAD)
[ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ] &&
    echo "fresh-check: note: the checkout has uncommitted changes; they are NOT part of this check"
t_all=$(date +%s)
for order in $orders; do
    root="$work/root-$order"
    [ -d "$root" ] && { remove_root "$root" || exit 1; }
    mkdir -p "$root"
    tar -C "$root" -xzf "$cache"
    git clone -q --no-hardlinks "$repo" "$root/root/qwinfer"
    echo "fresh-check: [$order] committed HEAD $head_rev of $repo"
    # Site network plumbing only: the host's resolver, and the CA
    # certificates it added locally (an intercepting proxy's, say), without
    # which pip cannot reach PyPI here. A machine on the open internet needs
    # neither; nothing else of the host goes in.
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
        cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
        chroot "$root" update-ca-certificates >/dev/null 2>&1 ||
            echo "fresh-check: [$order] update-ca-certificates failed in the root"
    fi
    mount -t proc proc "$root/proc" && mounted="$root/proc $mounted"
    mount -t sysfs sysfs "$root/sys" && mounted="$root/sys $mounted"
    mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev" && mounted="$root/dev $mounted"
    case "$order" in demo-first) cmds="demo test" ;; test-first) cmds="test demo" ;; esac
    for c in $cmds; do
        log="$work/$order-make-$c.log"
        t0=$(date +%s)
        # A login-like clean environment: nothing of this host's shell leaks in.
        env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            chroot "$root" sh -c "cd /root/qwinfer && make $c" >"$log" 2>&1
        rc=$?
        dt=$(($(date +%s) - t0))
        if [ "$rc" -eq 0 ]; then
            passed=$((passed + 1))
            echo "fresh-check: [$order] make $c: ok in ${dt} s (log $log)"
        else
            failed=$((failed + 1))
            echo "fresh-check: [$order] make $c: FAILED (exit $rc) after ${dt} s; last lines of $log:"
            tail -n 25 "$log" | sed 's/^/    /'
        fi
        # The command's own closing lines: the demo's summary, the suite's count.
        case "$c" in
            test) grep -E '^tests: [0-9]+ passed' "$log" | tail -n 1 | sed 's/^/    /' ;;
            demo) tail -n 4 "$log" | sed 's/^/    /' ;;
        esac
    done
    unmount_all
    [ "${FRESH_CHECK_KEEP:-0}" = 1 ] || remove_root "$root"
done
echo "fresh-check: $(($(date +%s) - t_all)) s for: $orders"
echo "fresh-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
