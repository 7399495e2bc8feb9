#!/bin/sh
# The threaded stress (tests/stress/stress_threads.c) under ThreadSanitizer:
# the library and the stress program built with gcc -fsanitize=thread -O1
# (the SIMD kernel files -O0) in BUILD-tsan, run for SECONDS (default 5:
# the make test version; make check-tsan passes STRESS_SECONDS, default 60)
# on a tiny generated model with a tokenizer. Fails on any ThreadSanitizer
# report (the first one stops the run: halt_on_error) and on any accounting
# failure of the stress.
#   tests/check_tsan.sh BUILD [SECONDS]
set -u
build=${1:-build}
secs=${2:-5}
make=${MAKE:-make}
cd "$(dirname "$0")/.." || exit 1

$make --no-print-directory -j2 BUILD="$build" "$build/bin/qw-makemodel" >/dev/null || {
    echo "check_tsan: building qw-makemodel failed"; exit 1; }
tsan_flags=$($make --no-print-directory -s BUILD="$build" print-tsan-flags)
# The SIMD kernel files at -O0 (KERNEL_CFLAGS): still instrumented, every
# load and store kept, but built in 4 s instead of 40 (q4i_x86.c's forced
# unrolls at -O1: the TSan tree took 82 s to build, 21 s this way). The
# stress model is 16 wide, so the kernels' speed does not matter here.
$make --no-print-directory -j2 BUILD="$build-tsan" OPT=-O1 SANITIZE="$tsan_flags" KERNEL_CFLAGS=-O0 CUDA=0 \
    stress-build || {
    echo "check_tsan: building the stress program failed"; exit 1; }

model="$build-tsan/stress-model"
rm -rf "$model"
"$build/bin/qw-makemodel" --shape tiny --hidden 16 --layers 1 --heads 2 --kv-heads 1 --head-dim 8 \
    --intermediate 16 --vocab 300 --max-pos 512 --dtype f32 --seed 11 --out "$model" >/dev/null 2>&1 || {
    echo "check_tsan: qw-makemodel failed"; exit 1; }

log="$build-tsan/stress.log"
start=$(date +%s)
TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
    "$build-tsan/stress/stress_threads" "$model" "$secs" >"$log" 2>&1
rc=$?
end=$(date +%s)
if [ $rc -ne 0 ] || grep -q 'WARNING: ThreadSanitizer' "$log"; then
    echo "check_tsan: FAILED (exit $rc after $((end - start))s; log $log)"
    grep -A 40 -m 1 'WARNING: ThreadSanitizer' "$log"
    grep 'stress:' "$log" | head -n 30
    exit 1
fi
grep 'stress:' "$log"
echo "check_tsan: ${secs}s stress under ThreadSanitizer, no report ($((end - start))s)"
