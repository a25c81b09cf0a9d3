#include "apps/droced/fabric_state.h"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "drivers/fabric/path_marker.h"
#include "wire/arp.h"
#include "wire/nd.h"
#include "wire/steer.h"
#include "apps/droced/clock.h"

namespace droce::droced {
namespace {

constexpr int64_t kMulticastQpn = 0xFFFFFF;  // BTH destination QP of a multicast datagram (IBTA 10.5.3)

uint64_t RandomWord() {
  uint64_t x = 0;
  if (getrandom(&x, sizeof x, 0) != sizeof x) x = NowNs() ^ (uint64_t(getpid()) << 32);
  return x;
}

std::string RandomSecret() {
  uint8_t b[8] = {};
  const uint64_t x = RandomWord();
  std::memcpy(b, &x, sizeof b);
  std::string s;
  for (uint8_t c : b) absl::StrAppendFormat(&s, "%02x", c);
  return s;
}

std::string Ipv4Text(uint32_t ip) {
  return absl::StrFormat("%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
}

bool IsMulticastMac(const uint8_t* mac) { return (mac[0] & 1) != 0; }

}  // namespace

FabricState::FabricState(std::string run_dir, PortBackend* backend)
    : run_dir_(std::move(run_dir)), backend_(backend), ports_(kMaxPorts), start_ns_(NowNs()) {}

int FabricState::FindDevice(const std::string& name) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int FabricState::FindDeviceByMac(const uint8_t* mac) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (std::memcmp(devices_[i].mac.data(), mac, 6) == 0) return static_cast<int>(i);
  }
  return -1;
}

int FabricState::FindDeviceByGid(const uint8_t* gid) const {
  static constexpr uint8_t kZero[16] = {};
  if (std::memcmp(gid, kZero, 16) == 0) return -1;  // a hole of a netdev device's table is no address
  for (size_t i = 0; i < devices_.size(); ++i) {
    for (const core::Gid& g : devices_[i].gids) {
      if (std::memcmp(g.data(), gid, 16) == 0) return static_cast<int>(i);
    }
  }
  return -1;
}

void FabricState::Rescan() {
  std::vector<std::string> names = verbs::ListDevices(run_dir_);
  for (FabricDevice& d : devices_) d.registered = false;
  for (const std::string& name : names) {
    absl::StatusOr<verbs::DeviceFile> f = verbs::ReadDevice(run_dir_, name);
    if (!f.ok() || !f->fabric) continue;
    int i = FindDevice(name);
    if (i < 0) {
      devices_.push_back({});
      i = static_cast<int>(devices_.size() - 1);
      devices_[i].name = name;
      devices_[i].slot_owner.assign(kSlots, -1);
    }
    FabricDevice& d = devices_[i];
    d.registered = true;
    if (f->netdev_bound) {
      // The kernel's interface, not the file, gives its MAC and GIDs
      // (SetNetdevState once droced bound it).
      if (!d.netdev_bound || d.iface_port < 0) {
        d.netdev_bound = true;
        d.netdev = f->netdev;
        d.steering = f->netdev_steering;
        d.file_mac = f->dev.mac;
        if (d.iface_port < 0) d.mac = f->dev.mac;
      }
      continue;
    }
    const bool attached = std::any_of(ports_.begin(), ports_.end(),
                                      [&](const Port& p) { return p.in_use && !p.iface && p.device == uint32_t(i); });
    if (!attached) {  // addresses change only while nobody uses the device
      d.mac = f->dev.mac;
      d.ipv4 = f->dev.ipv4;
      d.gids = core::GidTable(f->dev);
      d.vlan = f->dev.vlan;
      d.vlan_tci = f->dev.vlan_tci;
    }
    d.registered = true;
  }
}

