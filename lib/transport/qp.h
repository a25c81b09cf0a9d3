// A queue pair: RC's requester (9.7.1-9.7.4), responder (9.7.5) and
// completer (9.7.5.2 / 9.9), UC (9.8) and UD (9.8.4, ud_qp.cc) through the
// same steps, and the verbs state machine (10.3). Selective repeat (sr/)
// and congestion control (lib/cc) are components it reaches through hooks.
//
// One lcore owns a QP: the poll loop calls OnPacket() for each received
// packet addressed to it, Transmit() to fill transmit buffers, and
// OnTimer() with the current time. Time is injected (nanoseconds), so tests
// drive timeouts instantly and deterministically. Nothing here allocates
// after creation, takes a lock or logs; errors become completions, NAKs and
// counters.
#ifndef DROCE_LIB_TRANSPORT_QP_H_
#define DROCE_LIB_TRANSPORT_QP_H_

#include <algorithm>
#include <cerrno>
#include <memory>
#include <array>
#include <cstdint>
#include <optional>
#include <new>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "cc/congestion_control.h"
#include "cc/dcqcn.h"
#include "mem/mr_table.h"
#include "transport/qp_tuning.h"
#include "pktio/burst_io.h"
#include "queue/completion.h"
#include "queue/ring.h"
#include "transport/counters.h"
#include "transport/states.h"
#include "transport/types.h"
#include "transport/ud_qp.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace droce::transport {

class SelectiveRepeat;  // sr/selective_repeat.h

// Shared receive queue: receive WQEs any QP attached to it may consume.
class Srq {
 public:
  explicit Srq(uint32_t depth) : ring_(depth) {}
  queue::Ring<RecvWr, true>& ring() { return ring_; }

 private:
  queue::Ring<RecvWr, true> ring_;  // shared: the same type as a QP's own receive queue
};

enum class QpType : uint8_t { kRc = 2, kUc = 3, kUd = 4 };  // ibv_qp_type values

struct QpCaps {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = kMaxSge;
  uint32_t max_recv_sge = kMaxSge;
  uint32_t max_inline_data = kMaxInlineData;
  bool sq_sig_all = false;  // every send WR completes with a CQE
  QpType type = QpType::kRc;
  // UD: the port MTU bounds a datagram (a UD QP has no path MTU).
  uint32_t port_mtu = 4096;
};

// What a QP needs from its device, fixed at creation.
struct QpEnv : QpTuning {
  mem::MrTable* mrs = nullptr;
  queue::CompletionQueue* send_cq = nullptr;
  queue::CompletionQueue* recv_cq = nullptr;
  Srq* srq = nullptr;
  uint32_t pd = 0;
  // Builds the Eth/IP/UDP prefix for an address vector (the device knows its
  // GIDs, MAC, VLAN/DSCP/ECN policy and neighbours). Control path only.
  absl::Status (*make_route)(void* ctx, const AddressVector& av, uint32_t local_qpn,
                             uint32_t remote_qpn, wire::Route* out) = nullptr;
  void* route_ctx = nullptr;
  // UD: the device's address handles, which send WRs name.
  const AhTable* ahs = nullptr;
  // Requester tuning (not visible in verbs).
  uint32_t max_inflight_packets = 512;
  uint32_t ack_req_every = 64;  // AckReq at least every N packets of a long message
  // Congestion control (lib/cc/congestion_control.h): the algorithm and its
  // parameters (e.g. cc::kDcqcnOps with a cc::DcqcnParams); null = none.
  // While it limits the rate, every packet but CNPs is paced to it.
  const cc::Ops* cc = nullptr;
  const void* cc_params = nullptr;
  // The port takes gather frames (pktio::BurstIo::TakesGather): a SEND or
  // WRITE packet of at least kGatherTxMin payload bytes from one SGE points
  // at its payload in the registered memory instead of copying it
  // (BuildRequest).
  bool gather_tx = false;
};

// Whether a WRITE or SEND of one SGE of `total` bytes is valid on an RC or
// UC QP allowing max_send_sge SGEs (ValidateSend's checks for such a WR).
[[gnu::always_inline]] inline bool OneSgeFits(uint32_t max_send_sge, uint64_t total) {
  return max_send_sge != 0 && total <= kMaxMessageBytes;
}

class Qp {
  friend class SelectiveRepeat;  // a component of the QP, reached through its hooks

 public:
  Qp(uint32_t qpn, const QpCaps& caps, const QpEnv& env);
  ~Qp();

  uint32_t qpn() const { return qpn_; }
  QpType type() const { return caps_.type; }
  bool reliable() const { return caps_.type == QpType::kRc; }
  bool ud() const { return caps_.type == QpType::kUd; }
  uint32_t path_mtu() const { return mtu_; }  // RC, UC: a full packet's payload
  QpState state() const { return state_; }
  const QpAttr& attr() const { return attr_; }
  const QpCaps& caps() const { return caps_; }
  const QpEnv& env() const { return env_; }
  const QpCounters& counters() const { return counters_; }
  // The responder forgets the region its fast path places into (PlaceExpected):
  // the next WRITEs take the full chain until one resolves a region again.
  // The same for SENDs: it forgets the region the last receive scatter resolved.
  void ForgetExpectedRegion() {
    resp_.expected = {};
    resp_.recv_local = {};
  }
  // ACKs retire the send queue WQE by WQE (the reference path the
  // equivalence test compares AckUpTo's run-wise walk with).
  void AckEachWqe(bool on) { ack_per_wqe_ = on; }
  // Every request packet takes the requester's full build, none the short
  // one (BuildShortRequest): for the test that compares the two.
  void UseFullRequestBuild() { short_requests_ = false; }
  uint32_t expected_psn() const { return resp_.epsn; }  // responder's next PSN
  // As a SEND's packet is placed into its receive WQE at `offset`: bytes
  // [offset, offset + len) of the next posted WQE's first SGE, those below
  // kRecvWarmMax, are fetched for writing, when that SGE lies in the region
  // the last receive resolved (resp_.recv_local). Returns the bytes fetched
  // (0: none). kRecvWarmMax covers UCX's 8,256-byte eager segments: the
  // lines of a larger message's tail would be fetched long before use.
  static constexpr uint32_t kRecvWarmMax = 16384;
  uint32_t WarmNextRecv(uint32_t offset, uint32_t len);
  uint32_t next_psn() const { return req_.psn_next; }   // requester's next new PSN
  uint32_t posted_receives() const;  // queued, held, published

  // ibv_modify_qp: validates the transition and the attribute mask (IBTA
  // 10.3.1, the required/optional attributes of each transition).
  absl::Status Modify(const QpAttr& attr, uint32_t mask);

