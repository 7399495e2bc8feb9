#!/bin/sh
# Regression mode of the fuzz harnesses (tests/fuzz/): each harness, built
# with gcc + ASan/UBSan and tests/fuzz/driver.c in the sanitizer tree
# BUILD-asan, runs once over its seed corpus: the seeds make_seeds derives
# from qw-makemodel's output (BUILD/fuzz/seeds/<name>) and the committed
# ones (tests/fuzz/seeds/<name>, where inputs found by `make fuzz` are kept
# once fixed). Any sanitizer report, failed invariant or crash fails the
# check and names the input.
#   tests/check_fuzz_regress.sh BUILD
set -u
build=${1:-build}
make=${MAKE:-make}
names="safetensors config tokenizer serve_request"
cd "$(dirname "$0")/.." || exit 1

$make --no-print-directory -j2 BUILD="$build" fuzz-seeds || {
    echo "check_fuzz_regress: generating the seeds failed"; exit 1; }
# The same flags as make test's ASan tree, so nothing there is rebuilt.
asan_flags=$($make --no-print-directory -s BUILD="$build" print-asan-flags)
$make --no-print-directory -j2 BUILD="$build-asan" OPT=-O1 SANITIZE="$asan_flags" CUDA=0 fuzz-build || {
    echo "check_fuzz_regress: building the harnesses failed"; exit 1; }

status=0
log=$(mktemp)
for n in $names; do
    # generated seeds (make_seeds: the model files) and committed ones
    dirs=
    [ -d "$build/fuzz/seeds/$n" ] && dirs="$build/fuzz/seeds/$n"
    [ -d "tests/fuzz/seeds/$n" ] && dirs="$dirs tests/fuzz/seeds/$n"
    start=$(date +%s.%N)
    QWFUZZ_MODEL_DIR="$build/fuzz/model/single" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build-asan/fuzz/fuzz_$n" $dirs >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    secs=$(echo "$start $end" | awk '{printf "%.1f", $2 - $1}')
    if [ $rc -ne 0 ] || grep -qE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:' "$log"; then
        echo "fuzz_$n: FAILED (exit $rc, ${secs}s)"
        grep 'failing input:' "$log" | head -n 3
        tail -n 60 "$log"
        status=1
    else
        echo "fuzz_$n: $(tail -n 1 "$log" | sed 's/.*: \([0-9]* inputs\)/\1/') (${secs}s)"
    fi
done
rm -f "$log"
exit $status