fabric::Reply FabricState::Handle(int fd, const void* buf, ssize_t n, pid_t peer_pid, uid_t peer_uid,
                                  std::string* text, ResolveQuery* resolve) {
  ++counters_.requests;
  fabric::Request req;
  std::memset(&req, 0, sizeof req);
  auto reject = [&](int error, const std::string& why) {
    ++counters_.requests_rejected;
    return fabric::MakeReply(req, error, why);
  };
  // kOpSwitchSet carries a body (its knobs) after the request, kOpResolve its query.
  uint16_t op_peek = 0;
  if (n >= 8) std::memcpy(&op_peek, static_cast<const char*>(buf) + 6, sizeof op_peek);
  const ssize_t want = static_cast<ssize_t>(
      sizeof req + (op_peek == fabric::kOpSwitchSet ? sizeof(fabric::KnobRequest)
                    : op_peek == fabric::kOpResolve ? sizeof(fabric::ResolveRequest)
                    : op_peek == fabric::kOpMcast   ? sizeof(fabric::McastRequest)
                                                    : 0));
  if (n != want) {
    if (n >= 8) std::memcpy(&req, buf, 8);  // answer with its op if it has one
    return reject(EINVAL, absl::StrFormat("request of %d bytes, expected %u", n, want));
  }
  std::memcpy(&req, buf, sizeof req);
  if (req.magic != fabric::kMagic) return reject(EPROTO, "bad magic");
  if (req.version != fabric::kVersion) {
    return reject(EPROTONOSUPPORT, absl::StrFormat("protocol version %u, droced speaks %u", req.version,
                                                   fabric::kVersion));
  }
  if (req.size != static_cast<uint32_t>(want)) return reject(EINVAL, "bad size field");
  if (std::any_of(std::begin(req.reserved), std::end(req.reserved), [](uint8_t b) { return b != 0; })) {
    return reject(EINVAL, "reserved bytes are not zero");
  }
  if (std::memchr(req.device, 0, sizeof req.device) == nullptr) return reject(EINVAL, "device name not terminated");
  const std::string device(req.device);
  if (req.pid != static_cast<uint32_t>(peer_pid)) return reject(EPERM, "pid is not the sender's");
  if (req.link != fabric::kLinkRings && (req.op != fabric::kOpAttach || req.link != fabric::kLinkMemif)) {
    return reject(EINVAL, absl::StrFormat("bad link kind %u", req.link));
  }
  if (req.want_qpn_base != 0) {
    const uint32_t slot = req.want_qpn_base / fabric::kQpnsPerProcess;
    if (req.op != fabric::kOpAttach || req.want_qpn_base % fabric::kQpnsPerProcess != 0 || slot == 0 ||
        slot >= kSlots) {
      return reject(EINVAL, absl::StrFormat("bad QPN range base %u", req.want_qpn_base));
    }
  }

  switch (req.op) {
    case fabric::kOpAttach: {
      if (!verbs::IsValidDeviceName(device)) return reject(EINVAL, "bad device name");
      std::string message;
      int error = 0;
      fabric::Reply r = Attach(req, fd, peer_pid, &message, &error);
      if (error != 0) return reject(error, message);
      return r;
    }
    case fabric::kOpDetach: {
      for (size_t i = 0; i < ports_.size(); ++i) {
        if (ports_[i].in_use && ports_[i].conn_fd == fd) {
          Detach(static_cast<int>(i));
          return fabric::MakeReply(req, 0, "");
        }
      }
      return reject(ENOENT, "this connection has no attachment");
    }
    case fabric::kOpStatus: {
      if (!device.empty() && !verbs::IsValidDeviceName(device)) return reject(EINVAL, "bad device name");
      if (text != nullptr) {
        *text = StatusText(device);
        if (text->size() > fabric::kMaxStatusText) text->resize(fabric::kMaxStatusText);
      }
      return fabric::MakeReply(req, 0, "");
    }
    case fabric::kOpShutdown:
      if (peer_uid != 0 && peer_uid != getuid()) return reject(EPERM, "only root or the daemon's user");
      shutdown_requested_ = true;
      return fabric::MakeReply(req, 0, "");
    case fabric::kOpRescan:
      Rescan();
      return fabric::MakeReply(req, 0, "");
    case fabric::kOpSwitchSet: {
      // Knobs change what every process of the device receives, and a mirror
      // writes their frames to a file: the daemon's user or root only.
      if (peer_uid != 0 && peer_uid != getuid()) return reject(EPERM, "only root or the daemon's user");
      if (!verbs::IsValidDeviceName(device)) return reject(EINVAL, "bad device name");
      const int dev = FindDevice(device);
      if (dev < 0) return reject(ENODEV, absl::StrCat("no fabric device ", device));
      fabric::KnobRequest k;
      std::memcpy(&k, static_cast<const char*>(buf) + sizeof req, sizeof k);
      absl::Status s = SwitchKnobs::Validate(k);
      if (!s.ok()) return reject(EINVAL, std::string(s.message()));
      devices_[dev].knobs->Apply(k);
      return fabric::MakeReply(req, 0, "");
    }
    case fabric::kOpResolve: {
      if (!verbs::IsValidDeviceName(device)) return reject(EINVAL, "bad device name");
      const int dev = FindDevice(device);
      if (dev < 0) return reject(ENODEV, absl::StrCat("no device ", device));
      const FabricDevice& d = devices_[dev];
      if (!d.netdev_bound) {
        return reject(EOPNOTSUPP, absl::StrCat(device, " is no netdev-bound device (the fabric resolves by ARP)"));
      }
      fabric::ResolveRequest q;
      std::memcpy(&q, static_cast<const char*>(buf) + sizeof req, sizeof q);
      if (std::any_of(std::begin(q.reserved), std::end(q.reserved), [](uint8_t b) { return b != 0; })) {
        return reject(EINVAL, "reserved bytes are not zero");
      }
      if (q.timeout_ms == 0 || q.timeout_ms > 60000) return reject(EINVAL, "timeout_ms: 1..60000");
      core::Gid sgid, dgid;
      std::memcpy(sgid.data(), q.sgid, 16);
      std::memcpy(dgid.data(), q.dgid, 16);
      int index = -1;
      for (size_t i = 0; i < d.gids.size(); ++i) {
        if ((d.gid_valid >> i) & 1 && d.gids[i] == sgid) index = static_cast<int>(i);
      }
      if (index < 0) return reject(EADDRNOTAVAIL, "the source is none of the device's GIDs");
      if (dgid == core::Gid{}) return reject(EINVAL, "no destination");
      if (core::IsIpv4MappedGid(dgid) != core::IsIpv4MappedGid(sgid)) {
        return reject(EAFNOSUPPORT, "source and destination are of different IP versions");
      }
      if (resolve == nullptr) return reject(EOPNOTSUPP, "nobody resolves here");
      resolve->device = static_cast<uint32_t>(dev);
      resolve->sgid = sgid;
      resolve->dgid = dgid;
      resolve->timeout_ms = q.timeout_ms;
      return fabric::MakeReply(req, EINPROGRESS, "");
    }
    case fabric::kOpMcast: {
      if (!verbs::IsValidDeviceName(device)) return reject(EINVAL, "bad device name");
      const int dev = FindDevice(device);
      if (dev < 0) return reject(ENODEV, absl::StrCat("no device ", device));
      FabricDevice& d = devices_[dev];
      if (!d.netdev_bound) return reject(EOPNOTSUPP, absl::StrCat(device, " is no netdev-bound device"));
      fabric::McastRequest q;
      std::memcpy(&q, static_cast<const char*>(buf) + sizeof req, sizeof q);
      if (std::any_of(std::begin(q.reserved), std::end(q.reserved), [](uint8_t b) { return b != 0; })) {
        return reject(EINVAL, "reserved bytes are not zero");
      }
      if (q.join > 1) return reject(EINVAL, "join: 0 or 1");
      core::Gid group;
      std::memcpy(group.data(), q.gid, 16);
      if (!core::MulticastMac(group)) return reject(EINVAL, "not a multicast group");
      int port = -1;
      for (size_t i = 0; i < ports_.size(); ++i) {
        const Port& p = ports_[i];
        if (p.in_use && !p.iface && !p.uplink && p.pid == peer_pid && p.device == static_cast<uint32_t>(dev)) {
          port = static_cast<int>(i);
        }
      }
      if (port < 0) return reject(ENOENT, absl::StrCat("pid ", peer_pid, " has no attachment to ", device));
      auto it = d.groups.find(group);
      const bool member = it != d.groups.end() && absl::c_linear_search(it->second, port);
      if (q.join == 1) {
        if (member) return fabric::MakeReply(req, 0, "");
        if (it == d.groups.end()) {
          if (d.groups.size() >= kMaxGroupsPerDevice) return reject(ENOSPC, "the device's group table is full");
          it = d.groups.emplace(group, std::vector<int>{}).first;
        }
        it->second.push_back(port);
      } else {
        if (!member) return reject(EINVAL, "the process is no member of the group");
        std::erase(it->second, port);
        if (it->second.empty()) d.groups.erase(it);
      }
      return fabric::MakeReply(req, 0, "");
    }
    default:
      return reject(EOPNOTSUPP, absl::StrFormat("unknown op %u", req.op));
  }
}

