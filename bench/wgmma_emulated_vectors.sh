#!/usr/bin/env bash
# Issue 13's CPU acceptance, by hand (not a test: it compiles one emulated kernel per distinct
# shape and mask, minutes on a cold store): every vectors file of the project's set and of
# ../shared/vectors (formats 1 and 2) through the sm_90a wgmma family, run by the CUDA emulator
# with its sanitizer, on zigzag rings of 2 and 4 in bf16 and fp16. Each run is
#
#   cpgen verify --vectors F --backend emulated --spec wgmma --dtype D --scheme zigzag --ranks N
#
# (`--spec wgmma`: the family's default tiles for the file's shape with its mask's flags), and
# passes when out and lse are within 2e-2 (and the gradients, which the mma.sync backward
# computes, where the file has them). Format-1 files whose length zigzag cannot split over N are
# skipped and listed; format-2 files run with unequal shards.
#
#   bench/wgmma_emulated_vectors.sh                # writes bench/results/<date>-wgmma-emulated-vectors.md
#   CPGEN=build/cpgen bench/wgmma_emulated_vectors.sh REPORT.md
#   SPEC=wgmma-pingpong bench/wgmma_emulated_vectors.sh   # the ping-pong schedule of the same tiles
#                                                          # (<date>-wgmma-pingpong-emulated-vectors.md)
#   SPEC=wgmma-persistent bench/wgmma_emulated_vectors.sh # their persistent launch (the emulator
#                                                          # launches 3 CTAs, each looping over blocks)
#   APPROX=mixed bench/wgmma_emulated_vectors.sh          # every .approx instruction at an edge of
#                                                          # the PTX ISA's bound (verify --approx:
#                                                          # high, low or mixed; <date>-wgmma-emulated-
#                                                          # vectors-approx-mixed.md)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CPGEN=${CPGEN:-$ROOT/build/cpgen}
SPEC=${SPEC:-wgmma}
case "$SPEC" in wgmma|wgmma-pingpong|wgmma-persistent) ;; *) echo "wgmma_emulated_vectors: SPEC is wgmma, wgmma-pingpong or wgmma-persistent, got '$SPEC'" >&2; exit 2 ;; esac
APPROX=${APPROX:-}
case "$APPROX" in ''|high|low|mixed) ;; *) echo "wgmma_emulated_vectors: APPROX is high, low or mixed, got '$APPROX'" >&2; exit 2 ;; esac
approx_args=() approx_name=""
[ -n "$APPROX" ] && approx_args=(--approx "$APPROX") && approx_name="-approx-$APPROX"
REPORT=${1:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-$SPEC-emulated-vectors$approx_name.md}
[ -x "$CPGEN" ] || { echo "wgmma_emulated_vectors: $CPGEN is not built" >&2; exit 2; }
files=()
for dir in "$ROOT/tests/data/vectors" "$ROOT/../shared/vectors"; do
  [ -d "$dir" ] || continue
  for f in "$dir"/*.json "$dir"/v2/*.json; do
    case "$(basename "$f")" in partitions.json) continue ;; esac
    [ -f "$f" ] && files+=("$f")
  done
done
pass=0 fail=0 skip=0
rows=()
start=$(date +%s)
for f in "${files[@]}"; do
  name=$(realpath --relative-to="$ROOT" "$f")
  for dtype in bf16 fp16; do
    for n in 2 4; do
      out=$("$CPGEN" verify --vectors "$f" --backend emulated --spec "$SPEC" --dtype "$dtype" --scheme zigzag --ranks "$n" "${approx_args[@]}" 2>&1)
      rc=$?
      kernel=$(echo "$out" | grep -o 'ring_fwd_wgmma_[a-z0-9_]*' | head -1)
      if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); verdict=pass
      elif echo "$out" | grep -q "divisible by"; then
        skip=$((skip + 1)); verdict="skipped: $(echo "$out" | tail -1 | cut -c1-90)"
      else
        fail=$((fail + 1)); verdict="FAIL: $(echo "$out" | tail -1 | cut -c1-120)"
      fi
      errors=$(echo "$out" | awk '/relative Frobenius|max abs/ {printf "%s %s ", $1, $4}')
      rows+=("| $name | $dtype | $n | ${kernel:--} | $verdict | $errors |")
      echo "$name $dtype N=$n: $verdict" >&2
    done
  done
done
secs=$(( $(date +%s) - start ))
{
  echo "# The wgmma family (--spec $SPEC) on the reference vectors, in the CUDA emulator ($(date -u +%Y-%m-%d))"
  echo
  echo "Issue 13's CPU acceptance: every file of the project's vectors and of ../shared/vectors, formats"
  echo "1 and 2, through \`cpgen verify --backend emulated --spec $SPEC\` (the family's default tiles"
  echo "with the file's mask flags, sm_90a; wgmma-pingpong: in the ping-pong schedule), zigzag rings of"
  echo "2 and 4, bf16 and fp16; limit 2e-2."
  echo "The emulator's sanitizer is on for every launch (a finding fails the run; README, Emulated"
  echo "backend: bounds, alignment, shared races, reads of shared or global memory nothing wrote). dq, dk, dv come from the"
  echo "mma.sync backward kernels (the family is forward only) fed by the wgmma forward's out and lse."
  echo "CPU only: no GPU ran this."
  case "$APPROX" in
    high|low) echo "Every .approx instruction (ex2, rcp) at the $APPROX edge of the PTX ISA's error bound (\`--approx $APPROX\`)." ;;
    mixed) echo "Every .approx instruction (ex2, rcp) at one edge of the PTX ISA's error bound or the other, by its input (\`--approx mixed\`)." ;;
  esac
  echo
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD)"
  echo "- passed $pass, failed $fail, skipped $skip (zigzag cannot split a format-1 length), $secs s"
  echo "- command: \`SPEC=$SPEC${APPROX:+ APPROX=$APPROX} bench/wgmma_emulated_vectors.sh\`; each row is"
  echo "  \`cpgen verify --vectors FILE --backend emulated --spec $SPEC --dtype D --scheme zigzag --ranks N${APPROX:+ --approx $APPROX}\`"
  echo
  echo "| file | dtype | N | kernel | verdict | errors |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$REPORT"
echo "wgmma_emulated_vectors: $pass passed, $fail failed, $skip skipped; wrote $REPORT" >&2
[ $fail -eq 0 ]
