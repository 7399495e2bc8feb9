#!/bin/sh
# tests/gpu/e2e.c - the GPU run's end-to-end program - built against BUILD's
# shared library and run with --device cpu on a tiny bf16 model it makes:
# every check of --parity (unchunked and --parity-chunked), --features (sampling, penalties, min-tokens
# bans, logprobs, parallel samples against the sampler's definition) and
# --invariants (batched, chunked, mixed, cached, preempted) must hold
# exactly when the engine under test is the CPU engine itself. So the
# program the lent GPU runs once is known to build and to check what it
# claims on every machine, CUDA toolkit or not (tests/check_cudasim.sh then
# runs it against the emulated device where the toolkit's headers exist).
# A second of work.
#   tests/check_gpu_e2e_cpu.sh BUILD
set -eu
b=${1:-build}
fail() { echo "check_gpu_e2e_cpu: $*"; exit 1; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
${CC:-cc} -O2 -std=c11 -Wall -Wextra -Werror -Iinclude tests/gpu/e2e.c tests/gpu/e2e_features.c tests/gpu/e2e_invariants.c tests/gpu/e2e_late_refusal.c \
    -L"$b" -lqwinfer -lm -Wl,-rpath,"$PWD/$b" -o "$w/e2e" >"$w/build.log" 2>&1 ||
    fail "build failed: $(cat "$w/build.log")"
"$b/bin/qw-makemodel" --dtype bf16 --shape tiny --out "$w/tiny" >/dev/null 2>&1 || fail "qw-makemodel failed"
out=$("$w/e2e" --device cpu --parity "tiny=$w/tiny" --parity-chunked "tiny_chunked=$w/tiny" --features "tiny=$w/tiny" \
    --invariants "tiny=$w/tiny" --late-refusal "tiny=$w/tiny") ||
    fail "e2e --device cpu: $out"
echo "$out" | grep -q '^PARITY tiny PASS 4/4 prompts equal' || fail "no exact parity: $out"
echo "$out" | grep -q '^PARITY tiny_chunked PASS 4/4 prompts equal' || fail "no exact chunked parity: $out"
echo "$out" | grep -q '^LATEREFUSALS tiny SKIP' || fail "the late refusal check did not skip: $out"
echo "$out" | grep -q '^FEATURES tiny PASS 8/8 requests' || fail "features did not all pass: $out"
echo "$out" | grep -q '^INVARIANTS tiny PASS 5/5' || fail "invariants did not all hold: $out"
echo "check_gpu_e2e_cpu: tests/gpu/e2e --device cpu: parity (and chunked), the 8 feature requests and the 5 invariants pass"
