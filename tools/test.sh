#!/usr/bin/env bash
# Usage: tools/test.sh [ctest args...]   installs what is missing, builds, runs the whole suite.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BUILD_DIR"
exec ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
