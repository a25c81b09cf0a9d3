// droce-ctl: registers droce devices for libibverbs, like
// `rdma link add rxe0 type rxe netdev eth0` does for Soft-RoCE.
//
//   droce-ctl link add NAME netdev IFACE [steering auto|udp|xdp|af_packet]
//                                                  (the RoCE function of a host interface, doc/netdev.md)
//   droce-ctl link add NAME ip ADDR [options]      (a device of the host fabric, served by droced)
//   droce-ctl link add NAME type memif socket PATH role server|client ip ADDR [options]
//   droce-ctl link add NAME type af_packet iface IFACE ip ADDR [options]
//   droce-ctl link add NAME type vdev vdev DPDK-VDEV-STRING ip ADDR [options]
//   droce-ctl link del NAME
//   droce-ctl link show [NAME]
//   droce-ctl daemon start [--uplink SPEC] [--eal "ARGS"] [--hugepages] [--memory-mb N] | stop | status
//   droce-ctl env
//   droce-ctl settings [--markdown]
//
// Options (keyword value): ip ADDR (again for a second, IPv6 address),
// mac MAC, neighbor IP,MAC (repeatable), mtu N, netdev IFACE, eal "ARGS",
// progress PROFILE,
// set KEY=VALUE (any key of the device file: device_settings.h).
#include <linux/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "drivers/ethdev/memif_vdev.h"
#include "drivers/verbs/device_config.h"
#include "drivers/verbs/device_settings.h"
#include "apps/common/option_table.h"
#include "apps/droced/options.h"
#include "apps/droced/uplink_spec.h"
#include "drivers/fabric/build_tree.h"
#include "drivers/fabric/protocol.h"
#include "drivers/netdev/netlink.h"

namespace droce::verbs {
namespace {
namespace fs = std::filesystem;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "droce-ctl: %s\n", msg.c_str());
  return 2;
}

// A locally administered MAC derived from the device name (stable across runs).
core::Mac MacFromName(const std::string& name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return {0x02, 0xd0, 0xce, static_cast<uint8_t>(h >> 16), static_cast<uint8_t>(h >> 8), static_cast<uint8_t>(h)};
}

// droce-ctl run from the build tree uses the build tree's provider, shims
// and droced; an installed one uses the installed ones.
const std::string& BuildRoot() {
  static const std::string root = fabric::BuildTreeRoot();
  return root;
}

std::string ProviderDir() {
  const std::string dir = BuildRoot().empty() ? "" : BuildRoot() + "/drivers/verbs";
  if (!dir.empty() && fs::exists(fs::path(dir) / "libdroce-rdmav34.so")) return dir;
  return "";
}

// A shim library: the build tree's, or the installed one by its absolute
// path (LD_PRELOAD then needs no ld.so cache entry for a new install).
std::string ShimPath(const std::string& name, const std::string& build_subdir) {
  if (!BuildRoot().empty()) {
    const fs::path built = fs::path(BuildRoot()) / build_subdir / name;
    if (fs::exists(built)) return built.string();
  }
#ifdef DROCE_INSTALLED_SHIM_DIR
  if (fs::exists(fs::path(DROCE_INSTALLED_SHIM_DIR) / name)) return std::string(DROCE_INSTALLED_SHIM_DIR) + "/" + name;
#endif
  return name;
}

// The rdma_cm shim (drivers/rdmacm, doc/cm.md).
std::string RdmacmPreload() { return ShimPath("libdroce-rdmacm.so", "drivers/rdmacm"); }

int Env(const std::string& run_dir) {
  std::printf("export SYSFS_PATH=%s\n", SysfsRoot(run_dir).c_str());
  std::printf("export DROCE_RUN_DIR=%s\n", run_dir.c_str());
  const std::string dir = ProviderDir();
  if (!dir.empty()) {
    std::printf("export RDMAV_DRIVERS=%s/libdroce\n", dir.c_str());
    std::printf("export LD_PRELOAD=%s/libdroce-preload.so:%s\n", dir.c_str(), RdmacmPreload().c_str());
  } else {
    // Installed: libibverbs finds the provider through its driver file.
    std::printf("export LD_PRELOAD=%s:%s\n", ShimPath("libdroce-preload.so", "drivers/verbs").c_str(), RdmacmPreload().c_str());
  }
  return 0;
}

// droced: next to droce-ctl in a build tree or an installation, else $PATH.
std::string DrocedPath() {
  if (!BuildRoot().empty()) {
    const fs::path built = fs::path(BuildRoot()) / "apps/droced/droced";
    if (fs::exists(built)) return built.string();
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / "droced")) return (self.parent_path() / "droced").string();
  return "droced";
}

