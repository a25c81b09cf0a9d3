#!/usr/bin/env bash
# A same-run A/B of two MemifTx copy modes: one 64 B ib_write_bw pair whose
# process(es) alternate the modes every 2^18 bursts (~30-100 ms) and print
# each mode's frames and TSC ticks (tools/bench/verbs/results.md, "Streaming
# stores"). This VM's pair rate has modes lasting seconds (results.md, "The
# pair's two modes"); alternating inside one run gives both copies the same
# host. Needs a release tree built with memif_tx_ab.patch applied to 5c82ce2
# (experiment code: an environment variable read in the hot path):
#   git worktree add /work/wt/ab 5c82ce2 && cd /work/wt/ab &&
#   git apply tools/bench/verbs/memif_tx_ab.patch  # from a checkout that has it
#   meson setup build-relg --buildtype=release -Db_ndebug=true && ninja -C build-relg
#   BUILD=/work/wt/ab/build-relg bash tools/bench/verbs/memif_tx_ab.sh 0,6
# Modes: 0 memcpy + prefetchw 16 slots ahead (5c82ce2), 1 the same 64 ahead,
# 2 non-temporal copies of every frame that fits (no prefetch), 3 as 2 with
# descriptor lines prefetched, 4 as 2 with descriptors stored non-temporally
# too, 5 non-temporal when DROCE_MEMIF_TX_NT_DEPTH or more slots are in
# flight, 6 non-temporal for bursts of DROCE_MEMIF_TX_NT_DEPTH or more frames
# (main's rule with 3, before it kept large frames on memcpy and padded to
# whole lines: memif_tx_ab_lines.patch and memif_tx_ab_plain.patch measure
# those). Env: SIDE (c: the client's process alternates,
# s: the server's), TEST (ib_write_bw), SIZE (64), SECS (20), ROUNDS (3),
# PORT (18730). Prints per round the "memif_tx_ab" line (rate: frames per
# 1000 TSC ticks; x 2.596 = M frames/s on this host) and perftest's seconds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
b=$(cd "${BUILD:-build-relg}" && pwd) port=${PORT:-18730} secs=${SECS:-20} t=${TEST:-ib_write_bw} sz=${SIZE:-64}
se= ce=
if [ "${SIDE:-c}" = s ]; then se="env DROCE_MEMIF_TX_AB=$1"; else ce="env DROCE_MEMIF_TX_AB=$1"; fi
for r in $(seq 1 "${ROUNDS:-3}"); do
  out=$(BUILD=$b SERVER_DELAY=1.5 PAIR_TIMEOUT=$((secs + 15)) bash tools/verbs-pair.sh \
    "timeout $((secs + 2)) $se $t -d droce0 -x 1 -p $port -s $sz --run_infinitely -D 1" \
    "timeout -s INT $secs $ce $t -d droce1 -x 1 -p $port -s $sz --run_infinitely -D 1 127.0.0.1" 2>&1)
  echo "$out" | grep -o "memif_tx_ab.*" | tail -1
  echo "$out" | sed -n '/^--- client/,$p' | grep -E "^ *$sz +[0-9]+ " | awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $4} END {print ""}'
done
