#!/bin/sh
# qw-bench's prefill accounting: every step that runs only prompt tokens
# counts (time and tokens), charged the FLOPs of exactly the positions it
# computed (their matmul rows and the attention of each over the keys
# before it). So FLOPs per prompt token equal those of the whole prompt
# computed at once - for a prompt longer than the step's token budget, for
# three prefilling side by side, and unchunked - and a prompt whose prefix
# came from the prefix cache is charged only the positions after it. Before
# qw_request_stats.computed_tokens the last chunk's step was charged with
# the whole prompt's FLOPs, and a cached prefix as if computed.
#   tests/check_bench_prefill.sh BUILD
set -eu
b=${1:-build}/bin
fail() { echo "check_bench_prefill: $*"; exit 1; }
[ -x "$b/qw-bench" ] && [ -x "$b/qw-makemodel" ] || fail "missing $b/qw-bench or $b/qw-makemodel"
command -v python3 >/dev/null || fail "python3 is needed (make deps installs it)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$b/qw-makemodel" --shape tiny --dtype f32 --seed 5 --max-pos 4096 --out "$dir/m" >/dev/null ||
    fail "qw-makemodel"
# flops(c0, c1): positions [c0, c1) of one prompt and one row of logits, from
# the model's config.json - written independently of qw-bench's code
cat >"$dir/flops.py" <<PY
import json
c = json.load(open("$dir/m/config.json"))
H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
qd = c["num_attention_heads"] * c["head_dim"]
kvd = c["num_key_value_heads"] * c["head_dim"]
params = L * (H * (qd + 2 * kvd) + qd * H + 3 * H * I)
def flops(c0, c1):
    return 2 * params * (c1 - c0) + 4 * L * qd * (c1 * (c1 + 1) - c0 * (c0 + 1)) / 2 + 2 * H * c["vocab_size"]
PY
# bench WHAT ARGS...: qw-bench --json into $dir/out.json
bench() {
    what=$1
    shift
    "$b/qw-bench" --model "$dir/m" --threads 1 --output-len 1 --no-limits --json "$@" \
        >"$dir/out.json" 2>"$dir/err" || fail "qw-bench, $what: $(cat "$dir/err")"
}
# check NREQ BUDGET MIN_STEPS: 300-token prompts, at least MIN_STEPS prefill
# steps (the scheduler may use more: its partial prefill limit)
check() {
    bench "$1 x 300 tokens, budget $2" --num-requests "$1" --input-len 300 --max-batched-tokens "$2"
    PYTHONPATH="$dir" python3 - "$dir/out.json" "$1" "$2" "$3" <<'PY' || fail "$1 x 300 tokens, budget $2"
import json, sys
from flops import flops
run = json.load(open(sys.argv[1]))["runs"][0]
n, budget, steps = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
want = flops(0, 300) / 300   # independent of the chunking
got = run["prefill_flops_per_s"] / run["prefill_tokens_per_s"]
print(f"{n} x 300 tokens, budget {budget}: {run['prefill_steps']} prefill steps (want >= {steps}), "
      f"{got:.1f} FLOP per token (want {want:.1f})")
sys.exit(0 if abs(got - want) <= 1e-4 * want and run["prefill_steps"] >= steps else 1)
PY
}
check 1 128 3
check 3 128 8
check 1 512 1
check 3 1024 1
# Two 500-token prompts sharing 200 tokens, one after the other: the second
# finds the first's full blocks cached (how many: the run's prefix-cache hit
# rate x the 1000 tokens looked up).
bench "shared prefix" --mode serve --concurrency 1 --num-requests 2 --scenario shared-prefix \
    --prefix-len 200 --input-len 300 --max-batched-tokens 128
PYTHONPATH="$dir" python3 - "$dir/out.json" <<'PY' || fail "shared prefix"
import json, sys
from flops import flops
run = json.load(open(sys.argv[1]))["runs"][0]
cached = round(run["prefix_cache_hit_rate"] * 1000)
want = (flops(0, 500) + flops(cached, 500)) / (1000 - cached)
got = run["prefill_flops_per_s"] / run["prefill_tokens_per_s"]
print(f"2 x 500 tokens, {cached} cached: {got:.1f} FLOP per computed token (want {want:.1f})")
sys.exit(0 if cached > 0 and abs(got - want) <= 1e-4 * want else 1)
PY
echo "check_bench_prefill: chunked, whole and prefix-cached prompts charged their own FLOPs"
