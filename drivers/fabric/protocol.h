// The host fabric's control protocol: how a program (the verbs runtime),
// droce-ctl and droced talk over the daemon's control socket
// (<run dir>/droced.sock, AF_UNIX SOCK_SEQPACKET). doc/droced.md.
//
// Fixed-size versioned messages, one per datagram, as Linux's ucma ABI: a
// request names its op; the daemon checks every field (magic, version, op,
// size, the device name's characters and terminator, the pid against the
// socket's SO_PEERCRED) and answers every request with a reply of the same
// op whose `error` is 0 or a positive errno, with a message saying why.
// An attachment lives as long as its connection: the daemon frees the
// process's QPN range and memif interface when the socket closes, whether
// the program detached, exited or was killed.
//
// Pure POSIX + Abseil: both sides include it (droced; the provider, droce-ctl, droce-testpmd).
#ifndef DROCE_DRIVERS_FABRIC_PROTOCOL_H_
#define DROCE_DRIVERS_FABRIC_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace droce::fabric {

inline constexpr uint32_t kMagic = 0x64524f43;  // "dROC"
inline constexpr uint16_t kVersion = 2;
inline constexpr uint32_t kNameBytes = 48;      // device name, NUL-terminated (IsValidDeviceName: <= 32)
inline constexpr uint32_t kSecretBytes = 24;    // memif secret (DPDK's ETH_MEMIF_SECRET_SIZE)
inline constexpr uint32_t kMessageBytes = 128;
inline constexpr uint32_t kMaxGids = 4;
// Each attached process owns this many QPNs of its device: [base, base + count).
inline constexpr uint32_t kQpnsPerProcess = 1024;
inline constexpr uint32_t kQpnSpace = 1u << 24;
// A status reply carries up to this much text after its header.
inline constexpr uint32_t kMaxStatusText = 60 * 1024;

// An attached process's link to the switch (doc/droced.md "The link to the
// daemon").
enum AttachLink : uint32_t {
  // Shared-memory rings (ethdev::LinkMessage follows the attach reply): the
  // verbs provider. Any number of them, no DPDK on the process's side.
  kLinkRings = 0,
  // A DPDK memif interface on the daemon's memif socket (memif_id, secret,
  // memif_socket in the reply): a DPDK application whose engines drive an
  // ethdev port (droce-testpmd). At most RTE_MAX_ETHPORTS - 1 per daemon.
  kLinkMemif = 1,
};

enum Op : uint16_t {
  kOpAttach = 1,    // attach this process to a fabric device: its link, QPN range
  kOpDetach = 2,    // give the attachment back (closing the socket does too)
  kOpStatus = 3,    // text: devices, attached processes, counters
  kOpShutdown = 4,  // stop the daemon (same user or root)
  kOpRescan = 5,    // re-read the run directory's device files
  kOpSwitchSet = 6,  // a device's switch knobs: the request is followed by a KnobRequest (root or the daemon's user)
  // A netdev-bound device's next hop for a destination GID, as the kernel
  // routes and resolves it (doc/netdev.md): the request is followed by a
  // ResolveRequest; the reply's mac is the next hop's (the answer may take
  // as long as the kernel's neighbour resolution, up to timeout_ms).
  kOpResolve = 7,
  // A netdev-bound device's multicast group (doc/netdev.md "Multicast"):
  // the request is followed by a McastRequest. The process (its pid's
  // attachment to the device) joins or leaves the group; the interface is a
  // member while any process of the host is (IGMP/MLD through the kernel),
  // and the group's frames from the interface go to every process of the
  // device. A process's groups go when its attachment does.
  kOpMcast = 8,
};

// kOpMcast's body.
struct McastRequest {
  uint8_t gid[16];       // the group (IPv4 as ::ffff:a.b.c.d): a multicast address
  uint32_t join;         // 1: join, 0: leave
  uint8_t reserved[12];  // must be zero
};
static_assert(sizeof(McastRequest) == 32);

