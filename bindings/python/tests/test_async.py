"""AsyncEngine: asyncio over the C wait primitive."""
import asyncio
import contextlib
import time

from qwinfer import AsyncEngine, Engine, SamplingParams


def test_concurrent_streams_match_sync_generate(tiny_model):
    prompts = ["one two", "three four five", "six"]
    params = SamplingParams(max_tokens=12, temperature=0.9, seed=3)
    with Engine(model=tiny_model) as llm:
        want = [o.outputs[0] for o in llm.generate(prompts, params)]

    async def main():
        async with AsyncEngine(model=tiny_model) as llm:
            async def collect(p):
                return [c async for c in llm.stream(p, params)]
            streams = await asyncio.gather(*(collect(p) for p in prompts))
            outs = await asyncio.gather(*(llm.generate(p, params) for p in prompts))
            return streams, outs

    streams, outs = asyncio.run(main())
    for chunks, out, w in zip(streams, outs, want):
        assert "".join(c.text for c in chunks) == w.text
        assert [c.token_id for c in chunks if c.token_id >= 0] == w.token_ids
        assert out.outputs[0].token_ids == w.token_ids


def test_idle_engine_thread_uses_no_cpu_and_early_exit_cancels(tiny_model):
    async def main():
        async with AsyncEngine(model=tiny_model) as llm:
            c0 = time.process_time()
            await asyncio.sleep(0.5)          # the engine thread sits in qw_engine_wait
            idle_cpu = time.process_time() - c0
            n = 0
            gen = llm.stream([1, 2, 3], SamplingParams(max_tokens=2000, ignore_eos=True))
            async with contextlib.aclosing(gen):   # closing the stream early cancels the request
                async for _ in gen:
                    n += 1
                    if n == 5:
                        break
            stats = llm.engine.stats()
            return idle_cpu, n, stats

    idle_cpu, n, stats = asyncio.run(main())
    assert idle_cpu < 0.1, f"idle engine used {idle_cpu:.3f} s of CPU in 0.5 s"
    assert n == 5
    assert stats["num_running"] == 0 and stats["num_waiting"] == 0
