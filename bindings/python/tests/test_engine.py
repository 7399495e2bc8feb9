"""The Python binding against the C library it wraps."""
import threading

import pytest

from qwinfer import Engine, QwError, SamplingParams, ffi, lib


def c_tokens(model, prompt_ids, max_tokens, seed, temperature):
    """The same request through the raw C API (the binding's lib), stepping by hand."""
    opts = ffi.new("qw_engine_options **")
    assert lib.qw_engine_options_create(opts) == lib.QW_OK
    lib.qw_engine_options_set_string(opts[0], lib.QW_OPT_MODEL_PATH, model.encode())
    eng = ffi.new("qw_engine **")
    assert lib.qw_engine_create(opts[0], eng) == lib.QW_OK
    lib.qw_engine_options_destroy(opts[0])
    req = ffi.new("qw_request **")
    lib.qw_request_create(req)
    ids = ffi.new("int32_t[]", prompt_ids)
    lib.qw_request_set_prompt(req[0], ids, len(prompt_ids))
    lib.qw_request_set_int(req[0], lib.QW_REQ_MAX_TOKENS, max_tokens)
    lib.qw_request_set_int(req[0], lib.QW_REQ_SEED, seed)
    lib.qw_request_set_double(req[0], lib.QW_REQ_TEMPERATURE, temperature)
    assert lib.qw_engine_submit(eng[0], req[0]) == lib.QW_OK
    ev = ffi.new("qw_event[]", 8)
    n = ffi.new("size_t *")
    toks = []
    while lib.qw_engine_has_work(eng[0]):
        assert lib.qw_engine_step(eng[0], ev, 8, ffi.sizeof("qw_event"), n) == lib.QW_OK
        toks += [ev[i].token for i in range(n[0]) if ev[i].kind == lib.QW_EVENT_TOKEN]
    lib.qw_request_release(req[0])
    lib.qw_engine_destroy(eng[0])
    return toks


def test_generate_matches_the_c_api(tiny_model):
    prompt = [5, 17, 99, 3, 250, 41]
    with Engine(model=tiny_model) as llm:
        out = llm.generate([prompt], SamplingParams(max_tokens=12, seed=1234, temperature=0.8))
    assert out[0].outputs[0].token_ids == c_tokens(tiny_model, prompt, 12, 1234, 0.8)
    assert out[0].finished and out[0].outputs[0].finish_reason in ("length", "stop")


def test_batch_equals_alone_and_text_is_decoded(tiny_model):
    prompts = ["hello world", "the quick brown fox", "a"]
    params = SamplingParams(max_tokens=10, temperature=0)
    with Engine(model=tiny_model) as llm:
        batch = llm.generate(prompts, params)
        alone = [llm.generate(p, params)[0] for p in prompts]
        for b, a in zip(batch, alone):
            assert b.outputs[0].token_ids == a.outputs[0].token_ids
            assert b.outputs[0].text == llm.decode(b.outputs[0].token_ids)


def test_streaming_text_equals_final_text(tiny_model):
    params = SamplingParams(max_tokens=20, temperature=0.7, seed=5)
    with Engine(model=tiny_model) as llm:
        want = llm.generate("stream me", params)[0].outputs[0]
        chunks = list(llm.stream("stream me", params))
    assert "".join(c.text for c in chunks) == want.text
    assert [c.token_id for c in chunks if c.token_id >= 0] == want.token_ids
    assert chunks[-1].finish_reason == want.finish_reason


def test_n_samples_seeds_and_logprobs(tiny_model):
    with Engine(model=tiny_model) as llm:
        out = llm.generate([[1, 2, 3, 4]], SamplingParams(n=3, max_tokens=6, seed=40, logprobs=2))[0]
        assert [o.index for o in out.outputs] == [0, 1, 2]
        for o in out.outputs:   # sample i == a request with seed + i
            single = llm.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=6, seed=40 + o.index))[0]
            assert o.token_ids == single.outputs[0].token_ids
            assert len(o.logprobs) == len(o.token_ids)
            for tok, d in zip(o.token_ids, o.logprobs):
                assert tok in d and all(lp.logprob <= 0 for lp in d.values())


def test_cancel_from_another_thread(tiny_model):
    # The stream steps the engine only while it is iterated, so cancelling
    # from a thread joined between two chunks lands before the request can
    # finish, however fast the steps are (a timer-based cancel raced them).
    with Engine(model=tiny_model) as llm:
        rid = llm.submit([7, 8, 9], SamplingParams(max_tokens=1000, ignore_eos=True))
        chunks = []
        for chunk in llm.stream_request(rid):
            chunks.append(chunk)
            if len(chunks) == 3:
                t = threading.Thread(target=llm.cancel, args=(rid,))
                t.start()
                t.join()
    assert chunks[-1].finish_reason == "cancelled"
    assert len(chunks) < 1000


def test_errors_carry_status_and_message(tiny_model):
    with pytest.raises(QwError) as e:
        Engine(model=tiny_model + "-missing")
    assert e.value.status == lib.QW_ERR_IO and "missing" in e.value.message
    with pytest.raises(QwError) as e:
        Engine(model=tiny_model, max_num_seqs=-3)
    assert e.value.status_name.startswith("QW_ERR_INVALID_ARGUMENT")
    with Engine(model=tiny_model) as llm:
        with pytest.raises(QwError) as e:
            llm.generate([[10 ** 6]], SamplingParams(max_tokens=2))
        assert e.value.status == lib.QW_ERR_TOKEN_OUT_OF_RANGE
        with pytest.raises(QwError) as e:
            llm.generate("x", SamplingParams(temperature=-1.0))
        assert "QW_REQ_TEMPERATURE" in e.value.message or "temperature" in e.value.message
        assert llm.stats()["num_running"] == 0


def test_numerics_names_map_to_the_option(tiny_model):
    # each name the binding accepts makes an engine that generates; on the
    # bf16 tiny model fast-int8 computes as fast does (it changes int4 only)
    outs = {}
    for name in ("fast", "exact", "fast-int8"):
        with Engine(model=tiny_model, numerics=name) as llm:
            outs[name] = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=0))[0]
    assert outs["fast-int8"].outputs[0].token_ids == outs["fast"].outputs[0].token_ids
    with pytest.raises(KeyError):
        Engine(model=tiny_model, numerics="fast-int4")


def test_chat_and_model_info(tiny_model):
    with Engine(model=tiny_model, max_model_len=256) as llm:
        info = llm.model_info
        assert info["architecture"] == "Qwen3ForCausalLM" and info["max_model_len"] == 256
        out = llm.chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                       SamplingParams(max_tokens=8, temperature=0), enable_thinking=False)
        assert out.outputs[0].finish_reason in ("stop", "length")
        assert out.outputs[0].text == llm.decode(out.outputs[0].token_ids)


def test_errors_under_concurrency_name_their_own_input(tiny_model):
    with Engine(model=tiny_model) as llm:
        wrong = []

        def worker(g):
            for i in range(150):
                bad = 10 ** 6 + g * 1000 + i
                try:
                    llm.generate([[bad]], SamplingParams(max_tokens=2))
                    wrong.append((g, i, "accepted"))
                except QwError as e:
                    if e.status != lib.QW_ERR_TOKEN_OUT_OF_RANGE or str(bad) not in e.message:
                        wrong.append((g, i, e.message))

        threads = [threading.Thread(target=worker, args=(g,)) for g in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not wrong, wrong[:3]
