#!/usr/bin/env bash
# The verbs path as a fraction of the engine, round by round (issue 36's
# "ib_write_bw -s 64 >= 70 % of the engine"): each round runs the engine's
# one-core 64 B WRITE rate (droce-engine-bench 3 8 1000000), then a 1-QP and
# an 8-QP `ib_write_bw -s 64 -D 3` pair over memif (tools/verbs-pair.sh), and
# prints the two ratios against that round's engine. The host's speed drifts
# by half between minutes (tools/bench/verbs/results.md, "the host's two
# modes"): a ratio is only taken against the engine of its own round.
#   bash tools/bench/verbs/engine_ratio.sh            # 8 rounds on ./build-relg
# Env: BUILD (release build dir, default build-relg), ROUNDS (default 8),
#      PORT (perftest side-channel port, default 18900), WINDOW (perftest -t, default perftest's 128).
# Prints CSV: round,engine_mmsgs,bw_1qp_mmsgs,bw_8qp_mmsgs,ratio_1qp,ratio_8qp,load1
set -uo pipefail
cd "$(dirname "$0")/../../.."
build=${BUILD:-build-relg}
port=${PORT:-18900}
window=${WINDOW:+-t $WINDOW}
bench="$build/tools/bench/engine/droce-engine-bench"
[ -x "$bench" ] || { echo "no $bench: build $build first" >&2; exit 2; }
bw() {  # QPs
  BUILD=$build bash tools/verbs-pair.sh "ib_write_bw -d droce0 -x 1 -p $port -s 64 -D 3 -q $1 $window" \
    "ib_write_bw -d droce1 -x 1 -p $port -s 64 -D 3 -q $1 $window 127.0.0.1" 2>&1 |
    sed -n '/^--- client/,$p' | grep -E '^ *[0-9]+ +[0-9]+ ' | head -1 | awk '{print $5 + 0}'
}
echo "round,engine_mmsgs,bw_1qp_mmsgs,bw_8qp_mmsgs,ratio_1qp,ratio_8qp,load1"
for ((r = 1; r <= ${ROUNDS:-8}; ++r)); do
  engine=$(taskset -c 0 "$bench" 3 8 1000000 | awk -F, '$1 == "write_64B_msg_rate" {print $2}')
  one=$(bw 1)
  eight=$(bw 8)
  awk -v r="$r" -v e="${engine:-0}" -v a="${one:-0}" -v b="${eight:-0}" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN {printf "%d,%s,%s,%s,%.2f,%.2f,%s\n", r, e, a, b, (e > 0 ? a / e : 0), (e > 0 ? b / e : 0), l}'
done
