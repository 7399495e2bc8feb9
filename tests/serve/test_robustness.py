"""Malformed and hostile input (400/404/405/413, never a crash), body and
queue limits, client disconnects that free the KV cache, timeouts, priority
and graceful degradation. After every test the shared server still answers
(conftest.py's still_serving)."""
import errno
import json
import socket
import threading
import time

import openai
import pytest
import requests

from conftest import (RawRequest, check_openai_error, long_body, make_client, metric, metrics, metrics_when,
                      post, sse_events, wait_for)


def completion(server, **fields):
    b = {"model": server.name, "prompt": "hi", "max_tokens": 2}
    b.update(fields)
    return post(server, "/v1/completions", b)


# ---- malformed bodies ------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b"", b"{", b"{\"model\": ", b"not json at all", b"{\"prompt\": \"x\",}", b"[]", b"\"string\"",
    b"null", b"42", b"{\"prompt\": \"a\"} trailing", b"\x00\x01\x02",
    b"[" * 100000 + b"]" * 100000,
    b"{\"a\":" * 50000 + b"1" + b"}" * 50000,
])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_malformed_json_is_400(server, path, raw):
    check_openai_error(post(server, path, raw), 400)


@pytest.mark.parametrize("field, value", [
    ("prompt", 5), ("prompt", {"a": 1}), ("prompt", [1.5]), ("prompt", [None]), ("prompt", [[1], "x"]),
    ("max_tokens", "10"), ("max_tokens", 1.5), ("temperature", "hot"), ("top_p", []),
    ("top_k", "all"), ("min_p", {}), ("n", 1.5), ("n", "2"), ("stream", "yes"), ("stop", 5),
    ("stop", [1, 2]), ("seed", "x"), ("logprobs", "3"), ("echo", 1), ("logit_bias", [1]),
    ("logit_bias", {"5": "x"}), ("stream_options", "on"), ("presence_penalty", "x"),
    ("stop_token_ids", "5"), ("ignore_eos", "true"), ("priority", 0.5), ("cache_salt", 5),
    ("timeout", "soon"), ("model", 5),
])
def test_wrong_type_is_400_naming_the_field(server, field, value):
    check_openai_error(completion(server, **{field: value}), 400, param=field)


@pytest.mark.parametrize("field, value", [
    ("temperature", -1), ("temperature", float("inf")), ("top_p", 0), ("top_p", 1.5), ("top_k", -2),
    ("min_p", 1.5), ("n", 0), ("n", 17), ("logprobs", 21), ("logprobs", -1), ("max_tokens", -1),
    ("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0),
    ("logit_bias", {"5": 101}), ("logit_bias", {"abc": 1}), ("logit_bias", {"99999": 1}),
    ("stop", ["s%d" % i for i in range(65)]), ("timeout", -1), ("min_tokens", -1),
    ("prompt_logprobs", 21),
])
def test_out_of_range_is_400_naming_the_field(server, field, value):
    body = {"model": server.name, "prompt": "hi", "max_tokens": 2, field: value}
    raw = json.dumps(body).replace("Infinity", "1e999").encode()  # JSON has no inf literal
    check_openai_error(post(server, "/v1/completions", raw), 400,
                       param=None if value == float("inf") else field)


@pytest.mark.parametrize("text", [
    '"temperature": 1e309', '"temperature": -1e309', '"max_tokens": 1180591620717411303424',
    '"n": 1180591620717411303424', '"seed": 1180591620717411303424', '"logprobs": 1e309',
    '"prompt": [1180591620717411303424]', '"max_tokens": -1180591620717411303424',
    '"top_k": 1e400', '"priority": 99999999999999999999999',
])
def test_huge_numbers_are_400(server, text):
    raw = ('{"model": "%s", "prompt": "hi", %s}' % (server.name, text)).encode()
    check_openai_error(post(server, "/v1/completions", raw), 400)


@pytest.mark.parametrize("path, raw", [
    ("/v1/completions", b'{"model": "tiny", "prompt": "bad \xff\xfe bytes"}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "trunc \xe2\x82"}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "overlong \xc0\xaf"}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "surrogate \xed\xa0\x80"}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "x", "stop": ["\xff"]}'),
    ("/v1/completions", b'{"model": "tiny\xff", "prompt": "x"}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "x", "unknown\xff": 1}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "lone surrogate escape \\ud800"}'),
    ("/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": "\xc3"}]}'),
    ("/generate", b'{"inputs": "\xff"}'),
])
def test_invalid_utf8_is_400(server, path, raw):
    r = post(server, path, raw)
    if path.startswith("/v1/"):
        check_openai_error(r, 400)
    else:  # TGI's error shape
        assert r.status_code == 400 and set(r.json()) >= {"error", "error_type"}, r.text[:300]