  // ibv_post_send / ibv_post_recv: 0 or a positive errno as verbs returns it.
  // On the engine's thread: the WR is queued and, in ERR, flushed at once.
  int PostSend(const SendWr& wr);
  int PostRecv(const RecvWr& wr);

  // Posting from a thread that does not own the engine (the verbs
  // provider's fast path, doc/verbs.md "Posting without the device lock").
  // One thread at a time per queue (the caller's per-QP lock); the engine
  // may run meanwhile. The caller fills the slot in place (no copy of the WR
  // on the way) and publishes it; the engine takes what was published at the
  // QP's next doorbell (TakePosted). Checked here: what the QP's fixed caps
  // decide (SGEs, length, inline size, opcodes for an RC or UC QP, never
  // UD). The QP's state is the caller's to have checked (RTS or SQD for
  // sends; any but RESET for receives, no SRQ): a WR published while the
  // engine moved the QP to ERR is flushed when taken.
  SendWr* NextSendSlot();  // nullptr: the send queue is full (ENOMEM)
  int PublishSend();       // 0, or EINVAL with nothing published
  // A WRITE or SEND of one SGE without inline data (most posts) written
  // straight into its WQE and published, with no staged copy: 0, ENOMEM
  // (the send queue is full) or EINVAL (PostSend's checks for such a WR).
  int PublishOneSge(const OneSgeWr& wr);  // inline, below the class
  // A batch (ibv_wr_start .. ibv_wr_complete): the slot `ahead` after the
  // next, filled before any of the batch is published; its WQE's inline
  // buffer (kMaxInlineData), where inline data may be written in place (an
  // inline sge pointing at it is not copied again); then all `n` published
  // at once, or none (EINVAL) when one is invalid.
  SendWr* SendSlotAhead(uint32_t ahead);  // nullptr: the batch does not fit (ENOMEM)
  uint8_t* InlineBufferAhead(uint32_t ahead);
  int PublishSends(uint32_t n);
  RecvWr* NextRecvSlot();  // nullptr: the receive queue is full
  int PublishRecv();
  // Engine side: appends what was published to the queues (flushed at once
  // in ERR). Cheap when nothing was: one load per queue.
  void TakePosted() {
    if (sq_.published() != 0) TakePostedSends();
    TakePostedRecvs();
  }
  void TakePostedRecvs() {
    if (rq_.published() != 0) TakePublishedRecvs();
  }

  // A packet for this QP (BTH dest QP matched); parsed and ICRC-checked.
  void OnPacket(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns);
  // What OnPacket decides from a packet's opcode and the QP's type alone,
  // the same for the QP's life: a request or a response of its transport
  // (kAsRequest, kAsResponse), or kAsJudged: one OnPacket must judge (of the
  // other transport, or of selective repeat, which a connection may leave).
  enum PacketRole : uint8_t { kAsJudged = 0, kAsRequest = 1, kAsResponse = 2 };
  PacketRole RoleOf(const wire::ParsedPacket& p) const {
    const wire::OpcodeInfo& op = p.op();
    if (reliable() != (op.transport == wire::Transport::kRc) || (op.roles & wire::kRoleSr)) return kAsJudged;
    return (op.roles & wire::kRoleRequest) ? kAsRequest : kAsResponse;
  }
  // OnPacket for a packet whose RoleOf is `role` (not kAsJudged): the steps
  // that depend on the QP's state.
  void OnPacketAs(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns, PacketRole role);
  // A datagram (UD opcode) for this UD QP, or a multicast datagram for a
  // group it is attached to; parsed and ICRC-checked (ud_qp.cc).
  UdRx OnUdPacket(const uint8_t* frame, const wire::ParsedPacket& p);

  // Packets the poll loop hands over with the ICRC not yet checked, so that
  // the QP checks it while placing the payload (one pass instead of two):
  // RC WRITE MIDDLE, SEND FIRST/MIDDLE/LAST/ONLY and READ RESPONSE
  // FIRST/MIDDLE/LAST (doc/transport.md "ICRC and placement"). A SEND ONLY
  // shorter than kFusedSendOnlyBytes is checked first: its payload's share
  // of the CRC is small, and the poll loop checks a predicted frame from the
  // headers' precomputed CRC. A READ RESPONSE ONLY is too: testing for it
  // beside SEND ONLY costs every received frame (the 64 B WRITE's
  // instruction guard), and the READs it ends are one frame long.
  static constexpr uint32_t kFusedSendOnlyBytes = 512;
  // The RC opcodes (0-31) that are always placed so, as one mask: one test
  // per frame instead of a compare per opcode.
  static constexpr uint32_t kPlacedWhileVerified =
      1u << wire::kRcWriteMiddle | 1u << wire::kRcSendFirst | 1u << wire::kRcSendMiddle | 1u << wire::kRcSendLast |
      1u << wire::kRcReadResponseFirst | 1u << wire::kRcReadResponseMiddle | 1u << wire::kRcReadResponseLast;
  static bool VerifiesWhilePlacing(const wire::ParsedPacket& p) {
    const uint32_t op = p.opcode;
    return (op < 32 && ((kPlacedWhileVerified >> op) & 1)) ||
           (op == wire::kRcSendOnly && p.payload_len >= kFusedSendOnlyBytes);
  }
  // OnPacket for such a packet. False: the ICRC failed and the packet was
  // dropped without any change to the QP (the caller counts it); it may have
  // left bytes in the unacknowledged part of the WRITE, receive or READ in
  // progress, which the retransmission overwrites before anything completes.
  bool OnUnverifiedPacket(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns) {
    return OnUnverifiedPacket(frame, nullptr, p, now_ns) == Unverified::kTaken;
  }
  // The same for a lent frame (pktio::Frame::lent): `frame` holds its
  // headers, copied; `lent`, when not null, the whole frame in memory its
  // sender can still write. The payload, pad and ICRC are read from there,
  // once each, by the pass that CRCs and places them, so the ICRC judges
  // exactly the bytes placed. A packet this QP does not place so is left
  // untouched (kWantsWhole): the caller copies the whole frame and calls
  // again with lent null.
  // `trusted`: a packet placed here is placed by a plain copy without the
  // ICRC (a frame from a direct ring whose device trusts them,
  // core::DeviceConfig::rx_icrc_trust_direct); one the QP does not place so
  // is still checked (kWantsWhole for a lent frame, else IcrcMatches).
  enum class Unverified : uint8_t { kTaken, kBadIcrc, kWantsWhole };
  Unverified OnUnverifiedPacket(const uint8_t* frame, const uint8_t* lent, const wire::ParsedPacket& p,
                                uint64_t now_ns, bool trusted = false);

  // Fills up to n transmit buffers (each with capacity >= kMaxFrameBytes);
  // returns how many it used.
  uint32_t Transmit(pktio::Frame* frames, uint32_t n, uint64_t now_ns);

