# Sourced by wakeups.sh and profile.sh: two namespaces $A and $B on a veth
# (MTU 9000; 10.0.0.1/24 and fd00::1/64 in A, .2 and ::2 in B), droce0 bound
# on each with steering udp, udp_gso=on and the device settings in
# $SETTINGS ("KEY=VALUE ..."). Needs ctl (droce-ctl); udp_gso_pair_cleanup
# stops the droceds and removes the namespaces. `on NS CMD...` runs CMD in NS
# with droce-ctl's environment (and $ON_ENV, e.g. DROCE_STATS=1).
udp_gso_pair_cleanup() {
  for ns in $A $B; do
    ip netns exec $ns "$ctl" daemon stop >/dev/null 2>&1
    ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del $ns 2>/dev/null; rm -rf /run/droce/netns/$ns
  done
}
udp_gso_pair_up() {
  ip netns add $A && ip netns add $B || return 1
  ip -n $A link add nd0 type veth peer name nd0 netns $B
  for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set nd0 mtu 9000 up; done
  ip -n $A addr add 10.0.0.1/24 dev nd0; ip -n $B addr add 10.0.0.2/24 dev nd0
  ip -n $A addr add fd00::1/64 dev nd0 nodad; ip -n $B addr add fd00::2/64 dev nd0 nodad
  local settings=(set udp_gso=on) s
  for s in ${SETTINGS:-}; do settings+=(set "$s"); done
  for ns in $A $B; do
    ip netns exec $ns "$ctl" link add droce0 netdev nd0 steering udp "${settings[@]}" >/dev/null || return 1
  done
}
on() {
  local ns=$1; shift
  # shellcheck disable=SC2086
  ip netns exec "$ns" env CTL="$ctl" ${ON_ENV:-} bash -c 'eval "$("$CTL" env)"; exec "$@"' on "$@"
}
