#!/usr/bin/env bash
# compute-sanitizer over the GPU tests that launch cpgen's kernels (issue 14 point 2): memcheck,
# racecheck, synccheck and initcheck, each over the step-kernel tests (forward, backward, the
# harness) and the loopback ring tests. Needs a GPU and a build with tests (tools/gpu-check.sh
# makes build-gpu/); writes one summary line per tool and filter, and the whole output to LOGDIR.
#
#   tools/gpu-sanitize.sh [--build-dir DIR] [--logs DIR] [--tools memcheck,racecheck,...] [--filter F]
#                         [--run-limit SECONDS]
#
# Exit 0 only when every run printed "ERROR SUMMARY: 0 errors" and its tests passed. The tests
# themselves are small problems; racecheck multiplies their run time most (shared-memory
# tracking per access), so it gets the step-kernel tests and the wgmma ring test only unless
# --filter says otherwise. Each run is stopped after --run-limit seconds (default 300; 0: never),
# so a kernel that never finishes under a tool costs one run, not the whole device call.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
LOGS=""
# Racecheck last: it is the slowest (minutes for the ping-pong ring), so a run stopped by a time
# limit keeps the other three tools' lines.
TOOLS="memcheck,synccheck,initcheck,racecheck"
FILTER=""
RUN_LIMIT=300
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --tools) TOOLS=$2; shift 2 ;;
    --filter) FILTER=$2; shift 2 ;;
    --run-limit) RUN_LIMIT=$2; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "gpu-sanitize: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$RUN_LIMIT" =~ ^[0-9]+$ ]] || { echo "gpu-sanitize: --run-limit '$RUN_LIMIT': a whole number of seconds" >&2; exit 2; }
LOGS=${LOGS:-$BUILD/sanitize-logs}
mkdir -p "$LOGS"
TESTS=$BUILD/tests/cpgen_tests
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
[ -x "$TESTS" ] || { echo "gpu-sanitize: $TESTS is not built (tools/gpu-check.sh builds it)" >&2; exit 2; }
[ -n "$SAN" ] || { echo "gpu-sanitize: compute-sanitizer not found (CUDA toolkit's compute-sanitizer/)" >&2; exit 2; }

STEP_TESTS='StepFwdGpu*:StepFwdGpuRandom*:StepBwdGpu*:StepFwdHarness*'
# The ring tests, less the three that only multiply the same kernels: the two sweeps over every
# ring size, scheme and dtype (hundreds of rings each) and the 65,600-pair grid test, whose 67M-
# element tensors initcheck would track byte by byte. Each would take the run past its limit under
# a sanitizer; the tests phase runs them without one.
RING_TESTS='GpuRing.*:GpuRingBackward.*:GpuRingStreams.*:GpuRingWgmma.*-GpuRing.LoopbackMatchesVectorsForEveryRingSizeSchemeAndDtype:GpuRingBackward.LoopbackMatchesVectorGradientsForEveryRingSizeSchemeAndDtype:GpuRingStreams.BatchTimesKvHeadsAbove65535'
# The sm_90a family's GPU tests run its kernels (TMA, mbarriers, wgmma; the ping-pong variant
# also its CTA barriers 1 and 2) on the format-1 vectors; racecheck gets those too, since its
# shared-memory ring is where a race would be (synccheck covers the barriers with RING_TESTS).
# Two runs, the plain kernels first: a call stopped by its time budget keeps the finished lines.
WGMMA_RACE_TESTS='GpuRingWgmma.LoopbackReproducesTheFormat1Vectors'
PINGPONG_RACE_TESTS='GpuRingWgmma.PingPongLoopbackReproducesTheFormat1Vectors'
status=0
IFS=',' read -r -a tool_list <<<"$TOOLS"
for tool in "${tool_list[@]}"; do
  if [ -n "$FILTER" ]; then filters=("$FILTER")
  elif [ "$tool" = racecheck ]; then filters=("$STEP_TESTS" "$WGMMA_RACE_TESTS" "$PINGPONG_RACE_TESTS")
  else filters=("$STEP_TESTS" "$RING_TESTS"); fi
  run_index=0
  for f in "${filters[@]}"; do
    # The run's number keeps filters that begin alike (the two wgmma runs) in separate logs.
    run_index=$((run_index + 1))
    name=$tool-$run_index-$(echo "$f" | cut -c1-12 | tr -c 'A-Za-z0-9\n' '_')
    log=$LOGS/$name.log
    cmd=("$SAN" --tool "$tool" --error-exitcode 3 --print-limit 20 "$TESTS" --gtest_filter="$f")
    [ "$tool" = racecheck ] && cmd=("$SAN" --tool racecheck --racecheck-report all --error-exitcode 3 --print-limit 20 "$TESTS" --gtest_filter="$f")
    echo "+ ${cmd[*]}" >&2
    start=$(date +%s)
    timeout --kill-after=10 "$RUN_LIMIT" "${cmd[@]}" >"$log" 2>&1  # a limit of 0 is none
    rc=$?
    secs=$(( $(date +%s) - start ))
    summary=$(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$log" | tail -1)
    { [ $rc = 124 ] || [ $rc = 137 ]; } && summary="STOPPED after ${RUN_LIMIT} s (--run-limit)${summary:+; $summary}"
    tests=$(grep -hE "^\[  (PASSED|FAILED|SKIPPED) " "$log" | tr '\n' ' ')
    echo "$tool  $f  rc=$rc  ${secs}s  ${summary:-no summary}  $tests"
    if [ $rc -ne 0 ] || ! echo "$summary" | grep -qE "(^|[^0-9])0 (errors|hazards)"; then status=1; fi
  done
done
exit $status