@pytest.mark.parametrize("prompt", ["", [], [[]], [""], [[1, 2], []], ["a", ""]])
def test_empty_prompt_is_400(server, prompt):
    check_openai_error(completion(server, prompt=prompt), 400, param="prompt")


@pytest.mark.parametrize("prompt", [[600], [-1], [1, 2, 512], [[1, 2], [99999]], [2 ** 31]])
def test_prompt_token_out_of_range_is_400(server, prompt):
    check_openai_error(completion(server, prompt=prompt), 400, param="prompt")


def test_missing_prompt_and_messages_are_400(server):
    check_openai_error(post(server, "/v1/completions", {"model": server.name}), 400)
    check_openai_error(post(server, "/v1/chat/completions", {"model": server.name}), 400)


def test_prompt_too_long_is_400_context_length_exceeded(server):
    check_openai_error(completion(server, prompt=[7] * 2100), 400, code="context_length_exceeded")
    check_openai_error(completion(server, prompt="word " * 3000), 400, code="context_length_exceeded")
    check_openai_error(post(server, "/v1/chat/completions",
                            {"model": server.name, "max_tokens": 1,
                             "messages": [{"role": "user", "content": "word " * 3000}]}),
                       400, code="context_length_exceeded")


# ---- paths and methods -----------------------------------------------------------

@pytest.mark.parametrize("method, path", [
    ("GET", "/v1/completions"), ("GET", "/v1/chat/completions"), ("POST", "/v1/models"),
    ("POST", "/health"), ("DELETE", "/metrics"), ("PUT", "/v1/completions"), ("GET", "/generate"),
])
def test_wrong_method_is_405(server, method, path):
    r = requests.request(method, server.url + path, data=b"{}", timeout=10)
    check_openai_error(r, 405)


@pytest.mark.parametrize("method, path", [("GET", "/"), ("GET", "/v1/nope"), ("POST", "/v1/embeddings"),
                                          ("GET", "/v1/models/../../etc/passwd"), ("GET", "/%00")])
def test_unknown_path_is_404(server, method, path):
    r = requests.request(method, server.url + path, timeout=10)
    check_openai_error(r, 404)


# ---- transport-level garbage -----------------------------------------------------

@pytest.mark.parametrize("payload", [
    b"GARBAGE\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\"",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 200000 + b"\r\n\r\n",
])
def test_garbage_on_the_socket(server, payload):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(2)
        try:
            while s.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError):
            pass
    except (BrokenPipeError, ConnectionResetError):
        pass
    except OSError as e:
        # the server may close the connection (a 200 kB header: MHD refuses
        # it) before our shutdown() runs; ENOTCONN then, not a failure
        if e.errno != errno.ENOTCONN:
            raise
    finally:
        s.close()


# ---- body limit (413) ------------------------------------------------------------

def test_body_too_big_is_413(start_server):
    srv = start_server("--max-body-bytes", "1024")
    ok = {"model": srv.name, "prompt": "x" * 600, "max_tokens": 1}
    assert post(srv, "/v1/completions", ok).status_code == 200
    big = {"model": srv.name, "prompt": "x" * 2000, "max_tokens": 1}
    check_openai_error(post(srv, "/v1/completions", big), 413)
    check_openai_error(post(srv, "/v1/chat/completions", {"model": srv.name, "messages": [
        {"role": "user", "content": "y" * 5000}]}), 413)

    # a chunked upload (no Content-Length) is bounded too
    chunk = b"%x\r\n" % 1000 + b" " * 1000 + b"\r\n"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 3 + b"0\r\n\r\n")
    head = s.recv(4096)
    s.close()
    assert head.startswith(b"HTTP/1.1 413"), head[:100]
    # a huge declared length is refused before the body is read
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 99999999999\r\n\r\n")
    head = s.recv(4096)
    s.close()
    assert head.startswith(b"HTTP/1.1 413"), head[:100]
    assert post(srv, "/v1/completions", ok).status_code == 200


# ---- client disconnect frees the KV cache ---------------------------------------

def _idle(server):
    assert wait_for(lambda: metric(metrics(server), "vllm:num_requests_running") == 0, 5)
    return metrics(server)


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
def test_stream_disconnect_frees_kv(slow_server, reset):
    idle = _idle(slow_server)
    used0 = metric(idle, "qwinfer_kv_blocks_used")
    abort0 = metric(idle, "vllm:request_success_total", finished_reason="abort")
    req = RawRequest(slow_server, "/v1/completions", long_body(slow_server.name, max_tokens=1800))
    assert req.status() == 200
    req.read_until(b"data: ")
    assert wait_for(lambda: metric(metrics(slow_server), "qwinfer_kv_blocks_used") > used0, 1)
    req.close(reset=reset)

    def freed():
        m = metrics(slow_server)
        return (metric(m, "qwinfer_kv_blocks_used") == used0 and
                metric(m, "vllm:request_success_total", finished_reason="abort") == abort0 + 1 and
                metric(m, "vllm:num_requests_running") == 0)
    assert wait_for(freed, 2), metrics(slow_server)


