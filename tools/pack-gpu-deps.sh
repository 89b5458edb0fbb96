#!/usr/bin/env bash
# Packs the build dependencies that a GPU machine without Debian -dev packages lacks into
# .gpudeps/ (ignored by git), for carrying along to it: nlohmann-json and CLI11 (header-only),
# GoogleTest (headers, static libraries, CMake config), SQLite (header and shared library).
# Files keep their /usr-relative layout so the CMake package configs resolve as installed.
# An independent vector set (VECTORS, default ../shared/vectors when it exists) goes along as
# .gpudeps/vectors.tar.xz: 60 MB of JSON are 19 MB compressed, and the device tool carries 64 MiB
# in all; tools/gpu-check.sh unpacks it into its build folder.
#
#   tools/pack-gpu-deps.sh [DEST [VECTORS]]   # on a machine that has the packages (the dev machine)
#   tools/gpu-check.sh --deps .gpudeps        # on the GPU machine (the default when .gpudeps exists)
#
# Nothing is vendored into the repository: the folder is rebuilt from the packages each time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:-$ROOT/.gpudeps}
rm -rf "$DEST"
mkdir -p "$DEST"
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
echo "pack-gpu-deps: $(du -sh "$DEST" | cut -f1) in $DEST" >&2
