#!/bin/sh
# quant-bench.sh - the issue 16 benchmark (docs/benchmarks.md): batch-1 decode and 512-token
# prefill of the Qwen3-0.6B shape in bf16 and as AWQ int4, GPTQ int4/int8 (and int4 with its
# head quantized too, GPTQModel's lm_head=True) and FP8 checkpoints made by qw-makemodel from
# the same seed, three repeats each (the quantized-head model also in
# QW_NUMERICS_FAST_INT8, row "gptqh-int8"), then 4K-context decode with an
# f32, bf16 and fp8 KV cache. Fast numerics (the default), 2 threads, greedy. Every decode
# run also probes the read bandwidth between its steps (--probe-every 16) and prints its
# fraction of those probes, the limit issue 16's "75% of its own bandwidth bound" is judged by
# on a VM whose bandwidth swings between phases.
#   sh tools/quant-bench.sh [BUILD] [MODEL_DIR]     (defaults: build, /tmp/qbench)
# Not part of the test suite: minutes of machine time, and only meaningful on a quiet machine.
BUILD=${1:-build}
D=${2:-/tmp/qbench}
B=$(cd "$BUILD/bin" && pwd)/qw-bench
MK=$(cd "$BUILD/bin" && pwd)/qw-makemodel
mkdir -p "$D" && cd "$D" || exit 1
for q in none awq gptq fp8; do
  [ -f $q/config.json ] || $MK --shape 0.6b --dtype bf16 --seed 7 --quant $q --out $q >/dev/null || exit 1
done
[ -f gptq8/config.json ] || $MK --shape 0.6b --dtype bf16 --seed 7 --quant gptq --bits 8 --out gptq8 >/dev/null || exit 1
[ -f gptqh/config.json ] || $MK --shape 0.6b --dtype bf16 --seed 7 --quant gptq --gptq-lm-head --out gptqh >/dev/null || exit 1
echo "== machine"; grep -m1 'model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E 'avx2|avx512|amx' | tr '\n' ' '; echo; uptime
echo "== limits (bf16 model)"
$B --model none --threads 2 --num-requests 1 --input-len 16 --output-len 64 --temperature 0 2>&1 | tail -25
for rep in 1 2 3; do
  for q in none awq gptq gptqh gptqh-int8 gptq8 fp8; do
    m=${q%-int8}; num=fast
    [ "$m" = "$q" ] || num=fast-int8
    echo "== decode $q rep $rep"
    $B --model $m --numerics $num --threads 2 --num-requests 1 --input-len 16 --output-len 64 --temperature 0 --no-limits \
       --probe-every 16 2>&1 | grep -E "loaded|decode  |paired|memory" | head -8
    echo "== prefill512 $q rep $rep"
    $B --model $m --numerics $num --threads 2 --num-requests 1 --input-len 512 --output-len 1 --no-limits 2>&1 | grep -E "prefill  " | head -4
  done
done
for kv in f32 bf16 fp8; do
  echo "== kv4k $kv"
  $B --model none --threads 2 --num-requests 1 --input-len 4096 --output-len 48 --temperature 0 --no-limits --kv-cache-dtype $kv \
     --probe-every 16 2>&1 | grep -E "decode  |paired|prefill  " | head -8
done
