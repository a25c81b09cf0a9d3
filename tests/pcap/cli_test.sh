#!/usr/bin/env bash
# droce-pcap as a user runs it: check passes on the reference captures and
# fails on a corrupted one; dump decodes; bad arguments fail clearly.
set -u
tool=$1
dir=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$tool" check "$dir"/*.pcap >"$tmp/check.out" || fail "check failed on the reference captures: $(cat "$tmp/check.out")"
[ "$(grep -c ': OK ' "$tmp/check.out")" -eq 22 ] || fail "expected 22 OK lines"
grep -q 'rc_pingpong_small_mtu1024.pcap: OK packets=22 roce=22 icrc_ok=22 icrc_bad=0 malformed=0 truncated=0' \
  "$tmp/check.out" || fail "summary line for rc_pingpong_small"
grep -q 'write_bw_65536_mtu4096_snap256.pcap: OK packets=5247 .* truncated=3777' "$tmp/check.out" ||
  fail "snaplen-cut packets must count as truncated"

# Flip one payload byte of the first packet (pcap header 24 + record header 16 + 60 bytes in).
cp "$dir/rc_pingpong_small_mtu1024.pcap" "$tmp/bad.pcap"
printf '\x99' | dd of="$tmp/bad.pcap" bs=1 seek=100 conv=notrunc status=none
if "$tool" check "$tmp/bad.pcap" >"$tmp/bad.out"; then fail "check passed a corrupted capture"; fi
grep -q 'FAIL .*icrc_bad=1' "$tmp/bad.out" || fail "corrupted capture not reported: $(cat "$tmp/bad.out")"

"$tool" dump "$dir/rc_ops_rnr_nak_mtu1024.pcap" >"$tmp/dump.out" || fail "dump failed"
grep -q '^2: RC_ACKNOWLEDGE .*aeth(RNR-NAK timer=12 msn=0)' "$tmp/dump.out" || fail "dump line for the RNR NAK"
[ "$(wc -l <"$tmp/dump.out")" -eq 104 ] || fail "dump prints one line per packet"

"$tool" replay --responder "$dir/rc_ops_imm_zero_pad_mtu1024.pcap" >"$tmp/replay.out" || fail "replay: $(cat "$tmp/replay.out")"
grep -q EQUIVALENT "$tmp/replay.out" || fail "replay output"
for mode in --responder --requester; do  # the UD capture: both directions, both modes
  "$tool" replay $mode "$dir/ud_pingpong_512.pcap" >"$tmp/replay_ud.out" || fail "UD replay $mode: $(cat "$tmp/replay_ud.out")"
  [ "$(grep -c EQUIVALENT "$tmp/replay_ud.out")" = 2 ] || fail "UD replay $mode output: $(cat "$tmp/replay_ud.out")"
done

for bad in "" "frobnicate" "check" "dump" "dump a b" "replay" "replay --sideways x"; do
  # shellcheck disable=SC2086
  "$tool" $bad >/dev/null 2>"$tmp/err"
  [ $? -eq 2 ] || fail "'droce-pcap $bad' should exit 2"
  grep -q 'usage:' "$tmp/err" || fail "'droce-pcap $bad' should print usage"
done
"$tool" check /nonexistent/x.pcap >/dev/null 2>"$tmp/err" && fail "unreadable file should fail"
grep -q 'nonexistent' "$tmp/err" || fail "unreadable file message"
echo "droce-pcap CLI: all checks passed"
