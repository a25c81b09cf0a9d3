#!/usr/bin/env bash
# Where a 64 B ib_write_bw WRITE's instructions go, per end (results.md,
# "Where a 64 B WRITE's time goes"): runs the pair twice over memif, once
# with the server under callgrind and once with the client, the other end
# native (so the measured end is the slow one and never waits for work), and
# prints each part's instructions per message as CSV rows end,part,value:
#   server: the progress thread's total, the port's receive (memif PMD and
#   its wrappers) and mbuf release, lib/'s receive and responder, the
#   transmit round, timers, completion-event watches, the progress loop's
#   own; and its poll rounds, sleeps and packets (DROCE_STATS).
#   client: perftest's thread's ibv_post_send (and in it the engine's
#   doorbell, lib/'s requester, the port's transmit and buffer allocation)
#   and ibv_poll_cq; doorbells deferred (DROCE_STATS).
# Without BATCHED=1 the counts do not see doorbell batching (under valgrind no
# post follows another within its 1 µs); they never see the wall clock:
# thread_time.sh and fastpath.sh measure that.
#   bash tools/bench/verbs/breakdown.sh [BUILD_DIR]   (default build-relg)
# Env: N (messages, default 200000), PORT (perftest's side channel, default 18515),
#      KEEP=DIR (keep the callgrind files there), WIRE=fabric (the two processes on
#      the host fabric: droced and the direct rings, doc/droced.md; default memif),
#      BATCHED=1 (both devices with doorbell_burst_gap_ns=1000000: a post within 1 ms of
#      the last one defers its doorbell as it does natively within 1 us, so the client's
#      numbers are those of the batched steady state, up to doorbell_batch posts a burst),
#      LINK_SET='k=v ...' (more device settings for both devices, e.g. memif_direct_tx=off),
#      ENDS=client or ENDS=server (that half alone; default both).
set -uo pipefail
cd "$(dirname "$0")/../../.."
build=$(cd "${1:-build-relg}" && pwd)
n=${N:-200000}
port=${PORT:-18515}
out=$(mktemp -d /tmp/droce-breakdown.XXXXXX)
trap '[ -n "${KEEP:-}" ] && cp -a "$out"/. "$KEEP"/; rm -rf "$out"' EXIT
vg="valgrind --tool=callgrind --separate-threads=yes"
pair() {  # END (server|client): that end under callgrind
  local s="ib_write_bw -d droce0 -x 1 -p $port -s 64 -n $n" c="ib_write_bw -d droce1 -x 1 -p $port -s 64 -n $n 127.0.0.1"
  if [ "$1" = server ]; then s="$vg --callgrind-out-file=$out/server.%p $s"; else c="$vg --callgrind-out-file=$out/client.%p $c"; fi
  local set=${LINK_SET:-}
  [ "${BATCHED:-0}" = 1 ] && set="$set doorbell_burst_gap_ns=1000000"
  LINK_SET=$set BUILD=$build WIRE=${WIRE:-memif} SERVER_DELAY=8 PAIR_TIMEOUT=600 DROCE_STATS=1 bash tools/verbs-pair.sh "$s" "$c" >"$out/$1.log" 2>&1
}
incl() {  # FILE FUNCTION-SUBSTRING: inclusive instructions of its first match (0 if none)
  awk -v f="$2" 'index($0, f) {gsub(",", "", $1); print $1; found = 1; exit} END {if (!found) print 0}' "$1"
}
annotate() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null >"$1.incl"; }
# The callgrind part file of the thread that ran FUNCTION (valgrind numbers threads -01, -02, ...).
thread_of() {  # END FUNCTION
  local f
  for f in "$out/$1".*-[0-9]*; do
    [[ $f == *.incl ]] && continue
    [ -e "$f.incl" ] || annotate "$f"
    [ "$(incl "$f.incl" "$2")" != 0 ] && { echo "$f"; return; }
  done
}
row() { awk -v e="$1" -v p="$2" -v v="$3" -v n="$4" 'BEGIN {printf "%s,%s,%.0f\n", e, p, v / n}'; }
stat() {  # LOG DEVICE KEY: the number after KEY in DEVICE's DROCE_STATS lines
  grep "droce $2" "$1" | grep -oE "$3 [0-9]+" | head -1 | awk '{print $NF}'
}

if [ "${WIRE:-memif}" = fabric ]; then
  port_tx_fn='DirectIo::TxBurst(' port_alloc_fn='DaemonLink::AllocTx(' port_release_fn='DaemonLink::Release('
else
  port_tx_fn='EthdevPort::TxBurst(' port_alloc_fn='EthdevPort::AllocTx(' port_release_fn='EthdevPort::Release('
fi
echo "end,part,instructions_per_message"
if [ "${ENDS:-server,client}" != client ]; then
pair server
f=$(thread_of server 'ProgressThread::Run()')
[ -n "$f" ] || { echo "breakdown.sh: no progress thread in the server's profile ($out/server.log)" >&2; exit 1; }
i=$f.incl
pkts=$(stat "$out/server.log" droce0 'rx'); pkts=${pkts:-$n}
polls=$(grep 'droce droce0' "$out/server.log" | grep -oE 'progress polls [0-9]+' | awk '{print $NF}')
sleeps=$(grep 'droce droce0' "$out/server.log" | grep -oE 'sleeps [0-9]+' | head -1 | awk '{print $NF}')
run=$(incl "$i" 'ProgressThread::Run()')
poll_locked=$(incl "$i" 'Runtime::PollLocked(')
rx=$(incl "$i" 'Device::ReceiveBurst(unsigned long) [')
port_rx=$(incl "$i" 'LoopbackIo::RxBurst(')
release=$(incl "$i" "$port_release_fn")
row server progress_thread_total "$run" "$pkts"
row server port_rx "$port_rx" "$pkts"
row server port_release "$release" "$pkts"
row server lib_receive_and_responder "$((rx - port_rx - release))" "$pkts"
row server lib_transmit_round "$(incl "$i" 'Device::TransmitRound(')" "$pkts"
row server lib_timers "$(incl "$i" 'Device::ExpireTimers(')" "$pkts"
row server provider_event_watches "$(incl "$i" 'Runtime::DeliverEvents(')" "$pkts"
row server provider_progress_loop "$((run - poll_locked))" "$pkts"
echo "server,packets,$pkts"
echo "server,poll_rounds,${polls:-0}"
echo "server,sleeps,${sleeps:-0}"
row server progress_loop_per_round "$((run - poll_locked))" "${polls:-1}"
fi
[ "${ENDS:-server,client}" = server ] && exit 0

pair client
f=$(thread_of client '(anonymous namespace)::PostSend(')
[ -n "$f" ] || { echo "breakdown.sh: no post in the client's profile ($out/client.log)" >&2; exit 1; }
i=$f.incl
row client post_send "$(incl "$i" '(anonymous namespace)::PostSend(')" "$n"
row client engine_doorbell "$(incl "$i" 'core::Device::Doorbell(')" "$n"
row client lib_requester "$(incl "$i" 'transport::Qp::Transmit(')" "$n"
row client port_tx "$(incl "$i" "$port_tx_fn")" "$n"
row client port_alloc "$(incl "$i" "$port_alloc_fn")" "$n"
row client poll_cq "$(incl "$i" '(anonymous namespace)::PollCq(')" "$n"
echo "client,empty_polls_skipped,$(grep 'droce droce1' "$out/client.log" | grep -oE 'nothing to do\) [0-9]+' | awk '{print $NF}')"
echo "client,doorbells_deferred,$(stat "$out/client.log" droce1 tx_doorbells_deferred)"
