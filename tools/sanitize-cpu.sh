#!/usr/bin/env bash
# The CPU test suite built with AddressSanitizer and UndefinedBehaviorSanitizer, in its own build
# folder (build-asan/, or $CPGEN_BUILD_DIR): the library, the command line, the tests, and the
# emulator with the kernel templates it runs, checked for out-of-bounds and out-of-scope memory
# use, null pointers handed to the C library, signed overflow and the like. compute-sanitizer
# (tools/gpu-sanitize.sh) checks the kernels on a GPU; this checks the host side and the
# templates' index arithmetic as the emulator runs them, on any machine. Any finding stops its
# test (halt_on_error; UBSan does not recover), so a red test here is one report to read.
#
#   tools/sanitize-cpu.sh [ctest args...]      e.g. tools/sanitize-cpu.sh -R Emulated
#                                              (an -E of yours is added to the exclusions below)
#
# On 2 cores (2026-11-30): 17-25 minutes to build from nothing, 14 to run the suite. Not part of
# tools/test.sh (CI's suite must stay under 15 minutes); run it after changing host code or the
# emulator. LeakSanitizer runs too: a process that leaks reports it and exits with an error.
#
# Left out, the sanitizers' limits rather than the tests': Install.LinkDemoBuildsAgainstInstalledPackage
# (its consumer is built without the sanitizer, and an instrumented library cannot be loaded into
# it) and BenchKernelsPin.* (Python loads libcpgen through ctypes; the ASan runtime must be the
# process's first library, and preloading it into Python breaks its C++ exception interceptor).
# handle_segv=0: the emulator's fault tests expect the kernel's own signal handling, not ASan's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# ctest keeps only the last -E it is given, so a caller's exclusion joins these instead of
# replacing them.
exclude='Install\.LinkDemoBuildsAgainstInstalledPackage|BenchKernelsPin\.'
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -E|--exclude-regex)
      [ $# -ge 2 ] || { echo "sanitize-cpu: $1 needs a pattern" >&2; exit 2; }
      exclude="$exclude|$2"; shift 2 ;;
    --exclude-regex=*) exclude="$exclude|${1#*=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
export CPGEN_BUILD_DIR=${CPGEN_BUILD_DIR:-$ROOT/build-asan}
# --as-needed: the link lines of the sanitizer runtimes leave every library after them needed,
# libcuda among them, which libcpgen opens with dlopen and a machine without a driver lacks.
CPGEN_CONFIGURE_ARGS=(
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined -Wl,--as-needed"
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined -Wl,--as-needed")
source "$ROOT/tools/setup.sh"
cd "$CPGEN_BUILD_DIR"
export ASAN_OPTIONS=detect_leaks=1:handle_segv=0:halt_on_error=1:print_summary=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
exec ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" --timeout 900 -E "$exclude" ${args[@]+"${args[@]}"}
