"""Hugging Face TGI's POST /generate and /generate_stream, with requests."""
import json
import math

import pytest

from conftest import post


def generate(server, inputs, stream=False, **params):
    return post(server, "/generate_stream" if stream else "/generate",
                {"inputs": inputs, "parameters": params})


def tgi_events(resp):
    """The JSON payloads of a TGI SSE stream (`data: {...}\\n\\n` each)."""
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    raw = resp.content
    assert raw.endswith(b"\n\n")
    out = []
    for e in raw[:-2].split(b"\n\n"):
        assert e.startswith(b"data: "), e[:200]
        if e == b"data: [DONE]":
            continue
        out.append(json.loads(e[6:]))
    return out


def test_generate(server):
    r = generate(server, "Hello TGI", max_new_tokens=6)
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body["generated_text"], str)
    assert body.get("details") is None


def test_generate_details(server):
    r = generate(server, "Hello TGI", max_new_tokens=6, details=True)
    d = r.json()["details"]
    assert d["generated_tokens"] <= 6 and isinstance(d["finish_reason"], str)
    if d["generated_tokens"] < 6:
        assert d["finish_reason"] != "length"


def test_generate_greedy_matches_openai(server):
    """do_sample false (TGI's default) is greedy: the /v1/completions greedy text."""
    r = generate(server, "Compare me", max_new_tokens=8, do_sample=False)
    c = post(server, "/v1/completions", {"model": server.name, "prompt": "Compare me", "max_tokens": 8,
                                         "temperature": 0})
    assert r.status_code == 200 and c.status_code == 200
    assert r.json()["generated_text"] == c.json()["choices"][0]["text"]


def test_generate_seed_reproducible(server):
    a = generate(server, "seeded", max_new_tokens=10, do_sample=True, temperature=1.0, seed=42).json()
    b = generate(server, "seeded", max_new_tokens=10, do_sample=True, temperature=1.0, seed=42).json()
    assert a["generated_text"] == b["generated_text"]


def test_generate_stream(server):
    r = generate(server, "Hello TGI", stream=True, max_new_tokens=6, details=True)
    assert r.status_code == 200
    events = tgi_events(r)
    assert 1 <= len(events) <= 6
    for e in events:
        t = e["token"]
        assert isinstance(t["id"], int) and 0 <= t["id"] < 512
        assert isinstance(t["text"], str) and isinstance(t["special"], bool)
        assert math.isfinite(t["logprob"]) and t["logprob"] <= 0
    for e in events[:-1]:
        assert e["generated_text"] is None and e["details"] is None
    last = events[-1]
    assert isinstance(last["generated_text"], str)
    assert last["generated_text"] == "".join(e["token"]["text"] for e in events if not e["token"]["special"])
    assert last["details"]["generated_tokens"] == len(events)
    # the same greedy text as /generate
    g = generate(server, "Hello TGI", max_new_tokens=6).json()
    assert g["generated_text"] == last["generated_text"]


@pytest.mark.parametrize("body", [
    b"{not json",
    b'{"parameters": {"max_new_tokens": 4}}',
    b'{"inputs": 5}',
    b'{"inputs": "x", "parameters": {"max_new_tokens": -1}}',
    b'{"inputs": "x", "parameters": {"temperature": "hot"}}',
    b'{"inputs": "x", "parameters": []}',
])
@pytest.mark.parametrize("path", ["/generate", "/generate_stream"])
def test_tgi_errors(server, path, body):
    r = post(server, path, body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    e = r.json()
    assert isinstance(e["error"], str) and e["error"] and isinstance(e["error_type"], str)
