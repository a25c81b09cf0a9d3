#!/usr/bin/env bash
# `meson install` as a provider (doc/netdev.md, "Installing"), checked without
# touching the host: the tree is installed into a DESTDIR, which a private
# mount namespace then lays over the real prefix and /etc (read-only
# overlays); in a network namespace of its own the installed droce-ctl binds
# a veth, and a new login shell with nothing set by hand lists the device
# (`ibv_devices`) and runs `ibv_rc_pingpong` on it. Everything goes with the
# namespaces and the DESTDIR. Root only (skipped otherwise).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
install_test_begin install
opt() { meson introspect "$build" --buildoptions | python3 -c "import json,sys; print([o['value'] for o in json.load(sys.stdin) if o['name']=='$1'][0])"; }
prefix=$(opt prefix) libdir=$(opt libdir) bindir=$(opt bindir) datadir=$(opt datadir)
driver_dir=$(opt ibverbs_driver_dir) profile_dir=$(opt profile_dir)
provider=$prefix/$libdir/libibverbs/libdroce
overlay_dirs=("$prefix" /etc)

check "meson install --destdir" meson install -C "$build" --destdir "$D" --no-rebuild --quiet
check "the provider, its driver file, droced, the shims, the XDP and TC programs, the profile script, the unit" bash -c "
  set -e
  ls -l '$D$provider-rdmav34.so' '$D$prefix/$bindir/droced' '$D$prefix/$bindir/droce-ctl' '$D$prefix/$bindir/droce-cluster' \
    '$D$prefix/$libdir/droce/libdroce-preload.so' '$D$prefix/$libdir/droce/libdroce-rdmacm.so' '$D$prefix/$libdir/droce/droce_xdp.o' \
    '$D$prefix/$libdir/droce/droce_tc.o' '$D$profile_dir/droce.sh' '$D$prefix/lib/systemd/system/droced.service'
  grep -qx 'driver $provider' '$D$driver_dir/droce.driver'
  grep -q 'ExecStart=$prefix/$bindir/droced --foreground' '$D$prefix/lib/systemd/system/droced.service'"

check "the installed droce-ctl binds v0 with the installed droced and TC program (steering udp)" installed "
  '$prefix/$bindir/droce-ctl' link add droce0 netdev v0 steering udp &&
  '$prefix/$bindir/droce-ctl' daemon status | grep 'netdev v0: UDP sockets per process, TC steering' &&
  ! grep -q prog/xdp <(ip link show v0) && tr '\\0' ' ' </proc/\$(cat /run/droce/netns/$ns/droced.pid)/cmdline | grep -q '^$prefix/$bindir/droced'"
login_shell_checks
check "steering xdp with the installed XDP program; daemon stop unbinds it" installed "
  '$prefix/$bindir/droce-ctl' link del droce0 && '$prefix/$bindir/droce-ctl' link add droce0 netdev v0 steering xdp &&
  '$prefix/$bindir/droce-ctl' daemon status | grep 'netdev v0: AF_XDP' && grep -q 'prog/xdp.*droce_xdp' <(ip link show v0) &&
  '$prefix/$bindir/droce-ctl' daemon stop && ! grep -q prog/xdp <(ip link show v0)"
finish install