fabric::Reply FabricState::Attach(const fabric::Request& req, int fd, pid_t pid, std::string* message, int* error) {
  fabric::Reply r = fabric::MakeReply(req, 0, "");
  for (const Port& p : ports_) {
    if (p.in_use && p.conn_fd == fd) {
      *error = EBUSY;
      *message = "this connection is attached already (one device per connection)";
      return r;
    }
  }
  int dev = FindDevice(req.device);
  if (dev < 0 || !devices_[dev].registered) {
    Rescan();  // registered after the daemon looked
    dev = FindDevice(req.device);
  }
  if (dev < 0 || !devices_[dev].registered) {
    *error = ENODEV;
    *message = absl::StrCat("no fabric device ", req.device, " in ", run_dir_);
    return r;
  }
  if (devices_[dev].netdev_bound && devices_[dev].iface_port < 0) {
    *error = ENODEV;
    *message = absl::StrCat(req.device, " is not bound to ", devices_[dev].netdev, ": ", devices_[dev].bind_error);
    return r;
  }
  auto free_port = std::find_if(ports_.begin(), ports_.end(), [](const Port& p) { return !p.in_use; });
  if (free_port == ports_.end()) {
    *error = ENOSPC;
    *message = absl::StrFormat("%u processes attached: no port left", kMaxPorts);
    return r;
  }
  FabricDevice& d = devices_[dev];
  uint32_t slot = 0;
  if (req.want_qpn_base != 0) {  // a range back (checked in Handle): that one or none
    slot = req.want_qpn_base / fabric::kQpnsPerProcess;
    if (d.slot_owner[slot] >= 0) {
      *error = EADDRINUSE;
      *message = absl::StrFormat("QPN range %u-%u of %s is another process's", req.want_qpn_base,
                                 req.want_qpn_base + fabric::kQpnsPerProcess - 1, d.name);
      return r;
    }
  }
  for (uint32_t k = 0; k < kSlots - 1 && slot == 0; ++k) {
    const uint32_t s = 1 + (d.next_slot - 1 + k) % (kSlots - 1);  // slot 0 holds QPNs 0 and 1
    if (d.slot_owner[s] < 0) slot = s;
  }
  if (slot == 0) {
    *error = ENOSPC;
    *message = "no QPN range left on the device";
    return r;
  }
  Port& p = *free_port;
  const int index = static_cast<int>(free_port - ports_.begin());
  p = Port{};
  p.rings = req.link == fabric::kLinkRings;
  if (!p.rings) p.secret = RandomSecret();
  p.memif_id = next_memif_id_++;
  absl::StatusOr<int> handle = backend_->OpenPort(p.memif_id, p.secret, p.rings);
  if (!handle.ok()) {
    *error = EIO;
    *message = std::string(handle.status().message());
    return r;
  }
  p.in_use = true;
  p.conn_fd = fd;
  p.pid = pid;
  p.device = static_cast<uint32_t>(dev);
  p.slot = slot;
  p.handle = *handle;
  d.slot_owner[slot] = static_cast<int16_t>(index);
  d.next_slot = slot + 1;
  RefreshActivePorts();
  r.memif_id = p.memif_id;
  r.qpn_base = slot * fabric::kQpnsPerProcess;
  r.qpn_count = fabric::kQpnsPerProcess;
  std::memcpy(r.mac, d.mac.data(), 6);
  if (uplink_ >= 0) r.flags |= fabric::kReplyFramesFromWire;
  r.num_gids = static_cast<uint32_t>(std::min<size_t>(d.gids.size(), fabric::kMaxGids));
  for (uint32_t i = 0; i < r.num_gids; ++i) std::memcpy(r.gids[i], d.gids[i].data(), 16);
  if (!p.rings) {
    std::strncpy(r.secret, p.secret.c_str(), sizeof r.secret - 1);
    std::strncpy(r.memif_socket, memif_socket().c_str(), sizeof r.memif_socket - 1);
  }
  return r;
}

