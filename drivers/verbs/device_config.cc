#include "drivers/verbs/device_config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "droce/version.h"
#include "wire/gid.h"

namespace droce::verbs {
namespace fs = std::filesystem;

namespace {

absl::Status WriteFile(const fs::path& p, absl::string_view content) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", p.parent_path().string(), ": ", ec.message()));
  std::ofstream out(p, std::ios::trunc);
  out << content;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", p.string()));
  return absl::OkStatus();
}

std::string NodeGuid(const core::Mac& m) {  // EUI-64 of the MAC, sysfs form
  return absl::StrFormat("%02x%02x:%02x%02x:%02x%02x:%02x%02x", m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3],
                         m[4], m[5]);
}

}  // namespace

std::string UverbsName(const std::string& run_dir, const std::string& ibdev) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char c : run_dir) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return absl::StrFormat("uverbs_%s_%08x", ibdev, h);
}

absl::StatusOr<core::Mac> ParseMac(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  core::Mac m{};
  if (parts.size() != 6) return absl::InvalidArgumentError(absl::StrCat("bad MAC address '", s, "'"));
  for (int i = 0; i < 6; ++i) {
    uint32_t x = 0;
    if (parts[i].size() != 2 || !absl::SimpleHexAtoi(parts[i], &x)) {
      return absl::InvalidArgumentError(absl::StrCat("bad MAC address '", s, "'"));
    }
    m[i] = static_cast<uint8_t>(x);
  }
  if (m[0] & 1) return absl::InvalidArgumentError(absl::StrCat("MAC address '", s, "' is multicast"));
  return m;
}

std::string FormatMac(const core::Mac& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

absl::StatusOr<core::Gid> ParseIpAsGid(absl::string_view s) {
  const std::string str(s);
  core::Gid g{};
  in_addr a4{};
  if (inet_pton(AF_INET, str.c_str(), &a4) == 1) {
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, &a4, 4);
    return g;
  }
  if (inet_pton(AF_INET6, str.c_str(), g.data()) == 1) return g;
  return absl::InvalidArgumentError(absl::StrCat("bad IP address '", s, "'"));
}

