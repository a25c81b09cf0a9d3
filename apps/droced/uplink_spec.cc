#include "apps/droced/uplink_spec.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "drivers/ethdev/memif_vdev.h"

namespace droce::droced {
namespace {

constexpr const char kForms[] = "memif:SOCKET:server|client, vdev:NAME[,ARGS] or pci:DDDD:BB:DD.F[,ARGS]";

absl::Status Bad(const std::string& spec, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("bad uplink '", spec, "': ", why, " (", kForms, ")"));
}

bool Hex(const std::string& s, size_t from, size_t n) {
  if (from + n > s.size()) return false;
  for (size_t i = from; i < from + n; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// DPDK's devargs are NAME,KEY=VALUE,...: printable, no spaces (EAL would
// split them) and nothing a shell or the kvargs parser reads otherwise.
bool CleanArgs(const std::string& s) {
  for (char c : s) {
    if (!std::isgraph(static_cast<unsigned char>(c)) || c == '"' || c == '\'' || c == '\\') return false;
  }
  return true;
}

}  // namespace

std::string UplinkSpec::describe() const {
  switch (kind) {
    case Kind::kMemif: return absl::StrCat("memif ", socket, " (", server ? "server" : "client", ")");
    case Kind::kVdev: return vdev;
    case Kind::kPci: return absl::StrCat("pci ", vdev);
  }
  return "";
}

absl::StatusOr<UplinkSpec> ParseUplinkSpec(const std::string& spec) {
  UplinkSpec u;
  if (spec.rfind("memif:", 0) == 0) {
    const size_t b = spec.rfind(':');
    if (b <= 5) return Bad(spec, "memif needs SOCKET and a role");
    u.kind = UplinkSpec::Kind::kMemif;
    u.socket = spec.substr(6, b - 6);
    const std::string role = spec.substr(b + 1);
    if (role != "server" && role != "client") return Bad(spec, "the memif role is server or client, not '" + role + "'");
    u.server = role == "server";
    if (u.socket.empty() || u.socket[0] != '/') return Bad(spec, "the memif socket must be an absolute path");
    if (u.socket.size() >= 108) return Bad(spec, "the memif socket path is too long for AF_UNIX (107 bytes)");
    // The path goes into a vdev string: a comma or a space would add arguments.
    if (u.socket.find_first_of(", \t\n=") != std::string::npos || !CleanArgs(u.socket)) {
      return Bad(spec, "the memif socket path must not contain ',', '=', quotes or spaces");
    }
    u.port = "net_memif_uplink";
    u.vdev = ethdev::MemifVdevArgs({.name = u.port, .server = u.server, .id = 0, .socket = u.socket, .buffer_bytes = 10240});
    return u;
  }
  if (spec.rfind("vdev:", 0) == 0) {
    u.kind = UplinkSpec::Kind::kVdev;
    u.vdev = spec.substr(5);
    u.port = u.vdev.substr(0, u.vdev.find(','));
    if (u.port.empty()) return Bad(spec, "vdev needs a device name");
    if (u.port.rfind("net_", 0) != 0 || u.port.size() < 5) {
      return Bad(spec, "a DPDK virtual device's name starts with its driver, net_ (e.g. net_af_packet_up)");
    }
    for (char c : u.port) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return Bad(spec, "the vdev name takes letters, digits and _");
    }
    if (!CleanArgs(u.vdev)) return Bad(spec, "the vdev arguments must not contain spaces or quotes");
    return u;
  }
  if (spec.rfind("pci:", 0) == 0) {
    u.kind = UplinkSpec::Kind::kPci;
    u.vdev = spec.substr(4);
    u.port = u.vdev.substr(0, u.vdev.find(','));
    const std::string& a = u.port;  // DDDD:BB:DD.F
    if (a.size() != 12 || !Hex(a, 0, 4) || a[4] != ':' || !Hex(a, 5, 2) || a[7] != ':' || !Hex(a, 8, 2) ||
        a[10] != '.' || a[11] < '0' || a[11] > '7') {
      return Bad(spec, "a PCI address is DDDD:BB:DD.F, e.g. 0000:03:00.0 (lspci -D)");
    }
    if (!CleanArgs(u.vdev)) return Bad(spec, "the device arguments must not contain spaces or quotes");
    return u;
  }
  return Bad(spec, "unknown kind");
}

}  // namespace droce::droced