bool DaemonRunning(const std::string& run_dir) {
  const int fd = fabric::Connect(fabric::ControlSocketPath(run_dir));
  if (fd < 0) return false;
  close(fd);
  return true;
}

// What `daemon start` (or `link add` when it starts the daemon) passes on.
struct DaemonOptions {
  std::string uplink;  // --uplink SPEC ("": DROCED_UPLINK, if set, reaches droced through the environment)
  std::string eal;     // --eal "ARGS": EAL options of a real NIC's PMD
  bool hugepages = false;
  std::string memory_mb;  // --memory-mb N: droced's DPDK memory (a many-queue interface's AF_XDP UMEMs)
  bool any() const { return !uplink.empty() || !eal.empty() || hugepages || !memory_mb.empty(); }
};

// The uplink a daemon started now would get: checked here so that a bad one
// is a clear error (exit 2) rather than a daemon that failed to start.
int CheckUplink(const DaemonOptions& o) {
  const char* env = std::getenv("DROCED_UPLINK");
  const std::string spec = !o.uplink.empty() ? o.uplink : env != nullptr ? env : "";
  if (spec.empty()) return 0;
  absl::StatusOr<droced::UplinkSpec> u = droced::ParseUplinkSpec(spec);
  if (!u.ok()) return Fail(std::string(u.status().message()) + (o.uplink.empty() ? " (from DROCED_UPLINK)" : ""));
  return 0;
}

// Starts droced for the run directory unless it runs; it returns once the
// daemon listens. Options for a daemon that runs already are refused: its
// uplink and EAL are set when it starts.
int DaemonStart(const std::string& run_dir, bool quiet, const DaemonOptions& o = {}) {
  if (DaemonRunning(run_dir)) {
    if (o.any()) {
      return Fail("droced is running for " + run_dir +
                  " already: its uplink, EAL and memory options are given when it starts (droce-ctl daemon stop "
                  "first)");
    }
    if (!quiet) std::printf("droced is running for %s\n", run_dir.c_str());
    return 0;
  }
  if (const int rc = CheckUplink(o); rc != 0) return rc;
  const std::string exe = DrocedPath();
  std::vector<std::string> argv_s = {exe, "--run-dir", run_dir};
  if (!o.uplink.empty()) argv_s.insert(argv_s.end(), {"--uplink", o.uplink});
  if (!o.eal.empty()) argv_s.insert(argv_s.end(), {"--eal", o.eal});
  if (o.hugepages) argv_s.push_back("--hugepages");
  if (!o.memory_mb.empty()) argv_s.insert(argv_s.end(), {"--memory-mb", o.memory_mb});
  std::vector<char*> argv_c;
  for (std::string& a : argv_s) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Fail("fork failed");
  if (pid == 0) {
    execvp(exe.c_str(), argv_c.data());
    std::fprintf(stderr, "droce-ctl: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Fail("droced did not start (see " + fabric::LogFilePath(run_dir) + ")");
  }
  if (!quiet) std::printf("droced started for %s\n", run_dir.c_str());
  return 0;
}

int DaemonCommand(const std::string& run_dir, const std::vector<std::string>& args) {
  const std::string cmd = args.empty() ? "status" : args[0];
  const std::string control = fabric::ControlSocketPath(run_dir);
  if (cmd == "start") {
    DaemonOptions o;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--hugepages") {
        o.hugepages = true;
      } else if ((args[i] == "--uplink" || args[i] == "--eal") && i + 1 < args.size()) {
        (args[i] == "--uplink" ? o.uplink : o.eal) = args[i + 1];
        ++i;
        if (args[i - 1] == "--uplink" && o.uplink.empty()) return Fail("--uplink: empty");
      } else if (args[i] == "--memory-mb" && i + 1 < args.size()) {
        // droced's own bounds, checked here so a bad value is refused before a daemon starts.
        unsigned mb = 0;
        const absl::Status st =
            apps::Integer("--memory-mb", args[i + 1], droced::kMemoryMbMin, droced::kMemoryMbMax, &mb);
        if (!st.ok()) return Fail(std::string(st.message()));
        o.memory_mb = std::to_string(mb);
        ++i;
      } else {
        return Fail("daemon start [--uplink SPEC] [--eal \"ARGS\"] [--hugepages] [--memory-mb N]: unexpected '" +
                    args[i] + "'");
      }
    }
    return DaemonStart(run_dir, false, o);
  }
  if (cmd == "stop") {
    if (!DaemonRunning(run_dir)) {
      std::printf("droced is not running for %s\n", run_dir.c_str());
      return 0;
    }
    absl::StatusOr<fabric::Reply> r = fabric::CallOnce(control, fabric::MakeRequest(fabric::kOpShutdown, ""), 5000);
    if (!r.ok()) return Fail(std::string(r.status().message()));
    if (r->error != 0) return Fail(std::string("droced: ") + r->message);
    for (int i = 0; i < 100 && DaemonRunning(run_dir); ++i) usleep(100000);  // it detaches everyone first
    return 0;
  }
  if (cmd == "status") {
    std::string text;
    absl::StatusOr<fabric::Reply> r =
        fabric::CallOnce(control, fabric::MakeRequest(fabric::kOpStatus, args.size() > 1 ? args[1] : ""), 5000, &text);
    if (!r.ok()) return Fail(std::string(r.status().message()));
    if (r->error != 0) return Fail(std::string("droced: ") + r->message);
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  return Fail("daemon start|stop|status");
}

