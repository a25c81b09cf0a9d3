// How libdroce-rdmacm.so (the preloaded shim under an unmodified librdmacm)
// carries the ucma commands librdmacm writes to /dev/infiniband/rdma_cm to
// droced, which plays the kernel's rdma_cm (doc/cm.md).
//
// The fd librdmacm gets for its event channel is an AF_UNIX SOCK_SEQPACKET
// connection to the daemon's control socket (<run dir>/droced.sock). Each
// write() of a command becomes one CmRequest datagram followed by the
// command's bytes (rdma_ucm_cmd_hdr + `in` bytes) and, for SET_OPTION, the
// bytes its optval points to; the daemon answers with one CmReply datagram
// followed by what the kernel would have written to the command's response
// pointer. The daemon also sends a notification (a CmReply of kind
// kCmNotify, no payload) when events wait for the connection and none is
// outstanding, so the fd polls readable as the kernel's does; the shim
// reports the notifications it consumed in its next request.
// rdma_migrate_id (written to the destination channel) names the id's
// current channel by an fd of the program: the shim sends that channel's token (learnt from a kCmSync when it opened it)
// as the MIGRATE_ID's option bytes.
// Every field is checked by the daemon; a malformed request closes nothing
// and is answered with EINVAL (EPROTO for a bad magic or version).
#ifndef DROCE_DRIVERS_RDMACM_CM_PROTOCOL_H_
#define DROCE_DRIVERS_RDMACM_CM_PROTOCOL_H_

#include <cstdint>

namespace droce::cmproto {

inline constexpr uint32_t kCmMagic = 0x64524d43;  // "dRMC"
inline constexpr uint16_t kCmVersion = 1;
inline constexpr uint32_t kMaxCommandBytes = 1024;  // the largest ucma command is < 300 bytes
inline constexpr uint32_t kMaxOptionBytes = 256;
inline constexpr uint32_t kMaxReplyPayload = 1024;

enum CmKind : uint16_t {
  kCmCommand = 1,  // request: a ucma command
  kCmSync = 2,     // request: nothing but notifies_consumed (re-arms the notification);
                   // its reply carries the channel's token (uint64_t)
  kCmReply = 3,    // reply to either
  kCmNotify = 4,   // unsolicited: events wait
};

struct CmRequest {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t size;               // sizeof(CmRequest) + command_len + option_len: the datagram's length
  uint32_t notifies_consumed;  // notifications the shim read since its last request
  uint32_t command_len;
  uint32_t option_len;
};
static_assert(sizeof(CmRequest) == 24);

struct CmReply {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t size;            // sizeof(CmReply) + payload_len
  int32_t error;            // 0 or a positive errno
  uint32_t events_pending;  // events queued for this connection after the command
  uint32_t payload_len;
};
static_assert(sizeof(CmReply) == 24);

}  // namespace droce::cmproto

#endif  // DROCE_DRIVERS_RDMACM_CM_PROTOCOL_H_
