#!/usr/bin/env python3
"""Writes the project's own float64 attention vectors (tests/data/vectors/).

Usage: tools/vectors/make_vectors.py OUT_DIR                (format 1, and format 2 into OUT_DIR/v2)
       tools/vectors/make_vectors.py --check DIR   (recompute DIR's format-1 cases, compare)

The expected outputs are computed here from the definition of attention, with numpy in float64,
and share no code with the C++ reference (runtime/ring/reference.cpp), so the two check each
other. Files use the format "cpgen-attention-vectors/1" (docs/formats.md), plus partitions.json
("cpgen-partition-vectors/1"), the rank layouts of every scheme written from the scheme
definitions in docs/design.md.

Inputs are drawn from a counter-based generator with exact integer and dyadic arithmetic only, then
rounded to bf16, so they are the same bits on every machine and every numpy version. The outputs
go through numpy's matrix products, whose summation order may differ between BLAS builds in the
last bits; they are written with 13 significant digits, and the check in
tests/tools/make_vectors_test.cpp compares within 1e-12 relative.
"""

import json
import math
import os
import sys

import numpy as np

FORMAT = "cpgen-attention-vectors/1"
PARTITIONS_FORMAT = "cpgen-partition-vectors/1"
LAYOUT = "[batch][heads][seq][head_dim], row-major, sequence in global position order"

# name, batch, q_heads, kv_heads, head_dim, seq_len, causal, window, input scale of q and k.
# Small on purpose (the whole set is a few MB of JSON); every seq_len splits over 1, 2, 4 and 8
# ranks under every scheme (zigzag needs 2 * cp_size | seq_len); 48 also splits over 3.
CASES = [
    ("mha_causal_hd64_s64", 1, 1, 1, 64, 64, True, None, 1.0),
    ("mha_full_hd64_s32_b2", 2, 1, 1, 64, 32, False, None, 1.0),
    ("gqa2_causal_hd128_s32", 1, 2, 1, 128, 32, True, None, 1.0),
    ("gqa4_causal_hd64_s32", 1, 4, 1, 64, 32, True, None, 1.0),
    ("mqa_causal_hd96_s48", 1, 2, 1, 96, 48, True, None, 1.0),
    ("mha_full_hd256_s32", 1, 1, 1, 256, 32, False, None, 1.0),
    ("mha_window16_hd64_s64", 1, 1, 1, 64, 64, True, 16, 1.0),
    # q and k six times larger: scores reach the hundreds, softmax rows are nearly one-hot, and
    # lse is far from 0, which is where a merge that forgets the running max goes wrong.
    ("mha_causal_hd64_s64_large_logits", 1, 1, 1, 64, 64, True, None, 6.0),
]

FORMAT2 = "cpgen-attention-vectors/2"

# Format 2 (packed documents, two-sided window, softcap; ../shared/vectors/v2/README.md style):
# name, batch, q_heads, kv_heads, head_dim, documents, causal, window left, window right,
# softcap, input scale of q and k. Lengths no ring of 2, 3, 5 or 8 divides, with empty and
# one-token documents among them.
V2_CASES = [
    ("v2_docs_window_softcap_gqa2_hd64", 1, 2, 1, 64, [13, 1, 0, 17, 2, 10], True, 6, None, 20.0, 1.0),
    ("v2_window_l5_r3_full_hd64_b2", 2, 1, 1, 64, [29], False, 5, 3, None, 1.0),
    ("v2_docs_full_softcap_mqa_hd128", 1, 2, 1, 128, [11, 0, 9, 7], False, None, None, 10.0, 3.0),
]

SCHEMES = {
    "contiguous": "rank r holds positions [r*S/N, (r+1)*S/N)",
    "zigzag": "sequence cut into 2N equal chunks; rank r holds chunk r then chunk 2N-1-r",
    "zigzag-token": "token t: fold=t//N, j=t%N; rank j if fold even else N-1-j",
    "striped": "rank r holds positions r, r+N, r+2N, ...",
}
PARTITION_SIZES = [(8, 1), (16, 4), (32, 2), (48, 3), (64, 8)]