  // Runs the retransmission timer (RTO), selective repeat's tail-loss
  // probe and the DCQCN reaction point's timers (while they can change the
  // rate: rate limited or a decrease pending; alpha's decay is otherwise
  // caught up at the next CNP, ReactionPoint::Advance). Does nothing before
  // NextDeadline().
  void OnTimer(uint64_t now_ns);
  // The earliest instant (ns) at which time alone changes what the QP does,
  // 0 if none: OnTimer acts (retransmit deadline, TLP, reaction point
  // timers), or transmit work held back only by time is released (RNR wait,
  // the pacer). Before it, OnTimer changes nothing and HasTransmitWork
  // stays as it is. The device files it in its timing wheel (doc/core.md).
  uint64_t NextDeadline() const;
  // True if Transmit would build a frame now (what keeps a QP on the
  // device's active list): a CNP, a response or a request the window, the
  // RNR timer and the pacer let go now.
  bool HasTransmitWork(uint64_t now_ns) const;

  // True while the QP has something to send or a timer armed.
  bool HasWork() const;
  // How many transmit buffers Transmit() can use now, at most `burst`; 0 if
  // it would produce nothing. The poll loop allocates (and frees the unused
  // rest of) what this asks for, so it must not ask for a burst when only an
  // ACK is queued or the in-flight window is full.
  uint32_t TransmitDemand(uint64_t now_ns, uint32_t burst) const;
  // All the QP would send now is one plain ACK (no CNP, NAK, response or
  // request), and it is not a selective-repeat QP (whose ACKs time RTTs):
  // a poll round the program drives may hold it for the program's next
  // post, to leave in the same burst (core::Device::Poll, doc/core.md).
  bool OnlyAnAckToSend(uint64_t now_ns) const {
    return !sr_ && cnp_.cnps_pending == 0 && actions_.size() == 1 &&
           actions_.at(actions_.head()).kind == ActionKind::kAck && TransmitDemand(now_ns, 2) == 1;
  }

  // A packet for this QP arrived with ECN CE: schedule a CNP (rate-limited).
  void OnCongestionMark(uint64_t now_ns);
  // A CNP addressed to this QP: congestion control's event (DCQCN cuts the rate).
  void OnCnp(uint64_t now_ns);
  // The QP's congestion control (its algorithm, rate and window).
  const cc::CongestionControl& congestion_control() const { return cc_; }
  // The DCQCN reaction point, or null when the QP does not run DCQCN (RC, RT, alpha, stages).
  const cc::ReactionPoint* reaction_point() const { return cc::DcqcnReactionPoint(cc_); }
  // Earliest time the pacer lets this QP send again (0 if not paced).
  uint64_t paced_until_ns() const { return cc_.paced_until_ns(); }
  // The algorithm of this QP (null: none) with its parameters, which must
  // outlive the QP; before RTR (RESET/INIT), as selective repeat. The
  // device's default applies at creation; the verbs provider sets another
  // at RTR when the program chose one through ECE (doc/cc.md).
  absl::Status SetCongestionControl(const cc::Ops* ops, const void* params);

  // Selective repeat for this connection (RC only; before RTR). The device's
  // default (QpEnv::selective_repeat) applies at creation; the verbs
  // provider sets it at RTR when ECE agreed on it.
  absl::Status SetSelectiveRepeat(bool on);
  bool selective_repeat() const { return sr_ != nullptr; }
  // Selective repeat's state while the connection uses it (RTT, RTOs, the
  // packets in flight), null otherwise: for tests and statistics.
  const SelectiveRepeat* sr() const { return sr_; }

  // Moves to ERR and flushes outstanding work (also used by destroy).
  void EnterError();
  // Why the transport moved the QP to ERR (reset by a move to RESET).
  QpEvent error_event() const { return error_event_; }

 private:
  // Modify's steps: the transition and the values checked, then applied.
  absl::Status CheckTransition(QpState cur, QpState next, uint32_t mask) const;
  static absl::Status CheckAttributeValues(const QpAttr& a, uint32_t mask);
  void ApplyAttributes(const QpAttr& a, uint32_t mask, const wire::Route& route);
  void ResetToFresh();

  // A send WQE: what posting, the common request build and the completer
  // touch, in one 64-byte line (as mlx5's WQE basic block). A queue that
  // cycles through thousands of slots finds each cold when it is posted
  // again and when it completes: one line each time. What only some WRs
  // carry (further SGEs, inline data, immediate, atomic operands, a bind,
  // the UD route, READ progress) is in the slot's SendWqeExt, touched only
  // for them; the MR epoch in a dense array (SendWqeEpoch).
  struct alignas(64) SendWqe {
    uint64_t wr_id = 0;
    uint64_t remote_addr = 0;  // RDMA and atomic
    // One SGE (num_sge == 1; its length is total_len): its address and
    // L_Key as posted, its host address once started. Inline data: the
    // slot's bytes (SendWqeExt::inline_data). More SGEs: SendWqeExt::sges.
    uint64_t local_addr = 0;
    uint8_t* local_host = nullptr;
    uint32_t rkey = 0;
    uint32_t lkey = 0;
    uint32_t total_len = 0;
    uint32_t first_psn = 0;
    uint32_t last_psn = 0;
    uint32_t next_psn = 0;  // next packet to (re)send
    WrOpcode opcode = WrOpcode::kSend;
    uint8_t flags = 0;    // SendFlags
    uint8_t num_sge = 0;
    queue::WcStatus status = queue::WcStatus::kSuccess;
    bool started = false;     // PSNs assigned
    bool fully_sent = false;  // every packet handed to the wire at least once
    bool done = false;        // acknowledged or failed
  };
  static_assert(sizeof(SendWqe) == 64, "the hot WQE is one cache line");
  // The rest of a WQE, in an array beside the ring (same slot), read and
  // written only for the WRs that use it.
  struct SendWqeExt {
    Sge sges[kMaxSge];             // num_sge > 1
    uint8_t* sge_host[kMaxSge];    // num_sge > 1: resolved at start
    uint32_t imm_data;         // WITH_IMM
    uint32_t invalidate_rkey;  // SEND_WITH_INV, LOCAL_INV
    uint64_t compare_add;      // atomics
    uint64_t swap;
    BindWr bind;               // BIND_MW
    uint32_t read_done_bytes;  // READ: response bytes placed
    uint32_t recv_seq;  // SR: the receive sequence number of a message consuming a receive
    // UD: the destination QP, the address handle's prefix and the Q_Key, copied when posted.
    uint32_t remote_qpn;
    uint32_t ud_qkey;
    wire::Route ud_route;
    uint8_t inline_data[kMaxInlineData];
  };
  SendWqeExt& Ext(const SendWqe& w) { return sq_ext_[sq_.SlotOf(&w)]; }
  const SendWqeExt& Ext(const SendWqe& w) const { return sq_ext_[sq_.SlotOf(&w)]; }
  // MrTable::epoch() when the WQE's SGEs were last known good.
  uint64_t& SendWqeEpoch(const SendWqe& w) { return sq_epoch_[sq_.SlotOf(&w)]; }
  // SGE i of a posted WQE (its host address once started: local_host or
  // SendWqeExt::sge_host, which ForEachSgeSpan walks).
  Sge SgeOf(const SendWqe& w, uint32_t i) const {
    return w.num_sge == 1 ? Sge{w.local_addr, w.total_len, w.lkey} : Ext(w).sges[i];
  }

