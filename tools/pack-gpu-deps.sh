#!/usr/bin/env bash
# Packs the build dependencies that a GPU machine without Debian -dev packages lacks into
# .gpudeps/ (ignored by git), for carrying along to it: nlohmann-json and CLI11 (header-only),
# GoogleTest (headers, static libraries, CMake config), SQLite (header and shared library).
# Files keep their /usr-relative layout so the CMake package configs resolve as installed.
# An independent vector set (VECTORS, default ../shared/vectors when it exists) goes along as
# .gpudeps/vectors.tar.xz: 60 MB of JSON are 19 MB compressed, and the device tool carries 64 MiB
# in all; tools/gpu-check.sh unpacks it into its build folder.
# The sm_90a kernels a device call loads go along as .gpudeps/kernels.tar.xz (about 2 MB): every
# default (`cpgen compile --defaults`) and the tune candidates of examples/shapes (`cpgen tune`
# without a GPU compiles them only, TUNE_CANDIDATES per workload as gpu-check's tune phase asks),
# compiled here into a fresh store by the cpgen of CPGEN_BUILD (default build/; about 4 minutes
# on 2 cores). gpu-check unpacks them into its kernel store: under the same NVRTC the GPU machine
# finds them and compiles only the rest, minutes of device time otherwise spent in NVRTC. Made
# from the templates as they are now: after a template change, pack again. --no-kernels leaves
# them out. AB_REV=REV[,REV...] adds the kernels gpu-check --ab with the same list times from
# each REV's templates (the wgmma plain and persistent launches at head dim 128, GQA 1, the ring
# target's GQA 4 kernel, and the three backward kernels its row times too, as cpgen bench runs
# the backward: 12 per REV), compiled with CPGEN_TEMPLATES_DIR holding them
# (tools/templates-at.sh), so that the A/B compiles nothing on the GPU either; and it copies each
# REV's templates into .gpudeps/templates-ab/<commit>, which stand in for git on a machine whose
# copy of the tree lacks the history (tools/templates-at.sh).
#
# The cpgen that compiles is built first (cmake --build): one left from before a template change
# would pack kernels under keys the GPU machine never asks for. The pack is made beside DEST and
# replaces it only when whole: a step that fails leaves the old pack as it was.
#
#   tools/pack-gpu-deps.sh [--no-kernels] [DEST [VECTORS]]   # on the dev machine
#   tools/gpu-check.sh --deps .gpudeps        # on the GPU machine (the default when .gpudeps exists)
#
# Nothing is vendored into the repository: the folder is rebuilt from the packages each time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KERNELS=1
[ "${1:-}" = --no-kernels ] && { KERNELS=0; shift; }
FINAL=${1:-$ROOT/.gpudeps}
FINAL=${FINAL%/}  # ".gpudeps/" as a shell completes it: the new pack goes beside it, not into it
DEST=$FINAL.new
rm -rf "$DEST"
mkdir -p "$DEST"
trap 'rm -rf "$DEST"' EXIT
for pkg in nlohmann-json3-dev libcli11-dev libgtest-dev libsqlite3-dev libsqlite3-0; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    echo "pack-gpu-deps: $pkg is not installed here (tools/setup.sh installs it)" >&2
    exit 1
  fi
  dpkg -L "$pkg" | while read -r f; do
    case "$f" in */doc/*|*/man/*|*/lintian/*) continue ;; esac
    if [ -f "$f" ] || [ -L "$f" ]; then
      mkdir -p "$DEST$(dirname "$f")"
      cp -a "$f" "$DEST$f"
    fi
  done
done
# The static SQLite archive is not built for shared libraries; link the shared one.
rm -f "$DEST"/usr/lib/*/libsqlite3.a
echo "$(dpkg-query -W -f='${Package} ${Version}\n' nlohmann-json3-dev libcli11-dev libgtest-dev libsqlite3-dev)" \
  >"$DEST/PACKAGES"
VECTORS=${2:-$ROOT/../shared/vectors}
if [ -f "$VECTORS/partitions.json" ]; then
  tar -C "$VECTORS" -cJf "$DEST/vectors.tar.xz" .
  echo "pack-gpu-deps: vectors from $VECTORS" >&2
else
  echo "pack-gpu-deps: no vector set at $VECTORS (the GPU tests will use tests/data/vectors only)" >&2
