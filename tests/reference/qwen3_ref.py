#!/usr/bin/env python3
"""Independent float64 forward pass of Qwen3 (and Qwen2) - the correctness oracle.

Written from the Hugging Face definitions (transformers modeling_qwen3.py and
modeling_qwen2.py), not from qwinfer's C code, so that the two can disagree.
Depends only on numpy and the standard library.

Quantized checkpoints (config.json "quantization_config": Qwen3-FP8 block
fp8, AutoAWQ GEMM, AutoGPTQ/GPTQModel gptq and gptq_v2, act-order g_idx
included) are dequantized to float64 from the published storage formats
(see Weights.linear), again independently of qwinfer's loader.

    python3 tests/reference/qwen3_ref.py --model DIR --tokens 1,2,3 --out FILE [--last-only]
    python3 tests/reference/qwen3_ref.py --model DIR --tokens 1,2,3 --print-greedy N

--out writes raw little-endian float64 logits, shape [n_tokens, vocab] (row i
is the logits after token i), or [1, vocab] with --last-only; no header.
--print-greedy prints N greedy continuation tokens, comma-separated, on one line.

    python3 tests/reference/qwen3_ref.py --model DIR --weights-vs TWIN

prints the largest max|W - W_twin| / max|W_twin| over the linear layers of
DIR (dequantized) against those of TWIN (e.g. its --quant none twin).
"""

import argparse
import itertools
import json
import mmap
import os
import re
import struct
import sys

import numpy as np


# ---- safetensors ------------------------------------------------------------------

def _e4m3_table():
    """float64 value of each of the 256 OCP E4M3 (e4m3fn) bit patterns."""
    t = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp, mant = (b >> 3) & 0xF, b & 0x7
        if exp == 0xF and mant == 0x7:
            t[b] = np.nan                     # no infinities; S.1111.111 is NaN
        elif exp == 0:
            t[b] = sign * mant / 8.0 * 2.0 ** -6
        else:
            t[b] = sign * (1.0 + mant / 8.0) * 2.0 ** (exp - 7)
    return t


_E4M3 = _e4m3_table()
_SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "F8_E4M3": 1, "I32": 4}


def _decode(raw, dtype, shape):
    """Bytes of one tensor -> float64 array of the given shape (I32: int64)."""
    if dtype == "I32":
        return np.frombuffer(raw, dtype="<i4").astype(np.int64).reshape(shape)
    if dtype == "F8_E4M3":
        return _E4M3[np.frombuffer(raw, dtype=np.uint8)].reshape(shape)
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F64":
        a = np.frombuffer(raw, dtype="<f8")
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2")
    elif dtype == "BF16":
        # bf16 is the top half of an f32: widen the bit pattern and reinterpret.
        a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError("unsupported dtype %s" % dtype)
    return a.astype(np.float64).reshape(shape)