std::string FormatGid(const core::Gid& g) {
  std::string out;
  for (int i = 0; i < 16; i += 2) {
    absl::StrAppendFormat(&out, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
  }
  return out;
}

bool IsValidDeviceName(absl::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

std::string NetnsRunDir() {
  struct stat self{}, init{};
  if (::stat("/proc/self/ns/net", &self) != 0) return "/run/droce";
  // A namespace `ip netns add NAME` made is bind-mounted at /run/netns/NAME.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    struct stat st{};
    if (::stat(e.path().c_str(), &st) == 0 && st.st_dev == self.st_dev && st.st_ino == self.st_ino) {
      const std::string name = e.path().filename().string();
      if (IsValidDeviceName(name)) return "/run/droce/netns/" + name;
    }
  }
  // Another one is told from the host's (PID 1's) by its inode; where PID 1's
  // cannot be read (a container's root), it counts as the host's.
  if (::stat("/proc/1/ns/net", &init) == 0 && (init.st_dev != self.st_dev || init.st_ino != self.st_ino)) {
    return absl::StrCat("/run/droce/netns/ino-", self.st_ino);
  }
  return "/run/droce";
}

std::string DefaultRunDir() {
  const char* env = std::getenv("DROCE_RUN_DIR");
  return env != nullptr && *env != 0 ? env : NetnsRunDir();
}

absl::Status WriteDeviceTree(const std::string& run_dir, const std::string& dev_dir, const DeviceFile& f) {
  if (!IsValidDeviceName(f.name)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", f.name, "'"));
  const fs::path sys = SysfsRoot(run_dir);
  const fs::path verbs_class = sys / "class/infiniband_verbs";
  const fs::path uverbs = verbs_class / UverbsName(run_dir, f.name);
  const fs::path ibdev = sys / "class/infiniband" / f.name;
  if (fs::exists(ibdev)) return absl::AlreadyExistsError(absl::StrCat("device ", f.name, " already exists"));

  const std::vector<core::Gid> gids = core::GidTable(f.dev);

  std::vector<std::pair<fs::path, std::string>> files = {
      {verbs_class / "abi_version", "6\n"},
      {uverbs / "ibdev", f.name + "\n"},
      {uverbs / "dev", "1:7\n"},
      {uverbs / "abi_version", "1\n"},
      {ibdev / "node_type", "1: CA\n"},
      {ibdev / "node_guid", NodeGuid(f.dev.mac) + "\n"},
      {ibdev / "sys_image_guid", NodeGuid(f.dev.mac) + "\n"},
      {ibdev / "fw_ver", DROCE_VERSION_STRING "\n"},
      {ibdev / "hca_type", "droce\n"},
      {ibdev / "node_desc", absl::StrCat("droce ", f.name, "\n")},
      {ibdev / "device/modalias", absl::StrCat("droce:", f.name, "\n")},
      {ibdev / kConfigFileName, FormatDeviceFile(f)},
      {ibdev / "ports/1/state", "4: ACTIVE\n"},
      {ibdev / "ports/1/phys_state", "5: LinkUp\n"},
      {ibdev / "ports/1/link_layer", "Ethernet\n"},
      {ibdev / "ports/1/rate", "100 Gb/sec (4X EDR)\n"},
      {ibdev / "ports/1/lid", "0x0\n"},
      {ibdev / "ports/1/sm_lid", "0x0\n"},
      {ibdev / "ports/1/lid_mask_count", "0\n"},
      {ibdev / "ports/1/sm_sl", "0\n"},
      {ibdev / "ports/1/cap_mask", "0x04010000\n"},
      {ibdev / "ports/1/pkeys/0", "0xffff\n"},
  };
  // The port's GID table has room for kGidTableLen entries, as a kernel
  // RoCE device's has for more addresses: unused ones read as the zero GID
  // (libibverbs then answers ENODATA for them and skips them in tables).
  for (size_t i = 0; i < kGidTableLen; ++i) {
    const std::string idx = std::to_string(i);
    const bool used = i < gids.size();
    files.push_back({ibdev / "ports/1/gids" / idx, FormatGid(used ? gids[i] : core::Gid{}) + "\n"});
    files.push_back({ibdev / "ports/1/gid_attrs/types" / idx, "RoCE v2\n"});
    if (used) files.push_back({ibdev / "ports/1/gid_attrs/ndevs" / idx, f.netdev + "\n"});
  }
  for (const auto& [p, content] : files) {
    absl::Status s = WriteFile(p, content);
    if (!s.ok()) return s;
  }
  std::error_code ec;
  fs::create_directories(dev_dir, ec);
  const std::string node = dev_dir + "/" + UverbsName(run_dir, f.name);
  ::unlink(node.c_str());
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot create %s: %s (run droce-ctl as root)", node, std::strerror(errno)));
  }
  ::chmod(node.c_str(), 0666);  // as udev makes uverbs nodes: any user may open them
  return absl::OkStatus();
}

absl::Status WritePortState(const std::string& run_dir, const std::string& name, const std::string& netdev,
                            const std::vector<core::Gid>& gids, uint32_t valid_mask, bool active) {
  if (!IsValidDeviceName(name)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", name, "'"));
  const fs::path port = fs::path(SysfsRoot(run_dir)) / "class/infiniband" / name / "ports/1";
  if (!fs::exists(port)) return absl::NotFoundError(absl::StrCat("no device ", name));
  auto replace = [](const fs::path& p, const std::string& content) {
    const fs::path tmp = p.string() + ".new";
    absl::Status s = WriteFile(tmp, content);
    std::error_code ec;
    if (s.ok()) fs::rename(tmp, p, ec);
    if (s.ok() && ec) s = absl::UnavailableError(absl::StrCat("cannot replace ", p.string(), ": ", ec.message()));
    return s;
  };
  for (size_t i = 0; i < kGidTableLen; ++i) {
    const std::string idx = std::to_string(i);
    const bool used = i < gids.size() && (valid_mask >> i) & 1;
    absl::Status s = replace(port / "gids" / idx, FormatGid(used ? gids[i] : core::Gid{}) + "\n");
    if (s.ok()) s = replace(port / "gid_attrs/types" / idx, "RoCE v2\n");
    std::error_code ec;
    if (s.ok() && used) s = replace(port / "gid_attrs/ndevs" / idx, netdev + "\n");
    if (!used) fs::remove(port / "gid_attrs/ndevs" / idx, ec);
    if (!s.ok()) return s;
  }
  absl::Status s = replace(port / "state", active ? "4: ACTIVE\n" : "1: DOWN\n");
  if (s.ok()) s = replace(port / "phys_state", active ? "5: LinkUp\n" : "3: Disabled\n");
  return s;
}

absl::Status RemoveDeviceTree(const std::string& run_dir, const std::string& dev_dir, const std::string& name) {
  if (!IsValidDeviceName(name)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", name, "'"));
  const fs::path sys = SysfsRoot(run_dir);
  const fs::path ibdev = sys / "class/infiniband" / name;
  if (!fs::exists(ibdev)) return absl::NotFoundError(absl::StrCat("no device ", name));
  std::error_code ec;
  fs::remove_all(ibdev, ec);
  fs::remove_all(sys / "class/infiniband_verbs" / UverbsName(run_dir, name), ec);
  ::unlink((dev_dir + "/" + UverbsName(run_dir, name)).c_str());
  return absl::OkStatus();
}

std::vector<std::string> ListDevices(const std::string& run_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(SysfsRoot(run_dir)) / "class/infiniband", ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<DeviceFile> ReadDevice(const std::string& run_dir, const std::string& name) {
  const fs::path p = fs::path(SysfsRoot(run_dir)) / "class/infiniband" / name / kConfigFileName;
  std::ifstream in(p);
  if (!in) return absl::NotFoundError(absl::StrCat("no device ", name, " (", p.string(), ")"));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<DeviceFile> f = ParseDeviceFile(ss.str());
  if (!f.ok()) return absl::InvalidArgumentError(absl::StrCat(p.string(), ": ", f.status().message()));
  return f;
}

}  // namespace droce::verbs
