#include "drivers/netdev/tc.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "drivers/netdev/xdp.h"

namespace droce::netdev {
namespace {

// enum bpf_attach_type's tcx ingress (Linux 6.6); Debian 12's headers
// predate it.
constexpr int kBpfTcxIngress = 46;

}  // namespace

std::string TcObjectPath() { return BpfObjectPath("DROCED_TC_PROG", "droce_tc.o"); }

absl::StatusOr<std::unique_ptr<TcProgram>> TcProgram::Attach(int ifindex) {
  const std::string path = TcObjectPath();
  if (path.empty()) return absl::FailedPreconditionError("droce's TC program (droce_tc.o) is not installed");
  std::unique_ptr<TcProgram> p(new TcProgram());
  bpf_object* obj = bpf_object__open_file(path.c_str(), nullptr);
  if (obj == nullptr) return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno)));
  p->object_ = obj;
  if (const int rc = bpf_object__load(obj); rc != 0) {
    return absl::UnavailableError(absl::StrCat("loading ", path, ": ", std::strerror(-rc)));
  }
  bpf_program* prog = bpf_object__find_program_by_name(obj, "droce_tc");
  const auto map_fd = [obj](const char* name) {
    bpf_map* m = bpf_object__find_map_by_name(obj, name);
    return m != nullptr ? bpf_map__fd(m) : -1;
  };
  p->addrs_fd_ = map_fd("droce_addrs");
  p->ports_fd_ = map_fd("droce_ports");
  p->stats_fd_ = map_fd("droce_tc_stats");
  if (prog == nullptr || p->addrs_fd_ < 0 || p->ports_fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not droce's TC program"));
  }
  const int link = bpf_link_create(bpf_program__fd(prog), ifindex, static_cast<bpf_attach_type>(kBpfTcxIngress),
                                   nullptr);
  if (link < 0) {
    return absl::UnavailableError(absl::StrCat("attaching the TC program (tcx, Linux 6.6+): ", std::strerror(-link)));
  }
  p->link_fd_ = link;
  return p;
}

TcProgram::~TcProgram() {
  if (link_fd_ >= 0) close(link_fd_);  // the tcx link: the program leaves the interface
  if (object_ != nullptr) bpf_object__close(static_cast<bpf_object*>(object_));  // closes the map descriptors
}

absl::Status TcProgram::SetAddresses(const std::vector<wire::Gid>& addrs) { return SyncAddressMap(addrs_fd_, addrs); }

absl::Status TcProgram::SetPort(uint32_t slot, uint16_t port) {
  const uint32_t value = port;
  if (bpf_map_update_elem(ports_fd_, &slot, &value, BPF_ANY) != 0) {
    return absl::UnavailableError(absl::StrCat("TC port map: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

TcStats TcProgram::ReadStats() const {
  TcStats s;
  uint64_t* const fields[] = {&s.steered, &s.to_daemon, &s.marked};
  SumPerCpuCounters(stats_fd_, fields, 3);
  return s;
}

}  // namespace droce::netdev