def test_non_stream_disconnect_frees_kv(slow_server):
    idle = _idle(slow_server)
    used0 = metric(idle, "qwinfer_kv_blocks_used")
    abort0 = metric(idle, "vllm:request_success_total", finished_reason="abort")
    req = RawRequest(slow_server, "/v1/completions", long_body(slow_server.name, stream=False, max_tokens=1800))
    assert wait_for(lambda: metric(metrics(slow_server), "vllm:num_requests_running") == 1, 5)
    req.close()

    def freed():
        m = metrics(slow_server)
        return (metric(m, "qwinfer_kv_blocks_used") == used0 and
                metric(m, "vllm:request_success_total", finished_reason="abort") == abort0 + 1)
    assert wait_for(freed, 2), metrics(slow_server)


def test_chat_stream_disconnect_frees_kv(slow_server):
    idle = _idle(slow_server)
    used0 = metric(idle, "qwinfer_kv_blocks_used")
    req = RawRequest(slow_server, "/v1/chat/completions", {
        "model": slow_server.name, "messages": [{"role": "user", "content": "go on"}], "max_tokens": 1800,
        "ignore_eos": True, "stream": True})
    req.read_until(b"data: ")
    req.close()
    assert wait_for(lambda: metric(metrics(slow_server), "qwinfer_kv_blocks_used") == used0, 2)


# ---- timeouts ----------------------------------------------------------------------

def test_body_timeout_ends_stream(slow_server):
    before = metrics(slow_server)
    t0 = time.time()
    r = post(slow_server, "/v1/completions", long_body(slow_server.name, max_tokens=2000, timeout=0.3))
    assert time.time() - t0 < 5
    chunks = sse_events(r.content)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert reasons == ["timeout"]
    after = metrics_when(slow_server, "vllm:request_success_total",
                         metric(before, "vllm:request_success_total", finished_reason="timeout") + 1,
                         finished_reason="timeout")
    assert metric(after, "vllm:request_success_total", finished_reason="timeout") - \
        metric(before, "vllm:request_success_total", finished_reason="timeout") == 1


def test_body_timeout_non_stream(slow_server):
    r = post(slow_server, "/v1/completions", long_body(slow_server.name, stream=False, max_tokens=2000, timeout=0.3))
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "timeout"
    assert 0 < r.json()["usage"]["completion_tokens"] < 2000


def test_server_request_timeout(start_server):
    srv = start_server("--request-timeout", "1", slow=True)
    t0 = time.time()
    r = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=2000))
    # 2000 tokens of the slow model take several seconds; the deadline ends them
    assert r.json()["choices"][0]["finish_reason"] == "timeout"
    assert 0.9 < time.time() - t0 < 4
    # a body "timeout" may only ask for less
    r = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=2000, timeout=0.2))
    assert r.json()["choices"][0]["finish_reason"] == "timeout"
    t0 = time.time()
    r = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=2000, timeout=30))
    assert r.json()["choices"][0]["finish_reason"] == "timeout"
    assert time.time() - t0 < 4


# ---- overload: bounded queue, queue timeout, priority, degradation ----------------

def test_queue_full_is_503_with_retry_after(start_server):
    srv = start_server("--max-queue", "1", "--max-num-seqs", "1", slow=True)
    a = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900))
    a.read_until(b"data: ")
    b = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900))
    try:
        assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_waiting") == 1, 5)
        for stream in (False, True):
            r = post(srv, "/v1/completions", long_body(srv.name, stream=stream, max_tokens=4))
            err = check_openai_error(r, 503, code="overloaded")
            assert err["type"] == "server_error"
            assert int(r.headers["Retry-After"]) >= 1
        r = post(srv, "/v1/chat/completions", {"model": srv.name, "max_tokens": 2,
                                               "messages": [{"role": "user", "content": "hi"}]})
        check_openai_error(r, 503, code="overloaded")
        assert "Retry-After" in r.headers
        # the official client sees the same (no retries configured)
        with pytest.raises(openai.InternalServerError) as e:
            make_client(srv).completions.create(model=srv.name, prompt="x", max_tokens=2)
        assert e.value.status_code == 503
        m = metrics_when(srv, "qwinfer_http_requests_total", 4, code="503")
        assert metric(m, "qwinfer_http_requests_total", code="503") >= 4
    finally:
        a.close()
        b.close()
    assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_running") == 0, 3)
    assert post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=2)).status_code == 200


