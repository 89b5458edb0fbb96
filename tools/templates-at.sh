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
#
# Where git does not know REV (a copy of the tree without its history, as a device machine may
# get), a packed copy stands in: the folder $CPGEN_AB_TEMPLATES/<REV's full commit> (default
# .gpudeps/templates-ab, which tools/pack-gpu-deps.sh AB_REV= writes), REV a unique prefix of it.
#
#   tools/templates-at.sh --resolve REV    # prints REV's full commit (git's, else a packed one's)
#
# Exit 0 written (or kept); 2 a bad REV or DIR, or params that differ.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACKED=${CPGEN_AB_TEMPLATES:-$ROOT/.gpudeps/templates-ab}
fail() { echo "templates-at: $*" >&2; exit 2; }
# resolve REV: sets COMMIT (full) and SOURCE (git or packed), or fails naming both places looked in.
resolve() {
  local rev=$1 matches=()
  if COMMIT=$(git -C "$ROOT" rev-parse --verify -q "$rev^{commit}" 2>/dev/null); then SOURCE=git; return; fi
  if [[ "$rev" =~ ^[0-9a-fA-F]{4,40}$ ]] && [ -d "$PACKED" ]; then
    mapfile -t matches < <(find "$PACKED" -mindepth 1 -maxdepth 1 -type d -name "${rev,,}*" 2>/dev/null)
  fi
  [ ${#matches[@]} = 1 ] ||
    fail "'$rev': not a commit of this checkout$([ ${#matches[@]} -gt 1 ] && echo ", and more than one packed copy in $PACKED starts so" || echo ", nor a packed copy in $PACKED")"
  COMMIT=$(basename "${matches[0]}") SOURCE=packed
}
if [ "${1:-}" = --resolve ]; then
  [ $# = 2 ] || fail "usage: tools/templates-at.sh --resolve REV"
  resolve "$2"
  echo "$COMMIT"
  exit 0
fi
[ $# = 2 ] || fail "usage: tools/templates-at.sh REV DIR"
REV=$1 DIR=$2
[ -n "$DIR" ] || fail "DIR is empty"
resolve "$REV"
commit=$COMMIT
# REV's params*.cuh (the file at a path of templates/, from git or the packed copy).
rev_file() {
  if [ "$SOURCE" = git ]; then git -C "$ROOT" show "$commit:$1" 2>/dev/null; else cat "$PACKED/$commit/${1#templates/}" 2>/dev/null; fi
}
rev_params() {
  if [ "$SOURCE" = git ]; then git -C "$ROOT" ls-tree --name-only "$commit" templates/ | grep '/params.*\.cuh$'
  else find "$PACKED/$commit" -maxdepth 1 -name 'params*.cuh' -printf 'templates/%f\n'; fi
}
for f in $(rev_params; ls "$ROOT"/templates/params*.cuh | sed "s|^$ROOT/||"); do
  # The tree's file against REV's (a file only one side has differs too).
  if ! rev_file "$f" | cmp -s - "$ROOT/$f"; then
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
if [ "$SOURCE" = packed ]; then
  if ! cp -a "$PACKED/$commit/." "$DIR/"; then
    rm -rf "$DIR"
    fail "'$REV': cannot copy its packed templates from $PACKED/$commit"
  fi
elif ! git -C "$ROOT" archive "$commit" templates | tar -x -C "$DIR" --strip-components=1; then
  rm -rf "$DIR"
  fail "'$REV': cannot extract its templates"
fi
echo "$commit" >"$DIR/.rev"
cd "$DIR" && pwd
