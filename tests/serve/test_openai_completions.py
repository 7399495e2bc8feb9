"""POST /v1/completions and GET /v1/models through the official openai client
(raw HTTP only where the wire format itself is checked)."""
import math

import openai
import pytest

from conftest import post, sse_events, check_openai_error, make_client

# Token ids of the tiny model's byte-level vocabulary: "a" is 64 (vocab.json).
TOK_A = 64


def complete(client, server, **kw):
    kw.setdefault("model", server.name)
    kw.setdefault("prompt", "hello world")
    kw.setdefault("max_tokens", 8)
    return client.completions.create(**kw)


def greedy(client, server, prompt, max_tokens=8):
    r = complete(client, server, prompt=prompt, max_tokens=max_tokens, temperature=0,
                 extra_body={"ignore_eos": True})
    return r.choices[0].text


def test_models(client, server):
    models = client.models.list()
    assert [m.id for m in models.data] == [server.name] == ["tiny"]
    m = models.data[0]
    assert m.object == "model" and m.owned_by == "qwinfer"
    assert isinstance(m.created, int) and m.created > 0
    # max_model_len (vLLM's extra field): the tiny model's 2048 positions
    assert m.model_extra["max_model_len"] == 2048


def test_models_raw_shape(server):
    import requests
    r = requests.get(server.url + "/v1/models", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert body["object"] == "list" and len(body["data"]) == 1
    assert set(body["data"][0]) >= {"id", "object", "created", "owned_by", "max_model_len"}


def test_completion_shape_and_usage(client, server):
    r = complete(client, server, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.model == server.name
    assert isinstance(r.id, str) and r.id and isinstance(r.created, int)
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and isinstance(c.text, str) and c.finish_reason == "length"
    u = r.usage
    assert u.completion_tokens == 8 and u.prompt_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details is not None
    assert 0 <= u.prompt_tokens_details.cached_tokens <= u.prompt_tokens


def test_greedy_is_reproducible(client, server):
    a = greedy(client, server, "The capital of", 12)
    b = greedy(client, server, "The capital of", 12)
    assert a == b and a


def test_seed_is_reproducible(client, server):
    def sample(seed):
        return complete(client, server, prompt="Once upon", max_tokens=16, temperature=1.0, seed=seed,
                        extra_body={"ignore_eos": True}).choices[0].text
    a, b = sample(1234), sample(1234)
    assert a == b
    # Another seed draws other tokens: 16 draws from a 512-token random model.
    assert any(sample(s) != a for s in (1, 2, 3))


def test_stream_equals_non_stream(client, server):
    want = greedy(client, server, "stream me", 10)
    chunks = list(complete(client, server, prompt="stream me", max_tokens=10, temperature=0,
                           stream=True, extra_body={"ignore_eos": True}))
    assert chunks and all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]


def test_stream_sse_framing_and_usage_chunk(server):
    r = post(server, "/v1/completions", {"model": server.name, "prompt": "sse", "max_tokens": 5,
                                         "ignore_eos": True, "stream": True,
                                         "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    chunks = sse_events(r.content)
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 5
    assert last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + 5
    assert "cached_tokens" in last["usage"]["prompt_tokens_details"]
    for c in chunks[:-1]:
        assert c["choices"] and c.get("usage") is None, c
        assert c["object"] == "text_completion"


def test_stream_without_include_usage_has_no_usage_chunk(server):
    r = post(server, "/v1/completions", {"model": server.name, "prompt": "sse", "max_tokens": 4,
                                         "ignore_eos": True, "stream": True})
    chunks = sse_events(r.content)
    assert all(c["choices"] and c.get("usage") is None for c in chunks)


def test_n_samples_indices(client, server):
    r = complete(client, server, prompt="pick", n=3, max_tokens=6, temperature=1.0, seed=7,
                 extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 18


def test_n_stream_indices(client, server):
    chunks = list(complete(client, server, prompt="pick", n=2, max_tokens=5, temperature=1.0,
                           seed=3, stream=True, extra_body={"ignore_eos": True}))
    texts = {0: "", 1: ""}
    finished = []
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
            if ch.finish_reason:
                finished.append((ch.index, ch.finish_reason))
    assert sorted(finished) == [(0, "length"), (1, "length")]
    # the same seed without streaming gives the same two samples
    r = complete(client, server, prompt="pick", n=2, max_tokens=5, temperature=1.0, seed=3,
                 extra_body={"ignore_eos": True})
    assert {c.index: c.text for c in r.choices} == texts


def test_batch_prompts_choice_index(client, server):
    """index = prompt_i * n + sample_i; greedy samples equal the prompt's own greedy text."""
    prompts = ["first prompt", "the second one"]
    want = [greedy(client, server, p, 6) for p in prompts]
    r = complete(client, server, prompt=prompts, n=2, max_tokens=6, temperature=0,
                 extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    for c in r.choices:
        assert c.text == want[c.index // 2], (c.index, c.text, want)
    assert r.usage.completion_tokens == 24


def test_token_id_prompts(client, server):
    r = complete(client, server, prompt=[10, 11, 12, 13], max_tokens=3, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 3
    r = complete(client, server, prompt=[[10, 11, 12], [20, 21]], max_tokens=3,
                 extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 6


def test_token_ids_and_text_prompt_agree(client, server):
    """The same prompt as text and as its token ids: same greedy continuation.
    Punctuation has no merges in the tiny vocabulary: one token per character."""
    ids = [2, 3, 4, 2, 3]  # "#$%#$" in vocab.json
    by_ids = complete(client, server, prompt=ids, max_tokens=6, temperature=0,
                      extra_body={"ignore_eos": True})
    by_text = complete(client, server, prompt="#$%#$", max_tokens=6, temperature=0,
                       extra_body={"ignore_eos": True})
    assert by_ids.usage.prompt_tokens == by_text.usage.prompt_tokens == 5
    assert by_ids.choices[0].text == by_text.choices[0].text


def _stop_string(text):
    """Two ASCII letters of text whose first occurrence is past its start."""
    for i in range(1, len(text) - 1):
        s = text[i:i + 2]
        if s.isascii() and s.isalpha() and text.find(s) >= 1:
            return s
    return None


def _stop_case(client, server):
    for p in ("stop here", "The quick brown fox", "lorem ipsum", "abc", "zebra", "hello"):
        t = greedy(client, server, p, 24)
        s = _stop_string(t)
        if s:
            return p, t, s
    pytest.fail("no greedy reply with two ASCII letters past its start")


def test_stop_string(client, server):
    p, t, s = _stop_case(client, server)
    r = complete(client, server, prompt=p, max_tokens=24, temperature=0, stop=[s],
                 extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.text == t[:t.find(s)], (t, s, c.text)
    # vLLM's include_stop_str_in_output keeps the stop string
    r = complete(client, server, prompt=p, max_tokens=24, temperature=0, stop=s,
                 extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert r.choices[0].text == t[:t.find(s) + len(s)]


def test_stop_string_streaming(client, server):
    p, t, s = _stop_case(client, server)
    chunks = list(complete(client, server, prompt=p, max_tokens=24, temperature=0, stop=[s],
                           stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == t[:t.find(s)]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_logprobs(client, server):
    r = complete(client, server, prompt="log me", max_tokens=5, temperature=0, logprobs=3,
                 extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert lp.text_offset == sorted(lp.text_offset)
    for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert math.isfinite(v) and v <= 0
        # OpenAI: the top `logprobs` alternatives, plus the sampled token if not among them
        assert 3 <= len(top) <= 4 and all(x <= 0 for x in top.values())
        # greedy: the chosen token is the most likely one
        assert v == pytest.approx(max(top.values()), abs=1e-5)


def test_logprobs_zero(client, server):
    r = complete(client, server, prompt="log me", max_tokens=4, logprobs=0, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == 4 and all(v <= 0 for v in lp.token_logprobs)


def test_echo(client, server):
    r = complete(client, server, prompt="echo this", max_tokens=3, echo=True, temperature=0,
                 extra_body={"ignore_eos": True})
    t = greedy(client, server, "echo this", 3)
    assert r.choices[0].text == "echo this" + t


def _long_prompt(tag):
    return tag + ": " + " ".join("w%d" % (i * 7919 % 1000) for i in range(160))


def test_cached_tokens(client, server):
    p = _long_prompt("usage cache")
    first = complete(client, server, prompt=p, max_tokens=2)
    second = complete(client, server, prompt=p, max_tokens=2)
    assert first.usage.prompt_tokens == second.usage.prompt_tokens > 64
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert 0 < second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens


def test_cache_salt_isolates(client, server):
    """Header X-Cache-Salt and body cache_salt: another salt shares no cached blocks."""
    p = _long_prompt("salted")
    assert complete(client, server, prompt=p, max_tokens=1).usage.prompt_tokens_details.cached_tokens == 0
    assert complete(client, server, prompt=p, max_tokens=1).usage.prompt_tokens_details.cached_tokens > 0
    hdr = {"X-Cache-Salt": "tenant-b"}
    r = complete(client, server, prompt=p, max_tokens=1, extra_headers=hdr)
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    r = complete(client, server, prompt=p, max_tokens=1, extra_headers=hdr)
    assert r.usage.prompt_tokens_details.cached_tokens > 0
    # the body field names the same salt
    r = complete(client, server, prompt=p, max_tokens=1, extra_body={"cache_salt": "tenant-b"})
    assert r.usage.prompt_tokens_details.cached_tokens > 0
    r = complete(client, server, prompt=p, max_tokens=1, extra_body={"cache_salt": "tenant-c"})
    assert r.usage.prompt_tokens_details.cached_tokens == 0


def test_logit_bias_and_stop_token_ids(client, server):
    r = complete(client, server, prompt="bias", max_tokens=5, temperature=1.0, seed=1,
                 logit_bias={str(TOK_A): 100}, extra_body={"ignore_eos": True})
    assert r.choices[0].text == "aaaaa"
    r = complete(client, server, prompt="bias", max_tokens=5, logit_bias={str(TOK_A): 100},
                 extra_body={"stop_token_ids": [TOK_A]})
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens <= 1 and r.choices[0].text in ("", "a")


def test_sampling_fields_accepted(client, server):
    r = complete(client, server, prompt="fields", max_tokens=4, temperature=0.7, top_p=0.9, seed=5,
                 presence_penalty=0.5, frequency_penalty=0.5, user="someone",
                 extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 2,
                             "priority": -1, "ignore_eos": True, "skip_special_tokens": True,
                             "an_unknown_field": {"x": 1}})
    assert r.usage.completion_tokens == 4


def test_min_tokens_suppresses_eos(client, server):
    # EOS (<|im_end|>, id 511) forced by the bias: without min_tokens the reply stops at once
    r = complete(client, server, prompt="eos", max_tokens=6, logit_bias={"511": 100})
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens <= 1
    r = complete(client, server, prompt="eos", max_tokens=6, logit_bias={"511": 100},
                 extra_body={"min_tokens": 3})
    assert r.choices[0].finish_reason == "stop" and 3 <= r.usage.completion_tokens <= 4


def test_unknown_model_is_404(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        complete(client, server, model="no-such-model")
    assert e.value.status_code == 404 and e.value.code == "model_not_found"


def test_context_length_exceeded(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, server, prompt=[5] * 2049, max_tokens=1)
    assert e.value.code == "context_length_exceeded"
    # prompt + max_tokens beyond the model length, as vLLM counts it
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, server, prompt=[5] * 100, max_tokens=2000)
    assert e.value.code == "context_length_exceeded"
    r = post(server, "/v1/completions", {"model": server.name, "prompt": [5] * 3000, "max_tokens": 1})
    check_openai_error(r, 400, code="context_length_exceeded")
    # exactly the model length is fine
    r = complete(client, server, prompt=[5] * 2040, max_tokens=8, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == 2040 and r.usage.completion_tokens == 8


def test_continuous_usage_stats(server):
    r = post(server, "/v1/completions", {"model": server.name, "prompt": "usage", "max_tokens": 6,
                                         "ignore_eos": True, "stream": True,
                                         "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = sse_events(r.content)
    done = [c["usage"]["completion_tokens"] for c in chunks]  # every chunk has usage
    assert done == sorted(done) and done[-1] == 6
    for c in chunks:
        u = c["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert chunks[-1]["choices"] == []


def test_prompt_logprobs(server):
    r = post(server, "/v1/completions", {"model": server.name, "prompt": "hi there", "max_tokens": 2,
                                         "prompt_logprobs": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    pl = body["choices"][0]["prompt_logprobs"]
    # vLLM's shape: one entry per prompt token, None for the first (nothing precedes it)
    assert len(pl) == body["usage"]["prompt_tokens"] and pl[0] is None
    for entry in pl[1:]:
        assert 2 <= len(entry) <= 3
        for tok, v in entry.items():
            assert int(tok) in range(512) and v["logprob"] <= 0


def test_skip_special_tokens(client, server):
    """<|im_end|> (511) forced and ignore_eos: kept in the text only when asked."""
    kw = dict(prompt="special", max_tokens=3, logit_bias={"511": 100})
    r = complete(client, server, extra_body={"ignore_eos": True}, **kw)
    assert r.choices[0].text == "" and r.usage.completion_tokens == 3
    r = complete(client, server, extra_body={"ignore_eos": True, "skip_special_tokens": False}, **kw)
    assert r.choices[0].text == "<|im_end|>" * 3


def test_default_max_tokens(server):
    """max_tokens absent: 16 for completions (OpenAI's and vLLM's documented
    default), up to the model length for chat."""
    cases = (("/v1/completions", {"prompt": [5] * 100}, lambda u: u["completion_tokens"] == 16),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
              lambda u: u["prompt_tokens"] + u["completion_tokens"] == 2048))
    for path, body, want in cases:
        body.update(model=server.name, ignore_eos=True)
        r = post(server, path, body)
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert want(u), (path, u)


def test_engine_options_passed_through(start_server):
    """--max-model-len, --no-prefix-caching and --cache-salt-header reach the engine."""
    srv = start_server("--max-model-len", "256", "--no-prefix-caching", "--cache-salt-header", "X-Tenant")
    c = make_client(srv)
    assert c.models.list().data[0].model_extra["max_model_len"] == 256
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=srv.name, prompt=[5] * 250, max_tokens=10)
    assert e.value.code == "context_length_exceeded"
    p = _long_prompt("no cache")[:200]  # about 160 tokens
    for _ in range(2):
        r = c.completions.create(model=srv.name, prompt=p, max_tokens=1)
        assert r.usage.prompt_tokens_details.cached_tokens == 0
    srv2 = start_server("--cache-salt-header", "X-Tenant")
    c2 = make_client(srv2)
    cached = [c2.completions.create(model=srv2.name, prompt=p, max_tokens=1, extra_headers=h)
              .usage.prompt_tokens_details.cached_tokens
              for h in ({"X-Tenant": "a"}, {"X-Tenant": "a"}, {"X-Tenant": "b"}, {}, {"X-Cache-Salt": "c"})]
    # the renamed header salts; the default name is then an ordinary header (unsalted)
    assert cached[0] == 0 and cached[1] > 0 and cached[2] == 0 and cached[3] == 0 and cached[4] > 0, cached


def test_logprobs_streaming(client, server):
    """Streamed chunks carry the logprobs of their tokens: together, the
    non-streamed list."""
    kw = dict(prompt="log me", max_tokens=6, temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    whole = complete(client, server, **kw).choices[0].logprobs
    got = []
    for c in complete(client, server, stream=True, **kw):
        for ch in c.choices:
            if ch.logprobs is not None:
                got += ch.logprobs.token_logprobs
    assert got == pytest.approx(whole.token_logprobs, abs=1e-6) and len(got) == 6


def test_sampling_fields_reach_the_engine(server):
    """Each field changes what is sampled, as its definition says: the
    penalties break the greedy reply's repetition; top_k 1, a tiny top_p and
    min_p 1 leave only the most likely token, so sampling equals greedy."""
    def text(**fields):
        b = {"model": server.name, "prompt": "x", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        b.update(fields)
        r = post(server, "/v1/completions", b)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]
    plain = text()
    assert len(set(plain)) < len(plain)  # this model repeats itself greedily
    for penalty in ({"presence_penalty": 2}, {"frequency_penalty": 2}, {"repetition_penalty": 2.0}):
        assert text(**penalty) != plain, penalty
    for narrow in ({"top_k": 1}, {"top_p": 0.01}, {"min_p": 1.0}):
        for seed in (1, 2, 3):
            assert text(temperature=1.0, seed=seed, **narrow) == plain, (narrow, seed)
    assert any(text(temperature=1.0, seed=s) != plain for s in (1, 2, 3))