fi
BUILD_DIR=${CPGEN_BUILD:-$ROOT/build}
CPGEN=$BUILD_DIR/cpgen
TUNE_CANDIDATES=${TUNE_CANDIDATES:-24}
if [ $KERNELS = 1 ]; then
  # The templates are built into cpgen: it must be this tree's.
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] || ! cmake --build "$BUILD_DIR" --target cpgen -j "$(nproc)" >/dev/null; then
    echo "pack-gpu-deps: cannot build $CPGEN (tools/test.sh configures build/; CPGEN_BUILD names another build; --no-kernels packs without kernels)" >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work" "$DEST"' EXIT
  # AB_REV's templates first: a commit refused (tools/templates-at.sh says why) stops the pack
  # before minutes of compiling.
  revs=()
  [ -n "${AB_REV:-}" ] && IFS=, read -r -a revs <<<"$AB_REV"
  for i in "${!revs[@]}"; do
    "$ROOT/tools/templates-at.sh" "${revs[$i]}" "$work/ab-$i" >/dev/null ||
      { echo "pack-gpu-deps: AB_REV: ${revs[$i]} refused" >&2; exit 1; }
    mkdir -p "$DEST/templates-ab"
    cp -a "$work/ab-$i" "$DEST/templates-ab/$(cat "$work/ab-$i/.rev")"
  done
  start=$(date +%s)
  # CUDA_VISIBLE_DEVICES empty: compile only, even on a machine with a GPU.
  CUDA_VISIBLE_DEVICES= "$CPGEN" compile --defaults --arch sm_90a --store "$work/store" >"$work/compile.log" 2>&1 ||
    { echo "pack-gpu-deps: cpgen compile --defaults failed:" >&2; tail -5 "$work/compile.log" >&2; exit 1; }
  for f in "$ROOT"/examples/shapes/*.json; do
    CUDA_VISIBLE_DEVICES= "$CPGEN" tune --shapes "$f" --arch sm_90a --max-candidates "$TUNE_CANDIDATES" \
      --db "$work/tune.db" --store "$work/store" -q >>"$work/tune.log" 2>&1 ||
      { echo "pack-gpu-deps: cpgen tune (compile only) failed on $f:" >&2; tail -5 "$work/tune.log" >&2; exit 1; }
  done
  ab=""
  if [ ${#revs[@]} -gt 0 ]; then
    for i in "${!revs[@]}"; do
      rev=${revs[$i]}
      for spec in ring_fwd_wgmma_{bf16,fp16}_hd128_{causal,full}_gqa1_bm128_bn128_c2_s2{,_persistent} \
                  ring_fwd_wgmma_bf16_hd128_causal_gqa4_bm128_bn128_c2_s2 \
                  ring_bwd_bf16_hd128_causal_gqa4_bm64_bn64_w8_s2 ring_bwd_{pre,cvt}_bf16_hd128_w4; do
        CUDA_VISIBLE_DEVICES= CPGEN_TEMPLATES_DIR="$work/ab-$i" "$CPGEN" compile --spec "$spec" --arch sm_90a \
          --store "$work/store" >>"$work/ab.log" 2>&1 ||
          { echo "pack-gpu-deps: AB_REV: $rev: $spec failed:" >&2; tail -5 "$work/ab.log" >&2; exit 1; }
      done
    done
    ab=", and the 12 kernels gpu-check --ab $AB_REV times from each of those commits' templates (9 forward, 3 backward; the templates in templates-ab/)"
  fi
  # Root-owned and writable by the owner only: the store loads only entries this user or root owns
  # that no one else may write (kernel_store.cpp, trusted_entry), whoever unpacks them.
  count=$(find "$work/store" -maxdepth 1 -name '*.cpgenk' | wc -l)
  (cd "$work/store" && find . -maxdepth 1 -name '*.cpgenk' -print0 | tar --null -T - --owner=0 --group=0 --mode=go-w -cJf "$DEST/kernels.tar.xz")
  nvrtc=$("$CPGEN" compile --spec ring_fwd_fp16_hd64_full_gqa1_bm64_bn64_w4_s2 --arch sm_90a --store "$work/store" --json |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["nvrtc"])' 2>/dev/null || echo unknown)
  echo "packed at commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD -- templates generator 2>/dev/null || echo ' with template or generator changes'), NVRTC $nvrtc: $count sm_90a kernels, every default and $TUNE_CANDIDATES tune candidates per workload of examples/shapes$ab" \
    >"$DEST/KERNELS"
  echo "pack-gpu-deps: $count kernels in $(( $(date +%s) - start )) s ($(du -h "$DEST/kernels.tar.xz" | cut -f1) packed)" >&2
fi
rm -rf "$FINAL"
mv "$DEST" "$FINAL"
trap - EXIT
[ -n "${work:-}" ] && rm -rf "$work"
echo "pack-gpu-deps: $(du -sh "$FINAL" | cut -f1) in $FINAL" >&2