MASK64 = (1 << 64) - 1


def splitmix64(counter):
    """SplitMix64 of a uint64 array: wrapping integer arithmetic, identical everywhere."""
    with np.errstate(over="ignore"):
        z = counter + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def normal_like(count, stream):
    """Roughly standard normal values: the sum of 12 uniforms minus 6 (Irwin-Hall).

    Each uniform is a 53-bit integer times 2^-53, so it is exact in float64, and the sums are
    done in a fixed order; no transcendental function is involved, so no libm can change a bit.
    """
    index = np.arange(count, dtype=np.uint64) * np.uint64(12)
    base = np.uint64((stream * 0x1000193) & MASK64) << np.uint64(32)
    total = np.zeros(count, dtype=np.float64)
    for term in range(12):
        bits = splitmix64(base + index + np.uint64(term)) >> np.uint64(11)
        total = total + bits.astype(np.float64) * 2.0**-53
    return total - 6.0


def round_to_bf16(x):
    """Round float64 values to the nearest bf16 (ties to even), returned as float64."""
    as_f32 = x.astype(np.float32)  # exact for these inputs' magnitudes up to float32 rounding
    bits = as_f32.view(np.uint32).astype(np.uint64)
    bits = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def visible(seq_len, causal, window):
    """visible[i, j]: query position i may attend key position j."""
    i = np.arange(seq_len)[:, None]
    j = np.arange(seq_len)[None, :]
    mask = np.ones((seq_len, seq_len), dtype=bool)
    if causal:
        mask &= j <= i
    if window is not None:
        mask &= (i - j) < window
    return mask


def visible_v2(documents, causal, left, right):
    """visible[i, j] for format 2: same document, (not causal or j <= i), i - j <= left and
    j - i <= right where given (None: unbounded)."""
    doc = np.repeat(np.arange(len(documents)), documents)
    seq_len = int(sum(documents))
    i = np.arange(seq_len)[:, None]
    j = np.arange(seq_len)[None, :]
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= j <= i
    if left is not None:
        mask &= (i - j) <= left
    if right is not None:
        mask &= (j - i) <= right
    return mask


def attention(q, k, v, dout, scale, mask, group, softcap=None):
    """Forward and backward of softmax(scale * q k^T, masked) v for every (batch, query head).

    q, dout: [B, Hq, S, D]; k, v: [B, Hkv, S, D]; query head h reads kv head h // group.
    Backward is for loss = sum(out * dout):
      dv = p^T dout,  dp = dout v^T,  ds = p * (dp - rowsum(dout * out)),
      dq = scale * ds k,  dk = scale * ds^T q.
    """
    batch, q_heads, seq_len, _ = q.shape
    out = np.zeros_like(q)
    lse = np.zeros((batch, q_heads, seq_len))
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    for b in range(batch):
        for h in range(q_heads):
            kv = h // group
            raw = scale * (q[b, h] @ k[b, kv].T)
            # With a softcap c the logit is t = c tanh(raw / c); d t / d raw = 1 - (t / c)^2.
            logits = softcap * np.tanh(raw / softcap) if softcap else raw
            slope = 1.0 - (logits / softcap) ** 2 if softcap else 1.0
            scores = np.where(mask, logits, -np.inf)
            row_max = scores.max(axis=1, keepdims=True)
            weights = np.exp(scores - row_max)  # exp(-inf) = 0 at masked keys
            row_sum = weights.sum(axis=1, keepdims=True)
            p = weights / row_sum
            out[b, h] = p @ v[b, kv]
            lse[b, h] = (row_max + np.log(row_sum))[:, 0]
            dp = dout[b, h] @ v[b, kv].T
            delta = (dout[b, h] * out[b, h]).sum(axis=1, keepdims=True)
            ds = p * (dp - delta) * slope
            dq[b, h] = scale * (ds @ k[b, kv])
            dk[b, kv] += scale * (ds.T @ q[b, h])
            dv[b, kv] += p.T @ dout[b, h]
    return out, lse, dq, dk, dv


