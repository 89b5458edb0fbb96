#!/usr/bin/env bash
# One command for a GPU machine: build cpgen in its own build folder, run the whole test suite
# (the GPU tests run there instead of skipping), run the ring benchmark, and write a report
# bench/results/<date>-<gpu>-gpu-check.md with every command it ran.
#
#   tools/gpu-check.sh [--deps DIR] [--build-dir DIR] [--report FILE] [--skip-tests] [--skip-bench]
#                      [--skip-sanitize]
#
# After the tests, tools/gpu-sanitize.sh runs compute-sanitizer's tools over the kernel tests.
#
# The GPU machines have nvcc, CMake, PyTorch and the nvidia-nccl Python package but maybe none of
# the Debian -dev packages, and no network. Choice: vendor nothing in the repository; use what the
# machine has, and where a -dev package is missing use a carried prefix made on the dev machine by
# tools/pack-gpu-deps.sh (.gpudeps/, about 5 MB: nlohmann-json, CLI11, GoogleTest, SQLite header
# and library). With no GoogleTest anywhere the library, the CLI and the benchmark are still built
# and run and the report says the tests were skipped; a missing nlohmann-json, CLI11 or SQLite
# header (neither here nor carried) stops the build, and the report names what is missing.
# NCCL comes from the nvidia-nccl Python package (cmake/FindNCCL.cmake finds it).
#
# From a dev machine through the device tool: run tools/pack-gpu-deps.sh here once, then
#   run(command="tools/gpu-check.sh", carry=[".gpudeps"])
# the report and a tarball of every log come back under $OUT. The tests always read the in-repo
# vectors (tests/data/vectors); an independent set is added from $CPGEN_VECTORS_DIR, else
# ../shared/vectors, else shared/vectors or .vectors in the checkout (the device tool carries
# only the checkout: copy one into .vectors and carry it).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
DEPS=""
REPORT=""
RUN_TESTS=1
RUN_BENCH=1
RUN_SANITIZE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) DEPS=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --report) REPORT=$2; shift 2 ;;
    --skip-tests) RUN_TESTS=0; shift ;;
    --skip-bench) RUN_BENCH=0; shift ;;
    --skip-sanitize) RUN_SANITIZE=0; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -z "$DEPS" ] && [ -d "$ROOT/.gpudeps" ] && DEPS=$ROOT/.gpudeps
if [ -z "${CPGEN_VECTORS_DIR:-}" ]; then
  for d in "$ROOT/../shared/vectors" "$ROOT/shared/vectors" "$ROOT/.vectors"; do
    [ -f "$d/partitions.json" ] && export CPGEN_VECTORS_DIR=$(cd "$d" && pwd) && break
  done
fi
mkdir -p "$BUILD"
LOGS=$BUILD/gpu-check-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
COMMANDS=$LOGS/commands.txt
: >"$COMMANDS"
NOTES=()
note() { NOTES+=("$*"); echo "gpu-check: $*" >&2; }

# run NAME CMD...: runs CMD, output to $LOGS/NAME.log, records the command; returns its status.
run() {
  local name=$1
  shift
  printf '%s\n' "$*" >>"$COMMANDS"
  echo "+ $*" >&2
  "$@" >"$LOGS/$name.log" 2>&1
}

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi

# Environment.
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
GPU_TAG=$(echo "${GPU_NAME:-nogpu}" | tr ' /' '--')
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-$GPU_TAG-gpu-check.md}
mkdir -p "$(dirname "$REPORT")"
NVCC_VERSION=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo "nvcc missing")
CMAKE_VERSION=$(cmake --version 2>/dev/null | head -1)
TORCH=$(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null || echo "not importable")
NCCL_PY=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || echo "")
if [ -n "${CPGEN_VECTORS_DIR:-}" ]; then note "reference vectors: tests/data/vectors and $CPGEN_VECTORS_DIR"
else note "reference vectors: tests/data/vectors only (carry an independent set as .vectors to add it)"; fi
[ -z "$GPU_NAME" ] && note "nvidia-smi reports no GPU: the GPU tests will skip and the benchmark cannot run"

