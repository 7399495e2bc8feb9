#!/usr/bin/env python3
"""qw_generate.py - examples/qw-generate in Python: text in, text out, chat,
streaming, several concurrent requests, and the engine's statistics.

    python3 qw_generate.py --model DIR --prompt "Why is the sky blue?" [--chat [--no-think]]
                           [--num-requests N] [--max-tokens N] [--temperature T] [--top-p P]
                           [--top-k K] [--seed S] [--device cpu] [--threads N] [--stream]

One request streams its text as it is generated (--stream, the default for
one request); several print one line per request when all are done.
"""
import argparse
import sys
import time

from qwinfer import Engine, QwError, SamplingParams


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--chat", action="store_true", help="send the prompt as a user message")
    ap.add_argument("--no-think", action="store_true", help="with --chat: answer without thinking first")
    ap.add_argument("--num-requests", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--stream", action="store_true", help="stream even with several requests (the first one)")
    a = ap.parse_args()
    params = SamplingParams(max_tokens=a.max_tokens, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k,
                            seed=a.seed)
    try:
        with Engine(model=a.model, device=a.device, num_threads=a.threads) as llm:
            t0 = time.monotonic()
            if a.chat:
                messages = [{"role": "user", "content": a.prompt}]
                out = llm.chat(messages, params, enable_thinking=not a.no_think)
                print(out.outputs[0].text)
            elif a.num_requests == 1 or a.stream:
                # streaming: the text of each event, as it comes
                rid = llm.submit(a.prompt, params)
                others = [llm.submit(a.prompt, params) for _ in range(a.num_requests - 1)]
                for chunk in llm.stream_request(rid):
                    sys.stdout.write(chunk.text)
                    sys.stdout.flush()
                print()
                for r in others:
                    for _ in llm.stream_request(r):
                        pass
            else:
                outs = llm.generate([a.prompt] * a.num_requests, params)
                for i, o in enumerate(outs):
                    print(f"[req {i}] {o.outputs[0].finish_reason}: {o.outputs[0].text!r}")
            dt = time.monotonic() - t0
            st = llm.stats()
            print(f"{a.num_requests} request(s) in {dt:.2f} s: {st['generation_tokens']} tokens generated "
                  f"({st['generation_tokens'] / dt:.1f} tok/s), {st['prompt_tokens']} prompt tokens prefilled, "
                  f"mean batch {st['mean_batch_size']:.1f}", file=sys.stderr)
    except QwError as e:
        print(f"qw_generate: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
