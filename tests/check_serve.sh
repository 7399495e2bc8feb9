#!/bin/sh
# tests/check_serve.sh BUILD - qw-serve over loopback: the pytest suite in
# tests/serve/ (the official openai client, requests for TGI, prometheus_client's
# parser for /metrics) against BUILD/bin/qw-serve on small random models. When
# `make test` built BUILD-asan/bin/qw-serve too, the hostile-input, shutdown and
# chat tests run at the same time against that ASan+UBSan server (two pytest
# runs: shutdown apart). Every server a test starts must exit 0 on SIGTERM
# with no sanitizer report on stderr (a leak found at exit fails the test).
# About 60 s on 2 cores (Zen 1), most of it waiting.
set -eu
B=${1:-build}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
[ -x "$B/bin/qw-serve" ] || { echo "check_serve: no $B/bin/qw-serve (make BUILD=$1 $1/bin/qw-serve)"; exit 1; }
[ -x "$B/bin/qw-makemodel" ] || { echo "check_serve: no $B/bin/qw-makemodel"; exit 1; }
for m in openai requests prometheus_client pytest; do
    python3 -c "import $m" 2>/dev/null || { echo "check_serve: python module $m missing; run: sh tools/deps.sh"; exit 1; }
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# pytest finds tests/serve/conftest.py; the servers' logs and models go to $T.
# pytest_run LOG FILE-OR-DIR...: run, keep the output in $T/LOG, exit status of pytest.
pytest_run() {
    log=$1
    shift
    timeout 300 python3 -m pytest -q -p no:cacheprovider --basetemp "$T/$log.tmp" "$@" >"$T/$log" 2>&1
}
# The ASan passes run beside the main one: most of each is waiting on
# sockets, tokens and shutdown deadlines, so together they take little
# longer than the longest. The shutdown cases (36 s of mostly waiting under
# ASan on a 2-core Zen 1) run apart from the robustness and chat ones (42 s):
# in one pytest the ASan part took 78 s of the check's 84.
A="$B-asan"
asan_pids=
# asan_run LOG FILE...: one ASan pass in the background.
asan_run() {
    # Sanitized code runs several times slower: QW_SERVE_SLOW stretches the waits.
    QW_BUILD="$B" QW_SERVE="$A/bin/qw-serve" QW_SERVE_SLOW=4 \
        ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        pytest_run "$@" &
    asan_pids="$asan_pids $1:$!"
}
if [ -x "$A/bin/qw-serve" ]; then
    asan_run asan.log tests/serve/test_robustness.py tests/serve/test_openai_chat.py
    asan_run asan-shutdown.log tests/serve/test_shutdown.py
fi
rc=0
QW_BUILD="$B" QW_SERVE="$B/bin/qw-serve" pytest_run main.log tests/serve || rc=1
if [ "$rc" = 0 ]; then
    tail -n 1 "$T/main.log"
else
    tail -n 80 "$T/main.log"
    echo "check_serve: pytest failed against $B/bin/qw-serve"
fi
for lp in $asan_pids; do
    log=${lp%%:*}
    if wait "${lp#*:}"; then
        echo "check_serve: $A/bin/qw-serve (ASan+UBSan): $(tail -n 1 "$T/$log") ($log)"
    else
        tail -n 80 "$T/$log"
        echo "check_serve: pytest failed against $A/bin/qw-serve (ASan+UBSan) ($log)"
        rc=1
    fi
done
exit $rc
