"""Process life: the start-up lines, exit codes, and SIGTERM/SIGINT draining
(in-flight requests complete, new ones are refused, streams cut at the
deadline end with finish_reason "abort" and [DONE], exit 0)."""
import signal
import subprocess
import threading
import time

import requests

from conftest import (SERVE, SLOW, RawRequest, check_openai_error, long_body, metric, metrics, post,
                      sse_events, wait_for)


def test_startup_lines(server):
    assert server.stdout_lines[0] == "qw-serve: listening on " + server.url
    assert wait_for(lambda: "qw-serve: ready (model tiny)" in server.stdout_lines, 2), server.stdout_lines


def test_served_model_name(start_server):
    srv = start_server("--served-model-name", "my-model")
    r = requests.get(srv.url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in r["data"]] == ["my-model"]
    assert post(srv, "/v1/completions", {"model": "my-model", "prompt": "x", "max_tokens": 1}).status_code == 200
    check_openai_error(post(srv, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 1}),
                       404, code="model_not_found")


def test_usage_errors_exit_2(tmp_path):
    for args in ([], ["--model"], ["--model", str(tmp_path), "--port", "abc"],
                 ["--model", str(tmp_path), "--no-such-option"], ["--model", str(tmp_path), "--port", "70000"]):
        p = subprocess.run([SERVE] + args, capture_output=True, timeout=20 * SLOW)
        assert p.returncode == 2, (args, p.returncode, p.stderr[-500:])
        assert p.stderr, args


def test_load_failure_exits_1(tmp_path):
    (tmp_path / "config.json").write_text("{ not a config")
    for model in (str(tmp_path / "missing"), str(tmp_path)):
        p = subprocess.run([SERVE, "--model", model, "--port", "0"], capture_output=True, timeout=30 * SLOW)
        assert p.returncode == 1, (model, p.returncode, p.stderr[-500:])
        assert p.stderr.strip(), model


def test_sigterm_idle_exits_0(start_server):
    srv = start_server()
    t0 = time.time()
    srv.signal(signal.SIGTERM)
    assert srv.wait(10 * SLOW) == 0
    assert time.time() - t0 < 3 * SLOW
    srv.stop()  # checks stderr for sanitizer reports


def test_sigint_idle_exits_0(start_server):
    srv = start_server()
    srv.signal(signal.SIGINT)
    assert srv.wait(10 * SLOW) == 0
    srv.stop()


def _refused_or_503(srv):
    """After SIGTERM: no new connection, or 503 shutting_down with Retry-After."""
    try:
        r = post(srv, "/v1/completions", {"model": srv.name, "prompt": "late", "max_tokens": 2}, timeout=5)
    except requests.ConnectionError:
        return True
    err = check_openai_error(r, 503, code="shutting_down")
    assert "Retry-After" in r.headers and err["type"] == "server_error"
    return True


def test_sigterm_drains_in_flight(start_server):
    # the drain allowance stretches with the build's speed: an ASan server on
    # a slow host (Zen 1) needed more than 30 s for the 450 tokens
    srv = start_server("--shutdown-timeout", str(int(30 * SLOW)), slow=True)
    stream = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=250))
    stream.read_until(b"data: ")
    out = {}

    def blocking():
        out["r"] = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=200))
    t = threading.Thread(target=blocking)
    t.start()
    assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_running") == 2, 5)
    keepalive = requests.Session()  # a connection opened before the signal
    assert keepalive.get(srv.url + "/health", timeout=5).status_code == 200
    srv.signal(signal.SIGTERM)

    def draining():
        try:
            return requests.get(srv.url + "/health", timeout=2).status_code == 503
        except requests.ConnectionError:
            return True
    assert wait_for(draining, 2)
    assert srv.proc.poll() is None  # still finishing the two requests
    assert _refused_or_503(srv)
    # a new request on a connection that was already open is refused too
    try:
        r = keepalive.post(srv.url + "/v1/completions", json={"model": srv.name, "prompt": "x", "max_tokens": 2},
                           timeout=5)
        err = check_openai_error(r, 503, code="shutting_down")
        assert err["type"] == "server_error" and "Retry-After" in r.headers
    except requests.ConnectionError:
        pass  # the server closed the idle connection: refused as well
    # both in-flight requests complete normally
    chunks = _sse_from_chunked(stream.read_all().split(b"\r\n\r\n", 1)[1])
    assert [c["choices"][0]["finish_reason"] for c in chunks
            if c["choices"] and c["choices"][0]["finish_reason"]] == ["length"]
    t.join(30 * SLOW)
    r = out["r"]
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 200
    assert srv.wait(10 * SLOW) == 0
    srv.stop()


