#!/usr/bin/env bash
# Configures (once) and builds droce into ./build (release-like: -O2 -g).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
echo "built: $(pwd)/build"
