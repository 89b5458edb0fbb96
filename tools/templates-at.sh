#!/usr/bin/env bash
# Writes the templates/ folder of commit REV into DIR, for CPGEN_TEMPLATES_DIR: the kernels of an
# earlier commit compiled by this tree's host code, as tools/gpu-check.sh --ab times them and
# tools/pack-gpu-deps.sh (AB_REV=) packs them. Prints DIR's absolute path.
#
#   tools/templates-at.sh REV DIR
#
# The host passes the kernel its parameters as this tree's params*.cuh lay them out, so REV's
# params*.cuh must be the same files; otherwise nothing is written and the line names the file.
# DIR/.rev holds REV's full commit: a DIR that already holds REV's templates is kept as it is,
# one that holds another commit's is replaced, and a DIR that is not empty and has no .rev (not
# made here) is refused rather than emptied. The repository is only read.
# Exit 0 written (or kept); 2 a bad REV or DIR, or params that differ.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "templates-at: $*" >&2; exit 2; }
[ $# = 2 ] || fail "usage: tools/templates-at.sh REV DIR"
REV=$1 DIR=$2
[ -n "$DIR" ] || fail "DIR is empty"
commit=$(git -C "$ROOT" rev-parse --verify -q "$REV^{commit}") || fail "'$REV': not a commit of this checkout"
for f in $(git -C "$ROOT" ls-tree --name-only "$commit" templates/ | grep '/params.*\.cuh$'; ls "$ROOT"/templates/params*.cuh |
           sed "s|^$ROOT/||"); do
  # The tree's file against REV's (a file only one side has differs too).
  if ! git -C "$ROOT" show "$commit:$f" 2>/dev/null | cmp -s - "$ROOT/$f"; then
    fail "'$REV': its $f differs from this tree's, whose layout the host passes its kernels (the A/B needs the same parameters)"
  fi
done
if [ -e "$DIR" ] && [ ! -d "$DIR" ]; then fail "'$DIR' is not a folder"; fi
if [ -f "$DIR/.rev" ] && [ "$(cat "$DIR/.rev")" = "$commit" ]; then
  cd "$DIR" && pwd
  exit 0
fi
if [ -d "$DIR" ] && [ ! -f "$DIR/.rev" ] && [ -n "$(ls -A "$DIR")" ]; then
  fail "'$DIR' holds files this script did not write (no .rev): give an empty or new folder"
fi
rm -rf "$DIR" && mkdir -p "$DIR" || fail "cannot make '$DIR'"
if ! git -C "$ROOT" archive "$commit" templates | tar -x -C "$DIR" --strip-components=1; then
  rm -rf "$DIR"
  fail "'$REV': cannot extract its templates"
fi
echo "$commit" >"$DIR/.rev"
cd "$DIR" && pwd