// "10G", "2.5g", "100M", "1000000": bits per second; "64K", "1M", "1000":
// bytes (decimal units, as switch data sheets give buffers).
bool ParseUnits(const std::string& v, uint64_t* out) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || x < 0) return false;
  double mult = 1;
  const std::string unit(end);
  if (unit == "k" || unit == "K") mult = 1e3;
  else if (unit == "m" || unit == "M") mult = 1e6;
  else if (unit == "g" || unit == "G") mult = 1e9;
  else if (!unit.empty()) return false;
  *out = static_cast<uint64_t>(x * mult + 0.5);
  return true;
}

bool ParseProbability(const std::string& v, uint32_t* ppm) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != 0 || x < 0 || x > 1) return false;
  *ppm = static_cast<uint32_t>(x * 1e6 + 0.5);
  return true;
}

// droce-ctl switch set|clear NAME ...: one kOpSwitchSet request.
int SwitchCommand(const std::string& run_dir, const std::vector<std::string>& args) {
  if (args.size() < 2 || (args[0] != "set" && args[0] != "clear")) return Fail("switch set|clear NAME [KNOB...]");
  fabric::KnobRequest k{};
  if (args[0] == "clear") {
    k.set = fabric::kKnobAll;  // everything to zero/off; seed 0
  }
  for (size_t i = 2; args[0] == "set" && i < args.size(); ++i) {
    const std::string& a = args[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), val = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (a == "bottleneck") {
      k.set |= fabric::kKnobBottleneck;
      if (i + 1 < args.size() && args[i + 1] == "off") {
        ++i;
        continue;
      }
      k.kmin_bytes = 5000, k.kmax_bytes = 200000, k.pmax_ppm = 10000;  // lib/cc's defaults
      bool rate = false;
      for (; i + 1 < args.size(); ++i) {
        const std::string& b = args[i + 1];
        const size_t e = b.find('=');
        if (e == std::string::npos) break;
        const std::string bk = b.substr(0, e), bv = b.substr(e + 1);
        uint64_t x = 0;
        if (bk == "rate" && ParseUnits(bv, &x)) {
          k.rate_bps = x, rate = true;
        } else if ((bk == "kmin" || bk == "kmax" || bk == "limit") && ParseUnits(bv, &x) && x < (1ull << 31)) {
          (bk == "kmin" ? k.kmin_bytes : bk == "kmax" ? k.kmax_bytes : k.limit_bytes) = static_cast<uint32_t>(x);
        } else if (bk == "pmax" && ParseProbability(bv, &k.pmax_ppm)) {
        } else if (bk == "int" && (bv == "on" || bv == "off")) {
          k.port_flags = static_cast<uint8_t>(bv == "on" ? k.port_flags | fabric::kPortInt : k.port_flags & ~fabric::kPortInt);
        } else if (bk == "mark" && (bv == "enqueue" || bv == "dequeue")) {
          k.port_flags = static_cast<uint8_t>(bv == "dequeue" ? k.port_flags | fabric::kPortMarkAtDequeue
                                                              : k.port_flags & ~fabric::kPortMarkAtDequeue);
        } else if (bk == "pfc") {
          // pfc=XOFF[,XON] (XON defaults to half of XOFF), or pfc=off
          uint64_t xoff = 0, xon = 0;
          const size_t comma = bv.find(',');
          if (bv == "off") {
            k.pfc_xoff_bytes = k.pfc_xon_bytes = 0;
          } else if (ParseUnits(bv.substr(0, comma), &xoff) && xoff > 0 && xoff < (1ull << 30) &&
                     (comma == std::string::npos ? (xon = xoff / 2, true) : ParseUnits(bv.substr(comma + 1), &xon)) &&
                     xon <= xoff) {
            k.pfc_xoff_bytes = static_cast<uint32_t>(xoff);
            k.pfc_xon_bytes = static_cast<uint32_t>(xon);
          } else {
            return Fail("bad pfc setting '" + b + "' (pfc=XOFF[,XON] in bytes, XON <= XOFF, or pfc=off)");
          }
        } else if (bk == "loss" || bk == "reorder" || bk == "seed") {
          break;  // the next knob
        } else {
          return Fail("bad bottleneck setting '" + b + "'");
        }
      }
      if (!rate || k.rate_bps == 0) return Fail("bottleneck needs rate=RATE (e.g. rate=10G)");
    } else if (key == "loss" && ParseProbability(val, &k.loss_ppm)) {
      k.set |= fabric::kKnobLoss;
    } else if (key == "reorder" && ParseProbability(val, &k.reorder_ppm)) {
      k.set |= fabric::kKnobReorder;
    } else if (key == "seed" && !val.empty() && val.find_first_not_of("0123456789") == std::string::npos) {
      k.set |= fabric::kKnobSeed;
      k.seed = std::strtoull(val.c_str(), nullptr, 10);
    } else if (a == "mirror" && i + 1 < args.size()) {
      k.set |= fabric::kKnobMirror;
      const std::string path = args[++i] == "off" ? "" : std::string(fs::absolute(args[i]));
      if (path.size() >= sizeof k.mirror) return Fail("mirror path too long");
      std::memcpy(k.mirror, path.c_str(), path.size());
    } else {
      return Fail("bad knob '" + a + "'");
    }
  }
  fabric::Request req = fabric::MakeRequest(fabric::kOpSwitchSet, args[1]);
  req.size = sizeof req + sizeof k;
  const std::string control = fabric::ControlSocketPath(run_dir);
  const int fd = fabric::Connect(control);
  if (fd < 0) return Fail("droced is not running for " + run_dir);
  char buf[sizeof req + sizeof k];
  std::memcpy(buf, &req, sizeof req);
  std::memcpy(buf + sizeof req, &k, sizeof k);
  const bool sent = send(fd, buf, sizeof buf, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof buf);
  pollfd pfd{fd, POLLIN, 0};
  fabric::Reply r{};
  const bool got = sent && poll(&pfd, 1, 5000) == 1 && recv(fd, &r, sizeof r, 0) == static_cast<ssize_t>(sizeof r);
  close(fd);
  if (!got) return Fail("droced did not answer");
  r.message[sizeof r.message - 1] = 0;
  if (r.error != 0) return Fail(std::string("droced: ") + r.message + " (" + std::strerror(r.error) + ")");
  return 0;
}

