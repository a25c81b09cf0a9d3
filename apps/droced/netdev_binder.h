// droced's netdev-bound devices (doc/netdev.md): binding each to its host
// interface (drivers/netdev: the interface's port and steering), following
// the kernel's view of the interface through netlink (MAC, MTU, carrier,
// addresses -> the device's GID table, sysfs and the attached processes),
// and answering the processes' and the CM's next-hop questions with the
// kernel's routes and neighbours.
#ifndef DROCE_APPS_DROCED_NETDEV_BINDER_H_
#define DROCE_APPS_DROCED_NETDEV_BINDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/droced/fabric_state.h"
#include "drivers/netdev/gid_cache.h"
#include "drivers/netdev/interface_port.h"
#include "drivers/netdev/netlink.h"

namespace droce::droced {

class NetdevBinder {
 public:
  // Sends a netdev state message to every process attached to a device.
  using NotifyFn = std::function<void(uint32_t device, const fabric::NetdevState& m)>;
  // A next-hop question answered: error 0 and the MAC, or a positive errno.
  using AnswerFn = std::function<void(uint32_t device, const core::Gid& dst, int error, const core::Mac& mac)>;

  // A switch port about to close: whatever the loop holds of it (its
  // arrival wake-up, a duplicate of the port's socket) goes first, or the
  // interface's queue stays bound to the old socket.
  using PortGoneFn = std::function<void(int port)>;

  NetdevBinder(std::string run_dir, FabricState* state, NotifyFn notify, PortGoneFn port_gone);
  ~NetdevBinder();

  // Binds every registered netdev-bound device that is not bound yet and
  // unbinds those whose device file went. Returns "" or what failed (one
  // line per device), which the rescan's reply carries to droce-ctl.
  std::string Sync();
  void UnbindAll();

  // The netlink event socket (-1 before the first binding): poll it for
  // POLLIN and call OnReadable.
  int fd() const;
  void OnReadable();

  // The kernel's next hop from device `device`'s address sgid to dgid: the
  // route (from sgid, out of the device's interface), then the neighbour,
  // resolved by the kernel if it has none. answer() runs now or when the
  // kernel answers (or after timeout_ms: ETIMEDOUT). A destination that is a
  // local device's GID answers that device's MAC.
  void Resolve(uint32_t device, const core::Gid& sgid, const core::Gid& dgid, uint32_t timeout_ms, AnswerFn answer);
  // Pending resolutions past their deadline: ETIMEDOUT. Call often (the
  // control loop's every turn).
  void Timers(uint64_t now_ns);

  // The kernel's route to dgid (from sgid if given): which netdev-bound
  // device it leaves by, and the source address the kernel would pick. For
  // the CM (rdma_resolve_addr without a source). -1: not by one of ours.
  struct Route {
    int device = -1;
    int error = 0;  // ENETUNREACH, EHOSTUNREACH ...
    core::Gid source{};
    bool local = false;  // dgid is an address of this host
  };
  Route RouteTo(const core::Gid& dgid, const core::Gid* sgid);

  // steering udp (doc/netdev.md "UDP sockets"): whether device `device`'s
  // processes get sockets of their own, the socket of the process that owns
  // QPN slot `slot` (its descriptor is the caller's to send and close), and
  // the release of those whose slot has no owner any more (after a process
  // detached or died: its steering goes, then its port).
  bool SteersToSockets(uint32_t device) const;
  absl::StatusOr<netdev::ProcessSocket> ProcessSocketFor(uint32_t device, uint32_t slot);
  void ReleaseUnownedSockets();
  // Makes each bound interface a member of the multicast groups its
  // device's processes joined (FabricState::GroupsOf) and of no other, its
  // steering taking their frames. Call after a kOpMcast and after a process
  // left. The first failure, if any.
  absl::Status SyncGroups();

  bool any_bound() const { return !bound_.empty(); }
  static constexpr size_t kMaxPending = 4096;
  // The XDP program's counters of a bound device, for `daemon status`.
  std::string StatusText(uint32_t device) const;

 private:
  struct Bound {
    std::unique_ptr<netdev::InterfacePort> port;
    std::unique_ptr<netdev::GidCache> gids;
    int ifindex = 0;
    std::vector<uint32_t> socket_slots;  // steering udp: slots whose process has a socket
    std::vector<core::Gid> steered;      // the addresses the port's steering takes frames for
    std::vector<core::Gid> groups;       // the multicast groups the port joined
  };
  struct Pending {
    uint32_t device;
    int ifindex;
    core::Gid dst;       // what was asked
    core::Gid next_hop;  // what the kernel resolves
    uint64_t deadline_ns, retry_ns;
    AnswerFn answer;
  };
  absl::Status Bind(uint32_t device);
  void Unbind(uint32_t device, const std::string& why);
  // Re-reads the interface's link and addresses and publishes any change.
  void Refresh(uint32_t device);
  void Publish(uint32_t device, const netdev::LinkInfo& link, const std::vector<netdev::AddrInfo>& addrs);
  bool EnsureNetlink(std::string* why);
  int DeviceOfIfindex(int ifindex) const;
  int DeviceOwning(const core::Gid& gid) const;

  std::string run_dir_;
  FabricState* state_;
  NotifyFn notify_;
  PortGoneFn port_gone_;
  std::unique_ptr<netdev::Netlink> nl_;
  std::map<uint32_t, Bound> bound_;  // by device index
  std::vector<Pending> pending_;
};

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_NETDEV_BINDER_H_
