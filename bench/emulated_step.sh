#!/usr/bin/env bash
# Emulated-backend benchmark (not a test): the wall time of one emulated ring step of 128 queries
# against 128 keys at head dim 128 (one rank, so one launch of the step kernel), as
# `cpgen verify --backend emulated` reports it (the launch alone: no process start, no compile,
# no reference). Each case runs once to fill the kernel store (the host compile, timed apart),
# then REPEAT times from the store.
#
#   bench/emulated_step.sh                 # writes bench/results/<date>-emulated-step.md
#   REPEAT=10 CPGEN=build/cpgen bench/emulated_step.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CPGEN=${CPGEN:-$ROOT/build/cpgen}
REPEAT=${REPEAT:-5}
OUT=${OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-emulated-step.md}
STORE=$(mktemp -d "${TMPDIR:-/tmp}/cpgen_bench_store.XXXXXX")
trap 'rm -rf "$STORE"' EXIT
[ -x "$CPGEN" ] || { echo "emulated_step: $CPGEN not built (cmake --build build)" >&2; exit 1; }

CPGEN="$CPGEN" REPEAT="$REPEAT" OUT="$OUT" STORE="$STORE" CMDLINE="$(echo "$0 $*" | sed "s/ *$//")" python3 - <<'PY'
import json, os, platform, re, statistics, subprocess, time

cpgen, repeat, out, store = os.environ["CPGEN"], int(os.environ["REPEAT"]), os.environ["OUT"], os.environ["STORE"]
env = dict(os.environ, CPGEN_KERNEL_DIR=store)
cases = [("bf16", True, 1), ("bf16", False, 1), ("fp16", True, 1), ("bf16", True, 4)]

def run(dtype, causal, group):
    shape = {"q_heads": group, "kv_heads": 1, "head_dim": 128, "seq_len": 128, "cp_size": 1,
             "dtype": dtype, "causal": causal}
    args = [cpgen, "verify", "--shape", json.dumps(shape), "--random", "--backend", "emulated", "--json"]
    start = time.monotonic()
    doc = json.loads(subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout)
    wall = time.monotonic() - start
    note = next(n for n in doc["notes"] if "kernel launches emulated" in n)
    ms = float(re.search(r"in (\d+) ms", note).group(1))
    return doc, ms, wall

rows = []
for dtype, causal, group in cases:
    doc, first_ms, first_wall = run(dtype, causal, group)
    times = [run(dtype, causal, group)[1] for _ in range(repeat)]
    rows.append((doc["precision"].split(";")[0], group, first_wall, statistics.median(times), min(times), max(times),
                 all(c["ok"] for c in doc["checks"])))

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
with open(out, "w") as f:
    f.write(f"# One emulated ring step, 128 queries x 128 keys, head dim 128\n\n")
    f.write(f"Command: `{os.environ['CMDLINE']}` (REPEAT={repeat})\n\n")
    f.write(f"Machine: {cpu}, {os.cpu_count()} CPUs (shared with other jobs while measured). "
            f"One rank, so one launch of the step kernel; the time is the launch as the emulated device "
            f"measures it (all CTAs, every thread a fiber). GQA group 4 packs 512 query rows.\n\n")
    f.write("| kernel | GQA group | first run, s (host compile + run) | launch ms, median | min | max | check |\n")
    f.write("| --- | --- | --- | --- | --- | --- | --- |\n")
    for uri, group, first, med, lo, hi, ok in rows:
        f.write(f"| `{uri}` | {group} | {first:.1f} | {med:.0f} | {lo:.0f} | {hi:.0f} | {'ok' if ok else 'FAIL'} |\n")
print(open(out).read())
PY
