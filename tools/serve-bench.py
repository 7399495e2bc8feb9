#!/usr/bin/env python3
"""The Python steps of tools/serve-bench.sh (the HTTP serving benchmark).

    serve-bench.py fill-vocab MODEL_DIR
    serve-bench.py prompts --model DIR --corpus FILE --num N --input-len L
                           --output-len O --out FILE
    serve-bench.py schedule --in FILE --rate R --seed S --out FILE
    serve-bench.py table --dir DIR --rates "1 2 inf" [--markdown FILE]

fill-vocab: a model made by qw-makemodel names only its small learned
vocabulary (a few hundred ids) and Qwen's special ids; with the real 151936
vocabulary almost every id a random model samples decodes to no text, and a
streaming client sees nothing: no TTFT, no chunks, and an HTTP layer with
nothing to send. This gives every unnamed id below the first added token a
token of its own, spelled so that byte-level BPE can never produce it (a digit,
letters, a digit: the Qwen pre-tokenizer always splits digits off, and no merge
makes it), so the encoding of every text is unchanged and only decoding gains
text. The vocabulary is rewritten in place; a marker file records it.

prompts: real text from the corpus (tools/tokcorpus.sh), cut into prompts of
exactly L tokens with the model's tokenizer (Hugging Face's, which aiperf uses;
the library's tokenizer is tested to agree with it), each starting at a new
place in the corpus so that no two share a prefix. Written as aiperf's
single_turn JSONL ({"text": ..., "output_length": O}), which qw-bench --prompts
reads too. A prompt is kept only when its text encodes back to exactly L
tokens, so both sides prefill the same number of tokens.

schedule: the prompts file with a "timestamp" (milliseconds from the start) on
every line: seeded Poisson arrivals at R requests/s (exponential gaps of mean
1/R, the first one too). aiperf replays it with --fixed-schedule and qw-bench
with --fixed-schedule, so both send every request at the same moment: two
Poisson generators with one seed would draw two different schedules, and on a
short run the one that happened to come out denser would look faster.

table: one row per rate from DIR/aiperf-RATE/profile_export_aiperf.json and
DIR/qwbench-RATE.json: the client's request throughput, output tokens/s, TTFT
and ITL P50/P99, the same from qw-bench, the throughput lost over HTTP and the
TTFT it added at P50.
"""
import argparse
import json
import os
import sys

MARKER = "serve-bench-vocab-filled"


def b26(k):
    s = ""
    while True:
        s = chr(ord("a") + k % 26) + s
        k //= 26
        if k == 0:
            return s