# Dependencies: the system first, then the carried prefix.
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
PREFIXES=()
find_header() {  # find_header RELPATH -> prints "system", "carried" or nothing
  local d
  for d in /usr/include /usr/local/include; do [ -f "$d/$1" ] && { echo system; return; }; done
  [ -n "$DEPS" ] && [ -f "$DEPS/usr/include/$1" ] && echo carried
}
MISSING=()
for dep in "nlohmann-json:nlohmann/json.hpp" "CLI11:CLI/CLI.hpp" "GoogleTest:gtest/gtest.h" "SQLite:sqlite3.h"; do
  name=${dep%%:*}
  where=$(find_header "${dep#*:}")
  case "$where" in
    system) note "$name: system" ;;
    carried) note "$name: carried from $DEPS"; [ ${#PREFIXES[@]} -eq 0 ] && PREFIXES+=("$DEPS/usr") ;;
    *) note "$name: MISSING (not installed, and not in a carried prefix; run tools/pack-gpu-deps.sh on the dev machine and carry .gpudeps)"; MISSING+=("$name") ;;
  esac
  if [ "$name" = SQLite ] && [ "$where" = carried ]; then
    # Prefer the machine's own libsqlite3 (Python's sqlite3 module uses it) over the carried one.
    syslib=$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*libsqlite3\.so\.0$' | head -1)
    lib=${syslib:-$(ls "$DEPS"/usr/lib/*/libsqlite3.so.0 2>/dev/null | head -1)}
    CMAKE_ARGS+=(-DSQLite3_INCLUDE_DIR="$DEPS/usr/include" -DSQLite3_LIBRARY="$lib")
    note "SQLite library: $lib"
  fi
done
[ ${#PREFIXES[@]} -gt 0 ] && CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$DEPS/usr;$(ls -d "$DEPS"/usr/lib/*/cmake 2>/dev/null | head -1)")
TESTS_BUILT=1
if printf '%s\n' "${MISSING[@]}" | grep -qx GoogleTest; then
  CMAKE_ARGS+=(-DCPGEN_BUILD_TESTS=OFF)
  TESTS_BUILT=0
  note "tests SKIPPED: GoogleTest is missing; the library, CLI and benchmark are still built"
fi
BUILD_OK=0
if printf '%s\n' "${MISSING[@]}" | grep -qxE 'nlohmann-json|CLI11|SQLite'; then
  note "build SKIPPED: a required dependency is missing (${MISSING[*]})"
else
  if run configure cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}" &&
     run build cmake --build "$BUILD" -j "$(nproc)"; then
    BUILD_OK=1
  else
    note "build FAILED (see the log excerpt below)"
  fi
fi

TEST_SUMMARY="not run"
if [ $BUILD_OK = 1 ] && [ $TESTS_BUILT = 1 ] && [ $RUN_TESTS = 1 ]; then
  # Everything but the multi-process NCCL tests in parallel; those alone, since they share the GPU
  # and the loopback interface.
  (cd "$BUILD" && CPGEN_FULL_COMPILE_MATRIX=1 run ctest ctest --output-on-failure -j 8 -E '^Nccl' --timeout 600)
  (cd "$BUILD" && run ctest_nccl ctest --output-on-failure -R '^Nccl' --timeout 600)
  TEST_SUMMARY=$(grep -h "tests passed" "$LOGS/ctest.log" "$LOGS/ctest_nccl.log" 2>/dev/null | tr '\n' ';')
fi

SANITIZE_SUMMARY="not run"
if [ $BUILD_OK = 1 ] && [ $TESTS_BUILT = 1 ] && [ $RUN_SANITIZE = 1 ] && [ -n "$GPU_NAME" ]; then
  printf '%s\n' "tools/gpu-sanitize.sh --build-dir $BUILD --logs $LOGS/sanitize" >>"$COMMANDS"
  if "$ROOT/tools/gpu-sanitize.sh" --build-dir "$BUILD" --logs "$LOGS/sanitize" >"$LOGS/sanitize.log" 2>&1; then
    SANITIZE_SUMMARY="clean"
  else
    SANITIZE_SUMMARY="FINDINGS or failures (below)"
  fi
fi

BENCH_VERDICT="not run"
BENCH_REPORT=$LOGS/ring-overhead.md
if [ $BUILD_OK = 1 ] && [ $RUN_BENCH = 1 ] && [ -n "$GPU_NAME" ]; then
  printf '%s\n' "CPGEN=$BUILD/cpgen bench/ring_overhead.sh $BENCH_REPORT" >>"$COMMANDS"
  if CPGEN=$BUILD/cpgen "$ROOT/bench/ring_overhead.sh" "$BENCH_REPORT" >"$LOGS/bench.log" 2>&1; then :; fi
  BENCH_VERDICT=$(grep -v '^+' "$LOGS/bench.log" | grep -E 'target|failed' | head -3 | tr '\n' ' ')
fi

{
  echo "# gpu-check on ${GPU_NAME:-no GPU} ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- GPU: ${GPU_NAME:-none}, driver ${DRIVER:-none}; nvcc $NVCC_VERSION; $CMAKE_VERSION"
  echo "- PyTorch: $TORCH; NCCL package: ${NCCL_PY:-not found}"
  echo "- build: $([ $BUILD_OK = 1 ] && echo ok || echo 'FAILED or skipped')"
  echo "- tests: $TEST_SUMMARY"
  echo "- compute-sanitizer: $SANITIZE_SUMMARY"
  echo "- benchmark: $BENCH_VERDICT"
  echo
  echo "## Notes"
  for n in "${NOTES[@]}"; do echo "- $n"; done
  grep -h "NCCL" "$LOGS/configure.log" 2>/dev/null | sed 's/^/- configure: /'
  echo
  echo "## Commands"
  echo
  sed 's/^/    /' "$COMMANDS"
  if [ $BUILD_OK = 0 ] && [ -f "$LOGS/build.log" ]; then
    echo; echo "## Build errors (first 30) and the log's last 15 lines"; echo
    grep -E "error|Error|No rule" "$LOGS/build.log" | head -30 | sed 's/^/    /'
    echo "    ..."
    tail -15 "$LOGS/build.log" | sed 's/^/    /'
  fi
  for t in ctest ctest_nccl; do
    if [ -f "$LOGS/$t.log" ]; then
      echo; echo "## $t: failures and skips"; echo
      # ctest's closing summary: the pass count, then one line per failed or skipped test.
      grep -E "tests passed|Total Test time|^[[:space:]]+[0-9]+ - " "$LOGS/$t.log" | head -80 | sed 's/^/    /'
    fi
  done
  if [ -f "$LOGS/sanitize.log" ]; then
    echo; echo "## compute-sanitizer"; echo
    grep -v '^+' "$LOGS/sanitize.log" | sed 's/^/    /'
  fi
  if [ -f "$BENCH_REPORT" ]; then echo; echo "## Benchmark"; echo; sed 's/^# /### /' "$BENCH_REPORT"; fi
} >"$REPORT"
echo "gpu-check: wrote $REPORT" >&2
# The device tool brings back files written under $OUT.
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$REPORT" "$OUT/" 2>/dev/null
  tar -C "$LOGS" -czf "$OUT/gpu-check-logs.tar.gz" . 2>/dev/null
fi
[ $BUILD_OK = 1 ] || exit 1
if grep -qhE '(^|[^0-9])[1-9][0-9]* tests failed out of' "$LOGS"/ctest*.log 2>/dev/null; then exit 1; fi
exit 0
