"""GET /metrics: parsed by prometheus_client's parser; vLLM's names with the
model_name label; counters and histograms move as requests run."""
import json
import math

import requests

from conftest import metrics, metric, metrics_when, post, wait_for, RawRequest, long_body

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:gpu_cache_usage_perc", "qwinfer_kv_blocks_used", "qwinfer_kv_blocks_total"]
COUNTERS = ["vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
            "vllm:generation_tokens", "vllm:num_preemptions", "vllm:request_success",
            "qwinfer_http_requests"]
HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
              "vllm:iteration_tokens_total"]


def test_content_type(server):
    r = requests.get(server.url + "/metrics", timeout=10)
    assert r.status_code == 200
    ct = r.headers["Content-Type"].replace(" ", "")
    assert ct == "text/plain;version=0.0.4;charset=utf-8", r.headers["Content-Type"]


def test_names_present_with_model_label(server):
    m = metrics(server)
    names = {n for n, _ in m}
    for g in GAUGES:
        assert g in names, g
    for c in COUNTERS:
        # the 0.0.4 text format names counter samples with _total
        assert c + "_total" in names, c
    for h in HISTOGRAMS:
        for suffix in ("_bucket", "_count", "_sum"):
            assert h + suffix in names, h + suffix
    for (n, labels), _ in m.items():
        if n.startswith("vllm:"):
            assert dict(labels).get("model_name") == server.name, (n, labels)
    build = [(dict(ls), v) for (n, ls), v in m.items() if n == "qwinfer_build_info"]
    assert len(build) == 1 and build[0][1] == 1 and build[0][0].get("version")


def test_request_success_reasons(server):
    # one request ends by length, one by a stop token
    post(server, "/v1/completions", {"model": server.name, "prompt": "why", "max_tokens": 1, "ignore_eos": True})
    post(server, "/v1/completions", {"model": server.name, "prompt": "why", "max_tokens": 3,
                                     "logit_bias": {"64": 100}, "stop_token_ids": [64]})
    m = metrics(server)
    reasons = {dict(ls).get("finished_reason") for (n, ls), _ in m.items() if n == "vllm:request_success_total"}
    assert {"stop", "length"} <= reasons <= {"stop", "length", "abort", "error", "timeout"}, reasons


def test_histograms_are_consistent(server):
    post(server, "/v1/completions", {"model": server.name, "prompt": "hist", "max_tokens": 4})
    m = metrics(server)
    for h in HISTOGRAMS:
        buckets = sorted(((float(dict(ls)["le"]), v) for (n, ls), v in m.items() if n == h + "_bucket"))
        assert buckets and math.isinf(buckets[-1][0]), h
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (h, buckets)
        assert buckets[-1][1] == metric(m, h + "_count"), h


def test_ttft_buckets_are_vllms(server):
    m = metrics(server)
    les = sorted(float(dict(ls)["le"]) for (n, ls), v in m.items()
                 if n == "vllm:time_to_first_token_seconds_bucket")
    # vLLM's boundaries start at 1 ms and reach minutes
    assert les[0] == 0.001 and 0.1 in les and 1.0 in les and les[-2] >= 160.0


def test_gauges_at_idle(server):
    # the previous test's response can reach its client a moment before the
    # engine retires the request: scrape until the gauges show it gone
    m = {}

    def idle():
        m.clear()
        m.update(metrics(server))
        return metric(m, "vllm:num_requests_running") == 0 and metric(m, "vllm:num_requests_waiting") == 0
    wait_for(idle, 2)
    total = metric(m, "qwinfer_kv_blocks_total")
    used = metric(m, "qwinfer_kv_blocks_used")
    assert total > 0 and 0 <= used <= total
    assert metric(m, "vllm:kv_cache_usage_perc") == metric(m, "vllm:gpu_cache_usage_perc")
    assert abs(metric(m, "vllm:kv_cache_usage_perc") - used / total) < 1e-9
    assert metric(m, "vllm:num_requests_running") == 0 and metric(m, "vllm:num_requests_waiting") == 0


