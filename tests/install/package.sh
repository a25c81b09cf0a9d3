#!/usr/bin/env bash
# droce's Debian packages (debian/, README.md "Installing"), checked without
# touching the host:
#   - what the packages hold, where Debian's libibverbs, systemd and login
#     shells look for it;
#   - droce and droce-tools unpacked (dpkg -x) into a DESTDIR laid over /usr
#     and /etc in a private mount namespace, as tests/install/install.sh lays
#     `meson install`'s (tests/install/lib.sh): the maintainer scripts only
#     enable the unit, which a login shell does not need. The unit's
#     ExecStart starts droced (in a private /run), droce-ctl binds a veth
#     with it, ExecStop stops it; a new login shell lists the device and
#     runs ibv_rc_pingpong -c on it;
#   - a real `dpkg -i`, `dpkg -r` and `dpkg --purge` in a mount namespace
#     whose /usr, /etc and /var are writable overlays of the host's, with
#     their upper layers in the DESTDIR: after the purge nothing of droce's
#     remains, and nothing in /usr or /etc differs from the host's.
# DEBS: the directory of the built .debs (tools/build-deb.sh); without it
# the script builds them (DEB_BUILD_OPTIONS=nocheck) into its DESTDIR.
# Root only (skipped otherwise).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
install_test_begin package
if [ -z "${DEBS:-}" ]; then
  DEBS=$D/debs
  check "tools/build-deb.sh (nocheck)" env DEB_BUILD_OPTIONS=nocheck "$root/tools/build-deb.sh" "$DEBS"
fi
deb=$(ls "$DEBS"/droce_*.deb) tools_deb=$(ls "$DEBS"/droce-tools_*.deb) || exit 1
unit=lib/systemd/system/droced.service
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
provider=/usr/lib/$multiarch/libibverbs/libdroce
overlay_dirs=(/usr /etc)

check "droce holds the provider, its driver file, droced, droce-ctl, the shims, the BPF programs, the profile script, the unit, the manual pages" bash -c "
  set -e
  dpkg -c '$deb' | awk '{print \$6}' >'$D/droce.list'
  for f in '$provider-rdmav34.so' /etc/libibverbs.d/droce.driver /etc/profile.d/droce.sh /$unit \
      /usr/bin/droced /usr/bin/droce-ctl /usr/bin/droce-cluster /usr/lib/$multiarch/droce/libdroce-preload.so \
      /usr/lib/$multiarch/droce/libdroce-rdmacm.so /usr/lib/$multiarch/droce/droce_xdp.o /usr/lib/$multiarch/droce/droce_tc.o \
      /usr/share/doc/droce/netdev.md /usr/share/man/man1/droced.1.gz /usr/share/man/man1/droce-ctl.1.gz \
      /usr/share/man/man1/droce-cluster.1.gz; do
    grep -qx \".\$f\" '$D/droce.list' || { echo \"missing \$f\"; exit 1; }
  done
  dpkg -I '$deb' conffiles | grep -x /etc/profile.d/droce.sh
  dpkg -I '$deb' postinst | grep -q 'deb-systemd-helper.*enable.*droced.service'
  dpkg -f '$deb' Depends | tee /dev/stderr | grep libibverbs1 | grep librte-net-af-xdp | grep -q librte-net-af-packet"
check "dpkg -x droce and droce-tools" bash -c "dpkg -x '$deb' '$D' && dpkg -x '$tools_deb' '$D' && ls '$D/usr/bin/droce-testpmd'"
# Nothing of the tree's paths is in the packages (dpkg's fixfilepath maps
# the compilers' file names; droce-ctl and droced find a build tree at run
# time, drivers/fabric/build_tree.h): the same sources built in another
# directory give the same files. Debug information is in the -dbgsym
# packages, not checked here.
check "no file of the packages names the source tree or the build directory" bash -c "
  ! grep -rl -e '$root' -e 'obj-$(dpkg-architecture -qDEB_HOST_GNU_TYPE)' '$D/usr' '$D/etc' '$D/lib'"
