#!/usr/bin/env bash
# The main job, for now: droce's RC transport moving verified data between two
# devices over an impaired in-memory wire, then droce checking real Linux rxe
# captures (ICRC, parsing) and replaying them against its own responder.
# (The two-process run over a DPDK memif wire replaces this once the
# dataplane lands; see the README's status.)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null

echo "== RC transport over a lossy in-memory wire"
build/apps/loopback/droce-loopback --messages 2000 --size 65536 --loss 0.01 --reorder 0.01 \
  --duplicate 0.01 --corrupt 0.005

if [ -x build/apps/pcap/droce-pcap ]; then
  echo
  echo "== reference captures of Linux rxe: parse + ICRC"
  build/apps/pcap/droce-pcap check tests/data/pcaps/*.pcap
  if build/apps/pcap/droce-pcap --help 2>&1 | grep -q replay; then
    echo
    echo "== replaying them against droce's responder"
    build/apps/pcap/droce-pcap replay --responder tests/data/pcaps/*.pcap
  fi
fi