// Tells a running daemon that the run directory's devices changed; "" or
// what it could not do (a netdev-bound device it could not bind).
std::string DaemonRescan(const std::string& run_dir) {
  absl::StatusOr<fabric::Reply> r =
      fabric::CallOnce(fabric::ControlSocketPath(run_dir), fabric::MakeRequest(fabric::kOpRescan, ""), 15000);
  if (!r.ok()) return std::string(r.status().message());
  return r->error != 0 ? std::string(r->message) : "";
}

// `link add NAME netdev IFACE`: the interface must be there, up, Ethernet,
// with an address and room for RoCE's smallest path MTU, and bound to no
// other droce device (of this run directory, or of any droced of this
// network namespace). Fills in the device's MAC and MTU from it.
int CheckNetdev(const std::string& run_dir, const std::string& iface, DeviceFile* f) {
  if (iface.empty() || iface.size() >= IFNAMSIZ || iface.find('/') != std::string::npos) {
    return Fail("bad interface name '" + iface + "'");
  }
  absl::StatusOr<std::unique_ptr<netdev::Netlink>> nl = netdev::Netlink::Open(0);
  if (!nl.ok()) return Fail("netlink: " + std::string(nl.status().message()));
  absl::StatusOr<netdev::LinkInfo> link = (*nl)->GetLink(iface);
  if (!link.ok()) {
    return Fail(absl::IsNotFound(link.status()) ? "interface " + iface + " does not exist"
                                                : iface + ": " + std::string(link.status().message()));
  }
  if (!link->has_mac) return Fail(iface + " is not an Ethernet interface");
  if ((link->flags & IFF_UP) == 0) return Fail(iface + " is down (ip link set " + iface + " up)");
  absl::StatusOr<std::vector<netdev::AddrInfo>> addrs = (*nl)->GetAddrs(link->ifindex);
  if (!addrs.ok()) return Fail(iface + ": " + std::string(addrs.status().message()));
  bool routable = false;
  for (const netdev::AddrInfo& a : *addrs) routable |= !netdev::IsLinkLocal(a.addr);
  if (!routable) return Fail(iface + " has no IPv4 or global IPv6 address (ip addr add ADDR/LEN dev " + iface + ")");
  const uint8_t mtu = netdev::RocePathMtu(link->mtu, UINT32_MAX);
  if (mtu == 0) {
    return Fail(absl::StrCat(iface, "'s MTU ", link->mtu,
                             " is below RoCE's smallest path MTU (256 bytes and 80 of headers)"));
  }
  for (const std::string& other : ListDevices(run_dir)) {
    absl::StatusOr<DeviceFile> o = ReadDevice(run_dir, other);
    if (o.ok() && o->netdev_bound && o->netdev == iface && other != f->name) {
      return Fail(iface + " is bound to " + other + " already (droce-ctl link del " + other + " first)");
    }
  }
  // A droced of another run directory in this namespace holds the
  // interface's lock (drivers/netdev/interface_port.h): an abstract name.
  const int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe >= 0) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string name = "droce-netdev-" + std::to_string(link->ifindex);
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    const bool taken = bind(probe, reinterpret_cast<sockaddr*>(&a), len) != 0 && errno == EADDRINUSE;
    close(probe);
    if (taken) return Fail(iface + " is bound to a droce device of another run directory of this network namespace");
  }
  f->dev.mac = link->mac;
  f->mtu = 128u << mtu;
  return 0;
}

