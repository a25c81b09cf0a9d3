#!/usr/bin/env bash
# Builds droce's Debian packages from the tree (debian/, README.md
# "Installing") as Debian builds them, `dpkg-buildpackage -b -us -uc`, and
# moves what it writes beside the tree (.deb, .buildinfo, .changes) to OUTDIR
# (default build-deb/); the build tree (obj-*) stays until the next build
# cleans it. DEB_BUILD_OPTIONS as usual: `nocheck` builds only what the
# packages hold, no tests (CI runs them from its own build tree).
#   tools/build-deb.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-build-deb}")
mkdir -p "$out"
dpkg-buildpackage -b -us -uc -j"$(nproc)"
changes=../$(dpkg-parsechangelog -S Source)_$(dpkg-parsechangelog -S Version)_$(dpkg-architecture -qDEB_HOST_ARCH).changes
for f in $(cut -d' ' -f1 debian/files) "$(basename "$changes")"; do mv "../$f" "$out/"; done
ls -l "$out"