void FabricState::RefreshActivePorts() {
  active_ports_.clear();
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (ports_[i].in_use) active_ports_.push_back(i);
  }
}

int FabricState::AddUplink(int handle, std::string describe) {
  auto free_port = std::find_if(ports_.begin(), ports_.end(), [](const Port& p) { return !p.in_use; });
  if (free_port == ports_.end() || uplink_ >= 0) return -1;
  *free_port = Port{};
  free_port->in_use = true;
  free_port->uplink = true;
  free_port->device = kUplinkDevice;
  free_port->handle = handle;
  uplink_ = static_cast<int>(free_port - ports_.begin());
  uplink_describe_ = std::move(describe);
  RefreshActivePorts();
  return uplink_;
}

int FabricState::AddInterfacePort(uint32_t device, int handle, const std::vector<uint16_t>& queue_ports) {
  auto free_port = std::find_if(ports_.begin(), ports_.end(), [](const Port& p) { return !p.in_use; });
  if (free_port == ports_.end() || device >= devices_.size()) return -1;
  *free_port = Port{};
  free_port->in_use = true;
  free_port->iface = true;
  free_port->device = device;
  free_port->handle = handle;
  if (queue_ports.size() > 1) free_port->queue_ports = queue_ports;
  free_port->memif_id = next_memif_id_++;  // names this port's life (droced's per-port wake-ups)
  const int index = static_cast<int>(free_port - ports_.begin());
  devices_[device].iface_port = index;
  devices_[device].bind_error.clear();
  RefreshActivePorts();
  return index;
}

void FabricState::RemoveInterfacePort(uint32_t device) {
  if (device >= devices_.size()) return;
  FabricDevice& d = devices_[device];
  if (d.iface_port >= 0) {
    ForgetAskedBy(d.iface_port);
    ports_[d.iface_port] = Port{};
    d.iface_port = -1;
  }
  d.port_active = false;
  ++d.generation;
  RefreshActivePorts();
}

bool FabricState::SetNetdevState(uint32_t device, const core::Mac& mac, const std::vector<core::Gid>& gids,
                                 uint32_t valid, bool active, uint8_t active_mtu) {
  if (device >= devices_.size()) return false;
  FabricDevice& d = devices_[device];
  if (d.mac == mac && d.gids == gids && d.gid_valid == valid && d.port_active == active &&
      d.active_mtu == active_mtu) {
    return false;
  }
  d.mac = mac;
  d.gids = gids;
  d.gid_valid = valid;
  d.port_active = active;
  d.active_mtu = active_mtu;
  ++d.generation;
  return true;
}

std::vector<core::Gid> FabricState::GroupsOf(uint32_t device) const {
  std::vector<core::Gid> out;
  if (device >= devices_.size()) return out;
  for (const auto& [group, members] : devices_[device].groups) out.push_back(group);
  return out;
}