void Show(const std::string& run_dir, const DeviceFile& f) {
  if (f.netdev_bound) {
    std::printf("%s: netdev %s mac %s\n", f.name.c_str(), f.netdev.c_str(), FormatMac(f.dev.mac).c_str());
  } else if (f.fabric) {
    std::printf("%s: fabric lid %u mtu %u mac %s", f.name.c_str(), f.lid, f.mtu, FormatMac(f.dev.mac).c_str());
  } else {
    std::printf("%s: vdev %s mtu %u mac %s", f.name.c_str(), f.vdev.c_str(), f.mtu, FormatMac(f.dev.mac).c_str());
  }
  if (!f.netdev_bound) {  // a netdev-bound device's GIDs are the interface's: the daemon shows them
    const std::vector<core::Gid> gids = core::GidTable(f.dev);
    for (size_t i = 0; i < gids.size(); ++i) std::printf(" gid[%zu] %s", i, FormatGid(gids[i]).c_str());
    std::printf("\n");
  }
  if (!f.fabric) return;
  // Attached processes and their QPN ranges, as the daemon knows them.
  std::string text;
  absl::StatusOr<fabric::Reply> r = fabric::CallOnce(
      fabric::ControlSocketPath(f.fabric_dir), fabric::MakeRequest(fabric::kOpStatus, f.name), 5000, &text);
  if (!r.ok() || r->error != 0) {
    std::printf("  droced is not running for %s\n", f.fabric_dir.c_str());
  } else {
    std::fputs(text.c_str(), stdout);
  }
  (void)run_dir;
}

// `link add NAME KEY VALUE ...` as given, before the wire is decided.
struct LinkAddArgs {
  DeviceFile f;
  std::string type, socket, role, iface, vdev, steering;
  bool has_ip = false, has_netdev = false, has_mac = false;
  DaemonOptions daemon;
  std::vector<std::string> sets;  // KEY=VALUE lines for the device file's parser
};

int ParseLinkAdd(const std::vector<std::string>& args, LinkAddArgs* a) {
  if (args.empty()) return Fail("link add: missing device name");
  DeviceFile& f = a->f;
  f.name = args[0];
  if (!IsValidDeviceName(f.name)) return Fail("bad device name '" + f.name + "' (letters, digits, _ and -)");
  f.dev.mac = MacFromName(f.name);
  for (size_t i = 1; i < args.size(); i += 2) {
    const std::string& k = args[i];
    if (i + 1 >= args.size()) return Fail("link add: '" + k + "' needs a value");
    const std::string& v = args[i + 1];
    if (k == "type") {
      a->type = v;
    } else if (k == "socket") {
      a->socket = v;
    } else if (k == "role") {
      a->role = v;
    } else if (k == "iface") {
      a->iface = v;
    } else if (k == "vdev") {
      a->vdev = v;
    } else if (k == "ip") {
      auto g = ParseIpAsGid(v);
      if (!g.ok()) return Fail(std::string(g.status().message()));
      a->sets.push_back("ip=" + v);
      a->has_ip = true;
    } else if (k == "steering") {
      a->steering = v;
    } else if (k == "mac") {
      auto m = ParseMac(v);
      if (!m.ok()) return Fail(std::string(m.status().message()));
      f.dev.mac = *m;
      a->has_mac = true;
    } else if (k == "lid-peer") {
      auto g = ParseIpAsGid(v);
      if (!g.ok()) return Fail(std::string(g.status().message()));
      a->sets.push_back("lid_peer=" + v);
    } else if (k == "neighbor") {
      a->sets.push_back("neighbor=" + v);
    } else if (k == "mtu") {
      a->sets.push_back("mtu=" + v);
    } else if (k == "netdev") {
      f.netdev = v;
      a->has_netdev = true;
    } else if (k == "uplink") {
      if (v.empty()) return Fail("link add: uplink: empty");
      a->daemon.uplink = v;
    } else if (k == "progress") {
      a->sets.insert(a->sets.begin(), "progress_profile=" + v);  // knobs set with it change the profile
    } else if (k == "eal") {
      a->sets.push_back("eal_args=" + v);
    } else if (k == "set") {
      if (v.find('=') == std::string::npos) return Fail("set: expected KEY=VALUE, got '" + v + "'");
      a->sets.push_back(v);
    } else {
      return Fail("link add: unknown option '" + k + "'");
    }
  }
  return 0;
}

