# Sourced by tests/install/install.sh (meson install) and package.sh (the
# Debian packages): an installed tree in a DESTDIR ($D) seen as the host's in
# a private mount namespace, and the checks a new user's login shell makes.
#   install_test_begin NAME   $D (a fresh DESTDIR) and $ns (a network namespace,
#                             veth v0 10.0.0.1/24 and v1, both up), removed at exit
#   overlay_dirs              the host directories that $D's copies are laid over
#                             (read-only overlays), set by the script
#   installed CMD             bash CMD in $ns with $D laid over the host
#   login_shell_checks        droce0 bound on v0, a new login shell with an empty
#                             environment: ibv_devices lists droce0, ibv_devinfo
#                             shows 10.0.0.1's GID, ibv_rc_pingpong -c passes on it
. "$(dirname "${BASH_SOURCE[0]}")/../fabric/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (namespaces, overlays)"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }

install_test_begin() {
  D=$(mktemp -d "/tmp/droce-$1.XXXXXX")
  ns=${NETNS_PREFIX:-netdevtest}-$1-$$  # NETNS_PREFIX: the namespace's name prefix
  trap install_test_cleanup EXIT
  ip netns add "$ns" || exit 1
  ip -n "$ns" link set lo up
  ip -n "$ns" link add v0 type veth peer name v1
  ip -n "$ns" link set v0 up; ip -n "$ns" link set v1 up
  ip -n "$ns" addr add 10.0.0.1/24 dev v0
}
install_test_cleanup() {
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "/run/droce/netns/$ns" "$D"
}

# ip netns exec keeps the overlays: it copies the mount namespace it starts in.
installed() {
  local mounts="mount --make-rprivate /" dir
  for dir in "${overlay_dirs[@]}"; do
    mounts+=" && mount -t overlay overlay -o 'lowerdir=$D$dir:$dir' '$dir'"
  done
  unshare --mount bash -c "$mounts && ip netns exec '$ns' bash -c \"\$0\"" "$1"
}

# What a new login shell reads first is /etc/profile, and so
# /etc/profile.d/droce.sh.
login_shell_checks() {
  cat >"$D/devices.sh" <<'SH'
env | grep -E '^(SYSFS_PATH|DROCE_RUN_DIR|LD_PRELOAD|RDMAV_DRIVERS)='
ibv_devices | tee /dev/stderr | grep -q droce0
SH
  cat >"$D/pingpong.sh" <<'SH'
ibv_devinfo -d droce0 -v | grep -q '::ffff:10.0.0.1' || exit 1
ibv_rc_pingpong -d droce0 -g 1 -n 100 -c &
for _ in $(seq 300); do ss -ltn | grep -q ':18515 ' && break; sleep 0.1; done
ibv_rc_pingpong -d droce0 -g 1 -n 100 -c 10.0.0.1 && wait $!
SH
  check "a new login shell: ibv_devices lists droce0, nothing set by hand" installed \
    "env -i HOME=/root TERM=dumb bash -l '$D/devices.sh'"
  check "a new login shell: ibv_devinfo and ibv_rc_pingpong -c on droce0 (10.0.0.1)" installed \
    "env -i HOME=/root TERM=dumb timeout 60 bash -l '$D/pingpong.sh'"
}
