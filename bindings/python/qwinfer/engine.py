"""A Pythonic engine over the C API (qwinfer.h), in the shape of vLLM's LLM.

One Engine owns one qw_engine. Any thread may submit and cancel; stepping
(qw_engine_step) happens under the engine's lock in whichever thread is
waiting for output, and every event is routed to its request, so several
threads (or generators) can consume their own requests at once.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Union

from ._ffi import ffi, lib

Prompt = Union[str, Sequence[int]]


class QwError(Exception):
    """A qw_status other than QW_OK, with the library's message."""

    def __init__(self, status: int, message: str, call: str = ""):
        self.status = status
        self.status_name = ffi.string(lib.qw_status_string(status)).decode()
        self.message = message
        super().__init__(f"{call + ': ' if call else ''}{self.status_name}: {message}")


def _check(status: int, call: str) -> None:
    # qw_last_error() is per OS thread; this runs on the thread of the call
    if status != lib.QW_OK:
        raise QwError(status, ffi.string(lib.qw_last_error()).decode("utf-8", "replace"), call)


@dataclass
class SamplingParams:
    """Per-request options, named as in vLLM's SamplingParams (see docs/api.md
    for each one's exact definition in qwinfer)."""
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Optional[Dict[int, float]] = None
    skip_special_tokens: bool = True


@dataclass
class Logprob:
    token_id: int
    logprob: float


@dataclass
class CompletionOutput:
    index: int                      # the sample (0..n-1)
    text: str
    token_ids: List[int]
    finish_reason: Optional[str]    # "stop", "length", "cancelled", "error", "timeout"
    stop_reason: Union[str, int, None] = None  # the stop string, or the stop/EOS token id
    logprobs: Optional[List[Dict[int, Logprob]]] = None  # per token: sampled + top-k


@dataclass
class RequestOutput:
    request_id: int
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]] = None
    num_cached_tokens: int = 0


@dataclass
class StreamChunk:
    """One event of a streamed request: the text it completed and its token."""
    text: str
    token_id: int                   # -1 for an event without a token
    index: int                      # the sample (0..n-1)
    finish_reason: Optional[str]


@dataclass
class _Pending:
    handle: object                  # qw_request *
    params: SamplingParams
    prompt: Optional[str]
    chunks: List[StreamChunk] = field(default_factory=list)
    finished_samples: int = 0

    @property
    def done(self) -> bool:
        return self.finished_samples >= max(1, self.params.n)


def _option_key(name: str) -> int:
    try:
        return getattr(lib, "QW_OPT_" + name.upper())
    except AttributeError:
        raise TypeError(f"unknown engine option {name!r} (see QW_OPT_* in qwinfer.h)") from None


