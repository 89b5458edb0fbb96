#!/usr/bin/env bash
# Every wgmma kernel the GPU tune would time, run first by the CUDA emulator (not a test: about
# half a minute per kernel on 2 cores). The tune times its candidates only after checking each
# against a reference config, and rejects a wrong one; this finds such a kernel on the CPU
# instead, before a device session spends its minutes on it.
#
#   bench/wgmma_tune_candidates_emulated.sh [SHAPES.json ...]   # default: examples/shapes/*.json
#   SEQ=512 CANDIDATES=24 CPGEN=build/cpgen REPORT=out.md bench/wgmma_tune_candidates_emulated.sh
#
# 1. `cpgen tune --arch sm_90a --only fwd --max-candidates CANDIDATES` without a GPU (CUDA_VISIBLE_DEVICES
#    empty) lists and compiles each shapes file's forward candidates, as gpu-check's tune phase
#    asks for them (24 per workload), into a scratch database; its export names them.
# 2. Each distinct wgmma URI among them runs on a small random problem of its own kind (its
#    dtype, head dim, GQA group and mask; 2 kv heads (1 from GQA 8 up), a zigzag ring of 2, SEQ tokens or by default
#    2 x BLOCK_N x (stages + 1) rounded up to 64, at least 256, so that a rank's own chunk spans
#    more key tiles than the ring of stages holds and every stage is reused; a window
#    of 96 keys behind each query (and 32 ahead when not causal) for _ivl, softcap 30 for _cap):
#      cpgen verify --shape JSON --random --seed 7 --backend emulated --spec URI
#    which checks out, lse and (through the mma.sync backward) the gradients against float64 on
#    sampled rows, under the emulator's sanitizer.
# Report: bench/results/<date>-wgmma-tune-candidates-emulated.md (REPORT= to choose), rewritten
# after every kernel, so a run stopped early keeps what finished. Exit 0 when
# every kernel passed, 1 otherwise, 2 on bad input.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CPGEN=${CPGEN:-$ROOT/build/cpgen}
SEQ=${SEQ:-auto}
CANDIDATES=${CANDIDATES:-24}
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-wgmma-tune-candidates-emulated.md}
fail() { echo "wgmma_tune_candidates_emulated: $*" >&2; exit 2; }
[ -x "$CPGEN" ] || fail "$CPGEN is not built (tools/test.sh builds it; CPGEN= names another)"
[[ "$SEQ" == auto || ( "$SEQ" =~ ^[0-9]+$ && "$SEQ" -ge 64 ) ]] || fail "SEQ '$SEQ': auto, or a whole number of tokens, at least 64"
[[ "$CANDIDATES" =~ ^[0-9]+$ ]] || fail "CANDIDATES '$CANDIDATES': a whole number per workload (0: all)"
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=("$ROOT"/examples/shapes/*.json)
for f in "${shapes[@]}"; do [ -f "$f" ] || fail "'$f' is not a file"; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cpgen_wgmma_candidates.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
start=$(date +%s)
for f in "${shapes[@]}"; do
  echo "+ cpgen tune --shapes $f (compile only)" >&2
  CUDA_VISIBLE_DEVICES= "$CPGEN" tune --shapes "$f" --arch sm_90a --only fwd --max-candidates "$CANDIDATES" \
    --db "$TMP/tune.db" -q >>"$TMP/tune.log" 2>&1 || { tail -5 "$TMP/tune.log" >&2; fail "cpgen tune failed on $f"; }
done
"$CPGEN" db export --db "$TMP/tune.db" -o "$TMP/export.json" >/dev/null || fail "cpgen db export failed"
# One line per distinct wgmma URI: the URI, then the verify shape as JSON.
python3 - "$TMP/export.json" "$SEQ" >"$TMP/kernels.txt" <<'PY' || fail "cannot read the tune's export"
import json, re, sys
entries = json.load(open(sys.argv[1]))["entries"]
seq_arg = sys.argv[2]
seen = []
for e in entries:
    uri = e["kernel"]
    # What the tune would time: compiled, not pruned (infeasible) or failed to compile.
    if e["disposition"] == "not-timed" and "_wgmma_" in uri and uri not in seen:
        seen.append(uri)
for uri in seen:
    m = re.match(r"ring_fwd_wgmma_(bf16|fp16)_hd(\d+)_(causal|full)((?:_ivl)?)((?:_cap)?)_gqa(\d+)_bm\d+_bn(\d+)_c\d_s(\d)", uri)
    if not m:
        sys.exit(f"unexpected URI {uri}")
    dtype, hd, mask, ivl, cap, group, bn, stages = m.groups()
    seq = int(seq_arg) if seq_arg != "auto" else max(256, -(-2 * int(bn) * (int(stages) + 1) // 64) * 64)
    kv_heads = 1 if int(group) >= 8 else 2  # the emulator's time grows with the query heads
    shape = {"q_heads": kv_heads * int(group), "kv_heads": kv_heads, "head_dim": int(hd), "seq_len": seq, "cp_size": 2,
             "dtype": dtype, "causal": mask == "causal", "scheme": "zigzag"}
    if ivl:
        shape["window"] = {"left": 96, "right": 0 if mask == "causal" else 32}
    if cap:
        shape["softcap"] = 30
    print(uri, json.dumps(shape, separators=(",", ":")))
PY
total=$(wc -l <"$TMP/kernels.txt")
echo "wgmma_tune_candidates_emulated: $total distinct wgmma kernels among the candidates" >&2
pass=0 failed=0
rows=()
# The report is rewritten after every kernel, so a run stopped early (a time limit) keeps the
# kernels that finished.
write_report() {
  {
    echo "# Every wgmma kernel of the forward tune's candidates, in the CUDA emulator ($(date -u +%Y-%m-%d))"
    echo
    echo "Commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD -- templates generator tuner 2>/dev/null || echo ' with uncommitted template, generator or tuner changes'); $(nproc) CPU cores; $(( $(date +%s) - start )) s."
    echo "Candidates: \`cpgen tune --arch sm_90a --only fwd --max-candidates $CANDIDATES\` without a GPU over"
    echo "$(for f in "${shapes[@]}"; do printf '`%s` ' "$(realpath --relative-to="$ROOT" "$f")"; done)(compile only; its"
    echo "export names them). Each distinct wgmma kernel then ran \`cpgen verify --shape SHAPE --random --seed 7"
    echo "--backend emulated --spec URI\` on a problem of its kind (2 kv heads, 1 from GQA 8 up; zigzag ring of 2; SEQ=$SEQ tokens:"
    echo "auto is 2 x BLOCK_N x (stages + 1) rounded up to 64, at least 256, so each stage is reused):"
    echo "out and lse from the kernel, the gradients from the mma.sync backward, all within 2e-2 of float64"
    echo "on sampled rows, the emulator's sanitizer on."
    echo
    if [ $((pass + failed)) -lt "$total" ]; then
      echo "**Stopped after $((pass + failed)) of $total kernels: $pass passed, $failed failed.**"
    else
      echo "**$pass of $total passed, $failed failed.**"
    fi
    echo
    echo "| kernel | problem | verdict | errors | seconds |"
    echo "|---|---|---|---|---|"
    [ ${#rows[@]} -eq 0 ] || printf '%s\n' "${rows[@]}"
    echo
    echo "Command: \`$(realpath --relative-to="$ROOT" "$0")$(for f in "${shapes[@]}"; do printf ' %s' "$(realpath --relative-to="$ROOT" "$f")"; done)\` (SEQ=$SEQ CANDIDATES=$CANDIDATES)"
  } >"$REPORT"
}
while read -r uri shape; do
  t0=$(date +%s)
  out=$("$CPGEN" verify --shape "$shape" --random --seed 7 --backend emulated --spec "$uri" 2>&1)
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  errors=$(echo "$out" | awk '/relative Frobenius|max abs/ {printf "%s %s ", $1, $4}')
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); verdict=pass
  else failed=$((failed + 1)); verdict="FAIL: $(echo "$out" | grep -v '^ *$' | tail -1 | cut -c1-160)"; fi
  rows+=("| $uri | \`$shape\` | $verdict | $errors | $secs |")
  echo "$uri: $verdict (${secs} s)" >&2
  write_report
done <"$TMP/kernels.txt"
write_report
echo "wgmma_tune_candidates_emulated: $pass of $total passed; wrote $REPORT" >&2
[ $failed -eq 0 ]