// kOpResolve's body.
struct ResolveRequest {
  uint8_t dgid[16];      // the destination (IPv4 as ::ffff:a.b.c.d)
  uint8_t sgid[16];      // the source: one of the device's GIDs
  uint32_t timeout_ms;   // 1..60000
  uint8_t reserved[12];  // must be zero
};
static_assert(sizeof(ResolveRequest) == 48);

// What droced sends, unasked, on the control connection of a process
// attached to a netdev-bound device: right after the attach reply and
// whenever the interface changes (its addresses, its state, its MTU). The
// process's device takes the GID table and the port state from it
// (IBV_EVENT_GID_CHANGE, IBV_EVENT_PORT_ERR / PORT_ACTIVE).
inline constexpr uint32_t kNetdevMagic = 0x6e444556;  // "nDEV"
inline constexpr uint16_t kNetdevVersion = 1;
inline constexpr uint32_t kNetdevGids = 16;
struct NetdevState {
  uint32_t magic;
  uint16_t version;
  uint16_t size;         // sizeof(NetdevState)
  uint32_t generation;   // grows with every change
  uint8_t port_active;   // the interface is up with carrier
  uint8_t active_mtu;    // IBV_MTU_256..IBV_MTU_4096 (1..5)
  uint16_t gid_valid;    // bit i: gids[i] is an entry
  uint8_t mac[6];
  // 1: the interface steers to the processes' own UDP sockets (doc/netdev.md
  // "UDP sockets"): the state sent after the attach reply is followed by a
  // NetdevSocket with the process's socket.
  uint8_t own_socket;
  uint8_t pad;
  uint8_t gids[kNetdevGids][16];
  char ifname[16];
};
static_assert(sizeof(NetdevState) == 296);

// The process's UDP socket (steering udp), carried as one descriptor
// (SCM_RIGHTS) with this datagram: frames to other hosts leave through it
// from `port`, and the kernel delivers it the frames for the process's QPNs.
inline constexpr uint32_t kNetdevSocketMagic = 0x6e554450;  // "nUDP"
inline constexpr uint16_t kNetdevSocketVersion = 1;
struct NetdevSocket {
  uint32_t magic;
  uint16_t version;
  uint16_t size;  // sizeof(NetdevSocket)
  uint16_t port;
  uint8_t reserved[6];  // zero
};
static_assert(sizeof(NetdevSocket) == 16);

// kOpSwitchSet's body (apps/droced/switch_knobs.h): the knobs `set` names
// take these values; the others keep theirs.
enum KnobBits : uint32_t {
  kKnobBottleneck = 1,  // rate_bps (0: off), kmin/kmax, pmax, limit, pfc_xoff/xon, port_flags
  kKnobLoss = 2,
  kKnobReorder = 4,
  kKnobMirror = 8,      // mirror ("": off)
  kKnobSeed = 16,
  kKnobAll = 31,
};
struct KnobRequest {
  uint32_t set;
  uint32_t pmax_ppm;       // marking probability at kmax, parts per million
  uint64_t rate_bps;
  uint32_t kmin_bytes, kmax_bytes;
  uint32_t limit_bytes;    // tail drop beyond (0: unlimited)
  uint32_t loss_ppm, reorder_ppm;
  uint32_t reserved0;
  uint64_t seed;
  char mirror[112];        // absolute pcap path, NUL-terminated
  uint32_t pfc_xoff_bytes; // pause an ingress holding more than this in the queue (0: no PFC)
  uint32_t pfc_xon_bytes;  // and let it go at this or less
  uint8_t port_flags;      // KnobPortFlags
  uint8_t reserved[7];     // must be zero
};
enum KnobPortFlags : uint8_t {
  kPortInt = 1,            // stamp INT requests (wire/int.h) as frames leave
  kPortMarkAtDequeue = 2,  // RED on the queue behind a leaving frame (else ahead of an arriving one)
  kPortFlagsAll = 3,
};
static_assert(sizeof(KnobRequest) == 176);

