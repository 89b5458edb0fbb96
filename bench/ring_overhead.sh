#!/usr/bin/env bash
# Ring overhead benchmark (not a test; needs a GPU): the forward ring over N virtual ranks on one
# GPU (loopback transport) against one attention of the same total work by cpgen's own kernel.
#
#   bench/ring_overhead.sh [REPORT.md]      # default: bench/results/<date>-<gpu>-ring-overhead.md
#   CPGEN=build-gpu/cpgen ITERS=50 bench/ring_overhead.sh
#   TARGET_ONLY=1 bench/ring_overhead.sh    # the target row alone (about 30 s of the six rows' 3 minutes)
#   TUNE=1 bench/ring_overhead.sh           # each row's kernels tuned first, in this run (below)
#
# Without TUNE the ring and the single attention run what selection gives them from the database
# the environment names ($CPGEN_DB, else the default path; on a fresh machine: the defaults). With
# TUNE=1, before each row `cpgen tune --only fwd` times TUNE_CANDIDATES (default 24) candidates per
# workload of the row's ring (its step types at the local lengths) and of its single attention
# into a database of this run, and both run their winners: the overhead of a tuned ring against a
# tuned single kernel, as a user who tunes first would see it.
#
# Target (DESIGN.md): at seq 32K, N=8, causal zigzag, bf16, head dim 128 the ring costs < 5% more
# than the single attention. The other rows show how the overhead moves with N and the scheme.
# Each row is one `cpgen bench --json` process; times are medians of CUDA-event-timed runs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CPGEN=${CPGEN:-$ROOT/build/cpgen}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
TUNE=${TUNE:-0}
TUNE_CANDIDATES=${TUNE_CANDIDATES:-24}
case "$TUNE" in 0|1) ;; *) echo "ring_overhead: TUNE is 0 or 1, got '$TUNE'" >&2; exit 2 ;; esac
case "$TUNE_CANDIDATES" in ''|*[!0-9]*) echo "ring_overhead: TUNE_CANDIDATES is a whole number, got '$TUNE_CANDIDATES'" >&2; exit 2 ;; esac
[ -x "$CPGEN" ] || { echo "ring_overhead: $CPGEN is not built" >&2; exit 1; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' || true)
REPORT=${1:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-${GPU:-nogpu}-ring-overhead.md}
mkdir -p "$(dirname "$REPORT")"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cpgen_ring_bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ "$TUNE" = 1 ]; then
  export CPGEN_DB=$TMP/tuned.db
  KERNELS_NOTE="Kernels: tuned in this run (TUNE=1: cpgen tune --only fwd --max-candidates $TUNE_CANDIDATES on each row's ring and single attention, seconds below); the ring and the single attention run their winners."
else
  KERNELS_NOTE="Kernels: what selection gives without a tune in this run (database: ${CPGEN_DB:-the default path}; on a fresh machine, the defaults)."
