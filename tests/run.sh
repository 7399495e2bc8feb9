#!/bin/sh
# Run every Criterion test binary of one or more build trees, then the
# shell-level checks (exports, pkg-config consumer), and print one closing
# line "tests: N passed, M failed" (the counts are Criterion's, per test).
#   tests/run.sh BUILD [BUILD-asan]
# QW_ASAN_ONLY=1: the given tree is a sanitizer build; skip shell checks.
# Each binary's and check's wall time is printed after it, and the ten
# slowest at the end: the suite is meant to stay well under 15 minutes on
# 2 cores, and that list says where to look when it does not.
set -u
passed=0
failed=0
log=$(mktemp)
times=$(mktemp)
# took NAME START: print and record the seconds since START (date +%s)
took() {
    secs=$(( $(date +%s) - $2 ))
    echo "   ($secs s)"
    echo "$secs $1" >>"$times"
}
for build in "$@"; do
    for t in "$build"/tests/test_*; do
        [ -x "$t" ] || continue
        # a binary left by a renamed or deleted test would run stale code
        # and count its tests (the tree keeps objects between builds)
        if [ ! -f "$(dirname "$0")/$(basename "$t").c" ]; then
            echo "== $t: skipped, no tests/$(basename "$t").c (stale binary)"
            continue
        fi
        echo "== $t"
        start=$(date +%s)
        # -j2: this suite is sized for 2 cores; Criterion forks per test.
        # --ignore-warnings: a test logs a warning when it skips a kernel
        # table this CPU cannot run (AVX-512 on a Zen 3, say), and Criterion
        # would otherwise exit 1 although every test passed; the warnings
        # are still printed below, failures still fail.
        "$t" -j2 --short-filename --ignore-warnings >"$log" 2>&1
        rc=$?
        tail -n 40 "$log" | grep -v '^\[----\]' | grep -E 'FAIL|CRASH|Assertion|Synthesis|error|Error|SUMMARY|runtime error|WARN' | awk '!seen[$0]++' | head -n 40
        line=$(grep 'Synthesis' "$log" | tail -n 1)
        p=$(echo "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
        f=$(echo "$line" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
        c=$(echo "$line" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
        [ -n "$p" ] || p=0
        [ -n "$f" ] || f=0
        [ -n "$c" ] || c=0
        if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$c" -eq 0 ]; }; then
            echo "   (exit $rc with no Criterion synthesis: counted as one failure)"
            cat "$log" | tail -n 30
            f=$((f + 1))
        fi
        # Criterion runs each test in a child; a sanitizer report there (a
        # leak found at the child's exit, say) need not change any count.
        if grep -qE 'LeakSanitizer|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$log"; then
            echo "   sanitizer report in $t: counted as one failure"
            grep -E -A 12 'LeakSanitizer|AddressSanitizer|runtime error:' "$log" | head -n 60
            f=$((f + 1))
        fi
        if [ "$f" -ne 0 ] || [ "$c" -ne 0 ]; then cat "$log" | grep -v '^\[----\] *$' | tail -n 80; fi
        passed=$((passed + p))
        failed=$((failed + f + c))
        took "$t" "$start"
    done
done
if [ "${QW_ASAN_ONLY:-0}" != 1 ]; then
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
        took "$s" "$start"
    done
fi
echo "slowest:"
sort -rn "$times" | head -n 10 | sed 's/^/   /'
rm -f "$log" "$times"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