fabric::NetdevState FabricState::NetdevStateOf(uint32_t device) const {
  fabric::NetdevState m{};
  m.magic = fabric::kNetdevMagic;
  m.version = fabric::kNetdevVersion;
  m.size = sizeof m;
  if (device >= devices_.size()) return m;
  const FabricDevice& d = devices_[device];
  m.generation = d.generation;
  m.port_active = d.iface_port >= 0 && d.port_active ? 1 : 0;
  m.active_mtu = d.active_mtu;
  std::memcpy(m.mac, d.mac.data(), 6);
  for (size_t i = 0; i < d.gids.size() && i < fabric::kNetdevGids; ++i) {
    if (!((d.gid_valid >> i) & 1)) continue;
    m.gid_valid = static_cast<uint16_t>(m.gid_valid | (1u << i));
    std::memcpy(m.gids[i], d.gids[i].data(), 16);
  }
  std::strncpy(m.ifname, d.netdev.c_str(), sizeof m.ifname - 1);
  return m;
}

void FabricState::Detach(int port) {
  Port& p = ports_[port];
  if (!p.in_use) return;
  FabricDevice& d = devices_[p.device];
  if (d.slot_owner[p.slot] == port) d.slot_owner[p.slot] = -1;
  for (auto it = d.groups.begin(); it != d.groups.end();) {  // its multicast groups go with it
    std::erase(it->second, port);
    it = it->second.empty() ? d.groups.erase(it) : std::next(it);
  }
  backend_->ClosePort(p.handle, p.rings);
  p.in_use = false;
  p.conn_fd = -1;
  ForgetAskedBy(port);  // its index is the next attachment's
  RefreshActivePorts();
}

void FabricState::ConnectionClosed(int fd) {
  for (size_t i = 0; i < ports_.size(); ++i) {
    if (ports_[i].in_use && ports_[i].conn_fd == fd) Detach(static_cast<int>(i));
  }
}

// RFC 826 for the devices' addresses: the request is turned into the reply
// in place (same buffer, same VLAN tag).
bool FabricState::AnswerArp(int dev, uint8_t* frame, uint32_t len, uint32_t capacity, uint32_t* out_len) {
  wire::ArpPacket a;
  if (!wire::ParseArp(frame, len, &a) || a.op != wire::kArpRequest) return false;
  int target = dev;
  if (target < 0) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].ipv4 != 0 && devices_[i].ipv4 == a.target_ip) target = static_cast<int>(i);
    }
  }
  if (target < 0 || devices_[target].ipv4 == 0 || devices_[target].ipv4 != a.target_ip) return false;
  if (capacity < wire::kArpFrameBytes + wire::kVlanTagBytes) return false;
  const bool vlan = wire::LoadBe16(frame + 12) == wire::kEtherTypeVlan;
  const uint16_t tci = vlan ? wire::LoadBe16(frame + 14) : 0;
  *out_len = wire::BuildArp(wire::ArpReplyFor(a, devices_[target].mac, devices_[target].ipv4), vlan, tci, frame);
  ++devices_[target].counters.arp_replies;
  return true;
}

// RFC 4861 7.2.4 for the devices' IPv6 addresses (GID 0, the link-local
// one, and the global one), as core::Device answers for itself.
bool FabricState::AnswerNd(int dev_hint, uint8_t* frame, uint32_t len, uint32_t capacity, uint32_t* out_len) {
  wire::NdPacket nd;
  if (wire::ParseNd(frame, len, &nd) != wire::NdParse::kOk || nd.type != wire::kNdSolicit) return false;
  int target = -1;
  for (size_t i = 0; i < devices_.size() && target < 0; ++i) {
    if (dev_hint >= 0 && static_cast<int>(i) != dev_hint) continue;
    if (devices_[i].netdev_bound) continue;  // the kernel answers for the interface's addresses
    for (const core::Gid& g : devices_[i].gids) {
      if (!core::IsIpv4MappedGid(g) && g == nd.target) target = static_cast<int>(i);
    }
  }
  if (target < 0) return false;
  if (nd.dst != nd.target && nd.dst != wire::SolicitedNodeMulticast(nd.target)) return false;
  if (capacity < wire::kNdFrameMaxBytes) return false;
  const bool vlan = wire::LoadBe16(frame + 12) == wire::kEtherTypeVlan;
  const uint16_t tci = vlan ? wire::LoadBe16(frame + 14) : 0;
  const FabricDevice& d = devices_[target];
  const wire::NdPacket na = wire::AdvertFor(nd, d.mac);
  *out_len = wire::BuildNd(na, vlan, tci, frame);
  ++devices_[target].counters.nd_replies;
  return true;
}