fi

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
tmp, n, report, gpu, kernels_note = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
lines = [f"# Ring overhead on {gpu or 'unknown GPU'} ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
         "Loopback ring of N virtual ranks on one GPU against one attention of the same total work",
         "(cpgen's own kernel, cp_size 1). Useful FLOPs count 4 x head_dim per visible (query, key) pair.",
         "Target: overhead < 5% at seq 32K, N=8, causal zigzag, bf16, hd 128.", "", kernels_note, "",
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
    c = r["check"]
    # An error that is NaN (a row never written) comes as null in cpgen's JSON.
    err = lambda x: "nan" if x is None else f"{x:.2e}"
    check = "ok" if c["passed"] else (f"FAILED (out {err(c['out_rel_error'])}, lse {err(c['lse_max_abs_error'])}, "
                                      f"{c.get('nonfinite', 0)} elements unwritten)")
    if not c.get("grads_finite", True):
        check += "; the backward left gradients unwritten"
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
    lines += ["", f"The single attention ran {r.get('single_kernel') or 'a kernel the report does not name'}.", ""]
tunes = [open(f"{tmp}/{i}.tune").read().strip() for i in range(n) if os.path.exists(f"{tmp}/{i}.tune")]
if tunes:
    lines += ["Tuning (seconds, command):", ""] + [f"    {t}" for t in tunes] + [""]
lines += ["Commands:", ""]
lines += [f"    {open(f'{tmp}/{i}.cmd').read().strip()}" for i in range(n)]
open(report, "w").write("\n".join(lines) + "\n")
print(verdict)
PY
# TUNE=1: the row's ring and its single attention as a shapes file (examples/shapes/README.md),
# less what an earlier row tuned already (rows 1-3 share their single attention).
cat >"$TMP/row_shapes.py" <<'PY'
import json, os, sys
shape = {"batch": 1, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "seq_len": 32768, "dtype": "bf16",
         "causal": True, "scheme": "zigzag"}
for item in filter(None, sys.argv[1].split(",")):
    key, value = item.split("=", 1)
    shape[key] = value if key in ("dtype", "scheme") else (value in ("1", "true") if key == "causal" else int(value))
done_file = sys.argv[3]
done = set(open(done_file).read().splitlines()) if os.path.exists(done_file) else set()
todo = []
for s in (dict(shape, cp_size=int(sys.argv[2])), dict(shape, cp_size=1, scheme="contiguous")):
    key = json.dumps(s, sort_keys=True)
    if key not in done:
        done.add(key)
        todo.append(dict(s, name="ring" if s["cp_size"] > 1 else "single"))
open(done_file, "w").write("".join(k + "\n" for k in sorted(done)))
print(json.dumps({"shapes": todo}))
PY
# Tunes row $1's shapes into $CPGEN_DB; $TMP/$1.tune says how long it took, and how.
tune_row() {
  local i=$1 shapes=$TMP/$1.shapes.json t0
  python3 "$TMP/row_shapes.py" "$2" "$3" "$TMP/tuned-shapes.txt" >"$shapes"
  if grep -q '"shapes": \[\]' "$shapes"; then
    echo "0 s: row $i's shapes were tuned by an earlier row" >"$TMP/$i.tune"
    return 0
  fi
  local tune=("$CPGEN" tune --shapes "$shapes" --db "$CPGEN_DB" --only fwd --require-gpu --quiet
              --max-candidates "$TUNE_CANDIDATES")
  echo "+ ${tune[*]}" >&2
  t0=$(date +%s)
  if "${tune[@]}" >"$TMP/$i.tune.log" 2>&1; then
    echo "$(( $(date +%s) - t0 )) s: ${tune[*]}  # $(cat "$shapes")" >"$TMP/$i.tune"
    return 0
  fi
  echo "ring_overhead: row $i's tune failed: $(tail -1 "$TMP/$i.tune.log")" >&2
  echo "FAILED after $(( $(date +%s) - t0 )) s: ${tune[*]}: $(tail -1 "$TMP/$i.tune.log")" >"$TMP/$i.tune"
  return 1
}

i=0
status=0
for row in "${ROWS[@]}"; do
  IFS='|' read -r shape ranks target <<<"$row"
  if [ "$TUNE" = 1 ] && ! tune_row "$i" "$shape" "$ranks"; then status=1; fi
  cmd=("$CPGEN" bench --shape "$shape" --ranks "$ranks" --iters "$ITERS" --warmup "$WARMUP" --json)
  echo "+ ${cmd[*]}" >&2
  if "${cmd[@]}" >"$TMP/$i.json" 2>"$TMP/$i.err"; then :; else
    echo "ring_overhead: row $i failed: $(tail -1 "$TMP/$i.err")" >&2
    status=1
  fi
  echo "$target" >"$TMP/$i.target"
  echo "${cmd[*]}" >"$TMP/$i.cmd"
  i=$((i + 1))
  python3 "$TMP/report.py" "$TMP" "$i" "$REPORT" "$GPU" "$KERNELS_NOTE"
done
echo "ring_overhead: wrote $REPORT" >&2
exit $status