// A device with a DPDK wire of its own: memif, af_packet or any vdev.
int ConfigureOwnWire(LinkAddArgs* a) {
  if (a->type == "memif") {
    if (a->socket.empty()) return Fail("type memif needs 'socket PATH'");
    if (a->role != "server" && a->role != "client") return Fail("type memif needs 'role server' or 'role client'");
    if (a->socket[0] != '/') return Fail("memif socket must be an absolute path");
    a->vdev = ethdev::MemifVdevArgs({.name = "net_memif_" + a->f.name,
                                     .server = a->role == "server",
                                     .socket = a->socket,
                                     .buffer_bytes = 10240});
  } else if (a->type == "af_packet") {
    if (a->iface.empty()) return Fail("type af_packet needs 'iface IFACE'");
    // 4 KiB ring slots: DPDK 22.11's af_packet PMD sends nothing from larger
    // ones, so path MTU is at most 2048 on this wire.
    a->vdev = absl::StrCat("net_af_packet_", a->f.name, ",iface=", a->iface,
                           ",framesz=4096,blocksz=4096,framecnt=1024,qpairs=1");
    a->sets.insert(a->sets.begin(), "mtu=2048");
  } else if (a->type == "vdev") {
    if (a->vdev.empty()) return Fail("type vdev needs 'vdev DPDK-VDEV-STRING'");
  } else {
    return Fail("unknown type '" + a->type + "' (memif, af_packet, vdev, or none for the fabric)");
  }
  if (!a->daemon.uplink.empty()) return Fail("link add: uplink is a fabric device's (no type)");
  return 0;
}

// Both kinds of droced device (fabric and netdev-bound) live in the run
// directory, whose control socket path must fit sockaddr_un.
int JoinRunDir(const std::string& run_dir, DeviceFile* f) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  f->fabric = true;
  f->fabric_dir = fs::weakly_canonical(run_dir, ec).string();
  if (fabric::ControlSocketPath(f->fabric_dir).size() >= 108) return Fail("run directory path too long for a socket");
  return 0;
}

