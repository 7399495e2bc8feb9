#!/usr/bin/env python3
"""tests/gpu/hf_oracle.py - Hugging Face transformers as an independent oracle.

    hf_oracle.py --model NAME=DIR --dump DUMPDIR [--tol 2e-2] [--device cuda|cpu]

Reads the parity dumps that tests/gpu/e2e.c --dump wrote (DUMPDIR/NAME_cpu.bin
from our CPU engine, DUMPDIR/NAME_dut.bin from the engine under test, e.g.
cuda:0), loads the same checkpoint DIR with transformers' AutoModelForCausalLM
(Qwen3ForCausalLM for qw-makemodel's config.json) in float32, and runs each
prompt followed by the tokens that engine generated through one
teacher-forced forward pass. For every generated position it compares the
engine's logits row with transformers' row:

  rel     max|engine - hf| / max|hf| over the vocabulary (worst over rows);
  greedy  the engine's token is transformers' argmax, or within tol*max|hf|
          of it (a near-tie, as e2e.c counts them).

Prints "ORACLE NAME ENGINE PASS|FAIL ..." and "e2e oracle_NAME_ENGINE_rel X
rel PASS|FAIL" lines (read into run.sh's table). Exit 0 when every dump
passes, 1 on a failure, 2 usage, 77 when torch/transformers are missing.

That transformers loads the directory at all is part of the check: it proves
qw-makemodel writes real Hugging Face checkpoints.
"""
import argparse
import os
import struct
import sys

try:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
except ImportError as e:  # the lent GPU machine has them; a plain CI machine does not
    print(f"hf_oracle: {e}: needs torch and transformers")
    sys.exit(77)

MAGIC = 0x44505751  # "QWPD", little-endian int32


def read_dump(path):
    """The prompts, generated tokens and logits rows e2e.c's write_dump wrote."""
    with open(path, "rb") as f:
        data = f.read()
    off = 0

    def ints(n):
        nonlocal off
        v = struct.unpack_from(f"<{n}i", data, off)
        off += 4 * n
        return list(v)

    magic, version, nprompts, vocab, ntok = ints(5)
    if magic != MAGIC or version != 1:
        raise ValueError(f"{path}: not a version-1 parity dump")
    seqs = []
    for _ in range(nprompts):
        (plen,) = ints(1)
        prompt = ints(plen)
        (n,) = ints(1)
        tokens = ints(ntok)[:n]
        rows = np.frombuffer(data, dtype="<f4", count=ntok * vocab, offset=off).reshape(ntok, vocab)
        off += 4 * ntok * vocab
        seqs.append((prompt, tokens, rows[:n]))
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} trailing bytes")
    return vocab, seqs


def compare(model, device, vocab, seqs, tol):
    """Worst relative logit error, greedy agreements, near-ties, positions."""
    worst, agree, ties, total = 0.0, 0, 0, 0
    for prompt, tokens, rows in seqs:
        if not tokens:
            continue
        ids = torch.tensor([prompt + tokens[:-1]], dtype=torch.long, device=device)
        with torch.no_grad():
            hf = model(input_ids=ids).logits[0].float().cpu().numpy()
        if hf.shape[1] < vocab:
            raise ValueError(f"transformers gives {hf.shape[1]} logits, the engine {vocab}")
        hf = hf[len(prompt) - 1:, :vocab].astype(np.float64)
        for k, tok in enumerate(tokens):
            ref, got = hf[k], rows[k].astype(np.float64)
            scale = np.abs(ref).max()
            if not np.all(np.isfinite(got)):
                rel = float("inf")
            else:
                rel = float(np.abs(got - ref).max() / (scale if scale > 0 else 1.0))
            worst = max(worst, rel)
            best = int(ref.argmax())
            total += 1
            if best == tok:
                agree += 1
            elif ref[best] - ref[tok] <= tol * scale:
                agree += 1
                ties += 1
    return worst, agree, ties, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--dump", required=True)
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    ok = True
    for spec in a.model:
        name, _, path = spec.partition("=")
        if not path:
            ap.error(f"--model {spec}: expected NAME=DIR")
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(a.device).eval()
        except Exception as e:  # noqa: BLE001 - any load failure is the finding
            print(f"ORACLE {name} - FAIL transformers cannot load {path}: {e}")
            ok = False
            continue
        for engine in ("cpu", "dut"):
            dump = os.path.join(a.dump, f"{name}_{engine}.bin")
            if not os.path.exists(dump):
                continue
            vocab, seqs = read_dump(dump)
            worst, agree, ties, total = compare(model, a.device, vocab, seqs, a.tol)
            passed = worst <= a.tol and agree == total and total > 0
            ok &= passed
            verdict = "PASS" if passed else "FAIL"
            print(f"ORACLE {name} {engine} {verdict} worst logits rel {worst:.3e} (tol {a.tol:.1e}), "
                  f"greedy {agree}/{total} ({ties} near-ties), transformers on {a.device} float32")
            print(f"e2e oracle_{name}_{engine}_rel {worst:.3e} rel {verdict}")
        del model
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
