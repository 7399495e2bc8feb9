"""POST /v1/chat/completions through the official openai client (Qwen3's chat
template; raw HTTP only where the wire format itself is checked).

The tiny model's weights are random, so what it says cannot be steered by a
prompt: reasoning is tested through what the request controls (the rendered
prompt's length with and without thinking) and through the reply's fields."""
import math

import openai
import pytest

from conftest import post, sse_events, check_openai_error

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
USER = [{"role": "user", "content": "Hello there"}]


def chat(client, server, messages=USER, extra_body=None, **kw):
    kw.setdefault("model", server.name)
    if "max_completion_tokens" not in kw:
        kw.setdefault("max_tokens", 8)
    body = dict(NO_THINK)
    body["ignore_eos"] = True
    body.update(extra_body or {})
    return client.chat.completions.create(messages=messages, extra_body=body, **kw)


def full_text(msg):
    """The whole reply: reasoning (if any) then content."""
    return (getattr(msg, "reasoning_content", None) or "") + (msg.content or "")


def test_chat_shape_and_usage(client, server):
    r = chat(client, server, [{"role": "system", "content": "Be brief."}] + USER, temperature=0)
    assert r.object == "chat.completion" and r.model == server.name and r.id
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant" and isinstance(c.message.content, str)
    assert c.finish_reason == "length"
    u = r.usage
    assert u.completion_tokens == 8 and u.total_tokens == u.prompt_tokens + 8
    assert u.prompt_tokens_details.cached_tokens >= 0


def test_max_completion_tokens(client, server):
    r = chat(client, server, max_completion_tokens=5)
    assert r.usage.completion_tokens == 5


def test_greedy_and_seed_reproducible(client, server):
    a = chat(client, server, temperature=0, max_tokens=12).choices[0].message.content
    b = chat(client, server, temperature=0, max_tokens=12).choices[0].message.content
    assert a == b
    a = chat(client, server, temperature=1.0, seed=99, max_tokens=12).choices[0].message.content
    b = chat(client, server, temperature=1.0, seed=99, max_tokens=12).choices[0].message.content
    assert a == b