class Engine:
    """Engine(model=DIR, device="cpu", max_num_seqs=..., numerics="fast", ...).

    Keyword options are the QW_OPT_* names in lower case; strings, floats and
    ints map to the typed setters. numerics takes "fast", "exact" or "fast-int8";
    kv_cache_dtype takes "auto", "f32", "bf16" or "fp8".
    """

    def __init__(self, model: str, device: str = "cpu", **options):
        opts = ffi.new("qw_engine_options **")
        _check(lib.qw_engine_options_create(opts), "qw_engine_options_create")
        o = opts[0]
        try:
            _check(lib.qw_engine_options_set_string(o, lib.QW_OPT_MODEL_PATH, model.encode()), "model")
            _check(lib.qw_engine_options_set_string(o, lib.QW_OPT_DEVICE, device.encode()), "device")
            for name, value in options.items():
                if name == "numerics" and isinstance(value, str):
                    value = {"fast": lib.QW_NUMERICS_FAST, "exact": lib.QW_NUMERICS_EXACT,
                             "fast-int8": lib.QW_NUMERICS_FAST_INT8}[value]
                if name == "kv_cache_dtype" and isinstance(value, str):
                    kinds = {"auto": lib.QW_KV_CACHE_AUTO, "f32": lib.QW_KV_CACHE_F32,
                             "bf16": lib.QW_KV_CACHE_BF16, "fp8": lib.QW_KV_CACHE_FP8_E4M3}
                    if value not in kinds:
                        raise ValueError(f"kv_cache_dtype {value!r}: expected one of {sorted(kinds)}")
                    value = kinds[value]
                key = _option_key(name)
                if isinstance(value, str):
                    _check(lib.qw_engine_options_set_string(o, key, value.encode()), name)
                elif isinstance(value, float):
                    _check(lib.qw_engine_options_set_double(o, key, value), name)
                else:
                    _check(lib.qw_engine_options_set_int(o, key, int(value)), name)
            out = ffi.new("qw_engine **")
            _check(lib.qw_engine_create(o, out), "qw_engine_create")
        finally:
            lib.qw_engine_options_destroy(o)
        self._engine = out[0]
        self._lock = threading.RLock()           # stepping and routing
        self._pending: Dict[int, _Pending] = {}  # request id -> state
        self._events = ffi.new("qw_event[]", 256)
        self._tok = lib.qw_engine_get_tokenizer(self._engine)

    # -- lifetime ---------------------------------------------------------
    def close(self) -> None:
        """Cancel what runs, release every request and destroy the engine."""
        with self._lock:
            if self._engine is None:
                return
            for p in self._pending.values():
                lib.qw_engine_cancel(self._engine, p.handle)
            while lib.qw_engine_has_work(self._engine):
                self._step()
            for p in self._pending.values():
                lib.qw_request_release(p.handle)
            self._pending.clear()
            lib.qw_engine_destroy(self._engine)
            self._engine = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- facts --------------------------------------------------------------
    @property
    def model_info(self) -> dict:
        mi = ffi.new("qw_model_info *")
        _check(lib.qw_engine_get_model_info(self._engine, mi, ffi.sizeof("qw_model_info")),
               "qw_engine_get_model_info")
        d = {name: getattr(mi, name) for name, _ in ffi.typeof("qw_model_info").fields}
        d["architecture"] = ffi.string(mi.architecture).decode()
        d["dtype"] = ffi.string(mi.dtype).decode()
        d["eos_token_ids"] = [mi.eos_token_ids[i] for i in range(mi.num_eos)]
        del d["size"], d["num_eos"]
        return d

    def stats(self) -> dict:
        st = ffi.new("qw_engine_stats *")
        with self._lock:   # a step-thread call: not while another thread steps
            _check(lib.qw_engine_get_stats(self._engine, st, ffi.sizeof("qw_engine_stats")), "qw_engine_get_stats")
        return {name: getattr(st, name) for name, _ in ffi.typeof("qw_engine_stats").fields if name != "size"}

    def encode(self, text: str, parse_special: bool = True) -> List[int]:
        if self._tok == ffi.NULL:
            raise QwError(lib.QW_ERR_INVALID_STATE, "the model directory has no tokenizer")
        raw = text.encode()
        n = ffi.new("size_t *")
        _check(lib.qw_tokenizer_encode(self._tok, raw, len(raw), int(parse_special), ffi.NULL, 0, n), "encode")
        ids = ffi.new("int32_t[]", max(1, n[0]))
        _check(lib.qw_tokenizer_encode(self._tok, raw, len(raw), int(parse_special), ids, n[0], n), "encode")
        return list(ids[0:n[0]])

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if self._tok == ffi.NULL:
            raise QwError(lib.QW_ERR_INVALID_STATE, "the model directory has no tokenizer")
        arr = ffi.new("int32_t[]", list(ids) or [0])
        n = ffi.new("size_t *")
        _check(lib.qw_tokenizer_decode(self._tok, arr, len(ids), int(skip_special_tokens), ffi.NULL, 0, n),
               "decode")
        buf = ffi.new("char[]", n[0] + 1)
        _check(lib.qw_tokenizer_decode(self._tok, arr, len(ids), int(skip_special_tokens), buf, n[0] + 1, n),
               "decode")
        return ffi.unpack(buf, n[0]).decode("utf-8", "replace")

    # -- requests -----------------------------------------------------------
    def _make_request(self, params: SamplingParams, prompt: Optional[Prompt] = None, chat=None,
                      chat_flags: int = 0):
        out = ffi.new("qw_request **")
        _check(lib.qw_request_create(out), "qw_request_create")
        r = out[0]
        try:
            if chat is not None:
                _check(lib.qw_request_set_chat(r, chat, chat_flags), "qw_request_set_chat")
            elif isinstance(prompt, str):
                raw = prompt.encode()
                _check(lib.qw_request_set_prompt_text(r, raw, len(raw)), "qw_request_set_prompt_text")
            else:
                ids = ffi.new("int32_t[]", list(prompt))
                _check(lib.qw_request_set_prompt(r, ids, len(prompt)), "qw_request_set_prompt")
            p = params
            seti = lambda k, v, name: _check(lib.qw_request_set_int(r, k, int(v)), name)  # noqa: E731
            setd = lambda k, v, name: _check(lib.qw_request_set_double(r, k, float(v)), name)  # noqa: E731
            if p.max_tokens is not None:
                seti(lib.QW_REQ_MAX_TOKENS, p.max_tokens, "max_tokens")
            setd(lib.QW_REQ_TEMPERATURE, p.temperature, "temperature")
            setd(lib.QW_REQ_TOP_P, p.top_p, "top_p")
            seti(lib.QW_REQ_TOP_K, p.top_k, "top_k")
            setd(lib.QW_REQ_MIN_P, p.min_p, "min_p")
            if p.seed is not None:
                seti(lib.QW_REQ_SEED, p.seed, "seed")
            seti(lib.QW_REQ_MIN_TOKENS, p.min_tokens, "min_tokens")
            seti(lib.QW_REQ_IGNORE_EOS, p.ignore_eos, "ignore_eos")
            seti(lib.QW_REQ_N, p.n, "n")
            seti(lib.QW_REQ_SKIP_SPECIAL_TOKENS, p.skip_special_tokens, "skip_special_tokens")
            if p.logprobs is not None:
                seti(lib.QW_REQ_LOGPROBS, p.logprobs, "logprobs")
            if p.prompt_logprobs is not None:
                seti(lib.QW_REQ_PROMPT_LOGPROBS, p.prompt_logprobs, "prompt_logprobs")
            if p.repetition_penalty != 1.0:
                setd(lib.QW_REQ_REPETITION_PENALTY, p.repetition_penalty, "repetition_penalty")
            if p.presence_penalty:
                setd(lib.QW_REQ_PRESENCE_PENALTY, p.presence_penalty, "presence_penalty")
            if p.frequency_penalty:
                setd(lib.QW_REQ_FREQUENCY_PENALTY, p.frequency_penalty, "frequency_penalty")
            if p.stop_token_ids:
                ids = ffi.new("int32_t[]", list(p.stop_token_ids))
                _check(lib.qw_request_set_stop_tokens(r, ids, len(p.stop_token_ids)), "stop_token_ids")
            stops = [p.stop] if isinstance(p.stop, str) else list(p.stop or [])
            if stops:
                raw = [s.encode() for s in stops]
                keep = [ffi.new("char[]", s) for s in raw]
                arr = ffi.new("const char *[]", keep)
                lens = ffi.new("size_t[]", [len(s) for s in raw])
                _check(lib.qw_request_set_stop_strings(r, arr, lens, len(raw)), "stop")
                seti(lib.QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, p.include_stop_str_in_output,
                     "include_stop_str_in_output")
            if p.logit_bias:
                ids = ffi.new("int32_t[]", [int(k) for k in p.logit_bias])
                vals = ffi.new("float[]", [float(v) for v in p.logit_bias.values()])
                _check(lib.qw_request_set_logit_bias(r, ids, vals, len(p.logit_bias)), "logit_bias")
        except BaseException:
            lib.qw_request_release(r)
            raise
        return r

    def submit(self, prompt: Prompt, params: Optional[SamplingParams] = None) -> int:
        """Queue one request; returns its id (for cancel() and stream_request())."""
        return self._submit(self._make_request(params or SamplingParams(), prompt), params, prompt)

    def _submit(self, r, params, prompt) -> int:
        params = params or SamplingParams()
        rid = lib.qw_request_get_id(r)
        with self._lock:
            self._pending[rid] = _Pending(r, params, prompt if isinstance(prompt, str) else None)
        st = lib.qw_engine_submit(self._engine, r)
        if st != lib.QW_OK:
            msg = ffi.string(lib.qw_last_error()).decode("utf-8", "replace")
            with self._lock:
                del self._pending[rid]
            lib.qw_request_release(r)
            raise QwError(st, msg, "qw_engine_submit")
        return rid

    def cancel(self, request_id: int) -> None:
        """Ask a submitted request (all its samples) to stop; any thread."""
        with self._lock:
            p = self._pending.get(request_id)
        if p is not None:
            st = lib.qw_engine_cancel(self._engine, p.handle)
            if st not in (lib.QW_OK, lib.QW_ERR_INVALID_STATE):   # finished meanwhile: fine
                _check(st, "qw_engine_cancel")

    # -- stepping -------------------------------------------------------------
    def _step(self) -> None:
        """One qw_engine_step; routes each event to its request. Under the lock."""
        n = ffi.new("size_t *")
        _check(lib.qw_engine_step(self._engine, self._events, 256, ffi.sizeof("qw_event"), n), "qw_engine_step")
        piece, plen = ffi.new("const char **"), ffi.new("size_t *")
        for i in range(n[0]):
            ev = self._events[i]
            p = self._pending.get(ev.request_id)
            if p is None:
                continue
            text = ""
            if self._tok != ffi.NULL and lib.qw_request_get_text_piece(ev.request, piece, plen) == lib.QW_OK:
                text = ffi.unpack(piece[0], plen[0]).decode("utf-8", "replace")
            reason = None
            if ev.finish_reason != lib.QW_FINISH_NONE:
                reason = ffi.string(lib.qw_finish_reason_string(ev.finish_reason)).decode()
                p.finished_samples += 1
            tok = ev.token if ev.kind == lib.QW_EVENT_TOKEN else -1
            p.chunks.append(StreamChunk(text, tok, ev.sample_index, reason))

    def _run_until(self, done) -> None:
        with self._lock:
            while not done():
                if not lib.qw_engine_has_work(self._engine):
                    raise QwError(lib.QW_ERR_INTERNAL, "the engine went idle before the request finished")
                self._step()

    # -- results -------------------------------------------------------------
    def _logprobs_at(self, getter, handle, index, k):
        first = ffi.new("qw_logprob *")
        top = ffi.new("qw_logprob[]", max(1, k))
        n = ffi.new("size_t *")
        _check(getter(handle, index, first, top, max(0, k), n), "logprobs")
        d = {first.token: Logprob(first.token, first.logprob)}
        for j in range(n[0]):
            d.setdefault(top[j].token, Logprob(top[j].token, top[j].logprob))
        return d

    def _sample_output(self, handle, index: int, params: SamplingParams) -> CompletionOutput:
        n = ffi.new("size_t *")
        _check(lib.qw_request_get_tokens(handle, ffi.NULL, 0, n), "qw_request_get_tokens")
        buf = ffi.new("int32_t[]", max(1, n[0]))
        _check(lib.qw_request_get_tokens(handle, buf, n[0], n), "qw_request_get_tokens")
        ids = list(buf[0:n[0]])
        text = ""
        if self._tok != ffi.NULL:
            _check(lib.qw_request_get_text(handle, ffi.NULL, 0, n), "qw_request_get_text")
            tb = ffi.new("char[]", n[0] + 1)
            _check(lib.qw_request_get_text(handle, tb, n[0] + 1, n), "qw_request_get_text")
            text = ffi.unpack(tb, n[0]).decode("utf-8", "replace")
        fr = lib.qw_request_get_finish_reason(handle)
        reason = ffi.string(lib.qw_finish_reason_string(fr)).decode() if fr != lib.QW_FINISH_NONE else None
        stop_reason = None
        if fr == lib.QW_FINISH_STOP:
            si, stok = ffi.new("int32_t *"), ffi.new("int32_t *")
            if lib.qw_request_get_stop_match(handle, si, stok) == lib.QW_OK:
                stops = [params.stop] if isinstance(params.stop, str) else list(params.stop or [])
                stop_reason = stops[si[0]] if 0 <= si[0] < len(stops) else (stok[0] if stok[0] >= 0 else None)
        lps = None
        if params.logprobs is not None:
            lps = [self._logprobs_at(lib.qw_request_get_logprobs, handle, i, params.logprobs)
                   for i in range(len(ids))]
        return CompletionOutput(index, text, ids, reason, stop_reason, lps)

    def _collect(self, rid: int) -> RequestOutput:
        with self._lock:
            p = self._pending.pop(rid)
        try:
            outs = []
            for i in range(max(1, p.params.n)):
                h = ffi.new("qw_request **")
                _check(lib.qw_request_get_sample(p.handle, i, h), "qw_request_get_sample")
                outs.append(self._sample_output(h[0], i, p.params))
            st = ffi.new("qw_request_stats *")
            _check(lib.qw_request_get_stats(p.handle, st, ffi.sizeof("qw_request_stats")), "qw_request_get_stats")
            prompt_ids: List[int] = []
            plps = None
            if p.params.prompt_logprobs is not None:
                plps = [None]
                for i in range(1, st.prompt_tokens):
                    plps.append(self._logprobs_at(lib.qw_request_get_prompt_logprobs, p.handle, i,
                                                  p.params.prompt_logprobs))
                prompt_ids = [next(iter(d)) for d in plps[1:]]
            return RequestOutput(rid, p.prompt, prompt_ids, outs, True, plps, st.cached_prompt_tokens)
        finally:
            lib.qw_request_release(p.handle)

    # -- the vLLM-shaped entry points ----------------------------------------
    def generate(self, prompts: Union[Prompt, Sequence[Prompt]],
                 params: Optional[SamplingParams] = None) -> List[RequestOutput]:
        """Run every prompt (text, or a list of token ids) to the end, batched
        together; outputs in the order of the prompts."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids = [self.submit(p, params) for p in prompts]
        self._run_until(lambda: all(self._pending[i].done for i in ids))
        return [self._collect(i) for i in ids]

    def chat(self, messages: Sequence[dict], params: Optional[SamplingParams] = None,
             enable_thinking: bool = True) -> RequestOutput:
        """One conversation of {"role": "system"|"user"|"assistant"|"tool",
        "content": str, optional "reasoning_content": str} dicts, rendered with
        Qwen3's template; generation stops at the end of the answer."""
        roles = {"system": lib.QW_CHAT_SYSTEM, "user": lib.QW_CHAT_USER,
                 "assistant": lib.QW_CHAT_ASSISTANT, "tool": lib.QW_CHAT_TOOL}
        out = ffi.new("qw_chat **")
        _check(lib.qw_chat_create(out), "qw_chat_create")
        chat = out[0]
        try:
            for m in messages:
                raw = m["content"].encode()
                _check(lib.qw_chat_add_message(chat, roles[m["role"]], raw, len(raw)), "chat message")
                if m.get("reasoning_content"):
                    rr = m["reasoning_content"].encode()
                    _check(lib.qw_chat_set_reasoning(chat, rr, len(rr)), "chat reasoning")
            flags = lib.QW_CHAT_ADD_GENERATION_PROMPT | (0 if enable_thinking else lib.QW_CHAT_DISABLE_THINKING)
            r = self._make_request(params or SamplingParams(), chat=chat, chat_flags=flags)
        finally:
            lib.qw_chat_destroy(chat)
        rid = self._submit(r, params, None)
        self._run_until(lambda: self._pending[rid].done)
        return self._collect(rid)

    def stream(self, prompt: Prompt, params: Optional[SamplingParams] = None) -> Iterator[StreamChunk]:
        """Yield the request's events as they come: the text each one completed
        (the pieces join to the final text), its token and sample index. The
        request is cancelled if the iterator is closed early."""
        rid = self.submit(prompt, params)
        return self.stream_request(rid)

    def stream_request(self, rid: int) -> Iterator[StreamChunk]:
        p = self._pending[rid]
        try:
            while True:
                with self._lock:
                    if not p.chunks and not p.done:
                        if lib.qw_engine_has_work(self._engine):
                            self._step()
                    chunks, p.chunks = p.chunks, []
                yield from chunks
                if p.done and not p.chunks:
                    break
        finally:
            if not p.done:
                self.cancel(rid)
                self._run_until(lambda: p.done)
            self._collect(rid)
