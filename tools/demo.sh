#!/usr/bin/env bash
# The main job: two droce processes doing RDMA over a DPDK memif wire
# (RDMA WRITE bandwidth, then WRITE ping-pong latency, every transfer
# verified), unmodified ibv_rc_pingpong, perftest and qperf on droce0/droce1 shared through the host
# fabric daemon (droced), two hosts (network namespaces) whose droce devices are the RoCE function
# of their interfaces (as root), then droce's transport recovering from loss on an in-memory wire,
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

if [ "$(id -u)" -eq 0 ] && command -v fi_pingpong >/dev/null; then
  echo
  echo "== two hosts (network namespaces on a bridge), droce0 the RoCE function of each host's eth0:"
  echo "   programs reach the peer by its ordinary address, TCP keeps working beside RDMA"
  export DROCE_CLUSTER=droce-demo
  trap 'bash tools/droce-cluster down >/dev/null 2>&1 || true' EXIT
  bash tools/droce-cluster up 2 --subnet 10.77.0 >/dev/null
  bash tools/droce-cluster run 1 ibv_rc_pingpong -d droce0 -g 1 -n 2000 >/dev/null 2>&1 &
  sleep 1
  bash tools/droce-cluster run 2 ibv_rc_pingpong -d droce0 -g 1 -n 2000 10.77.0.1 | show
  wait
  bash tools/droce-cluster run 1 fi_pingpong -p verbs -e msg -I 1000 -S 4096 >/dev/null 2>&1 &
  sleep 1
  bash tools/droce-cluster run 2 fi_pingpong -p verbs -e msg -I 1000 -S 4096 10.77.0.1 | tail -2
  wait
  bash tools/droce-cluster run 2 ping -c 2 -q 10.77.0.1 | tail -2
  bash tools/droce-cluster down >/dev/null
  trap - EXIT
  unset DROCE_CLUSTER
fi

echo
echo "== RC transport over a lossy in-memory wire (droce-loopback)"
build/apps/loopback/droce-loopback --messages 2000 --size 65536 --loss 0.01 --reorder 0.01 \
  --duplicate 0.01 --corrupt 0.005

echo
echo "== reference captures of Linux rxe: parse + ICRC, then replay against droce's responder"
build/apps/pcap/droce-pcap check tests/data/pcaps/*.pcap | cut -c1-150
build/apps/pcap/droce-pcap replay --responder tests/data/pcaps/*.pcap | grep -v '^  '