// The RoCE function of a host interface (doc/netdev.md): droced binds it;
// MAC, MTU and addresses are the interface's.
int ConfigureNetdevBound(const std::string& run_dir, LinkAddArgs* a) {
  DeviceFile& f = a->f;
  if (!a->vdev.empty() || !a->socket.empty() || !a->iface.empty() || a->has_mac || !a->daemon.uplink.empty()) {
    return Fail("a netdev-bound device takes its MAC and addresses from " + f.netdev +
                " (no mac, vdev, socket, iface or uplink)");
  }
  if (const int rc = JoinRunDir(run_dir, &f); rc != 0) return rc;
  f.netdev_bound = true;
  if (!a->steering.empty()) {  // checked by the device file's own parser, before the interface is probed
    if (absl::Status s = FindDeviceSetting("netdev_steering")->parse(a->steering, f); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  f.dev.broadcast_unresolved = false;  // the kernel resolves its neighbours
  return CheckNetdev(run_dir, f.netdev, &f);
}

// The host fabric: no wire of its own; droced switches its frames.
int ConfigureFabric(const std::string& run_dir, LinkAddArgs* a) {
  DeviceFile& f = a->f;
  if (!a->vdev.empty() || !a->socket.empty() || !a->iface.empty()) {
    return Fail("a fabric device takes no vdev/socket/iface");
  }
  // The daemon's uplink: checked before anything is written.
  if (const int rc = CheckUplink(a->daemon); rc != 0) return rc;
  if (!a->daemon.uplink.empty() && DaemonRunning(run_dir)) {
    return Fail("link add: uplink: droced is running for " + run_dir +
                " already, its uplink set when it started (droce-ctl daemon stop first, or leave uplink out)");
  }
  if (const int rc = JoinRunDir(run_dir, &f); rc != 0) return rc;
  // Its LID (the fabric's subnet manager is here): kept on re-registering,
  // else the smallest one no other fabric device of the directory has.
  std::vector<bool> taken(0xC000, false);
  for (const std::string& other : ListDevices(run_dir)) {
    absl::StatusOr<DeviceFile> o = ReadDevice(run_dir, other);
    if (!o.ok() || !o->fabric || o->lid == 0) continue;
    if (other == f.name) f.lid = o->lid;
    else taken[o->lid] = true;
  }
  for (uint32_t lid = 1; lid < taken.size() && (f.lid == 0 || taken[f.lid]); ++lid) {
    if (!taken[lid]) f.lid = static_cast<uint16_t>(lid);
  }
  return 0;
}

// Writes the device's tree and, for droced's devices, has droced take it.
int RegisterDevice(const std::string& run_dir, const std::string& dev_dir, const DeviceFile& f,
                   const DaemonOptions& daemon) {
  absl::Status s = WriteDeviceTree(run_dir, dev_dir, f);
  if (!s.ok()) return Fail(std::string(s.message()));
  if (!f.fabric) return 0;
  if (const int rc = DaemonStart(f.fabric_dir, /*quiet=*/true, daemon); rc != 0) {
    if (f.netdev_bound) (void)RemoveDeviceTree(run_dir, dev_dir, f.name);
    return rc;
  }
  const std::string failed = DaemonRescan(f.fabric_dir);
  if (!failed.empty() && f.netdev_bound) {
    // droced could not bind it (XDP, the interface's lock, UDP 4791 ...).
    (void)RemoveDeviceTree(run_dir, dev_dir, f.name);
    (void)DaemonRescan(f.fabric_dir);
    std::string why = failed;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Fail("droced cannot bind " + f.name + ": " + why);
  }
  return 0;
}

int LinkAdd(const std::string& run_dir, const std::string& dev_dir, const std::vector<std::string>& args) {
  LinkAddArgs a;
  if (const int rc = ParseLinkAdd(args, &a); rc != 0) return rc;
  int rc = 0;
  if (!a.type.empty()) {
    rc = ConfigureOwnWire(&a);
  } else if (a.has_netdev && !a.has_ip) {
    rc = ConfigureNetdevBound(run_dir, &a);
  } else {
    rc = ConfigureFabric(run_dir, &a);
  }
  if (rc != 0) return rc;
  if (!a.steering.empty() && !a.f.netdev_bound) return Fail("link add: steering is a netdev-bound device's");
  a.f.vdev = a.vdev;
  // Validate everything through the same parser the provider uses.
  std::string text = FormatDeviceFile(a.f);
  for (const std::string& s : a.sets) text += s + "\n";
  absl::StatusOr<DeviceFile> parsed = ParseDeviceFile(text);
  if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
  if (!fs::exists("/sys/class/net/" + parsed->netdev)) {
    return Fail("netdev '" + parsed->netdev + "' does not exist (libibverbs resolves GIDs through it)");
  }
  if (const int reg = RegisterDevice(run_dir, dev_dir, *parsed, a.daemon); reg != 0) return reg;
  Show(run_dir, *parsed);
  return 0;
}

// Where droce-ctl registers devices: --run-dir and --dev-dir.
struct Dirs {
  std::string run;
  std::string dev;
};

int LinkDel(const Dirs& d, const std::vector<std::string>& args) {
  if (args.size() != 1) return Fail("link del NAME");
  absl::Status s = RemoveDeviceTree(d.run, d.dev, args[0]);
  if (s.ok() && DaemonRunning(d.run)) (void)DaemonRescan(d.run);
  return s.ok() ? 0 : Fail(std::string(s.message()));
}

int LinkShow(const Dirs& d, const std::vector<std::string>& args) {
  std::vector<std::string> names = args.empty() ? ListDevices(d.run) : args;
  int rc = 0;
  for (const std::string& n : names) {
    absl::StatusOr<DeviceFile> f = ReadDevice(d.run, n);
    if (!f.ok()) {
      rc = Fail(std::string(f.status().message()));
      continue;
    }
    Show(d.run, *f);
  }
  return rc;
}

int Settings(const Dirs&, const std::vector<std::string>& args) {
  const bool markdown = !args.empty() && args[0] == "--markdown";  // doc/verbs.md's tables
  std::fputs((markdown ? DeviceSettingsMarkdown() + "\n" + ProgressProfilesMarkdown() : DeviceSettingsText()).c_str(),
             stdout);
  return 0;
}

// droce-ctl's commands: the words that name one, its handler (given the
// arguments after those words) and its usage lines (none: an alias).
struct Command {
  const char* name;
  int (*run)(const Dirs& d, const std::vector<std::string>& args);
  const char* usage;
};
constexpr Command kCommands[] = {
    {"link add", [](const Dirs& d, const std::vector<std::string>& a) { return LinkAdd(d.run, d.dev, a); },
     "  link add NAME netdev IFACE [steering auto|udp|xdp|af_packet]\n"
     "                                    the RoCE function of a host interface, as Linux rxe's\n"
     "                                    (its MAC, MTU and addresses; droced binds it: doc/netdev.md)\n"
     "  link add NAME ip ADDR [OPTIONS]   a device of the host fabric (droced, started as needed):\n"
     "                                    any number of processes open it\n"
     "  link add NAME type memif socket PATH role server|client ip ADDR [OPTIONS]\n"
     "  link add NAME type af_packet iface IFACE ip ADDR [OPTIONS]\n"
     "  link add NAME type vdev vdev DPDK-VDEV ip ADDR [OPTIONS]\n"},
    {"link del", LinkDel, "  link del NAME\n"},
    {"link delete", LinkDel, nullptr},
    {"link show", LinkShow, "  link show [NAME]\n"},
    {"daemon", [](const Dirs& d, const std::vector<std::string>& a) { return DaemonCommand(d.run, a); },
     "  daemon start [--uplink SPEC] [--eal \"ARGS\"] [--hugepages] [--memory-mb N] | stop | status\n"
     "                             the run directory's fabric daemon (droced); SPEC (else $DROCED_UPLINK):\n"
     "                             memif:SOCKET:server|client, vdev:NAME[,ARGS], pci:DDDD:BB:DD.F[,ARGS]\n"},
    {"switch", [](const Dirs& d, const std::vector<std::string>& a) { return SwitchCommand(d.run, a); },
     "  switch set NAME KNOB...    the network's knobs on a fabric device's switch port (frames to it):\n"
     "         bottleneck rate=10G kmin=BYTES kmax=BYTES pmax=0.01 [limit=BYTES] [mark=enqueue|dequeue]\n"
     "                    [int=on] [pfc=XOFF[,XON]] | bottleneck off,\n"
     "         loss=P, reorder=P, seed=N, mirror FILE.pcap | mirror off\n"
     "  switch clear NAME          every knob of the device off\n"},
    {"env", [](const Dirs& d, const std::vector<std::string>&) { return Env(d.run); },
     "  env            print the environment a verbs program needs\n"},
    {"settings", Settings,
     "  settings [--markdown]  the device file's keys (set KEY=VALUE), their defaults and what they set\n"},
};

std::string Usage() {
  std::string out = "usage: droce-ctl [--run-dir DIR] [--dev-dir DIR] COMMAND\n";
  for (const Command& c : kCommands) {
    if (c.usage != nullptr) out += c.usage;
  }
  return out +
         "OPTIONS: ip ADDR (IPv4 and/or IPv6), mac MAC, neighbor IP,MAC, mtu 256..4096,\n"
         "         uplink SPEC (a fabric device: the uplink of the daemon this starts, as daemon start --uplink),\n"
         "         lid-peer IP (point-to-point: LID-addressed QPs, e.g. qperf's, go to IP),\n"
         "         netdev IFACE (named by sysfs gid_attrs, default lo), eal \"ARGS\",\n"
         "         progress balanced|latency|shared-host (the progress thread's profile, doc/verbs.md),\n"
         "         set KEY=VALUE (any key of the device file: droce-ctl settings)\n"
         "Devices live under --run-dir (default $DROCE_RUN_DIR, else /run/droce, or /run/droce/netns/NAME\n"
         "inside `ip netns exec NAME`: a network namespace is a host).\n";
}

int Main(int argc, char** argv) {
  Dirs dirs{DefaultRunDir(), kDevInfinibandDir};
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--run-dir" || a == "--dev-dir") && i + 1 < argc) {
      (a == "--run-dir" ? dirs.run : dirs.dev) = argv[++i];
    } else if (a == "-h" || a == "--help") {
      std::fputs(Usage().c_str(), stdout);
      return 0;
    } else {
      args.push_back(a);
    }
  }
  bool known_group = false;  // args[0] begins some command ("link")
  for (const Command& c : kCommands) {
    const std::vector<std::string> words = absl::StrSplit(c.name, ' ');
    known_group |= !args.empty() && args[0] == words[0];
    if (args.size() >= words.size() && std::equal(words.begin(), words.end(), args.begin())) {
      return c.run(dirs, std::vector<std::string>(args.begin() + static_cast<ptrdiff_t>(words.size()), args.end()));
    }
  }
  if (known_group && args.size() >= 2) return Fail("unknown command '" + args[0] + " " + args[1] + "'");
  std::fputs(Usage().c_str(), stderr);
  return 2;
}

}  // namespace
}  // namespace droce::verbs

int main(int argc, char** argv) { return droce::verbs::Main(argc, argv); }