def input_list(values):
    # bf16 values: Python's shortest round-trip form is exact and short.
    return "[" + ",".join(repr(float(x)) for x in values.ravel()) + "]"


def output_list(values):
    return "[" + ",".join("%.13g" % x for x in values.ravel()) + "]"


def make_case(index, name, batch, q_heads, kv_heads, head_dim, seq_len, causal, window, qk_scale):
    scale = 1.0 / math.sqrt(head_dim)
    q_shape = (batch, q_heads, seq_len, head_dim)
    kv_shape = (batch, kv_heads, seq_len, head_dim)
    stream = 16 * (index + 1)
    q = round_to_bf16(qk_scale * normal_like(int(np.prod(q_shape)), stream + 0)).reshape(q_shape)
    k = round_to_bf16(qk_scale * normal_like(int(np.prod(kv_shape)), stream + 1)).reshape(kv_shape)
    v = round_to_bf16(normal_like(int(np.prod(kv_shape)), stream + 2)).reshape(kv_shape)
    dout = round_to_bf16(normal_like(int(np.prod(q_shape)), stream + 3)).reshape(q_shape)
    out, lse, dq, dk, dv = attention(q, k, v, dout, scale, visible(seq_len, causal, window),
                                     q_heads // kv_heads)
    header = {
        "format": FORMAT,
        "name": name,
        "batch": batch,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "seq_len": seq_len,
        "causal": causal,
        "window": window,
        "softmax_scale": scale,
        "tensor_layout": LAYOUT,
        "inputs_are_bf16_exact": True,
        "generator": "tools/vectors/make_vectors.py",
    }
    parts = [json.dumps(header)[:-1]]
    for key, tensor in (("q", q), ("k", k), ("v", v), ("dout", dout)):
        parts.append(',"%s":%s' % (key, input_list(tensor)))
    for key, tensor in (("out", out), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        parts.append(',"%s":%s' % (key, output_list(tensor)))
    return "".join(parts) + "}\n"


def make_case_v2(index, name, batch, q_heads, kv_heads, head_dim, documents, causal, left, right,
                 softcap, qk_scale):
    seq_len = int(sum(documents))
    scale = 1.0 / math.sqrt(head_dim)
    q_shape = (batch, q_heads, seq_len, head_dim)
    kv_shape = (batch, kv_heads, seq_len, head_dim)
    stream = 16 * (index + 101)  # apart from the format-1 streams
    q = round_to_bf16(qk_scale * normal_like(int(np.prod(q_shape)), stream + 0)).reshape(q_shape)
    k = round_to_bf16(qk_scale * normal_like(int(np.prod(kv_shape)), stream + 1)).reshape(kv_shape)
    v = round_to_bf16(normal_like(int(np.prod(kv_shape)), stream + 2)).reshape(kv_shape)
    dout = round_to_bf16(normal_like(int(np.prod(q_shape)), stream + 3)).reshape(q_shape)
    out, lse, dq, dk, dv = attention(q, k, v, dout, scale, visible_v2(documents, causal, left, right),
                                     q_heads // kv_heads, softcap)
    header = {
        "format": FORMAT2,
        "name": name,
        "batch": batch,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "seq_len": seq_len,
        "documents": documents,
        "causal": causal,
        "window": {"left": left, "right": right},
        "softcap": softcap,
        "softmax_scale": scale,
        "tensor_layout": LAYOUT,
        "inputs_are_bf16_exact": True,
        "generator": "tools/vectors/make_vectors.py",
    }
    parts = [json.dumps(header)[:-1]]
    for key, tensor in (("q", q), ("k", k), ("v", v), ("dout", dout)):
        parts.append(',"%s":%s' % (key, input_list(tensor)))
    for key, tensor in (("out", out), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        parts.append(',"%s":%s' % (key, output_list(tensor)))
    return "".join(parts) + "}\n"


def positions(scheme, seq_len, cp_size, rank):
    """Global positions rank holds, in its local order (the definitions in SCHEMES)."""
    if scheme == "contiguous":
        per_rank = seq_len // cp_size
        return list(range(rank * per_rank, (rank + 1) * per_rank))
    if scheme == "zigzag":
        chunk = seq_len // (2 * cp_size)
        first = list(range(rank * chunk, (rank + 1) * chunk))
        mirror = 2 * cp_size - 1 - rank
        return first + list(range(mirror * chunk, (mirror + 1) * chunk))
    if scheme == "zigzag-token":
        held = []
        for t in range(seq_len):
            fold, j = divmod(t, cp_size)
            owner = j if fold % 2 == 0 else cp_size - 1 - j
            if owner == rank:
                held.append(t)
        return held
    if scheme == "striped":
        return list(range(rank, seq_len, cp_size))
    raise ValueError("unknown scheme " + scheme)


def make_partitions():
    cases = []
    for scheme in SCHEMES:
        for seq_len, cp_size in PARTITION_SIZES:
            cases.append({
                "scheme": scheme,
                "seq_len": seq_len,
                "cp_size": cp_size,
                "positions": [positions(scheme, seq_len, cp_size, r) for r in range(cp_size)],
            })
    doc = {"format": PARTITIONS_FORMAT, "schemes": SCHEMES, "cases": cases}
    return json.dumps(doc, indent=1) + "\n"


def relative_error(actual, expected):
    norm = np.linalg.norm(expected)
    diff = np.linalg.norm(actual - expected)
    return diff / norm if norm > 0 else diff


def check(directory):
    """Recompute the expected tensors of every format-1 case in a folder (another set of
    vectors, made elsewhere) from its inputs, and report the worst relative error. Two
    independent float64 computations agree to about the digits the files keep."""
    worst = 0.0
    checked = 0
    names = sorted(n for n in os.listdir(directory) if n.endswith(".json") and n != "partitions.json")
    for name in names:
        with open(os.path.join(directory, name)) as f:
            doc = json.load(f)
        if doc.get("format") != FORMAT:
            print("%s: skipped (format %s; only %s is recomputed here)" % (name, json.dumps(doc.get("format")), FORMAT),
                  file=sys.stderr)
            continue
        checked += 1
        b, hq, hkv, d, s = (doc[k] for k in ("batch", "q_heads", "kv_heads", "head_dim", "seq_len"))
        q = np.array(doc["q"]).reshape(b, hq, s, d)
        k = np.array(doc["k"]).reshape(b, hkv, s, d)
        v = np.array(doc["v"]).reshape(b, hkv, s, d)
        dout = np.array(doc["dout"]).reshape(b, hq, s, d)
        got = attention(q, k, v, dout, doc["softmax_scale"], visible(s, doc["causal"], doc["window"]), hq // hkv)
        errors = [relative_error(t.ravel(), np.array(doc[key]))
                  for key, t in zip(("out", "lse", "dq", "dk", "dv"), got)]
        print("%s: worst relative error %.2e" % (name, max(errors)))
        worst = max(worst, max(errors))
    # A folder of only other formats (v2/) checked nothing and passed.
    if not checked:
        print("no format-1 cases in " + directory, file=sys.stderr)
        return 1
    return 0 if worst < 1e-8 else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        return check(argv[2])
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: make_vectors.py OUT_DIR | --check DIR", file=sys.stderr)
        return 2
    out_dir = argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for index, case in enumerate(CASES):
        with open(os.path.join(out_dir, case[0] + ".json"), "w") as f:
            f.write(make_case(index, *case))
    with open(os.path.join(out_dir, "partitions.json"), "w") as f:
        f.write(make_partitions())
    os.makedirs(os.path.join(out_dir, "v2"), exist_ok=True)
    for index, case in enumerate(V2_CASES):
        with open(os.path.join(out_dir, "v2", case[0] + ".json"), "w") as f:
            f.write(make_case_v2(index, *case))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
