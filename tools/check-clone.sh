#!/usr/bin/env bash
# Usage: tools/check-clone.sh [WORK_DIR]
# The new-user walk-through, end to end: clone this commit into an empty folder (nothing beside
# it), run the README's `tools/run.sh --help` and `tools/test.sh` there, install the build to a
# prefix, delete the clone and its build, and check that the installed cpgen still selects a
# cache placed in <prefix>/share/cpgen/caches. Takes a full build and test run (7-14 minutes on two
# cores with a warm ccache: CMAKE_CXX_COMPILER_LAUNCHER=ccache in the environment). WORK_DIR (default: a new temporary folder) must be empty or absent; it is kept on
# failure for a look and removed on success. Exit 0 when every step passed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -ge 1 ]; then
  WORK=$1
else
  # mktemp makes the folder 0700; opened to others (like a clone in a home folder or /work) so
  # the test that runs cpgen as `nobody` (CmdDb...AsNonRoot) runs here instead of skipping.
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/cpgen-clone-XXXXXX")
  chmod 755 "$WORK"
fi
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
if [ -n "$(ls -A "$WORK")" ]; then
  echo "check-clone: $WORK is not empty; give an empty or new folder" >&2
  exit 2
fi
step() { echo "check-clone: $*" >&2; }
fail() { echo "check-clone: FAILED: $* (files kept in $WORK)" >&2; exit 1; }

COMMIT=$(git -C "$ROOT" rev-parse HEAD)
[ -z "$(git -C "$ROOT" status --porcelain)" ] || step "note: uncommitted changes in $ROOT are not part of the check"
step "cloning $COMMIT into $WORK/cpgen"
git clone -q --no-checkout "$ROOT" "$WORK/cpgen"
git -C "$WORK/cpgen" checkout -q "$COMMIT"
[ ! -e "$WORK/shared" ] || fail "$WORK/shared exists"

cd "$WORK/cpgen"
step "tools/run.sh --help"
tools/run.sh --help >"$WORK/run-help.txt" 2>"$WORK/run-help.err" || fail "tools/run.sh --help (see $WORK/run-help.err)"
grep -q "explain" "$WORK/run-help.txt" || fail "tools/run.sh --help does not list the commands"
step "tools/test.sh (the whole suite)"
env -u CPGEN_VECTORS_DIR tools/test.sh >"$WORK/test.txt" 2>&1 || fail "tools/test.sh (see $WORK/test.txt)"
grep -E "tests passed|Total Test time" "$WORK/test.txt" >&2 || true

PREFIX="$WORK/prefix"
step "installing to $PREFIX, then deleting the clone and its build"
cmake --install "$WORK/cpgen/build" --prefix "$PREFIX" >"$WORK/install.txt" 2>&1 || fail "cmake --install"
cd "$WORK"
rm -rf "$WORK/cpgen"
KERNEL=ring_fwd_bf16_hd128_causal_gqa4_bm64_bn64_w4_s2
cat >"$PREFIX/share/cpgen/caches/00-site.json" <<JSON
{"format": "cpgen-tuning-cache", "version": 1, "entries": [
  {"kernel": "$KERNEL", "source": "default-heuristic", "disposition": "not-timed",
   "workload": {"dtype": "bf16", "head_dim": 128, "causal": true, "gqa_group": 4}}]}
JSON
SHAPE='{"name": "s", "batch": 1, "q_heads": 8, "kv_heads": 2, "head_dim": 128, "seq_len": 8192, "cp_size": 2, "dtype": "bf16", "causal": true}'
env -u CPGEN_CACHES_DIR "$PREFIX/bin/cpgen" explain --arch sm_90 --db "$WORK/absent.db" --shape "$SHAPE" \
  >"$WORK/explain.txt" 2>&1 || fail "installed cpgen explain (see $WORK/explain.txt)"
cat "$WORK/explain.txt" >&2
grep -q "pretuned caches searched: $PREFIX/share/cpgen/caches" "$WORK/explain.txt" || fail "explain did not search $PREFIX/share/cpgen/caches"
grep -q "$KERNEL" "$WORK/explain.txt" || fail "explain did not select $KERNEL from the prefix's cache"
step "ok: clone, build, tests, relocated install"
rm -rf "$WORK"
