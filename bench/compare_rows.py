#!/usr/bin/env python3
"""Joins two bench/kernels.py result files (--jsonl) on their configurations and prints a markdown
table of the second run's cpgen kernel against the first's, e.g. the wgmma family pinned with
--pin against the kernel selection picks (issue 13's family ratio):

  python3 bench/compare_rows.py selected.jsonl wgmma.jsonl

Both runs measured the same shapes on the same GPU; their SDPA columns are separate
measurements, so the table also gives each run's ratio to cuDNN, which shows how far the two
runs' conditions agree. Ratios above 1.0 mean the second run's kernel is faster.

With --many, any number of runs side by side, each named by a label (tools/gpu-check.sh --ab
times the kernels of several commits in one call this way):

  python3 bench/compare_rows.py --many e59b2ca=ab-1.jsonl 3360f1e=ab-2.jsonl tree=wgmma.jsonl

One row per configuration, one column per run: the run's cpgen TFLOP/s over its own cuDNN
TFLOP/s (the runs' SDPA timings are separate measurements, so this is the figure that compares
across runs), with the cpgen TFLOP/s beside it. The last row is each column's mean ratio over the
configurations that every run measured and checked correct, the figure a keep-or-revert decision
reads first.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import fmt  # noqa: E402  (the table cells of kernels.py; it imports torch only when run)

# direction: "bwd" on kernels.py --direction bwd rows, absent (None) on forward ones.
KEY = ("dtype", "head_dim", "causal", "seq_len", "q_heads", "kv_heads", "batch", "ranks", "scheme", "direction")


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


def cell(row):
    """One run's cell of the --many table: its ratio to cuDNN, then its TFLOP/s."""
    if row is None:
        return "-"
    if "failed" in row:
        return "failed"
    if row.get("cpgen_check") == "FAILED":
        return "wrong"
    return f"{fmt(row.get('ratio_cudnn'), '.3f')} ({fmt(row.get('cpgen_tflops'), '.0f')})"


def usable(row):
    """Whether a row counts toward the mean: measured, checked correct, with a cuDNN ratio."""
    return (row is not None and "failed" not in row and row.get("cpgen_check") != "FAILED"
            and isinstance(row.get("ratio_cudnn"), (int, float)) and row["ratio_cudnn"] == row["ratio_cudnn"])


def many_table(runs):
    """runs: [(label, rows)]. The markdown lines of the side-by-side table."""
    keys = []
    for _, rows in runs:
        keys += [k for k in rows if k not in keys]
    labels = [label for label, _ in runs]
    lines = ["| dtype | hd | causal | seq | gqa | " + " | ".join(f"{label} vs cuDNN (TFLOP/s)" for label in labels) + " |",
             "|---|---|---|---|---|" + "---|" * len(labels)]
    common = []
    for key in keys:
        row = next(rows[key] for _, rows in runs if key in rows)
        lines.append(f"| {row['dtype']} | {row['head_dim']} | {int(row['causal'])} | {row['seq_len']} "
                     f"| {row['q_heads'] // row['kv_heads']} | " + " | ".join(cell(rows.get(key)) for _, rows in runs) + " |")
        if all(usable(rows.get(key)) for _, rows in runs):
            common.append(key)
    means = [sum(rows[k]["ratio_cudnn"] for k in common) / len(common) if common else None for _, rows in runs]
    lines.append(f"| mean of {len(common)} | | | | | " + " | ".join(fmt(m, ".3f") for m in means) + " |")
    return lines, len(common)


def main_many(args):
    runs = []
    for arg in args:
        label, sep, path = arg.partition("=")
        if not sep or not label or not path:
            print(f"compare_rows: --many '{arg}': LABEL=FILE.jsonl expected", file=sys.stderr)
            return 2
        if label in [known for known, _ in runs]:
            print(f"compare_rows: --many: the label '{label}' names two runs", file=sys.stderr)
            return 2
        try:
            runs.append((label, load(path)))
        except (OSError, ValueError) as e:
            print(f"compare_rows: {label}: {e}", file=sys.stderr)
            return 2
    if len(runs) < 2:
        print("compare_rows: --many needs two runs or more (LABEL=FILE.jsonl ...)", file=sys.stderr)
        return 2
    lines, common = many_table(runs)
    print("\n".join(lines))
    print(f"\n{common} configurations measured and correct in all {len(runs)} runs "
          f"({', '.join(f'{label} {len(rows)}' for label, rows in runs)} rows)")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--many":
        return main_many(argv[2:])
    if len(argv) != 3:
        print("usage: compare_rows.py BASE.jsonl OTHER.jsonl, or --many LABEL=FILE.jsonl ...", file=sys.stderr)
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