def test_several_concurrent_clients_some_refused(start_server):
    """Five concurrent long requests on one running slot and one queue place:
    at least three get 503 + Retry-After at once, none hangs or fails otherwise."""
    srv = start_server("--max-queue", "1", "--max-num-seqs", "1", slow=True)
    results = []

    def one():
        try:
            r = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=150), timeout=30)
            results.append((r.status_code, r.headers.get("Retry-After")))
        except requests.RequestException as e:  # pragma: no cover - reported below
            results.append((str(e), None))
    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = sorted(c for c, _ in results)
    assert len(results) == 5 and set(codes) <= {200, 503}, results
    assert codes.count(503) >= 3 and codes.count(200) >= 1, results
    assert all(ra is not None for c, ra in results if c == 503)


def test_batch_larger_than_the_queue_is_400(start_server):
    """prompts x n above --max-queue can never be admitted: a 400, not a 503
    that a client would retry forever; one that fits is served."""
    srv = start_server("--max-queue", "4")
    r = post(srv, "/v1/completions", {"model": srv.name, "prompt": ["a", "b", "c"], "n": 2, "max_tokens": 2})
    check_openai_error(r, 400, param="n")
    assert "Retry-After" not in r.headers
    r = post(srv, "/v1/completions", {"model": srv.name, "prompt": ["a", "b"], "n": 2, "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 4


def test_queued_request_times_out_with_503(start_server):
    srv = start_server("--max-queue", "4", "--max-num-seqs", "1", slow=True)
    a = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900))
    try:
        a.read_until(b"data: ")
        t0 = time.time()
        r = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=4, timeout=0.3))
        assert time.time() - t0 < 3
        check_openai_error(r, 503, code="timeout")
        assert "Retry-After" in r.headers
    finally:
        a.close()


def test_priority_runs_first(start_server):
    srv = start_server("--max-queue", "4", "--max-num-seqs", "1", slow=True)
    a = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900))
    a.read_until(b"data: ")
    low = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900, priority=5))
    assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_waiting") == 1, 5)
    high = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900, priority=-5))
    try:
        assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_waiting") == 2, 5)
        a.close()
        high.read_until(b"data: ")
        assert wait_for(lambda: [metric(metrics(srv), g) for g in ("vllm:num_requests_running",
                                                                   "vllm:num_requests_waiting")] == [1, 1], 2)
        low.sock.settimeout(0.2)
        try:
            low.read_until(b"data: ")
            pytest.fail("the low-priority request streamed while the high one ran")
        except socket.timeout:
            pass
    finally:
        low.close()
        high.close()


def test_degraded_max_tokens_under_pressure(start_server):
    srv = start_server("--max-queue", "8", "--max-num-seqs", "1", "--degrade-queue", "1",
                       "--degrade-max-tokens", "3", slow=True)
    # not under pressure: not capped, no header
    r = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=6))
    assert r.json()["usage"]["completion_tokens"] == 6 and "X-Qwinfer-Degraded" not in r.headers
    a = RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900))
    a.read_until(b"data: ")
    waiting = [RawRequest(srv, "/v1/completions", long_body(srv.name, max_tokens=1900)) for _ in range(2)]
    out = {}
    try:
        assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_waiting") == 2, 5)

        def capped():
            out["r"] = post(srv, "/v1/completions", long_body(srv.name, stream=False, max_tokens=50))
        t = threading.Thread(target=capped)
        t.start()
        assert wait_for(lambda: metric(metrics(srv), "vllm:num_requests_waiting") == 3, 5)
    finally:
        a.close()
        for w in waiting:
            w.close()
    t.join(30)
    r = out["r"]
    assert r.status_code == 200
    assert r.headers.get("X-Qwinfer-Degraded") == "max_tokens=3"
    assert r.json()["usage"]["completion_tokens"] == 3


def test_connection_limit(start_server):
    """--max-connections 2: a third concurrent connection is not served; once
    the two close, new ones are."""
    srv = start_server("--max-connections", "2")
    held = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(2)]
    time.sleep(0.1)
    try:
        with pytest.raises(requests.RequestException):
            requests.get(srv.url + "/health", timeout=0.5)
    finally:
        for s in held:
            s.close()
    assert wait_for(lambda: _health_ok(srv), 5)


def _health_ok(srv):
    try:
        return requests.get(srv.url + "/health", timeout=1).status_code == 200
    except requests.RequestException:
        return False