# The manual pages render without warnings and list what the programs accept.
check "man droce-ctl, droced, droce-testpmd: no warnings, the programs' own options" bash -c "
  set -e
  for p in droce-ctl droced droce-cluster droce-testpmd droce-pcap droce-loopback droce-ccsim droce-study; do
    out=\$(MANWIDTH=80 man --warnings -l '$D/usr/share/man/man1/'\$p.1.gz 2>&1 >/dev/null)
    [ -z \"\$out\" ] || { echo \"\$p: \$out\"; exit 1; }
  done
  MANWIDTH=200 man -l '$D/usr/share/man/man1/droce-ctl.1.gz' | grep -q 'link add NAME netdev IFACE'
  MANWIDTH=200 man -l '$D/usr/share/man/man1/droced.1.gz' | grep -q -- '--run-dir DIR'
  MANWIDTH=200 man -l '$D/usr/share/man/man1/droce-testpmd.1.gz' | grep -q -- '--fwd ENGINE'"
check "the driver file names the provider, the unit runs /usr/bin/droced" bash -c "
  grep -qx 'driver $provider' '$D/etc/libibverbs.d/droce.driver' &&
  grep -qx 'ExecStart=/usr/bin/droced --foreground --run-dir /run/droce' '$D/$unit'"

# droced as systemd starts it: the unit's ExecStart and ExecStop lines, in a
# private /run (the host's /run/droce is not touched).
exec_start=$(sed -n 's/^ExecStart=//p' "$D/$unit") exec_stop=$(sed -n 's/^ExecStop=//p' "$D/$unit")
check "the unit's ExecStart runs droced; droce-ctl binds v0 with it; ibv_devices sees droce0; ExecStop stops it" installed "
  mount -t tmpfs tmpfs /run && mkdir /run/droce || exit 1
  $exec_start >/run/droce/unit.log 2>&1 & pid=\$!
  trap 'kill \$pid 2>/dev/null' EXIT
  for _ in \$(seq 300); do droce-ctl --run-dir /run/droce daemon status >/dev/null 2>&1 && break; sleep 0.1; done
  droce-ctl --run-dir /run/droce link add droce0 netdev v0 steering udp &&
  [ \"\$(cat /run/droce/droced.pid)\" = \$pid ] &&
  eval \"\$(droce-ctl --run-dir /run/droce env)\" && ibv_devices | grep droce0 &&
  $exec_stop && wait \$pid"

check "the installed droce-ctl binds v0 in the namespace's run directory" installed "
  droce-ctl link add droce0 netdev v0 steering udp &&
  tr '\\0' ' ' </proc/\$(cat /run/droce/netns/$ns/droced.pid)/cmdline | grep -q '^/usr/bin/droced'"
login_shell_checks
check "droce-ctl daemon stop" installed "droce-ctl daemon stop"

# A real dpkg round trip in writable overlays of /usr, /etc and /var.
rw_overlays="mount --make-rprivate /"
for dir in usr etc var; do
  mkdir -p "$D/rw/$dir/upper" "$D/rw/$dir/work"
  rw_overlays+=" && mount -t overlay overlay -o lowerdir=/$dir,upperdir=$D/rw/$dir/upper,workdir=$D/rw/$dir/work /$dir"
done
check "dpkg -i; the unit enabled; dpkg -r keeps the conffiles; dpkg --purge removes everything of droce's" \
  unshare --mount bash -c "$rw_overlays && set -x &&
  dpkg -i '$deb' '$tools_deb' &&
  dpkg-query -W -f '\${Status}\n' droce droce-tools | grep -c 'install ok installed' | grep -qx 2 &&
  [ -L /etc/systemd/system/multi-user.target.wants/droced.service ] &&
  env -i HOME=/root TERM=dumb bash -lc 'env | grep ^SYSFS_PATH=' &&
  dpkg -r droce-tools droce && [ -f /etc/profile.d/droce.sh ] && [ ! -e /usr/bin/droced ] &&
  dpkg --purge droce-tools droce && ! dpkg-query -W droce droce-tools 2>/dev/null | grep . &&
  for f in \$(cat '$D/droce.list' | sed 's/^\\.//'); do [ -d \"\$f\" ] || [ ! -e \"\$f\" ] || { echo \"left: \$f\"; exit 1; }; done &&
  [ ! -e /etc/systemd/system/multi-user.target.wants/droced.service ]"
# What the round trip changed, from its upper layers: dpkg's status and the
# logs only (directories copied up are not changes; a whiteout, a file the
# round trip removed, is one).
check "after the purge: no file in /usr, /etc or /var differs from the host's (but dpkg's status and the logs)" bash -c "
  cd '$D/rw' && left=\$(find usr/upper etc/upper var/upper ! -type d | while read -r f; do
    host=/\${f%%/*}/\${f#*/upper/}
    case \$host in /var/lib/dpkg/*|/var/log/*|/var/cache/*) continue;; esac
    cmp -s \"\$f\" \"\$host\" || echo \"\$host\"
  done); [ -z \"\$left\" ] || { echo \"changed: \$left\"; exit 1; }"
finish package