def test_stream_equals_non_stream(client, server):
    want = chat(client, server, temperature=0, max_tokens=10).choices[0].message.content
    chunks = list(chat(client, server, temperature=0, max_tokens=10, stream=True))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    # OpenAI's first delta carries the role
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_stream_sse_framing_and_usage_chunk(server):
    r = post(server, "/v1/chat/completions",
             {"model": server.name, "messages": USER, "max_tokens": 4, "ignore_eos": True, "stream": True,
              "stream_options": {"include_usage": True}, "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    chunks = sse_events(r.content)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    for c in chunks[:-1]:
        assert c["object"] == "chat.completion.chunk" and c["choices"] and c.get("usage") is None


def test_n_indices(client, server):
    r = chat(client, server, n=3, temperature=1.0, seed=11, max_tokens=4)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 12
    chunks = list(chat(client, server, n=2, temperature=1.0, seed=11, max_tokens=4, stream=True))
    done = sorted((ch.index, ch.finish_reason) for c in chunks for ch in c.choices if ch.finish_reason)
    assert done == [(0, "length"), (1, "length")]


def test_stop_string(client, server):
    for q in ("Hello there", "Tell me a story", "What is 2+2?", "Why?"):
        msgs = [{"role": "user", "content": q}]
        t = chat(client, server, msgs, temperature=0, max_tokens=24).choices[0].message.content
        stop = next((t[i:i + 2] for i in range(1, len(t) - 1)
                     if t[i:i + 2].isascii() and t[i:i + 2].isalpha() and t.find(t[i:i + 2]) >= 1), None)
        if stop:
            break
    else:
        pytest.fail("no greedy reply with two ASCII letters past its start")
    r = chat(client, server, msgs, temperature=0, max_tokens=24, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == t[:t.find(stop)]


def test_logprobs(client, server):
    r = chat(client, server, temperature=0, max_tokens=5, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for x in content:
        assert math.isfinite(x.logprob) and x.logprob <= 0
        assert len(x.top_logprobs) == 3
        assert all(t.logprob <= 0 for t in x.top_logprobs)
        assert [t.logprob for t in x.top_logprobs] == sorted((t.logprob for t in x.top_logprobs), reverse=True)
        # greedy: the chosen token is the most likely one
        assert x.logprob == pytest.approx(x.top_logprobs[0].logprob, abs=1e-5)


def test_logprobs_without_top(client, server):
    r = chat(client, server, max_tokens=3, logprobs=True)
    content = r.choices[0].logprobs.content
    assert len(content) == 3 and all(x.logprob <= 0 and not x.top_logprobs for x in content)
    r = chat(client, server, max_tokens=3)
    assert r.choices[0].logprobs is None


def test_enable_thinking_changes_the_prompt(client, server):
    """Qwen3's template closes an empty think block when thinking is off, so
    the prompt is longer; thinking is on by default."""
    off = chat(client, server, max_tokens=1).usage.prompt_tokens
    on = chat(client, server, max_tokens=1,
              extra_body={"chat_template_kwargs": {"enable_thinking": True}}).usage.prompt_tokens
    default = client.chat.completions.create(model=server.name, messages=USER, max_tokens=1)
    assert off > on
    assert default.usage.prompt_tokens == on


# Qwen3's chat template for USER, as /v1/completions takes it (special tokens
# in the text are parsed): the generation prompt, and with thinking off the
# empty think block the template appends.
TEMPLATE_ON = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
TEMPLATE_OFF = TEMPLATE_ON + "<think>\n\n</think>\n\n"
END_THINK = 508  # </think> in the tiny vocabulary


def raw_reply(server, prompt, max_tokens, bias):
    """The greedy reply to a rendered prompt, unsplit, and its prompt length."""
    r = post(server, "/v1/completions", {"model": server.name, "prompt": prompt, "max_tokens": max_tokens,
                                         "temperature": 0, "ignore_eos": True,
                                         "logit_bias": {str(END_THINK): bias}})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"], r.json()["usage"]["prompt_tokens"]


def test_reasoning_content_absent_without_thinking(client, server):
    """Thinking off: the whole reply is content (a stray </think> included)."""
    for bias in (0, 4):
        want, plen = raw_reply(server, TEMPLATE_OFF, 16, bias)
        r = chat(client, server, temperature=0, max_tokens=16, logit_bias={str(END_THINK): bias})
        assert r.usage.prompt_tokens == plen  # the same rendered prompt
        msg = r.choices[0].message
        assert getattr(msg, "reasoning_content", None) is None
        assert msg.content == want


def test_reasoning_content_split_with_thinking(client, server):
    """Thinking on: the reply up to </think> is reasoning_content, the rest
    content. A logit bias on </think> puts it mid-reply: the bias is chosen
    where the unsplit greedy reply (same rendered prompt through
    /v1/completions) has text before its first </think>."""
    think = {"chat_template_kwargs": {"enable_thinking": True}}
    for bias in (3, 4, 5, 4.5, 3.5):
        raw, plen = raw_reply(server, TEMPLATE_ON, 16, bias)
        if raw.find("</think>") > 0:
            break
    else:
        pytest.fail("no bias puts </think> mid-reply")
    reasoning, content = raw.split("</think>", 1)
    r = chat(client, server, temperature=0, max_tokens=16, logit_bias={str(END_THINK): bias}, extra_body=think)
    assert r.usage.prompt_tokens == plen
    msg = r.choices[0].message
    assert msg.reasoning_content == reasoning and (msg.content or "") == content
    # streamed: delta.reasoning_content then delta.content add up to the same
    chunks = list(chat(client, server, temperature=0, max_tokens=16, logit_bias={str(END_THINK): bias},
                       extra_body=think, stream=True))
    got_r = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    got_c = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (got_r, got_c) == (reasoning, content)
    # unbiased (this model's greedy reply has no </think>: all of it is reasoning)
    raw, _ = raw_reply(server, TEMPLATE_ON, 16, 0)
    reasoning, _, content = raw.partition("</think>")
    r = chat(client, server, temperature=0, max_tokens=16, extra_body=think)
    assert (r.choices[0].message.reasoning_content or "", r.choices[0].message.content or "") == (reasoning, content)


def test_content_parts_equal_string(client, server):
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
    a = chat(client, server, parts, temperature=0, max_tokens=6)
    b = chat(client, server, USER, temperature=0, max_tokens=6)
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
    assert a.choices[0].message.content == b.choices[0].message.content


def test_all_roles_and_tools(client, server):
    msgs = [{"role": "system", "content": "You are a tool user."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
            {"role": "user", "content": "Thanks"}]
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    with_tools = chat(client, server, msgs, tools=tools, max_tokens=4)
    without = chat(client, server, msgs, max_tokens=4)
    assert with_tools.choices[0].finish_reason in ("length", "stop", "tool_calls")
    # the tool list is rendered into the prompt (Qwen3's <tools> system block)
    assert with_tools.usage.prompt_tokens > without.usage.prompt_tokens


def test_unknown_model_is_404(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        chat(client, server, model="gpt-4")
    assert e.value.code == "model_not_found"


@pytest.mark.parametrize("body, param", [
    ({"messages": "hello"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, None),
    ({"messages": [{"role": "user", "content": 5}]}, None),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, None),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, None),
    ({"messages": [{"content": "no role"}]}, None),
    ({"messages": USER, "top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ({"messages": USER, "logprobs": "yes"}, "logprobs"),
    ({"messages": USER, "chat_template_kwargs": {"enable_thinking": "no"}}, None),
    ({"messages": USER, "max_completion_tokens": -1}, "max_completion_tokens"),
])
def test_bad_chat_requests(server, body, param):
    b = {"model": server.name}
    b.update(body)
    check_openai_error(post(server, "/v1/chat/completions", b), 400, param=param)


def test_logprobs_streaming(client, server):
    whole = chat(client, server, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2).choices[0].logprobs
    got = []
    for c in chat(client, server, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2, stream=True):
        for ch in c.choices:
            if ch.logprobs is not None and ch.logprobs.content:
                got += [x.logprob for x in ch.logprobs.content]
                assert all(len(x.top_logprobs) == 2 for x in ch.logprobs.content)
    assert got == pytest.approx([x.logprob for x in whole.content], abs=1e-6) and len(got) == 6