// A frame from a netdev-bound device's interface: its steering took only
// RoCEv2 for the interface's addresses and the groups its processes joined,
// so only unicast RoCEv2 to the device is accepted, steered by QPN like a
// process's frames, and multicast RoCEv2 to one of those groups, which every
// process of the device gets a copy of (each keeps what its QPs attached).
Decision FabricState::FromInterface(uint32_t device, const uint8_t* frame, uint32_t len, int64_t qpn) {
  Decision d;
  FabricDevice& fd = devices_[device];
  if (qpn == kMulticastQpn && IsMulticastMac(frame)) {
    core::Gid group;
    if (!wire::DestIpAsGid(frame, len, group.data()) || !fd.groups.contains(group) ||
        core::MulticastMac(group) != core::Mac{frame[0], frame[1], frame[2], frame[3], frame[4], frame[5]}) {
      ++fd.counters.rx_not_roce;
      return d;
    }
    ++fd.counters.rx_roce;
    d.kind = Decision::kFlood;
    d.device = static_cast<int>(device);
    return d;
  }
  if (qpn < 0 || qpn == kMulticastQpn || std::memcmp(frame, fd.mac.data(), 6) != 0) {
    ++fd.counters.rx_not_roce;
    return d;
  }
  return SteerByQpn(static_cast<int>(device), qpn);
}

// A RoCEv2 frame to QPN qpn of a device: QP 1 to the daemon's CM, any
// other QPN to the port of the process whose range holds it.
Decision FabricState::SteerByQpn(int device, int64_t qpn) {
  Decision d;
  FabricDevice& fd = devices_[device];
  if (qpn == 1) {  // GSI: QP 1 lives in the daemon, which plays the kernel's CM
    ++fd.counters.rx_gsi;
    d.kind = Decision::kToGsi;
    d.device = device;
    return d;
  }
  const int16_t owner = fd.slot_owner[static_cast<uint32_t>(qpn) / fabric::kQpnsPerProcess];
  if (owner < 0) {
    ++fd.counters.rx_no_owner;
    return d;
  }
  ++fd.counters.rx_roce;
  d.kind = Decision::kToPort;
  d.port = owner;
  return d;
}

Decision FabricState::SteerMarker(int src, const uint8_t* frame, uint32_t len, int64_t qpn) {
  Decision d;
  fabric::PathMarker m;
  const Port& from = ports_[src];
  const int dev = IsMulticastMac(frame) ? -1 : FindDeviceByMac(frame);
  if (!from.uplink && !from.iface && dev >= 0 && qpn > 1 && fabric::ReadPathMarker(frame, len, &m)) {
    const Decision to = SteerByQpn(dev, qpn);
    for (const DirectPath& p : paths_) {
      if (p.id != m.path_id || p.marker_key != m.key || to.kind != Decision::kToPort) continue;
      for (int side = 0; side < 2; ++side) {
        if (p.port[side] == src && p.attachment_id[side] == from.memif_id && p.port[1 - side] == to.port &&
            p.attachment_id[1 - side] == ports_[to.port].memif_id) {
          return to;
        }
      }
    }
  }
  ++counters_.forged_markers;
  return d;
}

Decision FabricState::Classify(int src, uint8_t* frame, uint32_t len, uint32_t capacity) {
  Decision d;
  if (len < wire::kEthBytes) {
    ++counters_.rx_malformed;
    return d;
  }
  const uint32_t bth = wire::RoceBthOffset(frame, len);
  const int64_t qpn = wire::RoceDestQpAt(frame, bth);
  if (fabric::HasPathMarkerOpcode(frame, bth)) return SteerMarker(src, frame, len, qpn);
  const Port& from = ports_[src];
  if (from.iface) return FromInterface(from.device, frame, len, qpn);
  // A process of a netdev-bound device: what is for no device here leaves by
  // the device's interface (the host's network), not by the fabric's uplink.
  FabricDevice* home = !from.uplink && from.device < devices_.size() && devices_[from.device].netdev_bound
                           ? &devices_[from.device]
                           : nullptr;
  int dev = -1;
  // Not for this segment: out of the uplink, unless it came from there.
  auto to_uplink = [&](uint64_t& no_uplink_counter) {
    if (home != nullptr) {
      if (home->iface_port >= 0 && home->port_active) {
        ++home->counters.to_netdev;
        d.kind = Decision::kToPort;
        d.port = home->iface_port;
      } else {
        ++home->counters.netdev_dropped;
      }
    } else if (uplink_ >= 0 && src != uplink_) {
      ++counters_.to_uplink;
      d.kind = Decision::kToPort;
      d.port = uplink_;
    } else {
      ++no_uplink_counter;
    }
    return d;
  };
  if (!IsMulticastMac(frame)) {
    dev = FindDeviceByMac(frame);
    if (dev < 0) return to_uplink(counters_.rx_unknown_dst);
  } else if (qpn == kMulticastQpn) {
    // RoCEv2 multicast (UD to a group): to every other attached process of
    // the segment; each device keeps what is for the groups it joined. A
    // netdev-bound device's: to its other processes and out of its
    // interface (the host's network).
    d.kind = Decision::kFlood;
    if (home != nullptr) {
      d.device = static_cast<int>(from.device);
      if (home->iface_port >= 0 && home->port_active) {
        ++home->counters.to_netdev;
        d.port = home->iface_port;
      } else {
        ++home->counters.netdev_dropped;
      }
    }
    return d;
  } else if (qpn >= 0) {
    // Broadcast RoCEv2 (a sender whose neighbour was unresolved): the
    // destination IP names the device. (A netdev-bound device's processes
    // resolve through the kernel and never send these to another host.)
    uint8_t gid[16];
    if (wire::DestIpAsGid(frame, len, gid)) dev = FindDeviceByGid(gid);
    if (dev < 0) {
      if (home != nullptr) {
        ++counters_.rx_no_route;
        return d;
      }
      return to_uplink(counters_.rx_no_route);
    }
  }
  if (qpn >= 0) return SteerByQpn(dev, qpn);
  // Not RoCEv2: the control frames of the segment.
  uint32_t out_len = 0;
  const uint16_t type = wire::ReadL3(frame, len).ether_type;
  if (type == wire::kEtherTypeArp && AnswerArp(dev, frame, len, capacity, &out_len)) {
    d.kind = Decision::kReplyHere;
    d.port = src;
    d.len = out_len;
    return d;
  }
  if (type == wire::kEtherTypeIpv6 && AnswerNd(dev, frame, len, capacity, &out_len)) {
    d.kind = Decision::kReplyHere;
    d.port = src;
    d.len = out_len;
    return d;
  }
  // Anything else: to every other port of the device it is addressed to, or
  // (broadcast, multicast) of the segment; a netdev-bound device's control
  // frames stay among its own processes (the kernel owns ARP and ND on the
  // interface).
  d.kind = Decision::kFlood;
  d.device = home != nullptr ? static_cast<int>(from.device) : dev;
  return d;
}

