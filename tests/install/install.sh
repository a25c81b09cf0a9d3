#!/usr/bin/env bash
# `meson install` as a provider (doc/netdev.md, "Installing"), checked without
# touching the host: the tree is installed into a DESTDIR, which a private
# mount namespace then lays over the real prefix and /etc (read-only
# overlays); in a network namespace of its own the installed droce-ctl binds
# a veth, and a new login shell with nothing set by hand lists the device
# (`ibv_devices`) and runs `ibv_rc_pingpong` on it. Everything goes with the
# namespaces and the DESTDIR. Root only (skipped otherwise).
set -uo pipefail
. "$(dirname "$0")/../fabric/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (namespaces, overlays)"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
D=$(mktemp -d /tmp/droce-install.XXXXXX)
ns=${NETNS_PREFIX:-netdevtest}-install-$$  # NETNS_PREFIX: the namespace's name prefix
cleanup() {
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "/run/droce/netns/$ns" "$D"
}
trap cleanup EXIT
opt() { meson introspect "$build" --buildoptions | python3 -c "import json,sys; print([o['value'] for o in json.load(sys.stdin) if o['name']=='$1'][0])"; }
prefix=$(opt prefix) libdir=$(opt libdir) bindir=$(opt bindir) datadir=$(opt datadir)
driver_dir=$(opt ibverbs_driver_dir) profile_dir=$(opt profile_dir)
provider=$prefix/$libdir/libibverbs/libdroce

check "meson install --destdir" meson install -C "$build" --destdir "$D" --no-rebuild --quiet
check "the provider, its driver file, droced, the shims, the XDP and TC programs, the profile script, the unit" bash -c "
  set -e
  ls -l '$D$provider-rdmav34.so' '$D$prefix/$bindir/droced' '$D$prefix/$bindir/droce-ctl' '$D$prefix/$bindir/droce-cluster' \
    '$D$prefix/$libdir/libdroce-preload.so' '$D$prefix/$libdir/libdroce-rdmacm.so' '$D$prefix/$datadir/droce/droce_xdp.o' \
    '$D$prefix/$datadir/droce/droce_tc.o' '$D$profile_dir/droce.sh' '$D$prefix/lib/systemd/system/droced.service'
  grep -qx 'driver $provider' '$D$driver_dir/droce.driver'
  grep -q 'ExecStart=$prefix/$bindir/droced --foreground' '$D$prefix/lib/systemd/system/droced.service'"

# The login shell's view of the installed tree: overlays in a private mount
# namespace, a network namespace for the device (ip netns exec keeps the
# overlays: it copies the mount namespace it starts in).
ip netns add "$ns" || exit 1
ip -n "$ns" link set lo up
ip -n "$ns" link add v0 type veth peer name v1
ip -n "$ns" link set v0 up; ip -n "$ns" link set v1 up
ip -n "$ns" addr add 10.0.0.1/24 dev v0
installed() {  # CMD (a bash command line) in the namespace, with the installed tree laid over the host's
  unshare --mount bash -c "
    mount --make-rprivate / &&
    mount -t overlay overlay -o 'lowerdir=$D$prefix:$prefix' '$prefix' &&
    mount -t overlay overlay -o 'lowerdir=$D/etc:/etc' /etc &&
    ip netns exec '$ns' bash -c \"\$0\"" "$1"
}
check "the installed droce-ctl binds v0 with the installed droced and TC program (steering udp)" installed "
  '$prefix/$bindir/droce-ctl' link add droce0 netdev v0 steering udp &&
  '$prefix/$bindir/droce-ctl' daemon status | grep 'netdev v0: UDP sockets per process, TC steering' &&
  ! grep -q prog/xdp <(ip link show v0) && tr '\\0' ' ' </proc/\$(cat /run/droce/netns/$ns/droced.pid)/cmdline | grep -q '^$prefix/$bindir/droced'"
# A new login shell with an empty environment runs SCRIPT (what it reads
# first is /etc/profile, and so /etc/profile.d/droce.sh).
cat >"$D/devices.sh" <<'SH'
env | grep -E '^(SYSFS_PATH|DROCE_RUN_DIR|LD_PRELOAD|RDMAV_DRIVERS)='
ibv_devices | tee /dev/stderr | grep -q droce0
SH
cat >"$D/pingpong.sh" <<'SH'
ibv_devinfo -d droce0 -v | grep -q '::ffff:10.0.0.1' || exit 1
ibv_rc_pingpong -d droce0 -g 1 -n 100 & sleep 1.5
ibv_rc_pingpong -d droce0 -g 1 -n 100 10.0.0.1 && wait $!
SH
check "a new login shell: ibv_devices lists droce0, nothing set by hand" installed \
  "env -i HOME=/root TERM=dumb bash -l '$D/devices.sh'"
check "a new login shell: ibv_devinfo and ibv_rc_pingpong on droce0 (10.0.0.1)" installed \
  "env -i HOME=/root TERM=dumb timeout 60 bash -l '$D/pingpong.sh'"
check "steering xdp with the installed XDP program; daemon stop unbinds it" installed "
  '$prefix/$bindir/droce-ctl' link del droce0 && '$prefix/$bindir/droce-ctl' link add droce0 netdev v0 steering xdp &&
  '$prefix/$bindir/droce-ctl' daemon status | grep 'netdev v0: AF_XDP' && grep -q 'prog/xdp.*droce_xdp' <(ip link show v0) &&
  '$prefix/$bindir/droce-ctl' daemon stop && ! grep -q prog/xdp <(ip link show v0)"
finish install
