#!/bin/sh
# serve-bench.sh [BUILD] - the HTTP serving benchmark (`make serve-bench`):
# qw-serve driven by NVIDIA's aiperf (PyPI) with Poisson arrivals at several
# request rates, then the same workload in-process through
# `qw-bench --request-rate`, and one table of both, so that what the HTTP
# layer costs is the difference (docs/benchmarks.md).
#
# Same on both sides: the prompts (real text from tools/tokcorpus.sh cut to
# exactly INPUT_LEN tokens by tools/serve-bench.py, one JSONL file both read in
# order), the arrival times (one seeded Poisson schedule per rate, written into
# that file and replayed by both: aiperf --fixed-schedule, qw-bench
# --fixed-schedule; rate inf: all at once), OUTPUT_LEN tokens per request with
# ignore_eos, the engine options (threads, max-num-seqs, batched tokens), a
# fresh engine per rate with one warm-up request that shares no prefix with
# the prompts. aiperf sends /v1/completions with stream: true and counts tokens
# from the server's usage (--use-server-token-count), as qw-bench counts token
# events.
#
# Settings (environment):
#   MODEL        model directory (default BUILD/models/0.6b, made with
#                qw-makemodel --shape 0.6b --dtype bf16 when absent, its
#                vocabulary filled so that a random model's tokens decode to
#                text: see tools/serve-bench.py fill-vocab)
#   RATES        request rates, req/s; inf = all at once (default "0.25 0.5 1 inf":
#                0.6B on 2 cores decodes ~100 tok/s in a batch, ~0.8 req/s of
#                128 tokens, so two rates below that, one above, and the burst)
#   NUM_PROMPTS  requests per rate (default 32)
#   INPUT_LEN    prompt tokens (default 128)   OUTPUT_LEN  output tokens (default 128)
#   SEED         arrivals and sampling seed (default 1)
#   THREADS      engine threads, 0 = all cores (default 0)
#   OUT          results (default BUILD/serve-bench): prompts.jsonl and
#                prompts-RATE.jsonl (with the arrival times), server-RATE.log,
#                aiperf-RATE/ (aiperf's artifacts), qwbench-RATE.json, table.md
#   VENV         aiperf's virtual environment (default BUILD/serve-bench-venv);
#                created and aiperf installed into it when missing, unless
#                NO_INSTALL=1, which prints the command instead
# The client runs on the same machine as the server and takes CPU from it:
# on a small machine that is part of the difference the table shows.
set -eu
B=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
MODEL=${MODEL:-$B/models/0.6b}
RATES=${RATES:-"0.25 0.5 1 inf"}
NUM_PROMPTS=${NUM_PROMPTS:-32}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
SEED=${SEED:-1}
THREADS=${THREADS:-0}
MAX_NUM_SEQS=${MAX_NUM_SEQS:-256}
MAX_BATCHED=${MAX_BATCHED:-2048}
OUT=${OUT:-$B/serve-bench}
VENV=${VENV:-$B/serve-bench-venv}
AIPERF_VERSION=0.13.0
NAME=qwen3

say() { echo "serve-bench: $*"; }
fail() { echo "serve-bench: $*" >&2; exit 1; }

for t in qw-serve qw-bench qw-makemodel; do
    [ -x "$B/bin/$t" ] || fail "$B/bin/$t is missing: run make BUILD=$B $B/bin/$t"
done
case $NUM_PROMPTS$INPUT_LEN$OUTPUT_LEN in *[!0-9]*) fail "NUM_PROMPTS, INPUT_LEN and OUTPUT_LEN are numbers";; esac
[ -n "$RATES" ] || fail "RATES is empty"
for r in $RATES; do
    [ "$r" = inf ] || awk -v r="$r" 'BEGIN { exit !(r + 0 > 0) }' || fail "rate '$r' is not a positive number or inf"
done

# ---- the client: aiperf in its own virtual environment --------------------------
if [ ! -x "$VENV/bin/aiperf" ]; then
    install="python3 -m venv $VENV && $VENV/bin/pip install aiperf==$AIPERF_VERSION"
    [ "${NO_INSTALL:-0}" = 1 ] && fail "aiperf is not installed; run: $install"
    say "installing aiperf $AIPERF_VERSION into $VENV (PyPI; about 1 GB)"
    { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "aiperf==$AIPERF_VERSION"; } ||
        fail "installing aiperf failed; run: $install"
fi
client_version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aiperf"))')
PY="$VENV/bin/python"

# ---- the model -----------------------------------------------------------------
if [ "$MODEL" = "$B/models/0.6b" ]; then
    if [ ! -f "$MODEL/config.json" ]; then
        say "making the 0.6B shape in $MODEL (random bf16 weights, 1.2 GB)"
        "$B/bin/qw-makemodel" --shape 0.6b --dtype bf16 --seed 1 --out "$MODEL" >/dev/null
    fi
    # this benchmark's own model: every id decodes to text (fill-vocab; the
    # encoding of every text, so the prompts, stays as it was)
    [ -f "$MODEL/serve-bench-vocab-filled" ] || "$PY" "$here/serve-bench.py" fill-vocab "$MODEL"
fi
[ -f "$MODEL/config.json" ] || fail "$MODEL has no config.json"

