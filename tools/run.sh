#!/usr/bin/env bash
# Usage: tools/run.sh ARGS...   installs what is missing, builds, then runs build/cpgen ARGS...
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$BUILD_DIR/cpgen" "$@"
