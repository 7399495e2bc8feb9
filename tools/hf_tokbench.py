#!/usr/bin/env python3
"""Hugging Face `tokenizers` beside qw-tokbench, on the same files.

    hf_tokbench.py --dir TOKENIZER_DIR [--ids-from QW_IDS] FILE...

Builds the Qwen tokenizer as tests/reference/hf_tokenize.py does, encodes each
file whole on one thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false;
best of three), prints MB/s like qw-tokbench, and with --ids-from (the file
`qw-tokbench --ids-out` wrote, one line of ids per file) says whether both
tokenizers gave the same ids.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from hf_tokenize import build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--ids-from")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    tok = build(a.dir)
    theirs = None
    if a.ids_from:
        with open(a.ids_from) as f:
            theirs = [list(map(int, line.split())) for line in f]
    bad = 0
    for i, path in enumerate(a.files):
        with open(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
        best = 1e30
        for _ in range(3):
            t0 = time.perf_counter()
            ids = tok.encode(text, add_special_tokens=False).ids
            best = min(best, time.perf_counter() - t0)
        line = "%-28s %8.2f MB  %9d tokens  %7.2f MB/s" % (os.path.basename(path), len(data) / 1e6, len(ids),
                                                            len(data) / 1e6 / best)
        if theirs is not None:
            same = i < len(theirs) and theirs[i] == ids
            if not same:
                bad += 1
                mine = theirs[i] if i < len(theirs) else []
                k = next((j for j in range(min(len(mine), len(ids))) if mine[j] != ids[j]), min(len(mine), len(ids)))
                line += "  ids DIFFER from qwinfer at token %d" % k
            else:
                line += "  ids equal qwinfer's"
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