def test_sigterm_deadline_cuts_streams(start_server):
    """One running and one queued stream (--max-num-seqs 1), 2000 tokens each:
    more than the 1 s drain deadline. Both end with an "abort" chunk and [DONE]."""
    srv = start_server("--shutdown-timeout", "1", "--max-num-seqs", "1", slow=True)
    a = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=2000))
    a.read_until(b"data: ")
    b = RawRequest(srv, "/v1/chat/completions", {
        "model": srv.name, "messages": [{"role": "user", "content": "queued"}], "max_tokens": 2000,
        "ignore_eos": True, "stream": True})
    assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_waiting") == 1, 5)
    t0 = time.time()
    srv.signal(signal.SIGTERM)
    reasons = {}
    for name, req in (("a", a), ("b", b)):
        body = req.read_all()
        assert b"\r\n\r\n" in body, body[:300]
        chunks = _sse_from_chunked(body.split(b"\r\n\r\n", 1)[1])
        reasons[name] = [c["choices"][0]["finish_reason"] for c in chunks
                         if c["choices"] and c["choices"][0]["finish_reason"]]
    assert reasons["b"] == ["abort"], reasons
    assert reasons["a"] in (["abort"], ["length"]), reasons
    assert srv.wait(10 * SLOW) == 0
    assert 0.9 < time.time() - t0 < 4 * SLOW
    srv.stop()


def _sse_from_chunked(payload):
    """Undo HTTP/1.1 chunked transfer coding (when used), then parse the SSE events."""
    if payload.startswith(b"data: "):
        return sse_events(payload)
    out = b""
    while True:
        size_line, _, rest = payload.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        payload = rest[size + 2:]
    return sse_events(out)


def test_loading_is_503(start_server):
    """Until the model is loaded (about 0.2 s for the slow model, the first
    request comes within milliseconds of the listening line): /health 503,
    the API 503 "loading" with Retry-After; then 200 and the ready line."""
    srv = start_server(ready=False, slow=True)
    seen = []
    deadline = time.time() + 30 * SLOW
    while time.time() < deadline:
        h = requests.get(srv.url + "/health", timeout=10)
        r = post(srv, "/v1/completions", {"model": srv.name, "prompt": "x", "max_tokens": 1}, timeout=10)
        seen.append((h.status_code, r.status_code))
        if h.status_code == 200:
            break
        assert h.status_code == 503
        if r.status_code == 503:
            assert check_openai_error(r, 503, code="loading")["type"] == "server_error"
            assert r.headers["Retry-After"] == "1"
        else:
            assert r.status_code == 200 and requests.get(srv.url + "/health", timeout=10).status_code == 200
        m = requests.get(srv.url + "/v1/models", timeout=10)
        if m.status_code == 503:
            assert m.headers["Retry-After"] == "1"
        else:  # the engine became ready between the two requests
            assert m.status_code == 200 and requests.get(srv.url + "/health", timeout=10).status_code == 200
    assert seen[0] == (503, 503), seen[:3]
    assert seen[-1][0] == 200
    assert wait_for(lambda: any(x.startswith("qw-serve: ready") for x in srv.stdout_lines), 2)


def test_log_requests(start_server):
    srv = start_server("--log-requests")
    post(srv, "/v1/completions", {"model": srv.name, "prompt": "x", "max_tokens": 1})
    post(srv, "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 1})
    requests.get(srv.url + "/v1/models", timeout=10)
    time.sleep(0.1)
    lines = [x for x in srv.stderr_text().splitlines() if x.strip()]
    assert len(lines) >= 3, lines
    assert any("200" in x for x in lines) and any("404" in x for x in lines), lines