bool FabricState::DirectAllowed(uint32_t device) const {
  if (!direct_rings_ || device >= devices_.size()) return false;
  const SwitchKnobs& k = *devices_[device].knobs;
  return !k.active() && k.mirror_path().empty();
}

// Ring-linked processes only: the verbs provider takes paths (DirectIo); a
// memif-linked one (droce-testpmd) never reads the messages, and one sent
// mid-handshake on its control connection is in its way.
bool FabricState::QualifiesForPath(int port) const {
  const Port& p = ports_[port];
  return p.in_use && p.rings && !p.uplink && !p.iface && p.conn_fd >= 0 && DirectAllowed(p.device);
}

void FabricState::AskPath(int src, int dst) {
  // A port's frames to itself (two QPs of one device) never cross the
  // switch; a pair that cannot have a path asks again on every frame, at
  // the cost of these tests (switch knobs are the slow path anyway).
  if (src == dst || !QualifiesForPath(src) || !QualifiesForPath(dst)) return;
  asked_[static_cast<uint32_t>(src)].set(static_cast<uint32_t>(dst));
  asked_[static_cast<uint32_t>(dst)].set(static_cast<uint32_t>(src));
  DirectPath d;
  d.port[0] = src, d.port[1] = dst;
  d.attachment_id[0] = ports_[src].memif_id, d.attachment_id[1] = ports_[dst].memif_id;
  asked_pairs_.push_back(d);
}

void FabricState::ForgetAskedBy(int port) {
  asked_[static_cast<uint32_t>(port)].reset();
  for (std::bitset<kMaxPorts>& row : asked_) row.reset(static_cast<uint32_t>(port));
}

std::vector<PathChange> FabricState::SyncDirectPaths() {
  std::vector<PathChange> out;
  const auto same = [&](int port, uint32_t memif) {
    return ports_[port].in_use && !ports_[port].uplink && !ports_[port].iface && ports_[port].memif_id == memif;
  };
  // Paths whose ports left, or that the switch needs back.
  for (size_t i = 0; i < paths_.size();) {
    const DirectPath& d = paths_[i];
    const bool alive0 = same(d.port[0], d.attachment_id[0]), alive1 = same(d.port[1], d.attachment_id[1]);
    if (alive0 && alive1 && QualifiesForPath(d.port[0]) && QualifiesForPath(d.port[1])) {
      ++i;
      continue;
    }
    if (alive0 && alive1) ForgetAsked(d.port[0], d.port[1]);  // their next switched frame asks again
    PathChange c;
    c.path = d;
    c.notify[0] = alive0;
    c.notify[1] = alive1;
    out.push_back(c);
    paths_.erase(paths_.begin() + static_cast<long>(i));
  }
  // The pairs the switch found talking since, still the same attachments.
  for (const DirectPath& want : asked_pairs_) {
    const int a = want.port[0], b = want.port[1];
    if (!same(a, want.attachment_id[0]) || !same(b, want.attachment_id[1])) continue;  // one left (bits cleared)
    if (!QualifiesForPath(a) || !QualifiesForPath(b)) {
      ForgetAsked(a, b);
      continue;
    }
    const bool exists = std::any_of(paths_.begin(), paths_.end(), [&](const DirectPath& d) {
      return (d.port[0] == a && d.port[1] == b) || (d.port[0] == b && d.port[1] == a);
    });
    if (exists) continue;
    DirectPath d = want;
    d.id = next_path_id_++;
    do {
      d.marker_key = RandomWord();
    } while (d.marker_key == 0);
    paths_.push_back(d);
    PathChange c;
    c.add = true;
    c.path = d;
    c.notify[0] = c.notify[1] = true;
    out.push_back(c);
  }
  asked_pairs_.clear();
  return out;
}