def fill_vocab(model):
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    vocab_size = cfg.get("text_config", cfg)["vocab_size"]
    vpath = os.path.join(model, "vocab.json")
    with open(vpath, encoding="utf-8") as f:
        vocab = json.load(f)
    added = []
    tcpath = os.path.join(model, "tokenizer_config.json")
    if os.path.exists(tcpath):
        with open(tcpath, encoding="utf-8") as f:
            added = [int(k) for k in json.load(f).get("added_tokens_decoder", {})]
    top = min([vocab_size] + added)          # regular ids end below the added ones
    used = set(vocab.values())
    have = set(vocab)
    k = n = 0
    for i in range(top):
        if i in used:
            continue
        while True:
            tok = "%d%s%d" % (k % 10, b26(k), (k // 10) % 10)
            k += 1
            if tok not in have:
                break
        vocab[tok] = i
        have.add(tok)
        n += 1
    tmp = vpath + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    os.replace(tmp, vpath)
    with open(os.path.join(model, MARKER), "w") as f:
        f.write("tools/serve-bench.py fill-vocab gave %d unnamed ids below %d a token\n" % (n, top))
    print("serve-bench: %s: %d unnamed ids below %d now decode to text" % (model, n, top))


def make_prompts(a):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    vocab_size = cfg.get("text_config", cfg).get("vocab_size", 0)
    if len(tok) < 0.9 * vocab_size:
        print("serve-bench: warning: %s's tokenizer names %d of its %d ids: a random model's output is mostly "
              "empty text, which a streaming client does not see (run tools/serve-bench.py fill-vocab on a "
              "copy)" % (a.model, len(tok), vocab_size), file=sys.stderr)
    with open(a.corpus, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if not text:
        sys.exit("serve-bench: %s is empty" % a.corpus)
    # Enough characters for L tokens on any part of the corpus (CJK and
    # code take fewer characters per token than English prose).
    window = max(64, a.input_len * 8)
    # Prompt i starts near i/N of the way through the corpus, so the prompts
    # cover all of its kinds (prose, CJK, C, Python, JSON) and share no prefix.
    stride = max(1, len(text) // a.num)
    out = []
    for i in range(a.num):
        pos = i * stride
        for attempt in range(200):
            chunk = text[pos:pos + window]
            if len(chunk) < window:              # the end of the corpus: wrap
                chunk += text[:window - len(chunk)]
            ids = tok.encode(chunk, add_special_tokens=False)
            if len(ids) < a.input_len:
                window *= 2
                continue
            piece = tok.decode(ids[:a.input_len])
            # kept only when it encodes back to L tokens: a character or a
            # merge cut at the end changes that; then try a little further on
            if len(tok.encode(piece, add_special_tokens=False)) == a.input_len:
                out.append(piece)
                break
            pos = (pos + 7) % len(text)
        else:
            sys.exit("serve-bench: no prompt of %d tokens near offset %d of %s" % (a.input_len, i * stride, a.corpus))
    with open(a.out, "w", encoding="utf-8") as f:
        for p in out:
            f.write(json.dumps({"text": p, "output_length": a.output_len}, ensure_ascii=False) + "\n")
    print("serve-bench: %d prompts of %d tokens from %s -> %s" % (len(out), a.input_len, a.corpus, a.out))


def schedule(a):
    import random

    rnd = random.Random(a.seed)
    t = 0.0
    out = []
    with open(a.inp, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            t += rnd.expovariate(a.rate)
            d["timestamp"] = round(t * 1000.0, 3)
            out.append(json.dumps(d, ensure_ascii=False))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def aiperf_metric(doc, tag, stat):
    """A statistic of one aiperf metric; aiperf's JSON keeps each metric
    under its tag, at the top level or under "metrics" depending on the
    version. Milliseconds for latencies (aiperf's display unit)."""
    m = doc.get(tag)
    if m is None and isinstance(doc.get("metrics"), dict):
        m = doc["metrics"].get(tag)
    if not isinstance(m, dict) or m.get(stat) is None:
        return float("nan")
    v = float(m[stat])
    unit = m.get("unit", "")
    if unit == "ns":
        v /= 1e6
    elif unit == "us":
        v /= 1e3
    elif unit == "s" or unit == "sec":
        v *= 1e3
    return v


def cpu_time(a):
    """Run a command; write the CPU seconds it and its children used."""
    import resource
    import subprocess
    rc = subprocess.call(a.command)
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(a.out, "w") as f:
        f.write("%.2f\n" % (r.ru_utime + r.ru_stime))
    return rc


def histogram_mean_ms(path, name):
    """Mean of a Prometheus histogram (sum / count) in ms, from a /metrics scrape."""
    total = count = None
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(name + "_sum"):
                    total = float(line.rsplit(" ", 1)[1])
                elif line.startswith(name + "_count"):
                    count = float(line.rsplit(" ", 1)[1])
    except OSError:
        return float("nan")
    if not count or total is None:
        return float("nan")
    return 1000.0 * total / count


def read_number(path):
    try:
        with open(path) as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        return float("nan")


def split_table(a):
    """Where the client-vs-qw-bench difference goes: mean TTFT and ITL as the
    client saw them, as qw-serve's engine thread observed them (its /metrics,
    before any HTTP), and in-process; plus the CPU seconds of client and
    server. server - qw-bench = the engine slowed by sharing the machine;
    client - server = HTTP, SSE and the client's own parsing."""
    lines = ["| rate | TTFT mean: client | server | qw-bench | ITL mean: client | server | qw-bench "
             "| client CPU s | server CPU s |", "|" + "---|" * 9]
    fmt = lambda v, d: "n/a" if v != v else "%.*f" % (d, v)
    for r in a.rates.split():
        try:
            with open(os.path.join(a.dir, "aiperf-%s" % r, "profile_export_aiperf.json")) as f:
                c = json.load(f)
            with open(os.path.join(a.dir, "qwbench-%s.json" % r)) as f:
                q = json.load(f)
        except (OSError, ValueError):
            continue
        m = os.path.join(a.dir, "metrics-%s.txt" % r)
        row = [r, fmt(aiperf_metric(c, "time_to_first_token", "avg"), 1),
               fmt(histogram_mean_ms(m, "vllm:time_to_first_token_seconds"), 1), fmt(q["ttft_ms"]["mean"], 1),
               fmt(aiperf_metric(c, "inter_token_latency", "avg"), 2),
               fmt(histogram_mean_ms(m, "vllm:inter_token_latency_seconds"), 2), fmt(q["itl_ms"]["mean"], 2),
               fmt(read_number(os.path.join(a.dir, "aiperf-%s.cpu" % r)), 1),
               fmt(read_number(os.path.join(a.dir, "server-%s.cpu" % r)), 1)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def table(a):
    rates = a.rates.split()
    head = ("| rate | client req/s | out tok/s | TTFT P50 | TTFT P99 | ITL P50 | ITL P99 "
            "| qw-bench req/s | out tok/s | TTFT P50 | TTFT P99 | ITL P50 | ITL P99 "
            "| loss % | added TTFT ms |")
    lines = [head, "|" + "---|" * 15]
    bad = 0
    for r in rates:
        try:
            with open(os.path.join(a.dir, "aiperf-%s" % r, "profile_export_aiperf.json")) as f:
                c = json.load(f)
            with open(os.path.join(a.dir, "qwbench-%s.json" % r)) as f:
                q = json.load(f)
        except (OSError, ValueError) as e:
            lines.append("| %s | missing: %s |" % (r, e))
            bad += 1
            continue
        cv = [aiperf_metric(c, "request_throughput", "avg"), aiperf_metric(c, "output_token_throughput", "avg"),
              aiperf_metric(c, "time_to_first_token", "p50"), aiperf_metric(c, "time_to_first_token", "p99"),
              aiperf_metric(c, "inter_token_latency", "p50"), aiperf_metric(c, "inter_token_latency", "p99")]
        if q.get("prompts_truncated") or q.get("prompts_padded"):
            # the prompts were cut to INPUT_LEN tokens with Hugging Face's
            # tokenizer: the library's disagreeing means the server's
            # prompts are not the lengths qw-bench ran either
            print("serve-bench: warning: rate %s: qw-bench cut %s and padded %s prompts: the library's "
                  "tokenizer and Hugging Face's disagree on them" % (r, q.get("prompts_truncated"),
                                                                   q.get("prompts_padded")), file=sys.stderr)
        qv = [q["request_throughput"], q["output_token_throughput"], q["ttft_ms"]["p50"], q["ttft_ms"]["p99"],
              q["itl_ms"]["p50"], q["itl_ms"]["p99"]]
        qv = [float("nan") if v is None else float(v) for v in qv]
        loss = 100.0 * (1.0 - cv[1] / qv[1]) if qv[1] else float("nan")
        added = cv[2] - qv[2]
        fmt = lambda v, d: "n/a" if v != v else "%.*f" % (d, v)
        row = [r] + [fmt(cv[0], 3), fmt(cv[1], 1)] + [fmt(v, 2) for v in cv[2:]] + \
              [fmt(qv[0], 3), fmt(qv[1], 1)] + [fmt(v, 2) for v in qv[2:]] + [fmt(loss, 1), fmt(added, 2)]
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n\n" + split_table(a)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    fv = sub.add_parser("fill-vocab")
    fv.add_argument("model")
    p = sub.add_parser("prompts")
    p.add_argument("--model", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--num", type=int, required=True)
    p.add_argument("--input-len", type=int, required=True)
    p.add_argument("--output-len", type=int, required=True)
    p.add_argument("--out", required=True)
    sc = sub.add_parser("schedule")
    sc.add_argument("--in", dest="inp", required=True)
    sc.add_argument("--rate", type=float, required=True)
    sc.add_argument("--seed", type=int, required=True)
    sc.add_argument("--out", required=True)
    ct = sub.add_parser("cpu-time")
    ct.add_argument("--out", required=True)
    ct.add_argument("command", nargs=argparse.REMAINDER)
    t = sub.add_parser("table")
    t.add_argument("--dir", required=True)
    t.add_argument("--rates", required=True)
    t.add_argument("--markdown")
    a = ap.parse_args()
    if a.cmd == "fill-vocab":
        fill_vocab(a.model)
    elif a.cmd == "schedule":
        if not a.rate > 0:
            sys.exit("serve-bench: --rate must be positive")
        schedule(a)
    elif a.cmd == "cpu-time":
        cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not cmd:
            sys.exit("serve-bench: cpu-time needs a command")
        a.command = cmd
        sys.exit(cpu_time(a))
    elif a.cmd == "prompts":
        if a.num < 1 or a.input_len < 1 or a.output_len < 1:
            sys.exit("serve-bench: --num, --input-len and --output-len must be positive")
        make_prompts(a)
    else:
        sys.exit(table(a))


if __name__ == "__main__":
    main()