  // Responder resources for READ and atomic requests (9.7.5.1.3), kept for
  // duplicate detection: a duplicate READ is re-executed, a duplicate atomic
  // replays its saved result.
  struct Resource {
    bool valid = false;
    bool atomic = false;
    uint32_t first_psn = 0;
    uint32_t last_psn = 0;
    uint64_t original = 0;  // atomic result
    uint64_t va = 0;        // READ: what the original asked for; a duplicate
    uint32_t length = 0;    // may ask for that or a part of it, no more
    uint32_t rkey = 0;
  };

  // kSack (selective repeat): an ACK built when it leaves, from selective
  // repeat's state then: a SACK while anything past the expected PSN has
  // arrived, a plain ACK otherwise.
  enum class ActionKind : uint8_t { kAck, kNak, kReadResponse, kAtomicAck, kSack };
  struct Action {
    ActionKind kind = ActionKind::kAck;
    uint8_t syndrome = 0;
    uint32_t psn = 0;
    uint32_t msn = 0;
    // READ response progress. `rkey` is re-checked for every packet: a
    // region deregistered (or invalidated) mid-READ is read no further.
    uint8_t* host = nullptr;
    uint32_t rkey = 0;
    uint64_t epoch = 0;  // MrTable::epoch() when host was resolved
    uint32_t length = 0;
    uint32_t offset = 0;
    uint64_t original = 0;
    bool holds_resource = false;  // a new READ/atomic: counts against max_dest_rd_atomic until sent
  };

  // A key's region as a full check resolved it, kept so that the next
  // accesses through the same key check only their bounds while the MR
  // table's epoch is still `epoch` (the requester's L_Keys, the responder's
  // R_Key: req_.local, resp_.expected).
  struct ResolvedRegion {
    uint8_t* host = nullptr;
    uint64_t iova = 0;
    uint64_t length = 0;
    uint64_t epoch = ~uint64_t{0};  // none: no epoch is this
    uint32_t key = 0;
    bool writable = false;  // local write (the requester's READ and atomic targets)
    // Whether `k` still names this region (the MR table's epoch is still
    // the one it was resolved at) and [addr, addr + len) lies inside it,
    // at HostAt(addr).
    bool Holds(uint32_t k, uint64_t epoch_now, uint64_t addr, uint64_t len) const {
      const uint64_t offset = addr - iova;  // wraps (and fails the bound) below iova
      return k == key && epoch == epoch_now && offset <= length && len <= length - offset;
    }
    uint8_t* HostAt(uint64_t addr) const { return host + (addr - iova); }
  };

