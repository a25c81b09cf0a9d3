#include "drivers/netdev/xdp.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "drivers/fabric/build_tree.h"

namespace droce::netdev {
namespace {

struct ProgInfo {
  std::string name;
  std::vector<uint32_t> map_ids;
};

absl::StatusOr<ProgInfo> ReadProgInfo(int prog_fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) {
    return absl::UnavailableError(absl::StrCat("bpf program info: ", std::strerror(errno)));
  }
  ProgInfo out;
  out.name = std::string(info.name, strnlen(info.name, sizeof info.name));
  const uint32_t nmaps = info.nr_map_ids;
  out.map_ids.resize(nmaps);
  if (nmaps > 0) {
    bpf_prog_info again{};
    again.nr_map_ids = nmaps;
    again.map_ids = reinterpret_cast<uint64_t>(out.map_ids.data());
    len = sizeof again;
    if (bpf_obj_get_info_by_fd(prog_fd, &again, &len) != 0) {
      return absl::UnavailableError(absl::StrCat("bpf program maps: ", std::strerror(errno)));
    }
    out.map_ids.resize(std::min(nmaps, again.nr_map_ids));
  }
  return out;
}

struct Attachment {
  uint32_t prog_id = 0;
  uint8_t mode = 0;  // XDP_ATTACHED_*
};

absl::StatusOr<Attachment> Query(int ifindex) {
  LIBBPF_OPTS(bpf_xdp_query_opts, opts);
  if (const int rc = bpf_xdp_query(ifindex, 0, &opts); rc != 0) {
    return absl::UnavailableError(absl::StrCat("XDP query: ", std::strerror(-rc)));
  }
  Attachment a;
  a.mode = opts.attach_mode;
  a.prog_id = opts.prog_id != 0 ? opts.prog_id : opts.drv_prog_id != 0 ? opts.drv_prog_id : opts.skb_prog_id;
  return a;
}

std::string ModeName(uint8_t mode) {
  switch (mode) {
    case XDP_ATTACHED_DRV:
      return "native";
    case XDP_ATTACHED_SKB:
      return "generic";
    case XDP_ATTACHED_HW:
      return "offload";
    case XDP_ATTACHED_MULTI:
      return "multi";
    default:
      return "none";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<XdpProgram>> XdpProgram::Attached(int ifindex) {
  absl::StatusOr<Attachment> a = Query(ifindex);
  if (!a.ok()) return a.status();
  if (a->prog_id == 0) return absl::NotFoundError("no XDP program on the interface");
  const int prog_fd = bpf_prog_get_fd_by_id(a->prog_id);
  if (prog_fd < 0) return absl::UnavailableError(absl::StrCat("XDP program ", a->prog_id, ": ", std::strerror(errno)));
  absl::StatusOr<ProgInfo> info = ReadProgInfo(prog_fd);
  close(prog_fd);
  if (!info.ok()) return info.status();
  if (info->name != kXdpProgramName) {
    return absl::FailedPreconditionError(absl::StrCat("the interface runs another XDP program (", info->name, ")"));
  }
  std::unique_ptr<XdpProgram> p(new XdpProgram());
  p->prog_id_ = a->prog_id;
  p->mode_ = ModeName(a->mode);
  for (uint32_t id : info->map_ids) {
    const int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_map_info mi{};
    uint32_t len = sizeof mi;
    if (bpf_obj_get_info_by_fd(fd, &mi, &len) == 0) {
      const std::string name(mi.name, strnlen(mi.name, sizeof mi.name));
      if (name == "droce_addrs" && mi.key_size == 16 && mi.value_size == 4) {
        p->addrs_fd_ = fd;
        continue;
      }
      if (name == "droce_stats" && mi.value_size == 8) {
        p->stats_fd_ = fd;
        continue;
      }
      if (name == "xsks_map" && mi.type == BPF_MAP_TYPE_XSKMAP) {
        p->xsks_fd_ = fd;
        continue;
      }
    }
    close(fd);
  }
  if (p->addrs_fd_ < 0) return absl::FailedPreconditionError("droce's XDP program has no droce_addrs map");
  return p;
}

XdpProgram::~XdpProgram() {
  if (addrs_fd_ >= 0) close(addrs_fd_);
  if (stats_fd_ >= 0) close(stats_fd_);
  if (xsks_fd_ >= 0) close(xsks_fd_);
}

absl::Status XdpProgram::SetQueueSocket(uint32_t queue, int xsk_fd) {
  if (xsks_fd_ < 0) return absl::FailedPreconditionError("droce's XDP program has no xsks_map");
  const auto fd = static_cast<uint32_t>(xsk_fd);
  if (bpf_map_update_elem(xsks_fd_, &queue, &fd, BPF_ANY) != 0) {
    return absl::UnavailableError(absl::StrCat("the AF_XDP socket of RX queue ", queue, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status XdpProgram::SetAddresses(const std::vector<Gid>& addrs) {
  absl::Status s = SyncAddressMap(addrs_fd_, addrs);
  if (s.ok()) addrs_ = addrs;
  return s;
}

absl::Status SyncAddressMap(int fd, const std::vector<Gid>& addrs) {
  // Add first, then remove: an address in both sets is never missing.
  for (const Gid& g : addrs) {
    const uint32_t one = 1;
    if (bpf_map_update_elem(fd, g.data(), &one, BPF_ANY) != 0) {
      return absl::UnavailableError(absl::StrCat("BPF address map: ", std::strerror(errno)));
    }
  }
  std::vector<Gid> present;
  Gid key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    present.push_back(next);
    key = next;
    prev = key.data();
    if (present.size() > 1024) break;  // the maps hold 64
  }
  for (const Gid& g : present) {
    if (std::find(addrs.begin(), addrs.end(), g) == addrs.end()) (void)bpf_map_delete_elem(fd, g.data());
  }
  return absl::OkStatus();
}

void SumPerCpuCounters(int fd, uint64_t* const* fields, uint32_t n) {
  if (fd < 0) return;
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  for (uint32_t k = 0; k < n; ++k) {
    if (bpf_map_lookup_elem(fd, &k, per_cpu.data()) != 0) continue;
    for (uint64_t v : per_cpu) *fields[k] += v;
  }
}

XdpStats XdpProgram::ReadStats() const {
  XdpStats s;
  uint64_t* const fields[] = {&s.redirected, &s.no_socket, &s.passed};
  SumPerCpuCounters(stats_fd_, fields, 3);
  return s;
}

absl::StatusOr<bool> DetachStaleProgram(int ifindex) {
  absl::StatusOr<Attachment> a = Query(ifindex);
  if (!a.ok()) return a.status();
  if (a->prog_id == 0) return false;
  const int prog_fd = bpf_prog_get_fd_by_id(a->prog_id);
  if (prog_fd < 0) return false;
  absl::StatusOr<ProgInfo> info = ReadProgInfo(prog_fd);
  close(prog_fd);
  if (!info.ok() || info->name != kXdpProgramName) return false;
  const uint32_t mode = a->mode == XDP_ATTACHED_SKB ? XDP_FLAGS_SKB_MODE
                        : a->mode == XDP_ATTACHED_HW ? XDP_FLAGS_HW_MODE
                                                     : XDP_FLAGS_DRV_MODE;
  if (const int rc = bpf_xdp_detach(ifindex, mode, nullptr); rc != 0) {
    return absl::UnavailableError(absl::StrCat("detaching a stale droce XDP program: ", std::strerror(-rc)));
  }
  return true;
}

std::string BpfObjectPath(const char* env_var, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv(env_var); env != nullptr && *env != 0) {
    return fs::exists(env, ec) ? env : "";
  }
  // A droced run from the build tree uses the build tree's object.
  if (const std::string root = fabric::BuildTreeRoot(); !root.empty()) {
    const std::string built = root + "/drivers/netdev/" + file;
    if (fs::exists(built, ec)) return built;
  }
#ifdef DROCE_INSTALLED_BPF_DIR
  const std::string installed = std::string(DROCE_INSTALLED_BPF_DIR) + "/" + file;
  if (fs::exists(installed, ec)) return installed;
#endif
  return "";
}

std::string XdpObjectPath() { return BpfObjectPath("DROCED_XDP_PROG", "droce_xdp.o"); }

namespace {

// A classic BPF program with symbolic jump targets.
class FilterBuilder {
 public:
  void Stmt(uint16_t code, uint32_t k) { insns_.push_back({code, 0, 0, k}); }
  // A conditional jump to labels (an empty label: the next instruction).
  void Jump(uint16_t code, uint32_t k, const std::string& jt, const std::string& jf) {
    fixups_.push_back({insns_.size(), jt, jf});
    insns_.push_back({code, 0, 0, k});
  }
  void Label(const std::string& name) { labels_[name] = insns_.size(); }
  absl::StatusOr<std::vector<sock_filter>> Finish() {
    for (const Fixup& f : fixups_) {
      for (int side = 0; side < 2; ++side) {
        const std::string& l = side == 0 ? f.jt : f.jf;
        size_t target = f.at + 1;
        if (!l.empty()) {
          auto it = labels_.find(l);
          if (it == labels_.end()) return absl::InternalError("filter: unknown label " + l);
          target = it->second;
        }
        if (target <= f.at || target - f.at - 1 > 255) return absl::InternalError("filter: jump out of range");
        (side == 0 ? insns_[f.at].jt : insns_[f.at].jf) = static_cast<uint8_t>(target - f.at - 1);
      }
    }
    return insns_;
  }

 private:
  struct Fixup {
    size_t at;
    std::string jt, jf;
  };
  std::vector<sock_filter> insns_;
  std::vector<Fixup> fixups_;
  std::map<std::string, size_t> labels_;
};

uint32_t Be32At(const Gid& g, size_t off) {
  return (uint32_t{g[off]} << 24) | (uint32_t{g[off + 1]} << 16) | (uint32_t{g[off + 2]} << 8) | g[off + 3];
}

}  // namespace

absl::StatusOr<std::vector<sock_filter>> RoceFilter(const std::vector<Gid>& addrs) {
  if (addrs.size() > kMaxFilterAddrs) {
    return absl::InvalidArgumentError(absl::StrFormat("%zu addresses: the filter holds %zu", addrs.size(),
                                                      kMaxFilterAddrs));
  }
  constexpr uint32_t kAccept = 0xFFFFFFFF, kDrop = 0, kPort = 4791;
  FilterBuilder b;
  // To us, or to a group the interface is a member of (the addresses then
  // say whether it is one of the device's).
  b.Stmt(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE));
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, PACKET_HOST, "ether", "");
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, PACKET_MULTICAST, "", "drop0");
  b.Label("ether");
  // A tagged frame (its tag in the metadata, the data untagged) is its
  // VLAN interface's, never the interface's own.
  b.Stmt(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT));
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, "", "drop0");
  b.Stmt(BPF_LD | BPF_H | BPF_ABS, 12);  // EtherType
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0x0800, "v4", "");
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, 0x86DD, "v6", "drop0");
  b.Label("drop0");
  b.Stmt(BPF_RET | BPF_K, kDrop);
  // IPv4: UDP, not a fragment, to port 4791 (after the header's own
  // length), to one of our addresses.
  b.Label("v4");
  b.Stmt(BPF_LD | BPF_B | BPF_ABS, 14 + 9);
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, 17, "", "drop4");
  b.Stmt(BPF_LD | BPF_H | BPF_ABS, 14 + 6);
  b.Jump(BPF_JMP | BPF_JSET | BPF_K, 0x3FFF, "drop4", "");
  b.Stmt(BPF_LDX | BPF_B | BPF_MSH, 14);
  b.Stmt(BPF_LD | BPF_H | BPF_IND, 14 + 2);
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, kPort, "", "drop4");
  b.Stmt(BPF_LD | BPF_W | BPF_ABS, 14 + 16);
  for (const Gid& g : addrs) {
    if (wire::IsIpv4MappedGid(g)) b.Jump(BPF_JMP | BPF_JEQ | BPF_K, Be32At(g, 12), "accept4", "");
  }
  b.Label("drop4");
  b.Stmt(BPF_RET | BPF_K, kDrop);
  b.Label("accept4");
  b.Stmt(BPF_RET | BPF_K, kAccept);
  // IPv6: UDP right after the fixed header, to port 4791, to one of ours.
  b.Label("v6");
  b.Stmt(BPF_LD | BPF_B | BPF_ABS, 14 + 6);
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, 17, "", "drop6");
  b.Stmt(BPF_LD | BPF_H | BPF_ABS, 14 + 40 + 2);
  b.Jump(BPF_JMP | BPF_JEQ | BPF_K, kPort, "v6addrs", "drop6");
  b.Label("drop6");
  b.Stmt(BPF_RET | BPF_K, kDrop);
  b.Label("v6addrs");
  int n = 0;
  for (const Gid& g : addrs) {
    if (wire::IsIpv4MappedGid(g)) continue;
    const std::string next = absl::StrCat("v6next", n++);
    for (int w = 0; w < 4; ++w) {
      b.Stmt(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(14 + 24 + 4 * w));
      b.Jump(BPF_JMP | BPF_JEQ | BPF_K, Be32At(g, static_cast<size_t>(4 * w)), "", next);
    }
    b.Stmt(BPF_RET | BPF_K, kAccept);
    b.Label(next);
  }
  b.Stmt(BPF_RET | BPF_K, kDrop);
  return b.Finish();
}

absl::Status AttachFilter(int fd, const std::vector<sock_filter>& filter) {
  sock_fprog prog{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
    return absl::UnavailableError(absl::StrCat("SO_ATTACH_FILTER: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace droce::netdev