struct Request {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint32_t size;      // sizeof(Request)
  uint32_t pid;       // must be the sender's (SO_PEERCRED)
  char device[kNameBytes];
  // kOpAttach: 0, or the QPN range the process asks for back (a multiple of
  // kQpnsPerProcess): a program whose daemon restarted re-attaches with the
  // range its QPs already use. Granted only if free (else EADDRINUSE). Other
  // ops: zero.
  uint32_t want_qpn_base;
  // kOpAttach: how the process's frames reach the daemon (AttachLink).
  // Other ops: zero.
  uint32_t link;
  uint8_t reserved[8];  // must be zero
};
static_assert(sizeof(Request) == 80);

enum ReplyFlags : uint8_t {
  // Frames from other hosts reach the device: the daemon has an uplink, a
  // wire whose frames only their ICRC vouches for (a device that trusts its
  // link, rx_icrc_trust, must not attach).
  kReplyFramesFromWire = 1,
};

struct Reply {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint32_t size;       // sizeof(Reply), plus the text of a status reply
  int32_t error;       // 0 or a positive errno
  // kOpAttach:
  uint32_t memif_id;   // the attachment's id: its memif interface on the daemon's socket (kLinkMemif)
  uint32_t qpn_base;   // QPNs [qpn_base, qpn_base + qpn_count) are the process's
  uint32_t qpn_count;
  uint32_t num_gids;
  uint8_t mac[6];
  uint8_t flags;       // kOpAttach: ReplyFlags
  uint8_t pad;
  uint8_t gids[kMaxGids][16];
  char secret[kSecretBytes];  // memif secret of the interface (NUL-terminated)
  char memif_socket[112];     // path of the daemon's memif socket (sun_path: < 108)
  char message[kMessageBytes];  // why, when error != 0
};
static_assert(sizeof(Reply) == 368);

// Files of the daemon in a run directory.
inline std::string ControlSocketPath(const std::string& run_dir) { return run_dir + "/droced.sock"; }
inline std::string MemifSocketPath(const std::string& run_dir) { return run_dir + "/droced.memif.sock"; }
inline std::string PidFilePath(const std::string& run_dir) { return run_dir + "/droced.pid"; }
inline std::string LogFilePath(const std::string& run_dir) { return run_dir + "/droced.log"; }

Request MakeRequest(Op op, const std::string& device);
Reply MakeReply(const Request& req, int error, const std::string& message);

// Connects to the control socket (SOCK_CLOEXEC); -1 with errno if nobody listens.
int Connect(const std::string& control_socket);
// Sends one request (followed by `body`, for the ops that carry one: set
// req.size to include it) and waits up to timeout_ms for its reply. For a
// status request, *text receives the text that follows the reply.
absl::StatusOr<Reply> Call(int fd, const Request& req, int timeout_ms, std::string* text = nullptr,
                           const void* body = nullptr, size_t body_len = 0);
// Connect, call, close: for one-shot requests (droce-ctl, kOpResolve).
absl::StatusOr<Reply> CallOnce(const std::string& control_socket, const Request& req, int timeout_ms,
                               std::string* text = nullptr, const void* body = nullptr, size_t body_len = 0);

// A process's attachment to a fabric device (kOpAttach): the control
// connection, which the attachment lives as long as, and droced's reply,
// checked (no error; a QPN range inside the QPN space and, if one was asked
// for, that one; at most kMaxGids GIDs; the strings terminated).
struct Attachment {
  int fd = -1;
  Reply reply{};
};
// Connects to the droced of `run_dir` and attaches to `device`, asking for
// the QPN range at want_qpn_base (0: any free one). Errors say what to do;
// the socket is closed on one.
// `link`: AttachLink (kLinkRings: read the LinkMessage that follows).
absl::StatusOr<Attachment> Attach(const std::string& run_dir, const std::string& device, uint32_t want_qpn_base,
                                  uint32_t link = kLinkRings);

}  // namespace droce::fabric

#endif  // DROCE_DRIVERS_FABRIC_PROTOCOL_H_
