#!/usr/bin/env bash
# compute-sanitizer over the GPU tests that launch cpgen's kernels (issue 14 point 2): memcheck,
# racecheck, synccheck and initcheck, each over the step-kernel tests (forward, backward, the
# harness) and the loopback ring tests. Needs a GPU and a build with tests (tools/gpu-check.sh
# makes build-gpu/); writes one summary line per tool and filter, and the whole output to LOGDIR.
#
#   tools/gpu-sanitize.sh [--build-dir DIR] [--logs DIR] [--tools memcheck,racecheck,...] [--filter F]
#                         [--run-limit SECONDS] [--list]
#
# --list prints the runs it would make, one "TOOL FILTER" line each, and exits (no GPU needed:
# tests/tools/gpu_check_test.cpp checks that every filter names tests that exist).
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
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --tools) TOOLS=$2; shift 2 ;;
    --filter) FILTER=$2; shift 2 ;;
    --run-limit) RUN_LIMIT=$2; shift 2 ;;
    --list) LIST=1; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "gpu-sanitize: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$RUN_LIMIT" =~ ^[0-9]+$ ]] || { echo "gpu-sanitize: --run-limit '$RUN_LIMIT': a whole number of seconds" >&2; exit 2; }
# gtest filters match whole names, and a parametrized test's name starts with its instantiation
# ('AllDefaults/StepFwdGpuRandom.OneStepAndARingMatchFloat64/bf16_hd64_causal_gqa1'): a pattern
# 'StepFwdGpuRandom*' matched none of them until 2026-11-27.
STEP_TESTS='StepFwdGpu.*:*/StepBwdGpu.*:StepFwdHarness.*'
# The step kernel on random inputs for every default (dtype, head dim, causal, group): a run of
# its own, for the tools but racecheck, so that its 32 tests do not push the step run past its limit.
RANDOM_STEP_TESTS='*/StepFwdGpuRandom.*'
# The ring tests, less the three that only multiply the same kernels: the two sweeps over every
# ring size, scheme and dtype (hundreds of rings each) and the 65,600-pair grid test, whose 67M-
# element tensors initcheck would track byte by byte. Each would take the run past its limit under
# a sanitizer; the tests phase runs them without one.
RING_TESTS='GpuRing.*:GpuRingBackward.*:GpuRingStreams.*:GpuRingWgmma.*-GpuRing.LoopbackMatchesVectorsForEveryRingSizeSchemeAndDtype:GpuRingBackward.LoopbackMatchesVectorGradientsForEveryRingSizeSchemeAndDtype:GpuRingStreams.BatchTimesKvHeadsAbove65535'
# The sm_90a family's GPU tests run its kernels (TMA, mbarriers, wgmma; the ping-pong variant
# also its CTA barriers 1 and 2) on the format-1 vectors; racecheck gets those too, since its
# shared-memory ring is where a race would be (synccheck covers the barriers with RING_TESTS).
# One run per variant, the plain kernels first: a call stopped by its time budget keeps the
# finished lines.
WGMMA_RACE_TESTS='GpuRingWgmma.LoopbackReproducesTheFormat1Vectors'
# The ping-pong ring on one vector set: over every set racecheck ran past 150 s on an H200.
PINGPONG_RACE_TESTS='GpuRingWgmma.PingPongLoopbackOnOneVectorSetOverARingOfTwo'
# The persistent launch where its CTAs run several query blocks each (the Q tile and the stage
# ring reused from one block to the next).
PERSISTENT_RACE_TESTS='GpuRingWgmma.PersistentLoopbackOnMoreQueryBlocksThanTheGpuHasSms'
filters_for() {  # TOOL: the filters it runs, into the array `filters`
  if [ -n "$FILTER" ]; then filters=("$FILTER")
  elif [ "$1" = racecheck ]; then filters=("$STEP_TESTS" "$WGMMA_RACE_TESTS" "$PINGPONG_RACE_TESTS" "$PERSISTENT_RACE_TESTS")
  else filters=("$STEP_TESTS" "$RANDOM_STEP_TESTS" "$RING_TESTS"); fi
}
IFS=',' read -r -a tool_list <<<"$TOOLS"
if [ $LIST = 1 ]; then
  for tool in "${tool_list[@]}"; do
    filters_for "$tool"
    for f in "${filters[@]}"; do echo "$tool $f"; done
  done
  exit 0
fi
LOGS=${LOGS:-$BUILD/sanitize-logs}
mkdir -p "$LOGS"
TESTS=$BUILD/tests/cpgen_tests
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
[ -x "$TESTS" ] || { echo "gpu-sanitize: $TESTS is not built (tools/gpu-check.sh builds it)" >&2; exit 2; }
[ -n "$SAN" ] || { echo "gpu-sanitize: compute-sanitizer not found (CUDA toolkit's compute-sanitizer/)" >&2; exit 2; }

status=0
for tool in "${tool_list[@]}"; do
  filters_for "$tool"
  for f in "${filters[@]}"; do
    # The filter's checksum keeps filters that begin alike (the wgmma runs) in separate logs, also
    # across invocations that share --logs; a rerun of the same tool and filter replaces its log.
    name=$tool-$(echo "$f" | cut -c1-40 | tr -c 'A-Za-z0-9\n' '_')-$(printf '%s' "$f" | cksum | cut -d' ' -f1)
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
