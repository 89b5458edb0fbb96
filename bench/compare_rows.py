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
reads first. A row whose cuDNN output failed its check has no ratio to cuDNN ("cuDNN wrong", left
out of the mean); a file that holds one configuration twice (two runs appended to it) is refused.
The tables add batch, ring and dir columns where the rows differ in them, and a backward row's
kernel is the backward kernel it timed.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import fmt, ring_name  # noqa: E402  (kernels.py's table cells; it imports torch only when run)

# direction: "bwd" on kernels.py --direction bwd rows, absent (None) on forward ones.
KEY = ("dtype", "head_dim", "causal", "seq_len", "q_heads", "kv_heads", "batch", "ranks", "scheme", "direction")


class Repeated(ValueError):
    pass


def load(path):
    """{configuration: row} of a kernels.py --jsonl file. A configuration that appears twice (two
    runs appended to one file) is refused: which of its rows to join cannot be told."""
    rows, seen = {}, {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if line:
                row = json.loads(line)
                key = tuple(row.get(k) for k in KEY)
                if key in rows:
                    raise Repeated(f"{path}: line {number} repeats the configuration of line {seen[key]} "
                                   "(kernels.py --jsonl appends: give each run a file of its own)")
                rows[key], seen[key] = row, number
    return rows


def shape_columns(rows):
    """The shape columns a table needs for these rows: dtype, hd, causal, seq and gqa always, and
    batch, ring (kernels.py's ranks and scheme) and dir only where the rows differ in them, so that
    two rows never look alike. Returns [(title, cell(row))]."""
    columns = [("dtype", lambda r: r["dtype"]), ("hd", lambda r: r["head_dim"]), ("causal", lambda r: int(r["causal"])),
               ("seq", lambda r: r["seq_len"]), ("gqa", lambda r: r["q_heads"] // r["kv_heads"])]
    for title, get in (("batch", lambda r: r.get("batch")), ("ring", ring_name),
                       ("dir", lambda r: r.get("direction") or "fwd")):
        if len({get(r) for r in rows}) > 1:
            columns.append((title, get))
    return columns


def kernel_of(row):
    """The kernel a row timed: the backward kernel on a --direction bwd row (its forward ran
    untimed), else the forward one; the failure where there is none."""
    uri = row.get("cpgen_backward_uri") if row.get("direction") == "bwd" else row.get("cpgen_uri")
    return uri or row.get("failed", "")


def cudnn_ratio(row, spec):
    """A row's ratio to cuDNN, "wrong" where cuDNN's own output failed kernels.py's check."""
    return "wrong" if row.get("cudnn_check") == "FAILED" else fmt(row.get("ratio_cudnn"), spec)


def table(base, other):
    pairs = [(b, o) for key, o in other.items() if (b := base.get(key)) is not None]
    columns = shape_columns([o for _, o in pairs])
    lines = ["| " + " | ".join(t for t, _ in columns) + " | base TFLOP/s | other TFLOP/s | other / base | base vs cuDNN |"
             " other vs cuDNN | base kernel | other kernel |",
             "|" + "---|" * (len(columns) + 7)]
    for b, o in pairs:
        bt, ot = b.get("cpgen_tflops"), o.get("cpgen_tflops")
        # A kernel whose output failed kernels.py's check has no ratio worth reading.
        wrong = "FAILED" in (b.get("cpgen_check"), o.get("cpgen_check"))
        ratio = "wrong" if wrong else fmt(ot / bt if bt and ot else None, ".2f")
        lines.append("| " + " | ".join(str(get(o)) for _, get in columns) +
                     f" | {fmt(bt, '.0f')} | {fmt(ot, '.0f')} | {ratio} | {cudnn_ratio(b, '.2f')} "
                     f"| {cudnn_ratio(o, '.2f')} | {kernel_of(b)} | {kernel_of(o)} |")
    return lines, len(pairs)


def cell(row):
    """One run's cell of the --many table: its ratio to cuDNN, then its TFLOP/s."""
    if row is None:
        return "-"
    if "failed" in row:
        return "failed"
    if row.get("cpgen_check") == "FAILED":
        return "wrong"
    if row.get("cudnn_check") == "FAILED":
        return f"cuDNN wrong ({fmt(row.get('cpgen_tflops'), '.0f')})"
    return f"{fmt(row.get('ratio_cudnn'), '.3f')} ({fmt(row.get('cpgen_tflops'), '.0f')})"


def usable(row):
    """Whether a row counts toward the mean: measured, checked correct (cpgen and cuDNN both), with
    a cuDNN ratio."""
    return (row is not None and "failed" not in row and row.get("cpgen_check") != "FAILED"
            and row.get("cudnn_check") != "FAILED"
            and isinstance(row.get("ratio_cudnn"), (int, float)) and row["ratio_cudnn"] == row["ratio_cudnn"])


def many_table(runs):
    """runs: [(label, rows)]. The markdown lines of the side-by-side table."""
    keys = []
    for _, rows in runs:
        keys += [k for k in rows if k not in keys]
    labels = [label for label, _ in runs]
    first = {key: next(rows[key] for _, rows in runs if key in rows) for key in keys}
    columns = shape_columns(list(first.values()))
    lines = ["| " + " | ".join(t for t, _ in columns) + " | " +
             " | ".join(f"{label} vs cuDNN (TFLOP/s)" for label in labels) + " |",
             "|" + "---|" * (len(columns) + len(labels))]
    common = []
    for key in keys:
        lines.append("| " + " | ".join(str(get(first[key])) for _, get in columns) + " | " +
                     " | ".join(cell(rows.get(key)) for _, rows in runs) + " |")
        if all(usable(rows.get(key)) for _, rows in runs):
            common.append(key)
    means = [sum(rows[k]["ratio_cudnn"] for k in common) / len(common) if common else None for _, rows in runs]
    lines.append(f"| mean of {len(common)} |" + " |" * (len(columns) - 1) + " " +
                 " | ".join(fmt(m, ".3f") for m in means) + " |")
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
