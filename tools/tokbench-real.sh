#!/bin/sh
# tokbench-real.sh BUILD - tokenizer encode throughput on varied real text
# (`make tokbench`). Builds the corpus of tools/tokcorpus.sh under
# BUILD/tokcorpus, runs qw-tokbench (one core) on each part and on the mix,
# then, when Python's `tokenizers` is installed, Hugging Face's tokenizer on
# the same files (one thread) with a check that both give the same ids.
# Prints the CPU model so the figures can be recorded with it.
set -eu
build=${1:-build}
tokdir=${QW_TOKENIZER_DIR:-${QW_SHARED_DIR:-../shared}/data/qwen-tokenizer}
[ -f "$tokdir/vocab.json" ] || { echo "tokbench: no Qwen tokenizer at $tokdir (set QW_TOKENIZER_DIR)" >&2; exit 1; }
corpus="$build/tokcorpus"
[ -f "$corpus/mixed.txt" ] || sh "$(dirname "$0")/tokcorpus.sh" "$corpus"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores," \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' ')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "corpus: $(tr '\n' ';' <"$corpus/sources.txt")"
files="english chinese code_c code_py json mixed"
args=""
for f in $files; do args="$args --file $corpus/$f.txt"; done
echo "== qwinfer (qw-tokbench, 1 thread, best of 3)"
taskset -c 0 "$build/bin/qw-tokbench" --dir "$tokdir" $args --ids-out "$build/tokcorpus.qw-ids"
if python3 -c 'import tokenizers' >/dev/null 2>&1; then
    echo "== Hugging Face tokenizers $(python3 -c 'import tokenizers; print(tokenizers.__version__)') (1 thread, best of 3)"
    paths=""
    for f in $files; do paths="$paths $corpus/$f.txt"; done
    taskset -c 0 python3 "$(dirname "$0")/hf_tokbench.py" --dir "$tokdir" --ids-from "$build/tokcorpus.qw-ids" $paths
else
    echo "(Python tokenizers not installed: no comparison)"
fi