def test_counters_move(server):
    before = metrics(server)
    r = post(server, "/v1/completions", {"model": server.name, "prompt": "count these tokens please",
                                         "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200
    usage = r.json()["usage"]
    after = metrics_when(server, "vllm:request_success_total",
                         metric(before, "vllm:request_success_total", finished_reason="length") + 1,
                         finished_reason="length")

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("vllm:prompt_tokens_total") == usage["prompt_tokens"]
    assert delta("vllm:generation_tokens_total") == 5
    assert delta("vllm:request_success_total", finished_reason="length") == 1
    assert delta("vllm:request_success_total", finished_reason="stop") == 0
    for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens",
              "vllm:request_generation_tokens"):
        assert delta(h + "_count") == 1, h
    assert delta("vllm:inter_token_latency_seconds_count") == 4  # gaps between 5 tokens
    assert delta("vllm:request_prompt_tokens_sum") == usage["prompt_tokens"]
    assert delta("vllm:request_generation_tokens_sum") == 5
    assert delta("vllm:e2e_request_latency_seconds_sum") > 0
    assert delta("vllm:iteration_tokens_total_count") >= 5  # a prefill step and 4 decode steps at least
    assert delta("vllm:iteration_tokens_total_sum") >= usage["prompt_tokens"] + 4
    assert delta("vllm:prefix_cache_queries_total") > 0
    # the POST and the first scrape (counted once each has been answered)
    want = metric(before, "qwinfer_http_requests_total", code="200") + 2
    assert metric(metrics_when(server, "qwinfer_http_requests_total", want, code="200"),
                  "qwinfer_http_requests_total", code="200") >= want


def test_stop_reason_and_prefix_hits_counted(server):
    p = "prefix hits " + "x y z " * 40
    post(server, "/v1/completions", {"model": server.name, "prompt": p, "max_tokens": 1})
    before = metrics(server)
    # forced token "a" (id 64) that is also a stop token: finished_reason stop
    r = post(server, "/v1/completions", {"model": server.name, "prompt": p, "max_tokens": 4,
                                         "logit_bias": {"64": 100}, "stop_token_ids": [64]})
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    after = metrics_when(server, "vllm:request_success_total",
                         metric(before, "vllm:request_success_total", finished_reason="stop") + 1,
                         finished_reason="stop")
    assert metric(after, "vllm:request_success_total", finished_reason="stop") - \
        metric(before, "vllm:request_success_total", finished_reason="stop") == 1
    hits = metric(after, "vllm:prefix_cache_hits_total") - metric(before, "vllm:prefix_cache_hits_total")
    assert hits == r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_error_codes_counted(server):
    before = metrics(server)
    requests.get(server.url + "/no/such/path", timeout=10)
    post(server, "/v1/completions", b"{bad json")
    after = metrics_when(server, "qwinfer_http_requests_total",
                         metric(before, "qwinfer_http_requests_total", code="400") + 1, code="400")
    after = metrics_when(server, "qwinfer_http_requests_total",
                         metric(before, "qwinfer_http_requests_total", code="404") + 1, code="404")
    assert metric(after, "qwinfer_http_requests_total", code="404") - \
        metric(before, "qwinfer_http_requests_total", code="404") == 1
    assert metric(after, "qwinfer_http_requests_total", code="400") - \
        metric(before, "qwinfer_http_requests_total", code="400") == 1


def test_running_gauge_and_kv_during_a_request(slow_server):
    idle = metrics(slow_server)
    req = RawRequest(slow_server, "/v1/completions", long_body(slow_server.name))
    try:
        req.read_until(b"data: ")
        # the gauges are copied after each engine step: allow a step or two
        assert wait_for(lambda: metric(metrics(slow_server), "vllm:num_requests_running") == 1, 1)
        m = metrics(slow_server)
        assert metric(m, "qwinfer_kv_blocks_used") > metric(idle, "qwinfer_kv_blocks_used")
        assert metric(m, "vllm:kv_cache_usage_perc") > 0
    finally:
        req.close()
    assert wait_for(lambda: metric(metrics(slow_server), "vllm:num_requests_running") == 0, 5)


def test_preemptions_counted_and_transparent(server, start_server):
    """A 16-block KV pool (64 KiB: 256 tokens of the tiny model) and eight
    concurrent 245-token requests: the engine preempts, vllm:num_preemptions_total
    counts it, and every request still completes with the greedy text it gets
    alone on an unpressured server."""
    srv = start_server("--kv-cache-bytes", "65536")
    assert metric(metrics(srv), "qwinfer_kv_blocks_total") == 16
    bodies = [{"model": srv.name, "prompt": "req %d" % i, "max_tokens": 240, "ignore_eos": True,
               "temperature": 0} for i in range(8)]
    reqs = [RawRequest(srv, "/v1/completions", dict(b, stream=False)) for b in bodies]
    got = []
    for r in reqs:
        raw = r.read_all()
        r.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), raw[:300]
        got.append(json.loads(_dechunk(head, body)))
    m = metrics_when(srv, "vllm:num_preemptions_total", 1)
    assert metric(m, "vllm:num_preemptions_total") >= 1
    for b, g in zip(bodies, got):
        assert g["usage"]["completion_tokens"] == 240
        alone = post(server, "/v1/completions", dict(b, model=server.name)).json()
        assert g["choices"][0]["text"] == alone["choices"][0]["text"]


def _dechunk(head, body):
    """The body of an HTTP/1.1 response, chunked or not."""
    if b"chunked" not in head.lower():
        return body
    out = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2:]
