#!/bin/sh
# make demo: generate the tiny random Qwen3 model (no download) and run
# several concurrent generations on it through the public API.
set -eu
build=${1:-build}
model="$build/models/tiny"
if [ ! -f "$model/config.json" ]; then
    "$build/bin/qw-makemodel" --shape tiny --dtype f32 --seed 1 --out "$model"
fi
exec "$build/bin/qw-generate" --model "$model" --num-requests 8 --max-tokens 24 --temperature 0.8 --seed 7 \
    --shared-prefix 48 --session-turns 3 --quiet
