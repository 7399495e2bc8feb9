#!/usr/bin/env python3
"""Expected token ids for tests/test_tokenizer.c, from Hugging Face `tokenizers`.

Builds Qwen's tokenizer the way its tokenizer.json describes it (BPE over
vocab.json + merges.txt, NFC, the Split regex "Isolated" then ByteLevel
without its own regex, the ByteLevel decoder, added tokens from
tokenizer_config.json), so the C implementation is checked against an
independent one.

    hf_tokenize.py --dir DIR --in CASES.json --out EXPECTED.json [--save-json PATH]

CASES.json: {"texts": [str...], "decode": [[id...]...]}
EXPECTED.json: {"encode": [{"ids": [...], "ids_plain": [...], "nfc": str}...],
                "decode": [{"text": str, "text_skip": str}...]}
ids_plain is with special tokens encoded as text (encode_special_tokens).
--save-json also writes the tokenizer as a tokenizer.json (for the loader test).
"""
import argparse
import json
import os
import sys
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

# The Split regex of Qwen2/2.5/3's tokenizer.json (see the data README).
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def build(d):
    vocab, merges = models.BPE.read_file(os.path.join(d, "vocab.json"),
                                         os.path.join(d, "merges.txt"))
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    cfg_path = os.path.join(d, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            added = json.load(f).get("added_tokens_decoder", {})
        for sid in sorted(added, key=int):
            a = added[sid]
            t = AddedToken(a["content"], single_word=a.get("single_word", False),
                           lstrip=a.get("lstrip", False), rstrip=a.get("rstrip", False),
                           normalized=a.get("normalized", False), special=a.get("special", False))
            if a.get("special", False):
                tok.add_special_tokens([t])
            else:
                tok.add_tokens([t])
            got = tok.token_to_id(a["content"])
            if got != int(sid):
                sys.exit(f"hf_tokenize: added token {a['content']!r} got id {got}, want {sid}")
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--save-json")
    a = ap.parse_args()
    tok = build(a.dir)
    with open(a.inp, encoding="utf-8") as f:
        cases = json.load(f)
    texts = cases.get("texts", [])
    res = {"encode": [], "decode": []}
    plain = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    tok.encode_special_tokens = True
    nospecial = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    tok.encode_special_tokens = False
    for t, ids, ids_plain in zip(texts, plain, nospecial):
        res["encode"].append({"ids": ids, "ids_plain": ids_plain,
                              "nfc": unicodedata.normalize("NFC", t)})
    for ids in cases.get("decode", []):
        res["decode"].append({"text": tok.decode(ids, skip_special_tokens=False),
                              "text_skip": tok.decode(ids, skip_special_tokens=True)})
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(res, f, ensure_ascii=False)
    if a.save_json:
        tok.save(a.save_json)


if __name__ == "__main__":
    main()