  // --- requester / completer (requester.cc, completer.cc)
  int ValidateSend(const SendWr& wr, uint64_t* total) const;  // in qp.cc, inline in ValidateForQp
  static uint64_t SgeBytes(const SendWr& wr) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
    return total;
  }
  // A multi-packet WRITE or READ resolves its region (or window) once, on
  // its first packet; the key must still mean the same memory for each
  // later one. Once the program deregisters (re-registers, unbinds) it, or
  // a SEND_WITH_INV / LOCAL_INV invalidates a window, the memory may already
  // hold something else (IBTA 10.6: a deregistered key grants no access).
  bool MrStillLent(uint32_t key, uint64_t since) const { return env_.mrs->StillValid(key, since); }
  // MrStillLent, free while nothing was registered, deregistered, bound or
  // invalidated since *epoch (MrTable::epoch()); advances *epoch when the
  // key is still good.
  bool MrStillLentSince(uint32_t rkey, uint64_t* epoch) const {
    const uint64_t now = env_.mrs->epoch();
    if (*epoch == now) return true;
    if (!MrStillLent(rkey, *epoch)) return false;
    *epoch = now;
    return true;
  }
  // Inline: the test that passes every time but after a deregistration.
  bool SgesStillLent(SendWqe& w) {
    return (w.flags & kSendInline) || SendWqeEpoch(w) == env_.mrs->epoch() || SgesStillLentAfterChange(w);
  }
  bool SgesStillLentAfterChange(SendWqe& w);
  bool StartWqe(SendWqe& w);  // after MayStart: local op, lkeys, PSNs
  mem::MrTable::Resolved ResolveLocal(const Sge& sge, bool needs_write);  // CheckLocal, through req_.local
  // The requester's ReqState steps (requester.cc, transport/states.h):
  // request packets into frames[used, n); returns the new `used`.
  struct SendCtx;
  uint32_t TransmitRequests(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns);
  DROCE_STEP ReqState ReqGetWqe(SendCtx& c);
  DROCE_STEP ReqState ReqShortRequest(SendCtx& c);
  DROCE_STEP ReqState ReqCheckLimits(SendCtx& c);
  DROCE_STEP ReqState ReqStartWqe(SendCtx& c);
  DROCE_STEP ReqState ReqCheckWindow(SendCtx& c);
  DROCE_STEP ReqState ReqCheckLength(SendCtx& c);
  DROCE_STEP ReqState ReqCheckSges(SendCtx& c);
  DROCE_STEP ReqState ReqBuildPacket(SendCtx& c);
  template <bool kShortQp = false>
  DROCE_STEP ReqState ReqUpdate(SendCtx& c);
  // The per-WQE predicates below are inline: the doorbell's demand count
  // (qp.cc), the requester and the completer ask them of every WQE.
  uint32_t PacketsFor(const SendWqe& w) const {
    if (ud()) return 1;  // a datagram is one packet (longer ones are never sent)
    if (w.opcode == WrOpcode::kAtomicCmpAndSwp || w.opcode == WrOpcode::kAtomicFetchAndAdd) {
      return 1;
    }
    return PacketsForLength(w.total_len);
  }
  // Packets (PSNs) a message of `len` bytes takes at the path MTU, at least
  // one. The MTU is a power of two (256..4096): a shift, not a division,
  // and no overflow at any 32-bit length (2^31 bytes at MTU 256 is 2^23 PSNs).
  uint32_t PacketsForLength(uint32_t len) const { return len == 0 ? 1 : ((len - 1) >> mtu_log2_) + 1; }
  // Returns the frame's length (0: nothing built); a gather frame
  // (QpEnv::gather_tx) also gets f.gather, the payload where it is.
  uint32_t BuildRequest(SendWqe& w, pktio::Frame& f, uint64_t now_ns);
  // Ends a SEND/WRITE request or a READ response whose `seg` payload bytes
  // the port reads from the registered memory at `host` (a gather frame,
  // QpEnv::gather_tx): the frame holds the headers (`headers` transport
  // bytes from the BTH, ending at `payload`), then the pad and the ICRC,
  // which covers the payload as it is read here. The port takes or
  // flattens the frame before the device's round ends. Returns its length.
  uint32_t FinishGatherFrame(pktio::Frame& f, uint8_t* payload, uint32_t headers, uint32_t seg, const uint8_t* host);
  // The common request packet built in fewer steps (requester.cc).
  bool ShortQp() const;  // the QP's part of ShortRequest and ShortStart
  bool ShortRequest(const SendWqe& w, bool short_qp) const;
  bool ShortStart(const SendWqe& w, bool short_qp) const;
  uint32_t BuildShortRequest(SendWqe& w, uint8_t* frame, uint32_t ack_every);
  void GatherPayload(const SendWqe& w, uint32_t offset, uint32_t len, uint8_t* out) const;
  void GatherSges(const SendWqe& w, uint32_t offset, uint32_t len, uint8_t* out) const;  // inline
  template <typename Span>
  void ForEachSgeSpan(const SendWqe& w, uint32_t offset, uint32_t len, Span&& span) const;
  // GatherPayload continuing an ICRC register over the bytes it copies.
  uint32_t GatherPayloadCrc(const SendWqe& w, uint32_t offset, uint32_t len, uint8_t* out,
                            uint32_t crc) const;
  // Payloads from this size on are copied and CRCed in one pass.
  static constexpr uint32_t kFusedGatherMin = 512;
  // Payloads from this size on leave as gather frames where the port takes
  // them (QpEnv::gather_tx): below it the copy costs less than the port's
  // extra pieces (two more iovecs per datagram).
  static constexpr uint32_t kGatherTxMin = 1024;
  static_assert(kGatherTxMin > kFusedGatherMin, "a short request (BuildShortRequest) is never a gather frame");
  void ScatterToSges(const SendWqe& w, uint32_t offset, const uint8_t* data, uint32_t len) const;
  // ScatterToSges continuing an ICRC register over the bytes it copies;
  // `lent`: data is memory its sender can still write (wire::Crc32CopyOnceUpdate).
  uint32_t ScatterToSgesCrc(const SendWqe& w, uint32_t offset, const uint8_t* data, uint32_t len, uint32_t crc,
                            bool lent = false) const;
  static bool IsReadOrAtomic(const SendWqe& w) {
    return w.opcode == WrOpcode::kRdmaRead || w.opcode == WrOpcode::kAtomicCmpAndSwp ||
           w.opcode == WrOpcode::kAtomicFetchAndAdd;
  }
  static bool IsLocalOp(const SendWqe& w) {  // LOCAL_INV, BIND_MW: no packet
    return w.opcode == WrOpcode::kLocalInv || w.opcode == WrOpcode::kBindMw;
  }
  // Fence and rd_atomic limit allow it: a fenced WQE waits until every
  // earlier READ/atomic has completed (IBTA 10.8.3.3).
  bool MayStart(const SendWqe& w) const {
    if ((w.flags & kSendFence) && req_.rd_atomic_outstanding > 0) return false;
    return !IsReadOrAtomic(w) || req_.rd_atomic_outstanding < std::max<uint32_t>(1, attr_.max_rd_atomic);
  }
  uint32_t RequestRoom() const;           // request packets the send queue may send now
  uint32_t QueuedRequestPackets(uint32_t cap) const;  // request packets queued, at most cap
  // The completer's CompState steps (completer.cc, transport/states.h).
  struct RespCtx;
  // OnPacket's last step: to the responder (selective repeat's when on) or the completer.
  void Deliver(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns, bool request);
  // payload_placed: a READ response's payload is already in place (OnUnverifiedPacket).
  void OnResponse(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now, bool payload_placed = false);
  // The READ a READ RESPONSE FIRST/MIDDLE/LAST (`opcode`) at `psn` of `len`
  // bytes answers, when verified state alone says where its payload goes:
  // nullptr otherwise.
  SendWqe* ReadAwaitingResponse(uint32_t opcode, uint32_t psn, uint32_t len);
  DROCE_STEP CompState CompCheckPsn(RespCtx& c);
  DROCE_STEP CompState CompCheckAck(RespCtx& c);
  DROCE_STEP CompState CompAck(RespCtx& c);
  DROCE_STEP CompState CompRnrNak(RespCtx& c);
  DROCE_STEP CompState CompNak(RespCtx& c);
  DROCE_STEP CompState CompGetWqe(RespCtx& c);
  DROCE_STEP CompState CompAtomic(RespCtx& c);
  DROCE_STEP CompState CompRead(RespCtx& c);
  DROCE_STEP CompState CompComplete(RespCtx& c);
  // A READ response at another PSN than the one expected: a duplicate, or
  // one past a lost response (an implied NAK).
  CompState ReadResponseNotExpected(RespCtx& c, uint32_t expected);
  // A READ or atomic response's data into the WQE's buffers at `offset`.
  // False: the buffers' region was deregistered; the WQE failed LOC_PROT_ERR.
  bool PlaceResponseData(SendWqe& w, uint32_t offset, const uint8_t* data, uint32_t len);
  void AckUpTo(uint32_t psn, uint64_t now);
  bool AckPartOf(SendWqe& w, uint32_t psn);
  void AckUpToPerWqe(uint32_t psn, uint64_t now);
  bool ack_per_wqe_ = false;
  // The retransmission deadline to arm now (0: none): the retransmission
  // timeout is selective repeat's (its RTOs) or the QP's (4.096 us x 2^timeout).
  uint64_t ArmRetransmitTimer(uint64_t now);
  // 4.096 us x 2^timeout of the QP, raised to the device's floor
  // (QpEnv::min_ack_timeout); 0: infinite.
  uint64_t IbtaTimeoutNs() const;
  // AckReq at least every this many packets of a long message (selective
  // repeat's spacing while it runs, requester.cc), and twice per
  // congestion-control window, which a window-based algorithm (Swift, HPCC)
  // may shrink to a few packets.
  uint32_t AckReqEvery() const;
  // Request packets the window lets out with `in_flight` PSNs past psn_una.
  // The window's one rule (ReqCheckWindow sends nothing at 0, RequestRoom
  // tells the device): go-back-N caps the span past psn_una; selective
  // repeat has its own (the packets still in the path).
  uint32_t WindowRoom(int32_t in_flight) const {
    if (sr_) return SrWindowRoom(in_flight);
    const int32_t room = static_cast<int32_t>(InflightCap(env_.max_inflight_packets)) - in_flight;
    return room <= 0 ? 0 : static_cast<uint32_t>(room);
  }
  uint32_t SrWindowRoom(int32_t in_flight) const;
  // The in-flight cap: the transport's (go-back-N's window, or selective
  // repeat's bandwidth-delay product), or congestion control's window when
  // its algorithm keeps a smaller one.
  uint32_t InflightCap(uint32_t transport_cap) const {
    const uint32_t cc_window = cc_.output().window_packets;  // 0: none
    return cc_window != 0 && cc_window < transport_cap ? cc_window : transport_cap;
  }
  void NoteProgress(uint64_t now);
  void NoteAnswered(uint64_t now);
  void CheckProbeAnswer(uint32_t acked);
  void AdvancePastDone();
  void RetryFrom(uint32_t psn);
  void SolicitAck(uint64_t now_ns);
  void ImpliedNak(uint32_t missing_psn);
  void CompleteHead();
  void FailWqe(SendWqe& w, queue::WcStatus status);
  void PushSendCompletion(const SendWqe& w);
  bool Outstanding() const;

  // --- UD (ud_qp.cc)
  int PostUdSend(const SendWr& wr, SendWqe* w);  // checks and the AH copy; 0 or errno
  uint32_t BuildUdRequest(SendWqe& w, uint8_t* frame);
  void SkipOversizeUd(SendWqe& w);  // C10-93.1.1: no packet, a successful completion

  // --- responder (responder.cc): RespState steps, one function each,
  // returning the next state (transport/states.h, doc/transport.md).
  struct ReqCtx;
  // payload_placed: a WRITE or SEND MIDDLE payload is already in place (OnUnverifiedPacket).
  void OnRequest(const uint8_t* frame, const wire::ParsedPacket& p, bool payload_placed = false);
  // The IBTA responder's steps (PlaceExpected first); OnRequest takes a short
  // expected WRITE ONLY itself and every other request here.
  [[gnu::noinline]] void OnRequestSteps(const uint8_t* frame, const wire::ParsedPacket& p, bool payload_placed);
  DROCE_STEP RespState PlaceExpected(ReqCtx& c);
  RespState ExpectedAcknowledge(ReqCtx& c);
  void AcceptExpected(uint32_t psn, wire::BthView bth);
  void AcceptRequest(uint32_t psn, wire::BthView bth);
  DROCE_STEP RespState CheckPsn(ReqCtx& c);
  DROCE_STEP RespState CheckOpSequence(ReqCtx& c);
  DROCE_STEP RespState CheckLength(ReqCtx& c);
  DROCE_STEP RespState CheckResource(ReqCtx& c);
  DROCE_STEP RespState CheckRkeyStep(ReqCtx& c);
  DROCE_STEP RespState Execute(ReqCtx& c);
  DROCE_STEP RespState ExecuteSend(ReqCtx& c);
  DROCE_STEP RespState ExecuteWrite(ReqCtx& c);
  DROCE_STEP RespState ExecuteRead(ReqCtx& c);
  DROCE_STEP RespState ExecuteAtomic(ReqCtx& c);
  DROCE_STEP RespState Acknowledge(ReqCtx& c);
  RespState Duplicate(ReqCtx& c);
  const Resource* ReplayResponse(ReqCtx& c, Action* a);  // a duplicate READ/atomic's answer
  RespState CheckAndExecute(ReqCtx& c);  // check_resource, check_rkey, execute (selective repeat's way in)
  // The error state: RC NAKs (and moves to ERR for class C/D), UC drops.
  void RespondError(RespError e, uint32_t psn);
  void DropUcMessage();
  // Packets to resend besides the send queue's walk: selective repeat's
  // retransmissions, or go-back-N's retry probe.
  uint32_t PendingRetransmits() const;
  uint32_t SendRetryProbe(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns);
  // `read_len`: a READ asks for this many bytes (0: to its end).
  uint32_t BuildResend(SendWqe& w, uint32_t psn, pktio::Frame& f, uint64_t now_ns, uint32_t read_len = 0);
  // Scatters `len` bytes at byte `offset` of a receive WQE's buffers.
  // `learnt` (if given) receives the region the last piece's L_Key resolved to.
  static bool PlaceIntoRecv(mem::MrTable& mrs, uint32_t pd, const RecvWr& wr, uint32_t offset,
                            const uint8_t* payload, uint32_t len, RespError* error,
                            ResolvedRegion* learnt = nullptr);
  // Where `len` bytes at the held receive WQE's running offset go, when
  // they lie in one SGE inside the region its L_Key resolved to last
  // (resp_.recv_local, MR table epoch unchanged); else null (the full scatter).
  uint8_t* RecvDestination(uint32_t len) const { return RecvDestination(resp_.recv_wqe, resp_.recv_offset, len); }
  uint8_t* RecvDestination(const RecvWr& wr, uint32_t offset, uint32_t len) const;
  // The receive WQE a SEND FIRST/ONLY would take now (TakeRecvWqe's choice,
  // left in place), null when there is none or selective repeat holds some.
  const RecvWr* NextRecvWqe();
  // Scatters a SEND payload into the held receive WQE at the running offset.
  bool PlaceSendPayload(const uint8_t* payload, uint32_t len, RespError* error);
  // R_Key check of a remote request: the QP's own access flags, then the
  // region or window (type-2 windows: bound through this QP). A zero-length
  // READ or WRITE names no memory: neither its R_Key nor its VA is checked
  // (IBTA 9.4, RDMA WRITE and READ with a DMA length of zero; rxe's
  // check_rkey skips them too), and nothing is read or written for it.
  mem::MrTable::Resolved CheckRkey(uint32_t rkey, uint64_t va, uint64_t length,
                                   uint32_t access) const {
    if ((attr_.qp_access_flags & access) != access) {
      return {mem::AccessResult::kNoPermission, nullptr};
    }
    if (length == 0) return {mem::AccessResult::kOk, nullptr};
    return env_.mrs->CheckRemote(rkey, env_.pd, qpn_, va, length, access);
  }
  bool TakeRecvWqe();
  void QueueAck(uint32_t psn);
  void QueueNak(uint8_t syndrome, uint32_t psn);
  // Room in the response queue (actions_) for a response that is not a
  // plain ACK: its last slot is kept for one, so QueueAck and QueueSack
  // always find room (a queued ACK at the tail coalesces with the next). An
  // ACK a request asked for and the queue refused would never be sent at a
  // window's tail, where no later request brings another: the requester
  // would wait for its transport timer.
  bool ResponseRoom() const { return actions_.size() + 1 < actions_.depth(); }
  // Queues `a` (a NAK or a replayed READ/atomic response) where
  // ResponseRoom allows; false (counted in responses_refused) where not.
  bool PushResponse(const Action& a);
  void CompleteRecv(queue::WcStatus status, queue::WcOpcode opcode, uint32_t byte_len,
                    uint8_t flags, uint32_t imm_or_inv, bool solicited);
  // A READ response of kGatherTxMin payload bytes or more is a gather frame
  // where the port takes them (FinishGatherFrame).
  uint32_t BuildResponse(Action& a, pktio::Frame& f, bool* finished);
  uint8_t CreditsField() const;

  void FlushAll();
  void Fail(QpEvent why) {  // a transport error: ERR, and the event it raises
    if (error_event_ == QpEvent::kNone) error_event_ = why;
    EnterError();
  }
  uint32_t WriteHeaders(uint8_t* frame, uint8_t opcode, uint32_t psn, bool ack_req,
                        bool solicited, uint8_t** ext) const;

  const uint32_t qpn_;
  QpCaps caps_;
  QpEnv env_;
  QpState state_ = QpState::kReset;
  QpEvent error_event_ = QpEvent::kNone;
  QpAttr attr_;
  wire::Route route_;
  wire::HeaderTemplate headers_;  // route_ and the BTH's fixed fields (WriteHeaders)
  wire::Route cnp_route_;  // route_ with the CNP DSCP and Not-ECT
  // Notification point state: a move to RESET value-initialises it.
  struct CnpConn {
    uint32_t cnps_pending = 0;  // several when min_time_between_cnps is 0
    bool cnp_ever_sent = false;
    uint64_t last_cnp_ns = 0;
  } cnp_;
  uint32_t mtu_ = 1024;
  uint32_t mtu_log2_ = 10;  // RC, UC: mtu_ == 1 << mtu_log2_ (UD: PacketsFor is 1)
  uint16_t ud_src_port_ = 0xC000;  // UD: the UDP source port of every packet (UdSourcePort)
  QpCounters counters_;
  cc::CongestionControl cc_;
  bool Paced(uint64_t now_ns) const { return cc_.Paced(now_ns); }
  void NoteSent(uint32_t bytes, uint64_t now_ns) { cc_.OnSent(bytes, now_ns); }
  // Congestion control's hooks into the requester and the completer
  // (cc_hooks.cc), called only while the QP runs an algorithm: one packet
  // at a time is timed from its first transmission to the response that
  // acknowledges it (Karn: a resent one is not; the timed packet asks for
  // its ACK, so ACK coalescing does not stretch the sample), and every response that
  // moves psn_una reports the packets it acknowledged, the RTT sample if it
  // ends the timing, and the INT echo it carries.
  struct CcTiming {
    bool timing = false;
    uint32_t psn = 0;      // the timed packet
    uint64_t sent_ns = 0;
    uint32_t acked_una = 0;  // psn_una at the last report
    uint32_t ack_req_psn = 0;   // the newest request packet sent with AckReq
    bool ack_req_sent = false;  // ack_req_psn holds one
  } cc_timing_;
  bool CcNoteSent(uint32_t psn, bool retransmission, uint64_t now_ns);
  void CcOnResponse(const RespCtx& c);
  // A window-based algorithm's window can shrink below what is in flight
  // after the last packet that asked for an ACK was acknowledged: every
  // packet still in flight went without AckReq and the responder, which
  // coalesces, never answers. The oldest goes again with AckReq (the retry
  // probe a timeout sends), instead of waiting for the transport timer.
  void CcAskWhenWindowStalls();
  // INT (wire/int.h, doc/cc.md "INT"): a QP whose algorithm needs the
  // switches' telemetry (HPCC) asks for it in its SEND/WRITE packets
  // (CcWriteIntRequest: the header after the extended headers, BTH byte 4's
  // flag; the payload follows it); a responder that received a request with
  // the switches' records echoes the newest in its next ACK (CcNoteInt,
  // CcWriteIntEcho). A QP that never receives one never echoes.
  bool int_requests_ = false;
  bool short_requests_ = true;  // ShortRequest's packets take BuildShortRequest
  bool int_echo_pending_ = false;
  wire::IntStack int_echo_;
  uint32_t CcWriteIntRequest(uint8_t* bth_p, uint32_t header_bytes);
  void CcNoteInt(const ReqCtx& c);
  uint32_t CcWriteIntEcho(uint8_t* bth_p, uint32_t header_bytes);

  void TakePostedSends();
  template <bool kCommon, bool kOneSge>
  int PostSendSteps(const SendWr& wr);   // PostSend's (qp.cc)
  int PostSendOther(const SendWr& wr);   // PostSend but for its common case
  int PostSendCommon(const SendWr& wr);  // PostSend's common case but for one-SGE WRITE/SEND
  void TakePublishedRecvs();
  void FlushReceiveQueue();  // every queued receive completes with FLUSH_ERR, in order
  // The WQE from a valid WR (below the class); kCommon: neither inline nor UD;
  // kOneSge: a WRITE or SEND of one SGE.
  // Wr: a SendWr, or with kOneSge a OneSgeWr.
  template <bool kCommon, bool kOneSge, typename Wr>
  void FillSendWqe(SendWqe& w, const Wr& wr, uint64_t total);
  template <bool kCommon>
  void FillSendWqeRest(SendWqe& w, const SendWr& wr);
  int ValidateForQp(const SendWr& wr, uint64_t* total) const;  // ValidateSend plus the QP type's opcodes

  // Requester.
  queue::Ring<SendWqe, /*kShared=*/true> sq_;  // posts publish into it (NextSendSlot)
  // Arrays beside the send ring, by slot. Their storage is left as
  // allocated (each entry is written before it is read: by the post that
  // fills the slot, or the start of its WQE), so a deep queue costs no
  // set-up stores and no pages until used.
  struct FreeStorage {
    void operator()(void* p) const { ::operator delete(p); }
  };
  template <typename T>
  using SlotArray = std::unique_ptr<T[], FreeStorage>;
  template <typename T>
  static SlotArray<T> NewSlotArray(uint32_t n) {
    static_assert(std::is_aggregate_v<T> || std::is_trivially_default_constructible_v<T>,
                  "implicit lifetime: no constructor runs on the storage");
    return SlotArray<T>(static_cast<T*>(::operator new(sizeof(T) * n)));
  }
  SlotArray<SendWqeExt> sq_ext_;
  SlotArray<uint64_t> sq_epoch_;
  // What a producer fills (NextSendSlot, SendSlotAhead) before it is
  // published into the ring's WQEs, by the slot it will take.
  SlotArray<SendWr> sq_staged_;
  uint32_t sq_arrays_size_ = 0;
  void SizeSendQueueArrays();
  // The requester's per-connection state: a move to RESET value-initialises
  // it (RTR/RTS set the PSNs and retry budgets again).
  struct RequesterConn {
    uint32_t sq_next = 0;      // ring index of the next WQE to (re)transmit
    uint32_t psn_next = 0;     // PSN for the next new WQE
    uint32_t psn_una = 0;      // oldest unacknowledged PSN
    uint32_t psn_high = 0;     // one past the highest PSN ever sent (counts retransmissions)
    uint32_t rd_atomic_outstanding = 0;
    uint8_t retry_left = 7;
    uint8_t rnr_retry_left = 7;
    bool rnr_nak_pending = false;  // an RNR NAK for rnr_nak_psn not yet followed by progress
    uint32_t rnr_nak_psn = 0;
    uint64_t retransmit_deadline = 0;  // 0: not armed
    uint64_t rnr_resume_at = 0;        // 0: not waiting for an RNR timer
    uint32_t packets_since_ack_req = 0;
    // The newest packet went out without AckReq (at tail_sent_ns): unless
    // more follows, an ACK for it is solicited at ack_solicit_deadline.
    bool tail_unsolicited = false;
    uint64_t tail_sent_ns = 0;
    uint64_t ack_solicit_deadline = 0;  // 0: not armed
    bool progress_since_retry = true;
    // Go-back-N's retry probe: a timeout sends the oldest unacknowledged
    // packet once more, alone (SendRetryProbe); the first ACK at or past
    // its PSN decides whether the rest is resent (CheckProbeAnswer).
    bool retry_probe_pending = false;
    bool retry_probe_sent = false;
    uint32_t retry_probe_psn = 0;
    // Implied NAKs (lost READ/atomic responses) retry once per missing PSN
    // until progress; otherwise every later response would rewind again.
    bool implied_nak_pending = false;
    uint32_t implied_nak_psn = 0;
    bool force_ack_req = false;  // a retransmission asks for an ACK (SR resends, the retry probe)
    uint32_t resend_read_len = 0;  // a READ resent asks for this many bytes (0: to its end)
    uint64_t retry_clock_ns = 0;  // start of the IBTA timeout that the next retry_cnt spend measures
    // The region the last SGE's L_Key resolved to through CheckLocal
    // (ResolveLocal): the next SGEs through the same key are bounds-checked
    // against it while the MR table's epoch is still `epoch` (nothing
    // registered, deregistered, bound or invalidated since: the key still
    // names that memory, with the same PD and access).
    ResolvedRegion local;
  } req_;

  // Responder.
  queue::Ring<RecvWr, /*kShared=*/true> rq_;
  enum class InMessage : uint8_t { kNone, kSend, kWrite };
  // The responder's per-connection state: a move to RESET value-initialises it.
  struct ResponderConn {
    uint32_t epsn = 0;
    uint32_t msn = 0;
    bool nak_seq_sent = false;
    // Requests accepted without AckReq and not acknowledged since: a move
    // to ERR acknowledges them (EnterError), as a NIC that ACKs at once
    // would have, so a peer that disconnects right after its receive
    // completion does not leave our requester's last unsignaled WR to be
    // flushed instead of completed.
    bool ack_owed = false;
    InMessage in_message = InMessage::kNone;
    bool recv_wqe_held = false;
    RecvWr recv_wqe;
    uint32_t recv_offset = 0;
    uint8_t* write_host = nullptr;
    uint32_t write_rkey = 0;  // re-checked for every packet of the WRITE (see MrStillLentSince)
    uint64_t write_epoch = 0;
    uint32_t write_remaining = 0;
    uint32_t write_total = 0;
    uint32_t next_resource = 0;
    uint32_t rd_atomic_active = 0;  // new READ/atomic requests whose responses are not all sent
    // The region (or window) the last WRITE FIRST/ONLY resolved its R_Key
    // to through every check of check_rkey: PlaceExpected bounds-checks the
    // next WRITEs through the same key against it instead of the MR table,
    // while nothing was registered, deregistered, bound or invalidated
    // since (the table's epoch is still `epoch`) and the QP's access flags
    // are the same (Modify forgets it).
    ResolvedRegion expected;
    // The region the last receive scatter's L_Key resolved to through
    // CheckLocal (PlaceSendPayload): PlaceExpected places the next SENDs
    // through the same key with a bounds check against it while the MR
    // table's epoch is unchanged.
    ResolvedRegion recv_local;
  } resp_;
  // Selective repeat (sr/selective_repeat.h): allocated when chosen
  // (SetSelectiveRepeat), kept through a fallback to go-back-N for the
  // receive WQEs it holds and the SACKs still queued; sr_ points at it while
  // the connection uses it (a move to RESET undoes a fallback).
  std::unique_ptr<SelectiveRepeat> sr_chosen_;
  SelectiveRepeat* sr_ = nullptr;
  std::vector<Resource> resources_;
  queue::Ring<Action> actions_;
};

