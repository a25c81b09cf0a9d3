#!/usr/bin/env bash
# The main job: two droce processes doing RDMA over a DPDK memif wire
# (RDMA WRITE bandwidth, then WRITE ping-pong latency, every transfer
# verified), unmodified ibv_rc_pingpong, perftest and qperf on droce0/droce1 shared through the host
# fabric daemon (droced), then droce's transport recovering from loss on an in-memory wire,
# and droce checking and replaying real Linux rxe captures.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null

echo "== two processes, RDMA over a DPDK memif wire (droce-testpmd)"
CLIENT_ARGS="--duration 2" bash tools/memif-pair.sh --fwd write_bw --size 65536 --mtu 4096
CLIENT_ARGS="--duration 2" bash tools/memif-pair.sh --fwd write_lat --size 8

echo
echo "== unmodified verbs programs on droce devices (rdma-core provider, no kernel RDMA),"
echo "   droce0 and droce1 shared by every program through the host fabric daemon (droced)"
show() { grep -E '^ *[0-9]+ +[0-9]+ |iters in|bytes in|^--- |latency|bw  '; }
export WIRE=fabric
bash tools/verbs-pair.sh "ibv_rc_pingpong -d droce0 -g 1 -n 2000" \
  "ibv_rc_pingpong -d droce0 -g 1 -n 2000 127.0.0.1" | show      # both on droce0
bash tools/verbs-pair.sh "ibv_rc_pingpong -d droce0 -g 1 -n 2000" \
  "ibv_rc_pingpong -d droce1 -g 1 -n 2000 127.0.0.1" | show      # droce0 <-> droce1
bash tools/verbs-pair.sh "ib_write_bw -d droce0 -x 1 -D 2" "ib_write_bw -d droce0 -x 1 -D 2 127.0.0.1" | show
bash tools/verbs-pair.sh "ib_write_bw -d droce0 -x 1 -D 2" "ib_write_bw -d droce1 -x 1 -D 2 127.0.0.1" | show
bash tools/verbs-pair.sh "ib_send_lat -d droce0 -x 1 -n 2000" "ib_send_lat -d droce1 -x 1 -n 2000 127.0.0.1" | show
SERVER_STAYS=1 bash tools/verbs-pair.sh "qperf" "qperf 127.0.0.1 -t 2 rc_lat rc_bw" | show   # plain: both on droce0
SERVER_STAYS=1 bash tools/verbs-pair.sh "qperf" "qperf 127.0.0.1 -t 2 -li droce1:1 -ri droce0:1 rc_lat rc_bw" | show
unset WIRE
echo "   (the direct memif cable, one process per device, for comparison)"
bash tools/verbs-pair.sh "ib_write_bw -d droce0 -x 1 -D 2" "ib_write_bw -d droce1 -x 1 -D 2 127.0.0.1" | show

echo
echo "== RC transport over a lossy in-memory wire (droce-loopback)"
build/apps/loopback/droce-loopback --messages 2000 --size 65536 --loss 0.01 --reorder 0.01 \
  --duplicate 0.01 --corrupt 0.005

echo
echo "== reference captures of Linux rxe: parse + ICRC, then replay against droce's responder"
build/apps/pcap/droce-pcap check tests/data/pcaps/*.pcap | cut -c1-150
build/apps/pcap/droce-pcap replay --responder tests/data/pcaps/*.pcap | grep -v '^  '