class SafetensorsFile:
    """One .safetensors file: the header parsed, the data mapped read-only."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        (hlen,) = struct.unpack("<Q", self.map[:8])
        if 8 + hlen > len(self.map):
            raise ValueError("%s: header length %d past end of file" % (path, hlen))
        header = json.loads(bytes(self.map[8:8 + hlen]).decode("utf-8"))
        header.pop("__metadata__", None)
        self.header = header
        self.data_start = 8 + hlen

    def get(self, name):
        info = self.header[name]
        begin, end = info["data_offsets"]
        if info["dtype"] not in _SIZES:
            raise ValueError("%s: %s: unsupported dtype %s" % (self.path, name, info["dtype"]))
        size = _SIZES[info["dtype"]]
        if end - begin != size * int(np.prod(info["shape"], dtype=np.int64)):
            raise ValueError("%s: %s: data size does not match shape" % (self.path, name))
        if self.data_start + end > len(self.map):
            raise ValueError("%s: %s: data past end of file" % (self.path, name))
        raw = self.map[self.data_start + begin:self.data_start + end]
        return _decode(raw, info["dtype"], info["shape"])


class Weights:
    """All tensors of a model directory: model.safetensors or a sharded index."""

    def __init__(self, model_dir, quant=None):
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        self.quant = quant or {}
        self.where = {}
        if os.path.exists(index_path):
            with open(index_path) as f:
                weight_map = json.load(f)["weight_map"]
            files = {}
            for name, fname in weight_map.items():
                if fname not in files:
                    files[fname] = SafetensorsFile(os.path.join(model_dir, fname))
                self.where[name] = files[fname]
        else:
            st = SafetensorsFile(os.path.join(model_dir, "model.safetensors"))
            for name in st.header:
                self.where[name] = st

    def has(self, name):
        return name in self.where

    def get(self, name, shape):
        if name not in self.where:
            raise KeyError("missing tensor %s" % name)
        t = self.where[name].get(name)
        if tuple(t.shape) != tuple(shape):
            raise ValueError("%s: shape %s, expected %s" % (name, t.shape, tuple(shape)))
        return t

    def dtype(self, name):
        return self.where[name].header[name]["dtype"]

    def linear(self, prefix, n, k):
        """The weight [n out, k in] of the linear `prefix`, dequantized to float64
        when the checkpoint stores it quantized (a plain float "<prefix>.weight"
        is a module the quantizer left alone)."""
        method = self.quant.get("quant_method")
        wname = prefix + ".weight"
        if self.has(wname) and self.dtype(wname) != "F8_E4M3":
            return self.get(wname, (n, k))
        if method == "fp8":
            return self._fp8(prefix, n, k)
        if method == "awq":
            return self._awq(prefix, n, k)
        if method == "gptq":
            q = self._module_quant(prefix)
            if q is None:
                raise KeyError("missing tensor %s (a dynamic \"-:\" pattern leaves it unquantized)"
                               % wname)
            return self._gptq(prefix, n, k, q)
        raise KeyError("missing tensor %s" % wname)

    def _module_quant(self, prefix):
        """GPTQModel's "dynamic" per-module overrides: the first pattern that
        re.match()es the module name decides; "-:" means not quantized (None),
        "+:" (or no prefix) overrides bits / group_size / sym / desc_act."""
        q = dict(self.quant)
        for pat, over in (self.quant.get("dynamic") or {}).items():
            if pat.startswith("-:"):
                if re.match(pat[2:], prefix):
                    return None
            elif re.match(pat[2:] if pat.startswith("+:") else pat, prefix):
                q.update({key: over[key] for key in ("bits", "group_size", "sym", "desc_act")
                          if key in over})
                return q
        return q

    def _fp8(self, prefix, n, k):
        # Qwen3-FP8 / DeepSeek-V3 block fp8: w = e4m3 * weight_scale_inv of its
        # [block_n x block_k] block; the last blocks may be partial.
        bn, bk = self.quant.get("weight_block_size") or (n, k)
        if self.quant.get("fmt", "e4m3") != "e4m3":
            raise ValueError("fp8 fmt %s unsupported" % self.quant.get("fmt"))
        w = self.get(prefix + ".weight", (n, k))
        s = self.get(prefix + ".weight_scale_inv", (-(-n // bn), -(-k // bk)))
        return w * np.repeat(np.repeat(s, bn, axis=0)[:n], bk, axis=1)[:, :k]

    @staticmethod
    def _unpack(words, bits, axis):
        """Split each int32 of `words` into 32/bits fields (lowest bits first)
        laid out consecutively along `axis`."""
        u = words.astype(np.int64) & 0xFFFFFFFF
        per = 32 // bits
        fields = [(u >> (bits * i)) & ((1 << bits) - 1) for i in range(per)]
        st = np.stack(fields, axis=axis + 1)          # [..., words, per, ...]
        shape = list(u.shape)
        shape[axis] *= per
        return st.reshape(shape)

    def _awq(self, prefix, n, k):
        # AutoAWQ GEMM: qweight [k, n/8] and qzeros [k/g, n/8] hold 8 output
        # columns per word, field i = column 8j + (0,2,4,6,1,3,5,7)[i];
        # scales [k/g, n]; w[o, i] = (q - z) * s of group i // g.
        bits, g = self.quant.get("bits", 4), self.quant.get("group_size", 128)
        if bits != 4 or self.quant.get("version", "gemm").lower() != "gemm":
            raise ValueError("awq: only 4-bit gemm checkpoints are supported")
        if g == -1:
            g = k
        per = 32 // bits
        order = [0, 2, 4, 6, 1, 3, 5, 7]
        inverse = np.argsort(order)   # field holding column 8j + c
        def cols(words):
            f = self._unpack(words, bits, 1)                   # fields, word-major
            f = f.reshape(f.shape[0], -1, per)[:, :, inverse]
            return f.reshape(f.shape[0], -1)
        q = cols(self.get(prefix + ".qweight", (k, n // per)))          # [k, n]
        z = cols(self.get(prefix + ".qzeros", (k // g, n // per)))      # [k/g, n]
        s = self.get(prefix + ".scales", (k // g, n))
        gi = np.arange(k) // g
        return ((q - z[gi]) * s[gi]).T

    def _gptq(self, prefix, n, k, quant):
        # AutoGPTQ/GPTQModel: qweight [k*bits/32, n] packs input rows (row
        # i*per + t at bits*t); qzeros [G, n*bits/32] packs outputs the same
        # way, storing zero - 1 in checkpoint_format "gptq" (v1) and the zero
        # in "gptq_v2"; scales [G, n]; the group of input c is g_idx[c]
        # (act-order permutes it), c // group_size without g_idx.
        bits, g = quant.get("bits", 4), quant.get("group_size", 128)
        if bits not in (2, 4, 8):
            raise ValueError("gptq: %d bits unsupported" % bits)
        if g == -1:
            g = k
        fmt = quant.get("checkpoint_format", "gptq")
        if fmt not in ("gptq", "gptq_v2"):
            raise ValueError("gptq: checkpoint_format %s unsupported" % fmt)
        per, G = 32 // bits, -(-k // g)
        q = self._unpack(self.get(prefix + ".qweight", (k // per, n)), bits, 0)   # [k, n]
        z = self._unpack(self.get(prefix + ".qzeros", (G, n // per)), bits, 1)    # [G, n]
        z = z + (1 if fmt == "gptq" else 0)
        s = self.get(prefix + ".scales", (G, n))
        if self.has(prefix + ".g_idx"):
            gi = self.get(prefix + ".g_idx", (k,))
        else:
            gi = np.arange(k) // g
        if gi.min() < 0 or gi.max() >= G:
            raise ValueError("%s.g_idx: group index outside [0, %d)" % (prefix, G))
        return ((q - z[gi]) * s[gi]).T


# ---- model --------------------------------------------------------------------------

class Config:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = json.load(f)
        self.model_type = c.get("model_type", "qwen3")
        if self.model_type not in ("qwen3", "qwen2"):
            raise ValueError("unsupported model_type %s" % self.model_type)
        self.vocab = c["vocab_size"]
        self.hidden = c["hidden_size"]
        self.intermediate = c["intermediate_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        # Both HF models take head_dim from the config when given, else hidden/heads.
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.rope_theta = float(c.get("rope_theta", 10000.0))
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.tied = bool(c.get("tie_word_embeddings", False))
        self.quant = c.get("quantization_config") or {}
        if self.quant and self.quant.get("quant_method") not in ("fp8", "awq", "gptq"):
            raise ValueError("unsupported quant_method %s" % self.quant.get("quant_method"))
        # Qwen3: per-head q/k RMSNorm, bias only if attention_bias. Qwen2: q/k/v
        # biases always, no q/k norm.
        self.qk_norm = self.model_type == "qwen3"
        self.qkv_bias = self.model_type == "qwen2" or bool(c.get("attention_bias", False))
        if c.get("hidden_act", "silu") != "silu":
            raise ValueError("unsupported hidden_act %s" % c.get("hidden_act"))


def rms_norm(x, weight, eps):
    """Qwen3RMSNorm: weight * x / sqrt(mean(x^2) + eps) over the last axis."""
    return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_tables(n, head_dim, theta):
    """cos/sin [n, head_dim] of HF's default rotary embedding (NeoX layout)."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    freqs = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


