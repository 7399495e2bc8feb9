"""asyncio on top of Engine: one engine thread blocks in qw_engine_wait (the
C wait primitive: no CPU while idle, woken at once by a submit) and steps
while there is work; events reach each request's asyncio.Queue through
loop.call_soon_threadsafe. cffi releases the GIL around every C call, so the
event loop keeps running while a step computes.

    async with AsyncEngine(model=DIR) as llm:
        out = await llm.generate("Hello", SamplingParams(max_tokens=16))
        async for chunk in llm.stream("Hi", SamplingParams(max_tokens=16)):
            print(chunk.text, end="")
"""
from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Dict, Optional, Tuple

from ._ffi import lib
from .engine import Engine, Prompt, RequestOutput, SamplingParams, StreamChunk

_POLL_MS = 200   # the engine thread rechecks its stop flag this often while idle


class AsyncEngine:
    def __init__(self, model: str, **options):
        self.engine = Engine(model, **options)
        self._routes: Dict[int, Tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stop = False
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="qwinfer-engine", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting coroutine
            self._error = exc
            with self.engine._lock:
                for loop, q in self._routes.values():
                    loop.call_soon_threadsafe(q.put_nowait, None)
                self._routes.clear()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _serve(self) -> None:
        e = self.engine
        while not self._stop:
            if not lib.qw_engine_wait(e._engine, _POLL_MS):
                continue
            with e._lock:
                while lib.qw_engine_has_work(e._engine):
                    e._step()
                    for rid, (loop, q) in list(self._routes.items()):
                        p = e._pending.get(rid)
                        if p is None or not p.chunks:
                            continue
                        chunks, p.chunks = p.chunks, []
                        done = p.done
                        for c in chunks:
                            loop.call_soon_threadsafe(q.put_nowait, c)
                        if done:
                            loop.call_soon_threadsafe(q.put_nowait, None)
                            del self._routes[rid]

    async def stream(self, prompt: Prompt, params: Optional[SamplingParams] = None) -> AsyncIterator[StreamChunk]:
        """Yield the request's events as they come; the request is cancelled
        when the consumer stops early. Its final output is then dropped."""
        self._check()
        with self.engine._lock:   # route before the engine thread can step it
            rid = self.engine.submit(prompt, params)
            q: asyncio.Queue = asyncio.Queue()
            self._routes[rid] = (asyncio.get_running_loop(), q)
        try:
            while True:
                c = await q.get()
                if c is None:
                    self._check()
                    break
                yield c
        finally:
            with self.engine._lock:
                self._routes.pop(rid, None)
                p = self.engine._pending.get(rid)
            if p is not None:
                if not p.done:
                    self.engine.cancel(rid)
                    await asyncio.get_running_loop().run_in_executor(None, self._wait_done, rid)
                self.engine._collect(rid)

    def _wait_done(self, rid: int) -> None:
        e = self.engine
        while True:
            with e._lock:
                p = e._pending.get(rid)
                if p is None or p.done:
                    return
            lib.qw_engine_wait(e._engine, _POLL_MS)

    async def generate(self, prompt: Prompt, params: Optional[SamplingParams] = None) -> RequestOutput:
        """Run one prompt to the end and return its output."""
        self._check()
        with self.engine._lock:
            rid = self.engine.submit(prompt, params)
            q: asyncio.Queue = asyncio.Queue()
            self._routes[rid] = (asyncio.get_running_loop(), q)
        try:
            while await q.get() is not None:
                pass
            self._check()
        except asyncio.CancelledError:
            self.engine.cancel(rid)
            raise
        finally:
            with self.engine._lock:
                self._routes.pop(rid, None)
        return self.engine._collect(rid)

    async def aclose(self) -> None:
        self._stop = True
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self.engine.close()

    async def __aenter__(self) -> "AsyncEngine":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
