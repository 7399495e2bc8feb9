#!/bin/sh
# qw-bench's prefill accounting on a prompt longer than the step's token
# budget: every chunk's step counts (time and tokens), and the FLOPs are
# each chunk's own (its matmul rows and the attention of its positions over
# the keys before them), so FLOPs per prompt token equal those of the whole
# prompt computed at once - for one request, for three prefilling side by
# side, and unchunked. Before qw_request_stats.computed_tokens the last
# chunk's step was charged with the whole prompt's FLOPs.
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
# check NREQ BUDGET MIN_STEPS: 300-token prompts, output 1 token each; at
# least MIN_STEPS prefill steps (the scheduler may use more: its partial
# prefill limit)
check() {
    "$b/qw-bench" --model "$dir/m" --threads 1 --num-requests "$1" --input-len 300 --output-len 1 \
        --max-batched-tokens "$2" --no-limits --json >"$dir/out.json" 2>"$dir/err" ||
        fail "qw-bench $1 x 300, budget $2: $(cat "$dir/err")"
    python3 - "$dir/m/config.json" "$dir/out.json" "$1" "$2" "$3" <<'PY' || fail "$1 x 300 tokens, budget $2"
import json, sys
c = json.load(open(sys.argv[1]))
run = json.load(open(sys.argv[2]))["runs"][0]
n, budget, steps = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
qd = c["num_attention_heads"] * c["head_dim"]
kvd = c["num_key_value_heads"] * c["head_dim"]
params = L * (H * (qd + 2 * kvd) + qd * H + 3 * H * I)
P = 300
# independent of the chunking: the whole prompt, one row of logits
flops = 2 * params * P + 4 * L * qd * P * (P + 1) / 2 + 2 * H * c["vocab_size"]
want = flops / P
got = run["prefill_flops_per_s"] / run["prefill_tokens_per_s"]
ok = abs(got - want) <= 1e-4 * want and run["prefill_steps"] >= steps
print(f"{n} x {P} tokens, budget {budget}: {run['prefill_steps']} prefill steps (want >= {steps}), "
      f"{got:.1f} FLOP per token (want {want:.1f})")
sys.exit(0 if ok else 1)
PY
}
check 1 128 3
check 3 128 8
check 1 512 1
check 3 1024 1
echo "check_bench_prefill: chunked and whole prompts charged their own FLOPs"