class Model:
    def __init__(self, model_dir):
        self.cfg = Config(model_dir)
        self.w = Weights(model_dir, self.cfg.quant)

    def forward(self, tokens):
        """Logits [len(tokens), vocab] for the whole sequence, causal, from position 0."""
        cfg, w = self.cfg, self.w
        n = len(tokens)
        H, D, KV = cfg.heads, cfg.head_dim, cfg.kv_heads
        group = H // KV
        embed = w.get("model.embed_tokens.weight", (cfg.vocab, cfg.hidden))
        for t in tokens:
            if not 0 <= t < cfg.vocab:
                raise ValueError("token %d outside vocab %d" % (t, cfg.vocab))
        x = embed[np.asarray(tokens, dtype=np.int64)]           # [n, hidden]
        cos, sin = rope_tables(n, D, cfg.rope_theta)             # [n, D]
        causal = np.triu(np.ones((n, n), dtype=bool), k=1)       # True above the diagonal

        for i in range(cfg.layers):
            p = "model.layers.%d." % i
            # --- attention block
            h = rms_norm(x, w.get(p + "input_layernorm.weight", (cfg.hidden,)), cfg.eps)
            q = h @ w.linear(p + "self_attn.q_proj", H * D, cfg.hidden).T
            k = h @ w.linear(p + "self_attn.k_proj", KV * D, cfg.hidden).T
            v = h @ w.linear(p + "self_attn.v_proj", KV * D, cfg.hidden).T
            if cfg.qkv_bias:
                q = q + w.get(p + "self_attn.q_proj.bias", (H * D,))
                k = k + w.get(p + "self_attn.k_proj.bias", (KV * D,))
                v = v + w.get(p + "self_attn.v_proj.bias", (KV * D,))
            q = q.reshape(n, H, D).transpose(1, 0, 2)            # [H, n, D]
            k = k.reshape(n, KV, D).transpose(1, 0, 2)           # [KV, n, D]
            v = v.reshape(n, KV, D).transpose(1, 0, 2)
            if cfg.qk_norm:
                # per head, over head_dim, before rotary
                q = rms_norm(q, w.get(p + "self_attn.q_norm.weight", (D,)), cfg.eps)
                k = rms_norm(k, w.get(p + "self_attn.k_norm.weight", (D,)), cfg.eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            # repeat_kv: query head j reads KV head j // group
            k = np.repeat(k, group, axis=0)                      # [H, n, D]
            v = np.repeat(v, group, axis=0)
            scores = (q @ k.transpose(0, 2, 1)) / np.sqrt(D)     # [H, n, n]
            scores = np.where(causal[None], -np.inf, scores)
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs = probs / probs.sum(axis=-1, keepdims=True)
            attn = (probs @ v).transpose(1, 0, 2).reshape(n, H * D)
            x = x + attn @ w.linear(p + "self_attn.o_proj", cfg.hidden, H * D).T
            # --- MLP block
            h = rms_norm(x, w.get(p + "post_attention_layernorm.weight", (cfg.hidden,)), cfg.eps)
            gate = h @ w.linear(p + "mlp.gate_proj", cfg.intermediate, cfg.hidden).T
            up = h @ w.linear(p + "mlp.up_proj", cfg.intermediate, cfg.hidden).T
            x = x + (silu(gate) * up) @ w.linear(p + "mlp.down_proj", cfg.hidden,
                                                 cfg.intermediate).T

        x = rms_norm(x, w.get("model.norm.weight", (cfg.hidden,)), cfg.eps)
        return x @ self.head().T

    def head(self):
        """The output head [vocab, hidden] in float64."""
        cfg, w = self.cfg, self.w
        if cfg.quant.get("quant_method") == "gptq" and cfg.quant.get("lm_head") \
                and w.has("lm_head.qweight"):
            # GPTQModel's lm_head=True: the head is quantized like a linear.
            return w.linear("lm_head", cfg.vocab, cfg.hidden)
        if w.has("lm_head.weight"):
            # A tied model may still ship lm_head (a copy); use what is shipped.
            return w.get("lm_head.weight", (cfg.vocab, cfg.hidden))
        if cfg.tied:
            return w.get("model.embed_tokens.weight", (cfg.vocab, cfg.hidden))
        raise KeyError("missing tensor lm_head.weight (model is not tied)")

    def linears(self):
        """(prefix, n, k) of every linear layer."""
        cfg = self.cfg
        q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        shapes = [("self_attn.q_proj", q, cfg.hidden), ("self_attn.k_proj", kv, cfg.hidden),
                  ("self_attn.v_proj", kv, cfg.hidden), ("self_attn.o_proj", cfg.hidden, q),
                  ("mlp.gate_proj", cfg.intermediate, cfg.hidden),
                  ("mlp.up_proj", cfg.intermediate, cfg.hidden),
                  ("mlp.down_proj", cfg.hidden, cfg.intermediate)]
        return [("model.layers.%d.%s" % (i, name), n, k)
                for i in range(cfg.layers) for name, n, k in shapes]


def weights_vs(model, twin):
    """Largest max|W - W_twin| / max|W_twin| over the linears of two models
    (the output heads included)."""
    worst = 0.0
    pairs = ((model.w.linear(p, n, k), twin.w.linear(p, n, k)) for p, n, k in model.linears())
    for a, b in itertools.chain(pairs, [(model.head(), twin.head())]):
        worst = max(worst, float(np.abs(a - b).max() / np.abs(b).max()))
    return worst


# ---- command line -------------------------------------------------------------------

def parse_tokens(s):
    try:
        toks = [int(t) for t in s.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError("tokens must be comma-separated integers")
    if not toks:
        raise argparse.ArgumentTypeError("at least one token is needed")
    return toks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--tokens", type=parse_tokens, help="e.g. 1,2,3")
    ap.add_argument("--weights-vs", metavar="TWIN",
                    help="print the linears' max relative difference from TWIN's")
    ap.add_argument("--out", help="file for raw little-endian float64 logits")
    ap.add_argument("--last-only", action="store_true", help="write only the last row")
    ap.add_argument("--print-greedy", type=int, default=0, metavar="N",
                    help="print N greedy continuation tokens")
    args = ap.parse_args(argv)
    if args.weights_vs:
        try:
            print("%.6g" % weights_vs(Model(args.model), Model(args.weights_vs)))
        except (OSError, ValueError, KeyError) as e:
            print("qwen3_ref: %s" % e, file=sys.stderr)
            return 1
        return 0
    if not args.tokens:
        ap.error("--tokens is required")
    if not args.out and args.print_greedy <= 0:
        ap.error("nothing to do: give --out and/or --print-greedy N")

    try:
        model = Model(args.model)
        if args.out:
            logits = model.forward(args.tokens)
            if args.last_only:
                logits = logits[-1:]
            if not np.all(np.isfinite(logits)):
                print("qwen3_ref: warning: non-finite logits", file=sys.stderr)
            np.ascontiguousarray(logits, dtype="<f8").tofile(args.out)
        if args.print_greedy > 0:
            seq = list(args.tokens)
            out = []
            for _ in range(args.print_greedy):
                nxt = int(np.argmax(model.forward(seq)[-1]))
                out.append(nxt)
                seq.append(nxt)
            print(",".join(str(t) for t in out))
    except (OSError, ValueError, KeyError) as e:
        print("qwen3_ref: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