# ---- the prompts: real text, exactly INPUT_LEN tokens each -------------------------
mkdir -p "$OUT"
corpus="$B/tokcorpus"
[ -f "$corpus/mixed.txt" ] || sh "$here/tokcorpus.sh" "$corpus" >/dev/null
prompts="$OUT/prompts.jsonl"
rm -f "$prompts"
"$PY" "$here/serve-bench.py" prompts --model "$MODEL" --corpus "$corpus/mixed.txt" --num "$NUM_PROMPTS" \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --out "$prompts" 2>&1 | grep -v 'PyTorch was not found' || true
[ -s "$prompts" ] || fail "no prompts were written"

# ---- the server ------------------------------------------------------------------------
# A fresh server for every rate, as qw-bench is a fresh process: the prefix
# cache of one run must not serve the next run's (identical) prompts.
server_pid=
url=
stop_server() {
    [ -n "$server_pid" ] || return 0
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}
trap stop_server EXIT
trap 'stop_server; exit 1' INT TERM
max_queue=$NUM_PROMPTS
[ "$max_queue" -ge 256 ] || max_queue=256
start_server() {   # $1: log name
    "$B/bin/qw-serve" --model "$MODEL" --host 127.0.0.1 --port 0 --served-model-name "$NAME" \
        --threads "$THREADS" --max-num-seqs "$MAX_NUM_SEQS" --max-num-batched-tokens "$MAX_BATCHED" \
        --seed "$SEED" --max-queue "$max_queue" --request-timeout 0 >"$OUT/server-$1.out" 2>"$OUT/server-$1.log" &
    server_pid=$!
    url=
    i=0
    while [ $i -lt 600 ]; do      # up to 60 s for the socket, then for the model
        [ -n "$url" ] ||
            url=$(sed -n 's|^qw-serve: listening on \(http://[^ ]*\).*|\1|p' "$OUT/server-$1.out" | head -n 1)
        if [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ]; then break; fi
        kill -0 "$server_pid" 2>/dev/null || { cat "$OUT/server-$1.log" >&2; fail "qw-serve exited"; }
        sleep 0.1
        i=$((i + 1))
    done
    [ $i -lt 600 ] || fail "qw-serve was not ready within 60 s (see $OUT/server-$1.log)"
    # warm-up, as qw-bench's: a short request sharing no prefix with the prompts
    curl -s -o /dev/null "$url/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model": "'"$NAME"'", "prompt": "Warm-up request.", "max_tokens": 4, "ignore_eos": true}' ||
        fail "the warm-up request failed"
}

for r in $RATES; do
    # finite rates: one Poisson schedule (seeded) written into the prompts,
    # replayed by both benchmarks; inf: every request at once on both sides
    if [ "$r" = inf ]; then
        file=$prompts
        load="--concurrency $NUM_PROMPTS"
        qwload="--request-rate inf"
    else
        file="$OUT/prompts-$r.jsonl"
        "$PY" "$here/serve-bench.py" schedule --in "$prompts" --rate "$r" --seed "$SEED" --out "$file"
        load="--fixed-schedule"
        qwload="--fixed-schedule"
    fi
    start_server "$r"
    say "rate $r: aiperf against qw-serve at $url"
    rm -rf "$OUT/aiperf-$r"
    # serve-bench.py cpu-time records the CPU seconds aiperf and its worker
    # processes took from the machine the server runs on
    # shellcheck disable=SC2086
    "$PY" "$here/serve-bench.py" cpu-time --out "$OUT/aiperf-$r.cpu" -- "$VENV/bin/aiperf" profile --model-names "$NAME" --url "$url" --endpoint-type completions --streaming \
        --tokenizer "$MODEL" --input-file "$file" --custom-dataset-type single_turn \
        --dataset-sampling-strategy sequential --request-count "$NUM_PROMPTS" --random-seed "$SEED" \
        $load --extra-inputs ignore_eos:true --use-server-token-count \
        --no-server-metrics --no-gpu-telemetry --workers-max 1 --record-processors 1 --ui-type none \
        --artifact-dir "$OUT/aiperf-$r" >"$OUT/aiperf-$r.log" 2>&1 ||
        { tail -n 30 "$OUT/aiperf-$r.log" >&2; fail "aiperf failed at rate $r (log: $OUT/aiperf-$r.log)"; }
    # the server's own view: its latency histograms (measured on the engine
    # thread, before HTTP) and the CPU seconds it used
    curl -s "$url/metrics" >"$OUT/metrics-$r.txt" || true
    awk '{ print ($14 + $15) / 100 }' "/proc/$server_pid/stat" >"$OUT/server-$r.cpu" 2>/dev/null || true
    stop_server     # qw-bench gets the machine to itself, as the server had it
    say "rate $r: qw-bench"
    # shellcheck disable=SC2086
    "$B/bin/qw-bench" --model "$MODEL" --prompts "$file" $qwload --num-prompts "$NUM_PROMPTS" \
        --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --seed "$SEED" --threads "$THREADS" \
        --max-num-seqs "$MAX_NUM_SEQS" --max-batched-tokens "$MAX_BATCHED" --json >"$OUT/qwbench-$r.json"
done

echo
echo "serve-bench: model $MODEL, $NUM_PROMPTS prompts of $INPUT_LEN tokens, $OUTPUT_LEN output tokens," \
     "seed $SEED, threads $THREADS; client aiperf $client_version (streaming /v1/completions);" \
     "latencies in ms; loss = 1 - client/qw-bench output tok/s; added TTFT = client - qw-bench at P50"
"$PY" "$here/serve-bench.py" table --dir "$OUT" --rates "$RATES" --markdown "$OUT/table.md"
