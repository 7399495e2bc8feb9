#!/bin/sh
# Run every Criterion test binary of one or more build trees, then the
# shell-level checks (exports, pkg-config consumer), and print one closing
# line "tests: N passed, M failed" (the counts are Criterion's, per test).
#   tests/run.sh BUILD [BUILD-asan]
# QW_ASAN_ONLY=1: the given tree is a sanitizer build; skip shell checks.
# QW_TEST_WORKERS=N: binaries run N at a time (default: the CPU count, at
# most 4), each with Criterion's -j (cores / N, at least 1).
#
# Why a pool: most binaries spend most of their time in one test, and most
# tests use one core, so run one after another with -j2 the suite kept a
# 2-core machine 25% idle (user+sys 13.8 min over 9.2 min of wall time);
# two binaries at a time, one Criterion worker each, fill both cores. The
# binaries share nothing a concurrent run could break: test models are
# generated under a temporary name and renamed into place (tests/util),
# scratch directories carry the pid, and no test opens a fixed port or path.
# The shell checks run afterwards, one at a time: several of them call make
# on the same tree, which two at once would corrupt.
#
# Each binary's report is printed whole when it finishes (so in finishing
# order), then its wall time; the ten slowest come at the end: the suite is
# meant to stay well under 15 minutes on 2 cores, and that list says where
# to look when it does not.
set -u
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cores=$(nproc 2>/dev/null || echo 2)
workers=${QW_TEST_WORKERS:-$cores}
[ "$workers" -gt 4 ] && [ -z "${QW_TEST_WORKERS:-}" ] && workers=4
[ "$workers" -ge 1 ] || workers=1
cjobs=$((cores / workers))
[ "$cjobs" -ge 1 ] || cjobs=1

# The binaries in the order the pool takes them: the last tree first (the
# sanitizer tree's binaries run several times longer, and starting the long
# ones first leaves the short ones to fill the end).
list="$work/list"
: >"$list"
trees=""
for build in "$@"; do trees="$build $trees"; done
for build in $trees; do
    for t in "$build"/tests/test_*; do
        [ -x "$t" ] || continue
        # a binary left by a renamed or deleted test would run stale code
        # and count its tests (the tree keeps objects between builds)
        if [ ! -f "$(dirname "$0")/$(basename "$t").c" ]; then
            echo "== $t: skipped, no tests/$(basename "$t").c (stale binary)"
            continue
        fi
        echo "$t" >>"$list"
    done
done

# run_binary T I: run T, write its report to $work/I.out and
# "passed failed seconds" to $work/I.count (the count file last: its
# presence says the binary ran to the end).
run_binary() {
    t=$1
    i=$2
    log="$work/$i.log"
    out="$work/$i.out"
    start=$(date +%s)
    # --ignore-warnings: a test logs a warning when it skips a kernel
    # table this CPU cannot run (AVX-512 on a Zen 3, say), and Criterion
    # would otherwise exit 1 although every test passed; the warnings
    # are still printed below, failures still fail.
    # (stdin from /dev/null: the worker's loop reads the list on stdin)
    "$t" -j"$cjobs" --short-filename --ignore-warnings </dev/null >"$log" 2>&1
    rc=$?
    {
        echo "== $t"
        tail -n 40 "$log" | grep -v '^\[----\]' | grep -E 'FAIL|CRASH|Assertion|Synthesis|error|Error|SUMMARY|runtime error|WARN' | awk '!seen[$0]++' | head -n 40
    } >"$out"
    line=$(grep 'Synthesis' "$log" | tail -n 1)
    p=$(echo "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
    f=$(echo "$line" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
    c=$(echo "$line" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
    [ -n "$p" ] || p=0
    [ -n "$f" ] || f=0
    [ -n "$c" ] || c=0
    if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$c" -eq 0 ]; }; then
        echo "   (exit $rc with no Criterion synthesis: counted as one failure)" >>"$out"
        tail -n 30 "$log" >>"$out"
        f=$((f + 1))
    fi
    # Criterion runs each test in a child; a sanitizer report there (a
    # leak found at the child's exit, say) need not change any count.
    if grep -qE 'LeakSanitizer|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$log"; then
        echo "   sanitizer report in $t: counted as one failure" >>"$out"
        grep -E -A 12 'LeakSanitizer|AddressSanitizer|runtime error:' "$log" | head -n 60 >>"$out"
        f=$((f + 1))
    fi
    if [ "$f" -ne 0 ] || [ "$c" -ne 0 ]; then grep -v '^\[----\] *$' "$log" | tail -n 80 >>"$out"; fi
    secs=$(( $(date +%s) - start ))
    echo "   ($secs s)" >>"$out"
    echo "$p $((f + c)) $secs" >"$work/$i.count"
}

# worker: take the next unclaimed binary of the list (mkdir is atomic: the
# one worker whose mkdir succeeds runs it) until none is left; print each
# report under a lock so that two never interleave.
worker() {
    i=0
    while IFS= read -r t; do
        i=$((i + 1))
        mkdir "$work/claim.$i" 2>/dev/null || continue
        run_binary "$t" "$i"
        flock "$work/print.lock" cat "$work/$i.out"
    done <"$list"
}

echo "tests: $(wc -l <"$list") binaries, $workers at a time, Criterion -j$cjobs"
w=0
while [ "$w" -lt "$workers" ]; do
    worker &
    w=$((w + 1))
done
wait

passed=0
failed=0
times="$work/times"
: >"$times"
i=0
while IFS= read -r t; do
    i=$((i + 1))
    if [ -f "$work/$i.count" ]; then
        read -r p f secs <"$work/$i.count"
        passed=$((passed + p))
        failed=$((failed + f))
        echo "$secs $t" >>"$times"
    else
        echo "== $t: no result (its worker died): counted as one failure"
        failed=$((failed + 1))
    fi
done <"$list"

if [ "${QW_ASAN_ONLY:-0}" != 1 ]; then
    log="$work/check.log"
    for s in tests/check_*.sh; do
        [ -f "$s" ] || continue
        echo "== $s"
        start=$(date +%s)
        if sh "$s" "$1" >"$log" 2>&1; then
            passed=$((passed + 1))
            tail -n 3 "$log"
        else
            failed=$((failed + 1))
            cat "$log"
        fi
        secs=$(( $(date +%s) - start ))
        echo "   ($secs s)"
        echo "$secs $s" >>"$times"
    done
fi
echo "slowest:"
sort -rn "$times" | head -n 10 | sed 's/^/   /'
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