// Inline in the posting paths (PostSendSteps, PublishSend, PublishSends in
// qp.cc; PublishOneSge here), their only callers: the WQE from a valid WR,
// writing its one line and, only for what the WR carries, its slot's
// SendWqeExt. `total`: the WR's SGE bytes, as its validation added
// them up. kCommon: not inline, not UD (PostSend's common case); kOneSge:
// moreover a WRITE or SEND of one SGE (its most common WR).
template <bool kCommon, bool kOneSge, typename Wr>
[[gnu::always_inline]] inline void Qp::FillSendWqe(SendWqe& w, const Wr& wr, uint64_t total) {
  static_assert(kOneSge || std::is_same_v<Wr, SendWr>);
  w.wr_id = wr.wr_id;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.opcode = wr.opcode;
  w.flags = static_cast<uint8_t>(wr.flags);
  w.status = queue::WcStatus::kSuccess;
  w.started = w.fully_sent = w.done = false;
  w.total_len = static_cast<uint32_t>(total);
  if constexpr (kOneSge) {
    w.num_sge = 1;
    w.local_addr = wr.sg_list[0].addr;
    w.lkey = wr.sg_list[0].lkey;
  } else {
    FillSendWqeRest<kCommon>(w, wr);
  }
}

// Inline: the verbs post's most common WR, converted by the caller and
// written here in one frame (the OneSgeWr the caller fills need not reach
// memory). The checks PostSend makes for such a WR: a QP that is not UD
// (the address handle is the engine's to resolve) and whose caps and
// max_msg_sz allow it.
inline int Qp::PublishOneSge(const OneSgeWr& wr) {
  SendWqe* w = sq_.ProducerSlot();
  if (w == nullptr) [[unlikely]] return ENOMEM;
  const uint64_t total = wr.sg_list[0].length;
  if (ud() || !OneSgeFits(caps_.max_send_sge, total)) [[unlikely]] return EINVAL;
  FillSendWqe<true, true>(*w, wr, total);
  sq_.Publish();
  return 0;
}

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_QP_H_
