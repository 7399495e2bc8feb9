#!/bin/sh
# The kernel benchmarks still run and still check what they check, on tiny
# shapes (seconds, not a measurement): qw-abench (decode attention; exits 1
# when the batched result differs from row by row) in fast and exact
# numerics and over the fp8 cache, with the table's block size and with one
# its direct kernels do not take, qw-qbench (quantized matmuls) and
# qw-samplebench (the sampler).
#   tests/check_bench_tools.sh BUILD
set -eu
b=${1:-build}/bin
fail() { echo "check_bench_tools: $*"; exit 1; }
for t in qw-abench qw-qbench qw-samplebench; do [ -x "$b/$t" ] || fail "missing $b/$t"; done
out=$("$b/qw-abench" --seqs 5 --ctx 300 --layers 1 --seconds 0.01) || fail "qw-abench (fast): $out"
echo "$out" | grep -q '^decode attention: .* GB/s of K+V' || fail "qw-abench printed no result: $out"
"$b/qw-abench" --seqs 3 --ctx 40 --layers 1 --seconds 0.01 --exact >/dev/null || fail "qw-abench --exact"
out=$("$b/qw-abench" --seqs 2 --ctx 40 --layers 1 --seconds 0.01 --huge-pages) || fail "qw-abench --huge-pages: $out"
echo "$out" | grep -q '2 MiB pages' || fail "qw-abench --huge-pages did not say so: $out"
"$b/qw-abench" --seqs 3 --ctx 77 --layers 2 --seconds 0.01 --block-size 8 --heads 6 --kv-heads 2 \
    --head-dim 64 --threads 1 >/dev/null || fail "qw-abench, block size 8, group 3"
"$b/qw-abench" --seqs 0 >/dev/null 2>&1 && fail "qw-abench accepted --seqs 0"
# the fp8 e4m3 cache: its own kernels (on bf16 dot products where the table
# has them, --exact: f32), checked batched == alone the same way
out=$("$b/qw-abench" --seqs 3 --ctx 77 --layers 2 --seconds 0.01 --kv fp8) || fail "qw-abench --kv fp8: $out"
echo "$out" | grep -q 'fp8 e4m3 KV' || fail "qw-abench --kv fp8 did not say so: $out"
"$b/qw-abench" --seqs 3 --ctx 40 --layers 1 --seconds 0.01 --kv fp8 --block-size 8 --heads 6 --kv-heads 2 \
    --head-dim 64 --threads 1 >/dev/null || fail "qw-abench --kv fp8, block size 8, group 3"
out=$("$b/qw-abench" --seqs 2 --ctx 40 --layers 1 --seconds 0.01 --kv fp8 --exact) || fail "qw-abench --kv fp8 --exact: $out"
echo "$out" | grep -q 'on f32 kernels' || fail "qw-abench --kv fp8 --exact did not say so: $out"
"$b/qw-abench" --kv f16 >/dev/null 2>&1 && fail "qw-abench accepted --kv f16"
"$b/qw-qbench" --k 256 --n 256 --ms 1,8 --seconds 0.01 --layers 2 >/dev/null || fail "qw-qbench"
# one header column per --ms entry, in its order (without M = 1 there is no GB/s column)
out=$("$b/qw-qbench" --k 256 --n 256 --ms 8,1 --seconds 0.01 --layers 2) || fail "qw-qbench --ms 8,1"
echo "$out" | grep -q '^mode .*M=8 .*GF/s.*M=1 GB/s' || fail "qw-qbench --ms 8,1: header out of order: $out"
out=$("$b/qw-qbench" --k 256 --n 256 --ms 8 --seconds 0.01 --layers 2) || fail "qw-qbench --ms 8"
echo "$out" | grep -q 'GB/s' && fail "qw-qbench --ms 8: a GB/s column with no M = 1 run: $out"
# uniform zero points (the default) are not stored in the fast layout; varied ones are
u=$("$b/qw-qbench" --k 256 --n 256 --ms 1 --seconds 0.01 --layers 2 | awk '$1 == "fast" && $2 == "U4" {print $3}')
v=$("$b/qw-qbench" --k 256 --n 256 --ms 1 --seconds 0.01 --layers 2 --zeros varied | awk '$1 == "fast" && $2 == "U4" {print $3}')
[ -n "$u" ] && [ -n "$v" ] && [ "$u" -lt "$v" ] || fail "qw-qbench fast U4 bytes: uniform zeros $u, varied $v"
"$b/qw-qbench" --zeros some >/dev/null 2>&1 && fail "qw-qbench accepted --zeros some"
"$b/qw-samplebench" --vocab 4096 --rows 5 >/dev/null || fail "qw-samplebench"
echo "check_bench_tools: qw-abench, qw-qbench and qw-samplebench ran"
