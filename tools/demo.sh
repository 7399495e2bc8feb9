#!/bin/sh
# make demo: generate the tiny random Qwen3 model with its tokenizer (no
# download) and run several concurrent chat generations on it through the
# public API: text in, text out. The weights are random, so the answers are
# gibberish made of the tokenizer's learned pieces; everything else (chat
# template, encoding, batching, prefix cache, sessions, streamed
# detokenization) is the real path.
set -eu
build=${1:-build}
model="$build/models/tiny"
# (re)generate when missing, or made before models came with a tokenizer
if [ ! -f "$model/config.json" ] || [ ! -f "$model/tokenizer_config.json" ]; then
    "$build/bin/qw-makemodel" --shape tiny --dtype f32 --seed 1 --out "$model"
fi
exec "$build/bin/qw-generate" --model "$model" --prompt "Tell me how the cache works." --chat \
    --num-requests 8 --max-tokens 24 --temperature 0.8 --seed 7 \
    --shared-prefix 48 --session-turns 3 --quiet
