#!/bin/sh
# qw-bench says how the CPU backend's attention reads a bf16 or fp8 KV
# cache: on bf16 dot products (fast numerics, where the kernel table has
# them) or on f32 kernels ("kv_attention" in --json, and in the header).
# Machine-independent cases: exact numerics never use dot products; the
# portable generic table always has them in the fast mode; the f32 cache
# reports nothing.
#   tests/check_bench_kv_attention.sh BUILD
set -eu
b=${1:-build}/bin
fail() { echo "check_bench_kv_attention: $*"; exit 1; }
[ -x "$b/qw-bench" ] && [ -x "$b/qw-makemodel" ] || fail "missing $b/qw-bench or $b/qw-makemodel"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$b/qw-makemodel" --shape tiny --dtype bf16 --seed 5 --out "$dir/m" >/dev/null || fail "qw-makemodel"
# attention KV ARGS...: the kv_attention field qw-bench --json reports ("" if none)
attention() {
    kv=$1
    shift
    "$b/qw-bench" --model "$dir/m" --threads 1 --num-requests 1 --input-len 8 --output-len 2 --no-limits \
        --json --kv-cache-dtype "$kv" "$@" >"$dir/out.json" 2>"$dir/err" || fail "qw-bench $kv $*: $(cat "$dir/err")"
    sed -n 's/^  "kv_attention": "\(.*\)",$/\1/p' "$dir/out.json"
}
for kv in bf16 fp8; do
    got=$(attention $kv --numerics exact)
    [ "$got" = f32 ] || fail "$kv, exact numerics: kv_attention '$got', want f32"
    got=$(QWINFER_CPU_KERNELS=generic attention $kv)
    [ "$got" = bf16_dot ] || fail "$kv, fast numerics, generic table: kv_attention '$got', want bf16_dot"
done
got=$(attention f32)
[ -z "$got" ] || fail "f32 cache: kv_attention '$got', want none"
out=$("$b/qw-bench" --model "$dir/m" --threads 1 --num-requests 1 --input-len 8 --output-len 2 --no-limits \
    --kv-cache-dtype fp8 --numerics exact 2>&1) || fail "qw-bench (text): $out"
echo "$out" | grep -q 'KV cache fp8 (kernels [a-z0-9]*, attention on f32 kernels)' ||
    fail "the header does not say how attention ran: $(echo "$out" | head -1)"
echo "check_bench_kv_attention: qw-bench reports f32 / bf16 dot-product KV attention as the backend runs it"
