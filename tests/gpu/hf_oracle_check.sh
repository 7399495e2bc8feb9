#!/bin/sh
# tests/gpu/hf_oracle_check.sh BUILD [PYTHON] - the Hugging Face oracle on the
# CPU: qw-makemodel writes a tiny bf16 checkpoint (and the 0.6B shape with
# HF_ORACLE_06B=1), tests/gpu/e2e.c runs the parity prompts on the CPU
# engine and dumps its tokens and logits, and tests/gpu/hf_oracle.py checks
# them against transformers' Qwen3ForCausalLM in float32. Needs a Python
# with torch and transformers (PYTHON, default python3); exits 77 (skip)
# without them. Not part of `make test`: `make check-hf-oracle`.
set -eu
B=${1:-build}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
PY=${2:-python3}
"$PY" -c 'import torch, transformers' 2>/dev/null || {
    echo "SKIP: $PY lacks torch/transformers (e.g. python3 -m venv V && V/bin/pip install torch transformers;"
    echo "      then make check-hf-oracle PYTHON=V/bin/python)"; exit 77; }
W=$B/hf-oracle
rm -rf "$W"; mkdir -p "$W/dump"
${CC:-cc} -O2 -std=c11 -Wall -Wextra -Iinclude tests/gpu/e2e.c tests/gpu/e2e_features.c tests/gpu/e2e_invariants.c tests/gpu/e2e_late_refusal.c \
    -L"$B" -lqwinfer -lm -Wl,-rpath,"$B" -o "$W/e2e"
"$B/bin/qw-makemodel" --shape tiny --dtype bf16 --out "$W/tiny" >/dev/null
set -- --parity "tiny=$W/tiny"
O="--model tiny=$W/tiny"
if [ "${HF_ORACLE_06B:-0}" = 1 ]; then
    "$B/bin/qw-makemodel" --shape 0.6b --dtype bf16 --out "$W/0.6b" >/dev/null
    set -- "$@" --parity "0.6b=$W/0.6b"
    O="$O --model 0.6b=$W/0.6b"
fi
"$W/e2e" --device cpu --dump "$W/dump" "$@" | grep -v '^e2e: '
# shellcheck disable=SC2086
"$PY" tests/gpu/hf_oracle.py $O --dump "$W/dump" --device cpu 2>/dev/null | grep '^ORACLE'
