#!/bin/sh
# tests/serve/smoke.sh - a quick hand-run check of qw-serve with curl (the
# real suite is tests/check_serve.sh). Not part of `make test`.
#
#   sh tests/serve/smoke.sh BUILD_DIR [SERVER_PREFIX...]
#
# Builds nothing: BUILD_DIR must hold bin/qw-serve and bin/qw-makemodel.
# SERVER_PREFIX runs the server under a wrapper (e.g. "env ASAN_OPTIONS=...").
# Checks: /health, /v1/models, completions (plain, streamed, batch with n and
# logprobs), chat (plain and streamed), TGI, errors (404, 405, 400, 413),
# a client disconnect freeing its KV blocks, a SIGTERM that lets a stream
# finish, a SIGTERM past --shutdown-timeout that ends a stream with "abort",
# and exit code 0 each time. Prints "smoke: N checks passed" or fails.
set -u
build=${1:?usage: smoke.sh BUILD_DIR [SERVER_PREFIX...]}
shift
serve="$build/bin/qw-serve"
work=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null; fi; rm -rf "$work"' EXIT
passed=0

fail() { echo "smoke: FAIL: $*" >&2; [ -f "$work/err" ] && sed 's/^/  server: /' "$work/err" >&2; exit 1; }
ok() { passed=$((passed + 1)); }
# expect NAME PATTERN TEXT: TEXT must match the extended regex PATTERN
expect() { printf '%s' "$3" | tr '\n' ' ' | grep -Eq -- "$2" || fail "$1: expected /$2/ in: $(printf '%s' "$3" | head -c 600)"; ok; }

"$build/bin/qw-makemodel" --shape tiny --dtype bf16 --seed 3 --out "$work/tiny" >/dev/null || fail "qw-makemodel"

# start [ARGS...]: run the server on a free port, wait for "ready"
start() {
    : >"$work/out"
    "$@" "$serve" --model "$work/tiny" --port 0 >"$work/out" 2>"$work/err" &
    pid=$!
    i=0
    while ! grep -q '^qw-serve: ready' "$work/out" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 300 ] && fail "server not ready after 30 s"
        kill -0 "$pid" 2>/dev/null || fail "server exited at start"
        sleep 0.1
    done
    port=$(sed -n 's|^qw-serve: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$work/out")
    [ -n "$port" ] || fail "no listening line: $(cat "$work/out")"
    B="http://127.0.0.1:$port"
}

# stop: SIGTERM, expect exit code 0
stop() {
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    pid=
    [ $rc -eq 0 ] || fail "exit code $rc after SIGTERM"
    ok
}

post() { curl -s -m 30 "$B$1" -H 'Content-Type: application/json' -d "$2"; }
code() { curl -s -m 30 -o /dev/null -w '%{http_code}' "$@"; }
metric() { curl -s "$B/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }

start "$@"
expect health "^200$" "$(code "$B/health")"
expect models '"id":"tiny".*"max_model_len":' "$(curl -s "$B/v1/models")"
r=$(post /v1/completions '{"model":"tiny","prompt":"Hello","max_tokens":5,"temperature":0}')
expect completion '"object":"text_completion".*"finish_reason":"length".*"completion_tokens":5' "$r"
r=$(post /v1/completions '{"prompt":"Hello","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}')
expect completion-stream '"choices":\[\],"usage":\{"prompt_tokens":[0-9]+,"completion_tokens":4' "$r"
expect completion-stream-done 'data: \[DONE\]' "$r"
r=$(post /v1/completions '{"prompt":["Hi","Yo"],"n":2,"max_tokens":2,"logprobs":2}')
expect batch '"index":3,.*"token_logprobs"' "$r"
r=$(post /v1/chat/completions '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":6,"chat_template_kwargs":{"enable_thinking":false}}')
expect chat '"object":"chat.completion".*"role":"assistant"' "$r"
r=$(post /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_tokens":3,"stream":true}')
expect chat-stream '"object":"chat.completion.chunk".*"finish_reason":"length".*data: \[DONE\]' "$r"
expect tgi '"generated_text":.*"details":\{"finish_reason":"length","generated_tokens":3' \
    "$(post /generate '{"inputs":"Hello","parameters":{"max_new_tokens":3,"details":true}}')"
expect tgi-stream '"details":\{"finish_reason":"length"' \
    "$(post /generate_stream '{"inputs":"Hello","parameters":{"max_new_tokens":2}}')"
expect 404 '^404$' "$(code "$B/v1/nothing")"
expect 405 '^405$' "$(code -X DELETE "$B/v1/completions")"
expect 400-json '"code":null' "$(post /v1/completions '{bad json')"
expect 400-type '"param":"temperature"' "$(post /v1/completions '{"prompt":"x","temperature":"hot"}')"
expect 400-long '"code":"context_length_exceeded"' "$(post /v1/completions '{"prompt":"x","max_tokens":100000000}')"
expect 404-model '"code":"model_not_found"' "$(post /v1/completions '{"prompt":"x","model":"gpt-9"}')"
head -c 5000000 /dev/zero | tr '\0' a >"$work/big"
expect 413 '^413$' "$(code "$B/v1/completions" --data-binary @"$work/big")"
expect metrics ' vllm:num_requests_waiting\{model_name="tiny"\} ' "$(curl -s "$B/metrics")"

# a client that goes away: its request is cancelled and its blocks freed
idle=$(metric qwinfer_kv_blocks_used)
curl -s -N -m 0.3 "$B/v1/completions" -d '{"prompt":"Hi","max_tokens":2000,"ignore_eos":true,"n":16,"stream":true}' >/dev/null
sleep 0.5
expect disconnect-kv "^$idle\$" "$(metric qwinfer_kv_blocks_used)"
expect disconnect-abort '[1-9]' "$(curl -s "$B/metrics" | grep 'finished_reason="abort"')"

# SIGTERM with time to drain: the stream finishes normally
post /v1/completions '{"prompt":"Hi","max_tokens":400,"ignore_eos":true,"stream":true}' >"$work/s1" &
cp=$!
sleep 0.2
stop
wait $cp
expect drain-finish '"finish_reason":"length".*data: \[DONE\]' "$(cat "$work/s1")"

# SIGTERM past the deadline: the stream ends with "abort", then [DONE]
start "$@"
post /v1/completions '{"prompt":"Hi","max_tokens":2000,"ignore_eos":true,"n":16,"stream":true}' >"$work/s2" &
cp=$!
sleep 0.3
kill -TERM "$pid"
sleep 0.2
kill -TERM "$pid"   # a second signal skips the rest of the drain
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || fail "exit code $rc after a forced drain"
ok
wait $cp
expect drain-abort '"finish_reason":"abort".*data: \[DONE\]' "$(cat "$work/s2")"

# a model that cannot load: exit code 1
"$@" "$serve" --model "$work/nothing-here" --port 0 >/dev/null 2>"$work/err"
rc=$?
[ $rc -eq 1 ] || fail "exit code $rc for a missing model (1 expected)"
ok
"$serve" --bogus >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "exit code $rc for a usage error (2 expected)"
ok
echo "smoke: $passed checks passed"
