#!/usr/bin/env python3
"""Joins two bench/kernels.py result files (--jsonl) on their configurations and prints a markdown
table of the second run's cpgen kernel against the first's, e.g. the wgmma family pinned with
--pin against the kernel selection picks (issue 13's family ratio):

  python3 bench/compare_rows.py selected.jsonl wgmma.jsonl

Both runs measured the same shapes on the same GPU; their SDPA columns are separate
measurements, so the table also gives each run's ratio to cuDNN, which shows how far the two
runs' conditions agree. Ratios above 1.0 mean the second run's kernel is faster.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import fmt  # noqa: E402  (the table cells of kernels.py; it imports torch only when run)

KEY = ("dtype", "head_dim", "causal", "seq_len", "q_heads", "kv_heads", "batch", "ranks", "scheme")


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                row = json.loads(line)
                rows[tuple(row.get(k) for k in KEY)] = row
    return rows


def table(base, other):
    lines = ["| dtype | hd | causal | seq | gqa | base TFLOP/s | other TFLOP/s | other / base | base vs cuDNN |"
             " other vs cuDNN | base kernel | other kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    joined = 0
    for key, o in other.items():
        b = base.get(key)
        if b is None:
            continue
        joined += 1
        bt, ot = b.get("cpgen_tflops"), o.get("cpgen_tflops")
        # A kernel whose output failed kernels.py's check has no ratio worth reading.
        wrong = "FAILED" in (b.get("cpgen_check"), o.get("cpgen_check"))
        ratio = "wrong" if wrong else fmt(ot / bt if bt and ot else None, ".2f")
        lines.append(
            f"| {o['dtype']} | {o['head_dim']} | {int(o['causal'])} | {o['seq_len']} | {o['q_heads'] // o['kv_heads']} "
            f"| {fmt(bt, '.0f')} | {fmt(ot, '.0f')} | {ratio} | {fmt(b.get('ratio_cudnn'), '.2f')} "
            f"| {fmt(o.get('ratio_cudnn'), '.2f')} | {b.get('cpgen_uri', b.get('failed', ''))} "
            f"| {o.get('cpgen_uri', o.get('failed', ''))} |")
    return lines, joined


def main(argv):
    if len(argv) != 3:
        print("usage: compare_rows.py BASE.jsonl OTHER.jsonl", file=sys.stderr)
        return 2
    try:
        base, other = load(argv[1]), load(argv[2])
    except (OSError, ValueError) as e:
        print(f"compare_rows: {e}", file=sys.stderr)
        return 2
    lines, joined = table(base, other)
    print("\n".join(lines))
    print(f"\n{joined} configurations in both files ({len(base)} and {len(other)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