void FabricState::ForgetDirectPath(uint64_t id) {
  std::erase_if(paths_, [&](const DirectPath& d) { return d.id == id; });
}

std::string FabricState::StatusText(const std::string& only_device) const {
  std::string out;
  if (only_device.empty()) {
    absl::StrAppendFormat(&out, "droced pid %d, run directory %s, up %lu s, memif socket %s\n", getpid(), run_dir_,
                          (NowNs() - start_ns_) / 1'000'000'000ull, memif_socket());
    absl::StrAppendFormat(&out,
                          "  switch: rx_unknown_dst %lu rx_no_route %lu rx_malformed %lu flooded %lu "
                          "requests %lu rejected %lu unmap_faults %lu forged_markers %lu\n",
                          counters_.rx_unknown_dst, counters_.rx_no_route, counters_.rx_malformed, counters_.flooded,
                          counters_.requests, counters_.requests_rejected, counters_.unmap_faults,
                          counters_.forged_markers);
    absl::StrAppendFormat(&out, "  direct paths: %zu (direct rings %s)\n", paths_.size(),
                          direct_rings_ ? "on" : "off: every frame crosses the switch");
    if (uplink_ < 0) {
      out += "  uplink: none (only the devices of this run directory are reachable)\n";
    } else {
      const Port& u = ports_[uplink_];
      absl::StrAppendFormat(&out, "  uplink %s: to_uplink %lu, rx %lu pkts %lu B, tx %lu pkts %lu B, tx_dropped %lu\n",
                            uplink_describe_, counters_.to_uplink, u.counters.rx_packets, u.counters.rx_bytes,
                            u.counters.tx_packets, u.counters.tx_bytes, u.counters.tx_dropped);
    }
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    const FabricDevice& d = devices_[i];
    if (!only_device.empty() && d.name != only_device) continue;
    int attached = 0;
    for (const Port& p : ports_) attached += p.in_use && !p.iface && !p.uplink && p.device == i;
    absl::StrAppendFormat(&out, "device %s mac %s%s%s: %d attached, rx_roce %lu rx_no_owner %lu rx_gsi %lu "
                          "arp_replies %lu nd_replies %lu%s\n",
                          d.name, verbs::FormatMac(d.mac), d.ipv4 ? " ip " : "", d.ipv4 ? Ipv4Text(d.ipv4) : "",
                          attached, d.counters.rx_roce, d.counters.rx_no_owner, d.counters.rx_gsi, d.counters.arp_replies,
                          d.counters.nd_replies, d.registered ? "" : " (unregistered)");
    if (d.netdev_bound) {
      if (d.iface_port < 0) {
        absl::StrAppendFormat(&out, "  netdev %s: not bound (%s)\n", d.netdev, d.bind_error);
      } else {
        const Port& ip = ports_[d.iface_port];
        absl::StrAppendFormat(&out, "  netdev %s: %s, port %s, mtu %u; to_netdev %lu netdev_dropped %lu "
                              "rx_not_roce %lu, rx %lu pkts %lu B, tx %lu pkts %lu B, tx_dropped %lu\n",
                              d.netdev, d.iface_describe, d.port_active ? "ACTIVE" : "DOWN", 128u << d.active_mtu,
                              d.counters.to_netdev, d.counters.netdev_dropped, d.counters.rx_not_roce,
                              ip.counters.rx_packets, ip.counters.rx_bytes, ip.counters.tx_packets,
                              ip.counters.tx_bytes, ip.counters.tx_dropped);
        for (size_t g = 0; g < d.gids.size(); ++g) {
          if ((d.gid_valid >> g) & 1) absl::StrAppendFormat(&out, "  gid[%zu] %s\n", g, verbs::FormatGid(d.gids[g]));
        }
      }
    }
    out += d.knobs->Describe();
    for (size_t k = 0; k < ports_.size(); ++k) {
      const Port& p = ports_[k];
      if (!p.in_use || p.iface || p.uplink || p.device != i) continue;
      const uint32_t base = p.slot * fabric::kQpnsPerProcess;
      const size_t direct = static_cast<size_t>(std::count_if(paths_.begin(), paths_.end(), [&](const DirectPath& d) {
        return d.port[0] == static_cast<int>(k) || d.port[1] == static_cast<int>(k);
      }));
      absl::StrAppendFormat(&out, "  process pid %d port %zu %s %u qpns %u-%u: rx %lu pkts %lu B, tx %lu pkts %lu B, "
                            "tx_dropped %lu, direct paths %zu\n",
                            p.pid, k, p.rings ? "rings" : "memif", p.memif_id, base, base + fabric::kQpnsPerProcess - 1, p.counters.rx_packets,
                            p.counters.rx_bytes, p.counters.tx_packets, p.counters.tx_bytes, p.counters.tx_dropped,
                            direct);
    }
  }
  return out;
}

}  // namespace droce::droced
