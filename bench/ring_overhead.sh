#!/usr/bin/env bash
# Ring overhead benchmark (not a test; needs a GPU): the forward ring over N virtual ranks on one
# GPU (loopback transport) against one attention of the same total work by cpgen's own kernel.
#
#   bench/ring_overhead.sh [REPORT.md]      # default: bench/results/<date>-<gpu>-ring-overhead.md
#   CPGEN=build-gpu/cpgen ITERS=50 bench/ring_overhead.sh
#   TARGET_ONLY=1 bench/ring_overhead.sh    # the target row alone (about 30 s of the six rows' 3 minutes)
#
# Target (DESIGN.md): at seq 32K, N=8, causal zigzag, bf16, head dim 128 the ring costs < 5% more
# than the single attention. The other rows show how the overhead moves with N and the scheme.
# Each row is one `cpgen bench --json` process; times are medians of CUDA-event-timed runs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CPGEN=${CPGEN:-$ROOT/build/cpgen}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
[ -x "$CPGEN" ] || { echo "ring_overhead: $CPGEN is not built" >&2; exit 1; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' || true)
REPORT=${1:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-${GPU:-nogpu}-ring-overhead.md}
mkdir -p "$(dirname "$REPORT")"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cpgen_ring_bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

TARGET_SHAPE="q_heads=32,kv_heads=8,head_dim=128,seq_len=32768,dtype=bf16,causal=1,scheme=zigzag"
# shape|ranks|is_target
ROWS=(
  "$TARGET_SHAPE|8|yes"
  "$TARGET_SHAPE|4|no"
  "$TARGET_SHAPE|2|no"
  "q_heads=32,kv_heads=8,head_dim=128,seq_len=32768,dtype=bf16,causal=1,scheme=striped|8|no"
  "q_heads=32,kv_heads=8,head_dim=128,seq_len=32768,dtype=bf16,causal=0,scheme=contiguous|8|no"
  "q_heads=32,kv_heads=32,head_dim=64,seq_len=32768,dtype=fp16,causal=1,scheme=zigzag|8|no"
)
[ "${TARGET_ONLY:-0}" = 1 ] && ROWS=("${ROWS[0]}")
# The report is rewritten after every row, so a run stopped by a time limit (gpu-check's budget)
# keeps the rows that finished, the target row first among them.
cat >"$TMP/report.py" <<'PY'
import json, os, sys, datetime
tmp, n, report, gpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lines = [f"# Ring overhead on {gpu or 'unknown GPU'} ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
         "Loopback ring of N virtual ranks on one GPU against one attention of the same total work",
         "(cpgen's own kernel, cp_size 1). Useful FLOPs count 4 x head_dim per visible (query, key) pair.",
         "Target: overhead < 5% at seq 32K, N=8, causal zigzag, bf16, hd 128.", "",
         "Steps alone: every (rank, step) launch of the ring timed by itself, one after another; against",
         "single ms it is what the per-step kernels cost over one kernel, and ring ms against it is what",
         "running the ranks' launches and copies together costs (above 1) or saves (below 1).", "",
         "| shape | N | kernel | step TFLOP/s | ring ms | ring TFLOP/s | single ms | single TFLOP/s | overhead | steps alone ms | steps alone / single | ring / steps alone | check |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
verdict = "target row missing"
types = []
for i in range(n):
    cmd = open(f"{tmp}/{i}.cmd").read().strip()
    target = open(f"{tmp}/{i}.target").read().strip() == "yes"
    try:
        r = json.load(open(f"{tmp}/{i}.json"))
    except Exception:
        err = open(f"{tmp}/{i}.err").read().strip().splitlines()
        lines.append(f"| `{cmd}` | | failed: {err[-1] if err else 'no output'} | | | | | | | | | | |")
        if target: verdict = "target row FAILED to run"
        continue
    check = "ok" if r["check"]["passed"] else f"FAILED ({r['check']['out_rel_error']:.2e})"
    alone = r.get("steps_alone_ms") or 0
    split = (f"{alone:.3f} | {alone / r['single_ms']:.3f} | {r['ring_ms'] / alone:.3f}" if alone > 0
             else f"{r.get('steps_note') or 'not timed'} | | ")
    lines.append(f"| {r['shape']} | {r['ranks']} | {r['kernel']} | {r['step_tflops']:.1f} | {r['ring_ms']:.3f} | "
                 f"{r['ring_tflops']:.1f} | {r['single_ms']:.3f} | {r['single_tflops']:.1f} | "
                 f"{100*r['overhead']:+.2f}% | {split} | {check} |")
    types.append((r, target))
    if target and not r["check"]["passed"]:
        verdict = "target row's check FAILED: its overhead means nothing"
    elif target:
        verdict = ("target MET" if r["overhead"] < 0.05 else "target MISSED") + f": overhead {100*r['overhead']:+.2f}%"
lines += ["", f"**{verdict}**", ""]
# The steps alone by type, for the target row (and the others when they have them).
for r, target in types:
    if not r.get("step_types"):
        continue
    lines += [f"Steps alone, {r['shape']}, N={r['ranks']}{' (the target row)' if target else ''}:", "",
              "| step type | launches | ms | ms per launch | kernel |", "|---|---|---|---|---|"]
    lines += [f"| {t['step_type']} | {t['launches']} | {t['ms']:.3f} | {t['ms'] / t['launches']:.3f} | {t['kernel']} |"
              for t in r["step_types"]]
    lines.append("")
lines += ["Commands:", ""]
lines += [f"    {open(f'{tmp}/{i}.cmd').read().strip()}" for i in range(n)]
open(report, "w").write("\n".join(lines) + "\n")
print(verdict)
PY
i=0
status=0
for row in "${ROWS[@]}"; do
  IFS='|' read -r shape ranks target <<<"$row"
  cmd=("$CPGEN" bench --shape "$shape" --ranks "$ranks" --iters "$ITERS" --warmup "$WARMUP" --json)
  echo "+ ${cmd[*]}" >&2
  if "${cmd[@]}" >"$TMP/$i.json" 2>"$TMP/$i.err"; then :; else
    echo "ring_overhead: row $i failed: $(tail -1 "$TMP/$i.err")" >&2
    status=1
  fi
  echo "$target" >"$TMP/$i.target"
  echo "${cmd[*]}" >"$TMP/$i.cmd"
  i=$((i + 1))
  python3 "$TMP/report.py" "$TMP" "$i" "$REPORT" "$GPU"
done
echo "ring_overhead: wrote $REPORT" >&2
exit $status
