// libdroce-rdmav34.so: the rdma-core provider. libibverbs finds a droce
// device in the sysfs tree droce-ctl wrote, loads this library, and calls the
// ops below; each maps a verb onto lib/core's Device running inside this
// process (see runtime.h). Errors at this boundary are positive errnos, as a
// kernel-backed provider returns them.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "drivers/verbs/abi.h"
#include "drivers/verbs/device_config.h"
#include "drivers/verbs/runtime.h"
#include "droce/version.h"
#include "transport/types.h"

namespace droce::verbs {
namespace {

using transport::SendWr;
using transport::RecvWr;

constexpr uint32_t kMaxCqe = 1u << 20;
constexpr uint32_t kMaxQpWr = 1u << 15;
constexpr uint32_t kMaxSrqWr = 1u << 16;
constexpr uint32_t kMaxPd = 1u << 16;

struct DroceDevice {
  verbs_device vdev;
};

struct DroceContext {
  verbs_context ibv_ctx;
  DeviceFile* file;   // from <ibdev_path>/droce.conf at open time
  Runtime* rt;        // started on first use (PD, CQ, ...)
  int async_write_fd;
};

struct DrocePd {
  ibv_pd pd;
  uint32_t id;
};

struct DroceCq {
  verbs_cq vcq;
  uint32_t id;
  // ibv_cq_ex polling (start_poll/next_poll/end_poll): completions taken from
  // the device but not yet read stay here and are served first by either
  // polling API. `poll_mu` is held from a successful start_poll to end_poll,
  // as mlx5 does, and by poll_cq on an extended CQ (a plain CQ has no
  // read-ahead, so its poll_cq takes no CQ lock).
  bool extended = false;
  std::mutex poll_mu;
  static constexpr uint32_t kBatch = 32;
  queue::Completion batch[kBatch];
  uint32_t batch_head = 0;
  uint32_t batch_count = 0;
  HoldSnapshot quiet;  // empty polls without the device lock (Runtime::QuietPoll)
};

struct DroceSrq {
  ibv_srq srq;
  uint32_t id;
};

struct DroceAh {
  ibv_ah ah;
  uint32_t id;  // the device's address handle (core::Device::CreateAh)
};

// ECE (Enhanced Connection Establishment, IBA comment #9434): the vendor id
// and option bits the CM carries in REQ/REP so two droce ends can agree on
// options (doc/cm.md). Bit 0x2: selective repeat with the 1024-PSN SACK
// (doc/transport.md "Selective repeat"), offered by every RC QP; another
// vendor's ECE is refused, so toward rxe or ConnectX a QP stays IBTA
// go-back-N. Bit 0x1 (selective repeat with a 128-PSN SACK, which older
// droce builds offer) is never offered, so such a peer and this one agree
// on nothing and stay go-back-N rather than drop each other's SACKs.
constexpr uint32_t kDroceEceSelectiveRepeat = 0x2;
// Bits 0x4..0x20: the congestion control a QP runs (doc/cc.md "Per QP").
// Every RC QP offers all four; a program picks one for a QP by setting its
// ECE to that bit alone (ibv_set_ece, or rdma_set_local_ece, which carries
// it to the peer in the REQ). Exactly one bit agreed: the QP runs that
// algorithm from RTR; none or several: the device's cc=.
constexpr struct {
  uint32_t bit;
  const char* algorithm;
} kDroceEceCc[] = {{0x4, "dcqcn"}, {0x8, "timely"}, {0x10, "hpcc"}, {0x20, "swift"}};
constexpr uint32_t kDroceEceCcMask = 0x4 | 0x8 | 0x10 | 0x20;
constexpr uint32_t kDroceEceOptions = kDroceEceSelectiveRepeat | kDroceEceCcMask;

// One poster at a time on a QP's send (or receive) queue: verbs lets
// several threads post to one QP. Held for the WR copy into the ring, never
// across a wait for the device (doc/verbs.md "Posting without the device
// lock"). A holder preempted by the scheduler makes the others yield.
class PostLock {
 public:
  void lock() {
    for (int spins = 0; held_.exchange(true, std::memory_order_acquire);) {
      while (held_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) {
          __builtin_ia32_pause();
        } else {
          sched_yield();
        }
      }
    }
  }
  bool try_lock() { return !held_.exchange(true, std::memory_order_acquire); }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 4000;
  std::atomic<bool> held_{false};
};

struct DroceQp {
  verbs_qp vqp;
  uint32_t qpn;
  // The core's QP (stable while this one exists): posts write its rings.
  transport::Qp* engine = nullptr;
  PostLock send_lock, recv_lock;  // order: send_lock, recv_lock, then the device's mu
  // Posts that do not take the device's lock: set by modify_qp (and create)
  // under both post locks, from the state the QP was moved to. Sends: RC or
  // UC in RTS or SQD. Receives: no SRQ, any state but RESET and ERR. Other
  // posts (UD sends resolve an address handle; into RESET or ERR they fail
  // or flush at once) take the device's lock.
  bool direct_send = false;
  bool direct_recv = false;
  PostedDoorbell doorbell;  // a post's doorbell left for the device's owner
  // ibv_wr_* batch between wr_start and wr_complete: the WRs are written
  // straight into the send ring's next slots (inline data into their WQEs)
  // and published together at wr_complete — or, for a QP whose posts take
  // the device's lock (direct_send false), posted one by one from there
  // under it. send_lock is held from wr_start to wr_complete or wr_abort
  // (as mlx5 holds its QP lock), so no other post or state change runs
  // in between.
  std::atomic<const void*> batch_owner{nullptr};  // the thread whose wr_start holds send_lock; null: none
  uint32_t batch_size = 0;                        // WRs started
  SendWr* batch_wr = nullptr;                     // the one the setters fill
  SendWr batch_discard;                           // a WR that has no slot (an error): filled, never posted
  int batch_error = 0;
  // ECE options (doc/cm.md): what this QP offers (droce's, kDroceEceOptions)
  // until set_ece gives the peer's, then what both offered.
  uint32_t ece_options = 0;
  bool ece_set = false;  // set_ece was called: ece_options is an agreement
  // The last one-SGE post was unsignaled (PostSend, under send_lock).
  bool last_post_unsignaled = false;
};

// Whether ECE agreed on `algorithm`'s bit with the peer.
bool EceAgreedOn(const DroceQp& qp, std::string_view algorithm) {
  if (!qp.ece_set) return false;
  for (const auto& c : kDroceEceCc) {
    if (algorithm == c.algorithm) return (qp.ece_options & c.bit) != 0;
  }
  return false;
}

// A per-thread address: which thread opened a QP's ibv_wr_* batch.
const void* ThisThread() {
  static thread_local char token;
  return &token;
}

// Whether this thread is between wr_start and wr_complete on the QP (and so
// holds its send_lock: a post, modify or destroy of it from here would wait
// for itself).
// (A batch open anywhere is rare: the thread-local address, a call in a
// shared library, is asked for only then.)
bool BatchOpenHere(const DroceQp* qp) {
  const void* owner = qp->batch_owner.load(std::memory_order_relaxed);
  return owner != nullptr && owner == ThisThread();
}

DroceContext* ToCtx(ibv_context* c) {
  return reinterpret_cast<DroceContext*>(reinterpret_cast<uint8_t*>(c) - offsetof(DroceContext, ibv_ctx) -
                                         offsetof(verbs_context, context));
}
DroceQp* ToQp(ibv_qp* q) { return reinterpret_cast<DroceQp*>(q); }
DroceQp* ToQp(ibv_qp_ex* q) { return reinterpret_cast<DroceQp*>(q); }
DroceCq* ToCq(ibv_cq* c) { return reinterpret_cast<DroceCq*>(c); }

int ErrnoOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return EINVAL;
    case absl::StatusCode::kNotFound: return ENOENT;
    case absl::StatusCode::kResourceExhausted: return ENOMEM;
    case absl::StatusCode::kPermissionDenied: return EACCES;
    case absl::StatusCode::kUnavailable: return EHOSTUNREACH;
    case absl::StatusCode::kUnimplemented: return EOPNOTSUPP;
    default: return EIO;
  }
}

// Starts the dataplane on first use; a failure is explained once on stderr
// (it is the control path: the user must learn why the device is unusable).
Runtime* EnsureRuntime(DroceContext* ctx) {
  static std::mutex start_mu;  // two threads' first verbs on one context start it once
  std::lock_guard<std::mutex> lock(start_mu);
  if (ctx->rt != nullptr) return ctx->rt;
  absl::StatusOr<Runtime*> rt = Runtime::Acquire(*ctx->file);
  if (!rt.ok()) {
    std::fprintf(stderr, "droce: cannot start the dataplane of %s: %s\n", ctx->file->name.c_str(),
                 std::string(rt.status().message()).c_str());
    errno = ENODEV;
    return nullptr;
  }
  ctx->rt = *rt;
  {
    std::lock_guard<DeviceMutex> rt_lock(ctx->rt->mu);
    ctx->rt->AddAsyncFd(ctx->async_write_fd);  // port events
  }
  return ctx->rt;
}

Runtime* Rt(ibv_context* c) { return ToCtx(c)->rt; }

// A provider object, or null with errno ENOMEM (verbs' way to fail).
template <typename T>
T* New() {
  T* p = new (std::nothrow) T{};
  if (p == nullptr) errno = ENOMEM;
  return p;
}

// Runs a destroy verb on the device under the lock: 0, EBUSY while the
// object is still in use, or the errno of the failure.
template <typename Fn>
int DestroyLocked(Runtime* rt, Fn destroy) {
  AppLock lock(rt);
  const absl::Status s = destroy();
  if (s.ok()) return 0;
  return s.code() == absl::StatusCode::kFailedPrecondition ? EBUSY : ErrnoOf(s);
}

// ---------------------------------------------------------------- device

// Software devices have no IEEE OUI: like siw ("bmt") droce reports ASCII
// "dro". ECE (enhanced connection establishment) will carry it to tell a
// droce peer from rxe (0xffffff) or a ConnectX (0x02c9).
constexpr uint32_t kDroceVendorId = 0x64726f;
constexpr uint32_t kDroceVendorPartId = 1;

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                  size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  const DeviceFile& f = *ToCtx(context)->file;
  ibv_device_attr_ex a{};
  ibv_device_attr& o = a.orig_attr;
  std::snprintf(o.fw_ver, sizeof o.fw_ver, "%s", DROCE_VERSION_STRING);
  const core::Mac& m = f.dev.mac;
  const uint8_t eui[8] = {static_cast<uint8_t>(m[0] ^ 2), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
  std::memcpy(&o.node_guid, eui, 8);  // __be64: bytes in wire order
  o.sys_image_guid = o.node_guid;
  o.max_mr_size = 1ull << 40;
  o.page_size_cap = 0xfffff000;
  o.vendor_id = kDroceVendorId;
  o.vendor_part_id = kDroceVendorPartId;
  o.hw_ver = 0;
  o.max_qp = static_cast<int>(f.dev.max_qp);
  o.max_qp_wr = kMaxQpWr;
  o.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
                       IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR;
  o.max_sge = transport::kMaxSge;
  o.max_sge_rd = transport::kMaxSge;
  o.max_cq = 1 << 16;
  o.max_cqe = kMaxCqe;
  o.max_mr = static_cast<int>(f.dev.max_mr);
  o.max_pd = kMaxPd;
  o.max_qp_rd_atom = transport::kMaxRdAtomic;
  o.max_ee_rd_atom = 0;
  o.max_res_rd_atom = static_cast<int>(transport::kMaxRdAtomic * f.dev.max_qp);
  o.max_qp_init_rd_atom = transport::kMaxRdAtomic;
  o.max_ee_init_rd_atom = 0;
  o.atomic_cap = IBV_ATOMIC_HCA;
  // Memory windows of type 1 and 2B, as rxe; they share the key table with regions.
  o.device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  o.max_mw = static_cast<int>(f.dev.max_mr);
  o.max_srq = 1 << 16;
  o.max_srq_wr = kMaxSrqWr;
  o.max_srq_sge = transport::kMaxSge;
  o.max_pkeys = 1;
  o.max_ah = static_cast<int>(core::Device::kMaxAh);
  o.max_mcast_grp = static_cast<int>(core::Device::kMaxMcastGroups);
  o.max_mcast_qp_attach = static_cast<int>(core::Device::kMaxMcastQpAttach);
  o.max_total_mcast_qp_attach = o.max_mcast_grp * o.max_mcast_qp_attach;
  o.local_ca_ack_delay = 15;
  o.phys_port_cnt = 1;
  a.comp_mask = 0;
  a.max_dm_size = 0;
  a.phys_port_cnt_ex = o.phys_port_cnt;
  std::memcpy(attr, &a, std::min(attr_size, sizeof a));
  return 0;
}

ibv_mtu MtuEnum(uint32_t bytes) { return static_cast<ibv_mtu>(transport::MtuBytesToEnum(bytes)); }

int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) {
  if (port != 1) return EINVAL;
  DroceContext* ctx = ToCtx(context);
  std::memset(attr, 0, sizeof *attr);
  // The port is ACTIVE once registered: like an Ethernet NIC cabled to a
  // switch, it does not go down because the remote host is not up yet (the
  // memif link comes up only when the peer process attaches). phys_state
  // shows the wire: LinkUp, or Polling while the peer is absent.
  // A fabric device whose daemon is gone is DOWN (IBV_EVENT_PORT_ERR was
  // sent) until it is attached again (IBV_EVENT_PORT_ACTIVE).
  const bool down = ctx->rt != nullptr && ctx->rt->port_down();
  attr->state = down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  attr->phys_state = down ? 3 : (ctx->rt == nullptr || ctx->rt->link_up()) ? 5 : 2;
  attr->lid = ctx->file->fabric ? ctx->file->lid : 0;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = MtuEnum(ctx->rt != nullptr ? ctx->rt->active_mtu() : ctx->file->mtu);
  attr->gid_tbl_len = static_cast<int>(kGidTableLen);
  attr->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  attr->max_msg_sz = 1u << 31;
  attr->pkey_tbl_len = 1;
  attr->max_vl_num = 1;
  attr->active_width = 2;    // 4X
  attr->active_speed = 32;   // EDR
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

// ---------------------------------------------------------------- PD and MR

ibv_pd* AllocPd(ibv_context* context) {
  DroceContext* ctx = ToCtx(context);
  Runtime* rt = EnsureRuntime(ctx);
  if (rt == nullptr) return nullptr;
  auto* pd = New<DrocePd>();
  if (pd == nullptr) return nullptr;
  AppLock lock(rt);
  pd->id = rt->dev().AllocPd();
  pd->pd.context = context;
  pd->pd.handle = pd->id;
  return &pd->pd;
}

int DeallocPd(ibv_pd* ibpd) {
  auto* pd = reinterpret_cast<DrocePd*>(ibpd);
  Runtime* rt = Rt(ibpd->context);
  const int err = DestroyLocked(rt, [&] { return rt->dev().DeallocPd(pd->id); });
  if (err == 0) delete pd;
  return err;
}

constexpr int kSupportedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

ibv_mr* RegMr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access) {
  auto* pd = reinterpret_cast<DrocePd*>(ibpd);
  // Optional flags (relaxed ordering and the like) may be ignored; others not.
  const int mandatory = access & ~IBV_ACCESS_OPTIONAL_RANGE;
  if ((mandatory & ~kSupportedAccess) != 0 ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  if (length == 0 || addr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mr = New<verbs_mr>();
  if (mr == nullptr) return nullptr;
  Runtime* rt = Rt(ibpd->context);
  absl::StatusOr<mem::MrKeys> keys;
  {
    AppLock lock(rt);
    keys = rt->dev().RegMr(pd->id, addr, length, hca_va, static_cast<uint32_t>(access & kSupportedAccess));
  }
  if (!keys.ok()) {
    delete mr;
    errno = ErrnoOf(keys.status());
    return nullptr;
  }
  mr->mr_type = IBV_MR_TYPE_MR;
  mr->access = access;
  mr->ibv_mr.context = ibpd->context;
  mr->ibv_mr.pd = ibpd;
  mr->ibv_mr.addr = addr;
  mr->ibv_mr.length = length;
  mr->ibv_mr.handle = keys->lkey;
  mr->ibv_mr.lkey = keys->lkey;
  mr->ibv_mr.rkey = keys->rkey;
  return &mr->ibv_mr;
}

int DeregMr(verbs_mr* vmr) {
  Runtime* rt = Rt(vmr->ibv_mr.context);
  const int err = DestroyLocked(rt, [&] { return rt->dev().DeregMr(vmr->ibv_mr.lkey); });
  if (err == 0) delete vmr;
  return err;
}

// ibv_rereg_mr: translation, PD and access change in place; the keys stay
// (a peer keeps using the rkey it was given). Refused while windows are
// bound to the region.
int ReregMr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access) {
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
    const int mandatory = access & ~IBV_ACCESS_OPTIONAL_RANGE;
    if ((mandatory & ~kSupportedAccess) != 0 ||
        ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
      errno = EINVAL;
      return EINVAL;
    }
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) && ibpd == nullptr) {
    errno = EINVAL;
    return EINVAL;
  }
  Runtime* rt = Rt(vmr->ibv_mr.context);
  const uint32_t pd = (flags & IBV_REREG_MR_CHANGE_PD) ? reinterpret_cast<DrocePd*>(ibpd)->id : 0;
  absl::Status s;
  {
    AppLock lock(rt);
    s = rt->dev().mrs().Reregister(vmr->ibv_mr.lkey, static_cast<uint32_t>(flags), pd, addr, length,
                                   reinterpret_cast<uintptr_t>(addr),
                                   static_cast<uint32_t>(access & kSupportedAccess));
  }
  const int err = ErrnoOf(s);
  if (err != 0) {
    errno = err;
    return err;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) vmr->access = access;
  return 0;
}

// ---------------------------------------------------------------- MW

// Memory windows (IBTA 10.6.7), type 1 and 2B as rxe offers them. The
// window's handle is its slot in the device's key table.
ibv_mw* AllocMw(ibv_pd* ibpd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mw = New<ibv_mw>();
  if (mw == nullptr) return nullptr;
  Runtime* rt = Rt(ibpd->context);
  absl::StatusOr<mem::MrTable::MwKeys> keys;
  {
    AppLock lock(rt);
    keys = rt->dev().mrs().AllocMw(reinterpret_cast<DrocePd*>(ibpd)->id, static_cast<int>(type));
  }
  if (!keys.ok()) {
    delete mw;
    errno = ErrnoOf(keys.status());
    return nullptr;
  }
  mw->context = ibpd->context;
  mw->pd = ibpd;
  mw->rkey = keys->rkey;
  mw->handle = keys->handle;
  mw->type = type;
  return mw;
}

// Unbinds the window if it is bound: its key stops working at once.
int DeallocMw(ibv_mw* mw) {
  Runtime* rt = Rt(mw->context);
  const int err = DestroyLocked(rt, [&] { return rt->dev().mrs().DeallocMw(mw->handle); });
  if (err == 0) delete mw;
  return err;
}

transport::BindWr ToBindWr(ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info) {
  transport::BindWr b;
  b.mw_handle = mw->handle;
  b.new_key = rkey;
  b.mr_lkey = info.mr != nullptr ? info.mr->lkey : 0;
  b.addr = info.addr;
  b.length = info.length;
  b.access = info.mw_access_flags;
  return b;
}

// ibv_bind_mw (type 1): a BIND_MW work request on `ibqp`, as rdma-core's rxe
// provider posts it. The window's new key (a fresh random low byte) is its
// key from now on; if the bind completes in error the program must undo it,
// as with rxe.
int BindMw(ibv_qp* ibqp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  const ibv_mw_bind_info& info = mw_bind->bind_info;
  if (mw->type != IBV_MW_TYPE_1 || (info.mr == nullptr && (info.addr != 0 || info.length != 0)) ||
      (info.mw_access_flags & IBV_ACCESS_ZERO_BASED)) {
    errno = EINVAL;
    return EINVAL;
  }
  if (info.mr != nullptr && info.mr->pd != mw->pd) {
    errno = EPERM;
    return EPERM;
  }
  DroceQp* qp = ToQp(ibqp);
  if (BatchOpenHere(qp)) return EINVAL;  // inside this thread's wr_start .. wr_complete
  Runtime* rt = Rt(ibqp->context);
  std::lock_guard<PostLock> post(qp->send_lock);
  AppLock lock(rt);
  SendWr s;
  s.wr_id = mw_bind->wr_id;
  s.opcode = transport::WrOpcode::kBindMw;
  s.flags = mw_bind->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED);
  const uint32_t new_key = rt->dev().mrs().NextMwKey(mw->handle);
  if (new_key == 0) {
    errno = EINVAL;
    return EINVAL;
  }
  s.bind = ToBindWr(mw, new_key, info);
  const int err = rt->dev().PostSend(qp->qpn, s);
  if (err != 0) {
    errno = err;
    return err;
  }
  mw->rkey = new_key;
  rt->DoorbellLocked(qp->qpn, NowNs());
  return 0;
}

// ---------------------------------------------------------------- CQ

// Creates the device CQ behind `cq` and its event watch; 0 or an errno.
int InitCq(DroceCq* cq, ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
  DroceContext* ctx = ToCtx(context);
  if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors) {
    return EINVAL;
  }
  CqWatch watch;
  if (channel != nullptr) {
    // Our channels are autobound AF_UNIX datagram sockets (preload.cc); a
    // channel of another kind cannot carry droce's events.
    int type = 0;
    socklen_t tl = sizeof type;
    watch.channel_addr_len = sizeof watch.channel_addr;
    if (getsockopt(channel->fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM ||
        getsockname(channel->fd, reinterpret_cast<sockaddr*>(&watch.channel_addr), &watch.channel_addr_len) != 0 ||
        watch.channel_addr.sun_family != AF_UNIX) {
      std::fprintf(stderr, "droce: completion channel was not created by droce (is LD_PRELOAD set?)\n");
      return EINVAL;
    }
    watch.has_channel = true;
    watch.channel_fd = channel->fd;
  }
  Runtime* rt = EnsureRuntime(ctx);
  if (rt == nullptr) return ENODEV;
  AppLock lock(rt);
  absl::StatusOr<uint32_t> id = rt->dev().CreateCq(static_cast<uint32_t>(cqe));
  if (!id.ok()) return ErrnoOf(id.status());
  cq->id = *id;
  cq->vcq.cq.context = context;
  cq->vcq.cq.cqe = cqe;
  cq->vcq.cq.handle = *id;
  watch.cq_id = *id;
  watch.handle = reinterpret_cast<uintptr_t>(&cq->vcq.cq);
  watch.async_write_fd = ctx->async_write_fd;
  rt->WatchCq(watch);
  return 0;
}

ibv_cq* CreateCq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
  auto* cq = New<DroceCq>();
  if (cq == nullptr) return nullptr;
  if (const int err = InitCq(cq, context, cqe, channel, comp_vector); err != 0) {
    delete cq;
    errno = err;
    return nullptr;
  }
  return &cq->vcq.cq;
}

int DestroyCq(ibv_cq* ibcq) {
  DroceCq* cq = ToCq(ibcq);
  Runtime* rt = Rt(ibcq->context);
  const int err = DestroyLocked(rt, [&] {
    absl::Status s = rt->dev().DestroyCq(cq->id);
    if (s.ok()) rt->UnwatchCq(cq->id);
    return s;
  });
  if (err == 0) delete cq;
  return err;
}

// ibv_resize_cq: work already posted completes first (one poll round), so
// shrinking below what is outstanding fails with EINVAL rather than losing
// completions, as rxe refuses a size below the queued count.
int ResizeCq(ibv_cq* ibcq, int cqe) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe) return EINVAL;
  Runtime* rt = Rt(ibcq->context);
  AppLock lock(rt);
  rt->PollLocked(NowNs());
  const int err = ErrnoOf(rt->dev().ResizeCq(ToCq(ibcq)->id, static_cast<uint32_t>(cqe)));
  if (err == 0) ibcq->cqe = cqe;
  return err;
}

// The CQE as the program reads it, written once from the completion's slot
// in the device's CQ (Device::PollCqEach).
inline void ToWc(const queue::Completion& c, ibv_wc* wc) {
  wc->wr_id = c.wr_id;
  wc->status = static_cast<ibv_wc_status>(c.status);
  wc->opcode = static_cast<ibv_wc_opcode>(c.opcode);
  wc->vendor_err = 0;
  wc->byte_len = c.byte_len;
  wc->imm_data = c.imm_or_inv;  // invalidated_rkey shares the union
  wc->qp_num = c.qp_num;
  wc->src_qp = c.src_qp;
  wc->wc_flags = c.flags & ~queue::CompletionQueue::kWcSolicited;
  wc->pkey_index = 0;
  wc->slid = 0;
  wc->sl = c.sl;
  wc->dlid_path_bits = 0;
}

// Up to n completions of CQ `cq`, each handed to emit(completion, i) where
// it lies in the device's CQ; when fewer are there, one poll round of the
// dataplane first (the program's polling drives it), unless the device has
// nothing to do: an idle device's empty poll runs no round, and the polls
// after it answer without the lock for a while (Runtime::QuietPoll).
template <typename Emit>
uint32_t TakeCompletions(Runtime* rt, DroceCq* cq, uint32_t n, Emit&& emit) {
  if (rt->QuietPoll(cq->quiet)) return 0;
  AppLock lock(rt);
  const uint64_t now = NowNs();
  rt->NoteAppPoll(now);
  uint32_t got = 0, rx_bytes = 0;
  const auto take = [&](const queue::Completion& c) {
    // RECV and RECV_RDMA_WITH_IMM
    if (static_cast<uint8_t>(c.opcode) & static_cast<uint8_t>(queue::WcOpcode::kRecv)) rx_bytes += c.byte_len;
    emit(c, got++);
  };
  rt->dev().PollCqEach(cq->id, n, take);
  if (got < n) {
    if (rt->PollIfBusyLocked(now)) {
      rt->dev().PollCqEach(cq->id, n - got, take);
    } else if (got == 0) {
      rt->NoteQuietLocked(cq->quiet);
    }
  } else {
    rt->FlushDeferredLocked(now);  // a burst's last posts do not wait for a later round
  }
  if (got > 0) rt->NoteCompletionsTaken(rx_bytes);
  return got;
}

// Into an extended CQ's read-ahead (the flag the CQ keeps for itself masked).
uint32_t TakeCompletions(Runtime* rt, DroceCq* cq, queue::Completion* out, uint32_t n) {
  return TakeCompletions(rt, cq, n, [out](const queue::Completion& c, uint32_t i) {
    out[i] = c;
    out[i].flags &= ~queue::CompletionQueue::kWcSolicited;
  });
}

int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  if (num_entries <= 0) return 0;
  DroceCq* cq = ToCq(ibcq);
  Runtime* rt = Rt(ibcq->context);
  const auto to_wc = [wc](const queue::Completion& c, uint32_t i) { ToWc(c, &wc[i]); };
  if (!cq->extended) {
    // No read-ahead: no CQ lock, and each CQE written once, from the CQ.
    return static_cast<int>(TakeCompletions(rt, cq, static_cast<uint32_t>(num_entries), to_wc));
  }
  // Completions an extended CQ's start/next_poll read ahead come first.
  std::lock_guard<std::mutex> cq_lock(cq->poll_mu);
  uint32_t got = 0;
  const uint32_t want = static_cast<uint32_t>(num_entries);
  while (got < want && cq->batch_head < cq->batch_count) ToWc(cq->batch[cq->batch_head++], &wc[got++]);
  if (got < want) {
    got += TakeCompletions(rt, cq, want - got,
                           [wc, got](const queue::Completion& c, uint32_t i) { ToWc(c, &wc[got + i]); });
  }
  return static_cast<int>(got);
}

// ---------------------------------------------------------------- extended CQ

constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;

DroceCq* ToCq(ibv_cq_ex* c) { return reinterpret_cast<DroceCq*>(c); }
const queue::Completion& Current(ibv_cq_ex* c) {
  DroceCq* cq = ToCq(c);
  return cq->batch[cq->batch_head];
}

// Makes batch[batch_head] the next completion: ENOENT when there is none.
int NextCompletion(DroceCq* cq) {
  if (cq->batch_head >= cq->batch_count) {
    cq->batch_head = 0;
    cq->batch_count = TakeCompletions(Rt(cq->vcq.cq.context), cq, cq->batch, DroceCq::kBatch);
    if (cq->batch_count == 0) return ENOENT;
  }
  const queue::Completion& c = cq->batch[cq->batch_head];
  cq->vcq.cq_ex.wr_id = c.wr_id;
  cq->vcq.cq_ex.status = static_cast<ibv_wc_status>(c.status);
  return 0;
}

int StartPollEx(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
  if (attr->comp_mask != 0) return EINVAL;
  DroceCq* cq = ToCq(ibcq);
  cq->poll_mu.lock();
  const int err = NextCompletion(cq);
  if (err != 0) cq->poll_mu.unlock();  // end_poll is not called after ENOENT
  return err;
}

int NextPollEx(ibv_cq_ex* ibcq) {
  DroceCq* cq = ToCq(ibcq);
  ++cq->batch_head;  // the one read since start_poll / the last next_poll
  return NextCompletion(cq);
}

void EndPollEx(ibv_cq_ex* ibcq) {
  DroceCq* cq = ToCq(ibcq);
  ++cq->batch_head;  // the last one read; any others stay for the next poll
  cq->poll_mu.unlock();
}

ibv_wc_opcode ReadOpcode(ibv_cq_ex* c) { return static_cast<ibv_wc_opcode>(Current(c).opcode); }
uint32_t ReadVendorErr(ibv_cq_ex*) { return 0; }
uint32_t ReadByteLen(ibv_cq_ex* c) { return Current(c).byte_len; }
__be32 ReadImmData(ibv_cq_ex* c) { return Current(c).imm_or_inv; }
uint32_t ReadQpNum(ibv_cq_ex* c) { return Current(c).qp_num; }
uint32_t ReadSrcQp(ibv_cq_ex* c) { return Current(c).src_qp; }
unsigned int ReadWcFlags(ibv_cq_ex* c) { return Current(c).flags; }
uint32_t ReadSlid(ibv_cq_ex*) { return 0; }
uint8_t ReadSl(ibv_cq_ex* c) { return Current(c).sl; }
uint8_t ReadDlidPathBits(ibv_cq_ex*) { return 0; }

ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS)) {
    errno = EOPNOTSUPP;  // parent domains
    return nullptr;
  }
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0) {
    errno = EOPNOTSUPP;  // timestamps, cvlan, flow tag, tag matching
    return nullptr;
  }
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (attr->flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX) || attr->comp_vector > static_cast<uint32_t>(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = New<DroceCq>();
  if (cq == nullptr) return nullptr;
  if (const int err = InitCq(cq, context, static_cast<int>(attr->cqe), attr->channel,
                             static_cast<int>(attr->comp_vector));
      err != 0) {
    delete cq;
    errno = err;
    return nullptr;
  }
  // libibverbs' ibv_create_cq_ex calls this op directly: the fields its
  // ibv_create_cq wrapper would set are ours to set.
  cq->extended = true;
  ibv_cq_ex& x = cq->vcq.cq_ex;
  x.channel = attr->channel;
  x.cq_context = attr->cq_context;
  x.comp_events_completed = 0;
  x.async_events_completed = 0;
  pthread_mutex_init(&x.mutex, nullptr);
  pthread_cond_init(&x.cond, nullptr);
  x.start_poll = StartPollEx;
  x.next_poll = NextPollEx;
  x.end_poll = EndPollEx;
  x.read_opcode = ReadOpcode;
  x.read_vendor_err = ReadVendorErr;
  x.read_byte_len = ReadByteLen;
  x.read_imm_data = ReadImmData;
  x.read_qp_num = ReadQpNum;
  x.read_src_qp = ReadSrcQp;
  x.read_wc_flags = ReadWcFlags;
  x.read_slid = ReadSlid;
  x.read_sl = ReadSl;
  x.read_dlid_path_bits = ReadDlidPathBits;
  return &x;
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  DroceCq* cq = ToCq(ibcq);
  Runtime* rt = Rt(ibcq->context);
  AppLock lock(rt);
  rt->dev().cq(cq->id)->ArmNotify(solicited_only != 0);
  rt->ArmCq(cq->id);
  return 0;
}

void CqEvent(ibv_cq*) {}
void AsyncEvent(ibv_context*, ibv_async_event*) {}

// ---------------------------------------------------------------- SRQ

ibv_srq* CreateSrq(ibv_pd* ibpd, ibv_srq_init_attr* init) {
  if (init->attr.max_wr == 0 || init->attr.max_wr > kMaxSrqWr || init->attr.max_sge > transport::kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  Runtime* rt = Rt(ibpd->context);
  auto* srq = New<DroceSrq>();
  if (srq == nullptr) return nullptr;
  AppLock lock(rt);
  absl::StatusOr<uint32_t> id = rt->dev().CreateSrq(init->attr.max_wr);
  if (!id.ok()) {
    delete srq;
    errno = ErrnoOf(id.status());
    return nullptr;
  }
  srq->id = *id;
  srq->srq.context = ibpd->context;
  srq->srq.srq_context = init->srq_context;
  srq->srq.pd = ibpd;
  srq->srq.handle = *id;
  pthread_mutex_init(&srq->srq.mutex, nullptr);
  pthread_cond_init(&srq->srq.cond, nullptr);
  init->attr.max_sge = transport::kMaxSge;
  return &srq->srq;
}

// IBV_SRQ_LIMIT arms the limit event (IBV_EVENT_SRQ_LIMIT_REACHED on
// async_fd when a receive taken leaves fewer than `srq_limit` posted; it then
// disarms, as rxe and mlx5 do); 0 disarms. Resizing is not supported.
int ModifySrq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  if (mask & ~IBV_SRQ_LIMIT) return EOPNOTSUPP;
  if (mask == 0) return 0;
  auto* srq = reinterpret_cast<DroceSrq*>(ibsrq);
  Runtime* rt = Rt(ibsrq->context);
  AppLock lock(rt);
  if (attr->srq_limit > rt->dev().srq(srq->id)->ring().depth()) return EINVAL;
  rt->ArmSrqLimit(srq->id, reinterpret_cast<uintptr_t>(ibsrq), attr->srq_limit,
                  ToCtx(ibsrq->context)->async_write_fd);
  return 0;
}

int QuerySrq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  auto* srq = reinterpret_cast<DroceSrq*>(ibsrq);
  Runtime* rt = Rt(ibsrq->context);
  AppLock lock(rt);
  attr->max_wr = rt->dev().srq(srq->id)->ring().depth();
  attr->max_sge = transport::kMaxSge;
  attr->srq_limit = rt->SrqLimit(srq->id);
  return 0;
}

int DestroySrq(ibv_srq* ibsrq) {
  auto* srq = reinterpret_cast<DroceSrq*>(ibsrq);
  Runtime* rt = Rt(ibsrq->context);
  const int err = DestroyLocked(rt, [&] {
    const absl::Status s = rt->dev().DestroySrq(srq->id);
    if (s.ok()) rt->ArmSrqLimit(srq->id, 0, 0, -1);
    return s;
  });
  if (err == 0) delete srq;
  return err;
}

// Copies a verbs receive WR; EINVAL for more SGEs than the device has.
int ToRecvWr(const ibv_recv_wr* in, RecvWr* out) {
  if (in->num_sge < 0 || static_cast<uint32_t>(in->num_sge) > transport::kMaxSge) return EINVAL;
  if (in->num_sge > 0 && in->sg_list == nullptr) return EINVAL;
  out->wr_id = in->wr_id;
  out->num_sge = static_cast<uint32_t>(in->num_sge);
  for (int i = 0; i < in->num_sge; ++i) {
    out->sg_list[i] = {in->sg_list[i].addr, in->sg_list[i].length, in->sg_list[i].lkey};
  }
  return 0;
}

// Posts a receive WR list with `post`; stops at the first failure, which
// *bad names (those before it stay posted, as verbs specifies).
template <typename PostFn>
int PostRecvList(Runtime* rt, ibv_recv_wr* wr, ibv_recv_wr** bad, PostFn post) {
  AppLock lock(rt);
  for (; wr != nullptr; wr = wr->next) {
    RecvWr r;
    int err = ToRecvWr(wr, &r);
    if (err == 0) err = post(r);
    if (err != 0) {
      *bad = wr;
      return err;
    }
  }
  return 0;
}

int PostSrqRecv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* srq = reinterpret_cast<DroceSrq*>(ibsrq);
  Runtime* rt = Rt(ibsrq->context);
  return PostRecvList(rt, wr, bad, [&](const RecvWr& r) {
    const int err = rt->dev().PostSrqRecv(srq->id, r);
    rt->NoteSrqPosted(srq->id);
    return err;
  });
}

// ---------------------------------------------------------------- QP

void WrStart(ibv_qp_ex* qpx);
int WrComplete(ibv_qp_ex* qpx);
void WrAbort(ibv_qp_ex* qpx);
void WrSend(ibv_qp_ex* qpx);
void WrSendImm(ibv_qp_ex* qpx, __be32 imm);
void WrSendInv(ibv_qp_ex* qpx, uint32_t rkey);
void WrRdmaWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr);
void WrRdmaWriteImm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, __be32 imm);
void WrRdmaRead(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr);
void WrCmpSwp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap);
void WrFetchAdd(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t add);
void WrLocalInv(ibv_qp_ex* qpx, uint32_t rkey);
void WrBindMw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info);
void WrSetSge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length);
void WrSetSgeList(ibv_qp_ex* qpx, size_t n, const ibv_sge* sges);
void WrSetInline(ibv_qp_ex* qpx, void* addr, size_t length);
void WrSetInlineList(ibv_qp_ex* qpx, size_t n, const ibv_data_buf* bufs);
void WrSetUdAddr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey);

constexpr uint64_t kSupportedSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                       IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
                                       IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW;
static_assert(IBV_QPT_RC == static_cast<int>(transport::QpType::kRc) &&
              IBV_QPT_UC == static_cast<int>(transport::QpType::kUc) &&
              IBV_QPT_UD == static_cast<int>(transport::QpType::kUd));

ibv_qp* CreateQpCommon(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  // Capabilities beyond the device's limits are EINVAL whatever the QP type,
  // before the type is looked at (pyverbs checks that a UD QP with illegal
  // caps fails with an error, not as unsupported).
  ibv_qp_cap& cap = attr->cap;
  if (cap.max_send_wr > kMaxQpWr || cap.max_recv_wr > kMaxQpWr || cap.max_send_sge > transport::kMaxSge ||
      cap.max_recv_sge > transport::kMaxSge || cap.max_inline_data > transport::kMaxInlineData) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD) {
    errno = EOPNOTSUPP;  // XRC and raw packet QPs are not implemented
    return nullptr;
  }
  if (attr->pd == nullptr || attr->send_cq == nullptr || attr->recv_cq == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  Runtime* rt = Rt(context);
  core::QpInitAttr init;
  init.pd = reinterpret_cast<DrocePd*>(attr->pd)->id;
  init.send_cq = ToCq(attr->send_cq)->id;
  init.recv_cq = ToCq(attr->recv_cq)->id;
  init.srq = attr->srq != nullptr ? static_cast<int32_t>(reinterpret_cast<DroceSrq*>(attr->srq)->id) : -1;
  init.caps.type = static_cast<transport::QpType>(attr->qp_type);  // RC, UC, UD: same numbers
  init.caps.port_mtu = ToCtx(context)->file->mtu;  // UD datagrams: at most the port MTU
  init.caps.max_send_wr = std::max<uint32_t>(cap.max_send_wr, 1);
  init.caps.max_recv_wr = attr->srq != nullptr ? 0 : std::max<uint32_t>(cap.max_recv_wr, 1);
  init.caps.max_send_sge = transport::kMaxSge;
  init.caps.max_recv_sge = transport::kMaxSge;
  init.caps.max_inline_data = transport::kMaxInlineData;
  init.caps.sq_sig_all = attr->sq_sig_all != 0;
  auto* qp = New<DroceQp>();
  if (qp == nullptr) return nullptr;
  AppLock lock(rt);
  absl::StatusOr<uint32_t> qpn = rt->dev().CreateQp(init);
  if (!qpn.ok()) {
    delete qp;
    errno = ErrnoOf(qpn.status());
    return nullptr;
  }
  qp->qpn = *qpn;
  qp->engine = rt->dev().qp(*qpn);
  qp->doorbell.qpn = *qpn;
  rt->CountQp(+1);
  if (attr->qp_type == IBV_QPT_RC) qp->ece_options = kDroceEceOptions;
  ibv_qp& q = qp->vqp.qp;
  rt->WatchQp(*qpn, reinterpret_cast<uintptr_t>(&q), ToCtx(context)->async_write_fd);
  q.context = context;
  q.qp_context = attr->qp_context;
  q.pd = attr->pd;
  q.send_cq = attr->send_cq;
  q.recv_cq = attr->recv_cq;
  q.srq = attr->srq;
  q.handle = *qpn;
  q.qp_num = *qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  // What the QP really has (verbs lets a provider round up).
  cap.max_send_wr = init.caps.max_send_wr;
  cap.max_recv_wr = init.caps.max_recv_wr;
  cap.max_send_sge = transport::kMaxSge;
  cap.max_recv_sge = attr->srq != nullptr ? 0 : transport::kMaxSge;
  cap.max_inline_data = transport::kMaxInlineData;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    ibv_qp_ex& x = qp->vqp.qp_ex;
    qp->vqp.comp_mask |= VERBS_QP_EX;
    x.wr_start = WrStart;
    x.wr_complete = WrComplete;
    x.wr_abort = WrAbort;
    x.wr_send = WrSend;
    x.wr_send_imm = WrSendImm;
    x.wr_send_inv = WrSendInv;
    x.wr_rdma_write = WrRdmaWrite;
    x.wr_rdma_write_imm = WrRdmaWriteImm;
    x.wr_rdma_read = WrRdmaRead;
    x.wr_atomic_cmp_swp = WrCmpSwp;
    x.wr_atomic_fetch_add = WrFetchAdd;
    x.wr_local_inv = WrLocalInv;
    x.wr_bind_mw = WrBindMw;
    x.wr_set_sge = WrSetSge;
    x.wr_set_sge_list = WrSetSgeList;
    x.wr_set_inline_data = WrSetInline;
    x.wr_set_inline_data_list = WrSetInlineList;
    x.wr_set_ud_addr = WrSetUdAddr;
  }
  return &q;
}

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = CreateQpCommon(pd->context, &ex);
  if (qp != nullptr) attr->cap = ex.cap;
  return qp;
}

ibv_qp* CreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kSupportedMask =
      IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  if ((attr->comp_mask & ~kSupportedMask) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // Creation flags (scatter FCS, loopback blocking, source QPN, ...) are
  // hardware features; asking for none of them is fine, as on rxe.
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~kSupportedSendOps) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return CreateQpCommon(context, attr);
}

// The IPv4 GID of the run directory's fabric device whose LID is `lid`
// (DeviceFile::lid); both ends need an IPv4 address.
absl::StatusOr<core::Gid> FabricGidOfLid(const DeviceFile& self, uint16_t lid) {
  if (self.dev.ipv4 == 0) return absl::FailedPreconditionError("no IPv4 address");
  for (const std::string& name : ListDevices(self.fabric_dir)) {
    absl::StatusOr<DeviceFile> f = ReadDevice(self.fabric_dir, name);
    if (!f.ok() || !f->fabric || f->lid != lid || f->dev.ipv4 == 0) continue;
    return wire::Ipv4MappedGid(f->dev.ipv4);  // core::GidTable's entry 1
  }
  return absl::NotFoundError("no fabric device has that LID");
}

// A QP in a state that takes requests and responses from its peer.
bool Receives(const transport::Qp* q) {
  if (q == nullptr) return false;
  const transport::QpState st = q->state();
  return st != transport::QpState::kReset && st != transport::QpState::kInit && st != transport::QpState::kErr;
}

int ModifyQp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  DroceQp* qp = ToQp(ibqp);
  transport::QpAttr a;
  a.qp_state = static_cast<transport::QpState>(attr->qp_state);
  a.cur_qp_state = static_cast<transport::QpState>(attr->cur_qp_state);
  a.qp_access_flags = static_cast<uint32_t>(attr->qp_access_flags) & kSupportedAccess;
  a.pkey_index = attr->pkey_index;
  a.port_num = attr->port_num;
  a.qkey = attr->qkey;
  if (mask & IBV_QP_PORT && attr->port_num != 1) return EINVAL;
  if (mask & IBV_QP_PKEY_INDEX && attr->pkey_index != 0) return EINVAL;
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = attr->ah_attr;
    const DeviceFile& file = *ToCtx(ibqp->context)->file;
    if (ah.is_global) {
      std::memcpy(a.ah.dgid.data(), ah.grh.dgid.raw, 16);
      a.ah.sgid_index = ah.grh.sgid_index;
    } else if (file.fabric && ah.dlid != 0) {
      // LID addressing on the host fabric: the fabric device with that LID.
      absl::StatusOr<core::Gid> dgid = FabricGidOfLid(file, ah.dlid);
      if (!dgid.ok()) return EINVAL;
      a.ah.dgid = *dgid;
      a.ah.sgid_index = 1;  // our IPv4 GID
    } else if (file.has_lid_peer) {
      // LID addressing on a point-to-point wire: the wire's one peer, from our
      // GID of the same IP version (1: IPv4, 2: IPv6).
      a.ah.dgid = file.lid_peer;
      a.ah.sgid_index = file.lid_peer[10] == 0xff && file.lid_peer[11] == 0xff ? 1 : 2;
    } else {
      return EINVAL;  // RoCE addresses by GID: the GRH is mandatory
    }
    if (ah.is_global) {
      a.ah.hop_limit = ah.grh.hop_limit != 0 ? ah.grh.hop_limit : 64;
      a.ah.traffic_class = ah.grh.traffic_class;
      a.ah.flow_label = ah.grh.flow_label;
    }
  }
  if (mask & IBV_QP_PATH_MTU) {
    a.path_mtu = transport::MtuEnumToBytes(attr->path_mtu);
    if (a.path_mtu == 0) return EINVAL;
  }
  a.timeout = attr->timeout;
  a.retry_cnt = attr->retry_cnt;
  a.rnr_retry = attr->rnr_retry;
  a.rq_psn = attr->rq_psn;
  a.sq_psn = attr->sq_psn;
  a.max_rd_atomic = attr->max_rd_atomic;
  a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  a.min_rnr_timer = attr->min_rnr_timer;
  a.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC && attr->max_rd_atomic > transport::kMaxRdAtomic) return EINVAL;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC && attr->max_dest_rd_atomic > transport::kMaxRdAtomic) return EINVAL;
  Runtime* rt = Rt(ibqp->context);
  if ((mask & IBV_QP_STATE) && (attr->qp_state == IBV_QPS_RTR || attr->qp_state == IBV_QPS_RTS)) {
    // About to talk to the peer: give a wire whose far end is still
    // attaching (memif's client connects asynchronously) time to come up,
    // rather than burning the retry budget on a dead link.
    // A path to one of our own GIDs is the device's internal loopback: no
    // wire, no neighbour to resolve.
    const bool local = (mask & IBV_QP_AV) && rt->IsLocalGid(a.ah.dgid);
    if (!local) {
      rt->WaitLinkUp();
      // ARP (also waits for a peer still starting); a netdev-bound device's
      // next hop is the kernel's, and a destination it cannot reach fails
      // the transition as a kernel RoCE driver's does.
      if (mask & IBV_QP_AV) {
        if (const int err = rt->ResolveNeighbor(a.ah.dgid, a.ah.sgid_index); err != 0) return err;
      }
    }
  }
  // No post runs while the state changes (a reset empties the rings).
  if (BatchOpenHere(qp)) return EINVAL;  // inside this thread's wr_start .. wr_complete
  std::lock_guard<PostLock> send_post(qp->send_lock);
  std::lock_guard<PostLock> recv_post(qp->recv_lock);
  AppLock lock(rt);
  rt->DrainPostedLocked(NowNs());  // posts made before this call are taken in the state they were posted in
  rt->FlushDeferredLocked(NowNs());  // what was held or deferred leaves in the state it was posted in
  // A connected QP's move to ERR (rdma_disconnect's, before its DREQ; the
  // peer's on the DISCONNECTED event): frames that already reached the
  // device are taken and answered first, as a NIC took them on arrival.
  // The DREQ goes through the daemon and can overtake the dataplane's
  // rounds: without this the peer's last unsignaled WRITE, placed or not,
  // or our own WR whose ACK waits in the ring, is flushed instead of
  // completing (doc/transport.md "An unasked tail at a disconnect").
  const bool to_err = (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR;
  if (to_err && Receives(rt->dev().qp(qp->qpn))) (void)rt->PollLocked(NowNs());
  if (to_err) rt->NoteQpErrorByUser(qp->qpn);
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) rt->RearmQp(qp->qpn);  // may fail again
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR && ibqp->qp_type == IBV_QPT_RC &&
      rt->dev().qp(qp->qpn) != nullptr && rt->dev().qp(qp->qpn)->state() == transport::QpState::kInit) {
    // Selective repeat when the device has it on for every QP, or when ECE
    // agreed on it with the peer (both offered the bit; doc/cm.md).
    const bool sr = rt->dev().config().selective_repeat ||
                    (qp->ece_set && (qp->ece_options & kDroceEceSelectiveRepeat) != 0);
    absl::Status s = rt->dev().SetQpSelectiveRepeat(qp->qpn, sr);
    if (!s.ok()) return ErrnoOf(s);
    for (const auto& c : kDroceEceCc) {
      if (qp->ece_set && (qp->ece_options & kDroceEceCcMask) == c.bit) {
        s = rt->dev().SetQpCongestionControl(qp->qpn, c.algorithm);
        if (!s.ok()) return ErrnoOf(s);
      }
    }
    // An algorithm that needs the peer (HPCC: INT on every request, echoed
    // in its ACKs) runs only where ECE agreed on its bit; toward a peer that
    // did not (rxe, ConnectX, a program that connects without ECE) the QP
    // runs none, so that peer sees plain IBTA.
    const cc::Ops* ops = rt->dev().qp(qp->qpn)->congestion_control().ops();
    if (ops != nullptr && ops->needs_int && !EceAgreedOn(*qp, ops->name)) {
      s = rt->dev().SetQpCongestionControl(qp->qpn, "none");
      if (!s.ok()) return ErrnoOf(s);
    }
  }
  absl::Status s = rt->dev().ModifyQp(qp->qpn, a, static_cast<uint32_t>(mask));
  if (!s.ok()) return ErrnoOf(s);
  // The ACK EnterError queued for what was accepted without AckReq leaves
  // now, ahead of the DREQ librdmacm sends once this returns.
  if (to_err) (void)rt->dev().Doorbell(qp->qpn, NowNs());
  const transport::QpState now = qp->engine->state();
  qp->direct_send = ibqp->qp_type != IBV_QPT_UD && (now == transport::QpState::kRts || now == transport::QpState::kSqd);
  qp->direct_recv = ibqp->srq == nullptr && now != transport::QpState::kReset && now != transport::QpState::kErr;
  return 0;
}

int QueryEce(ibv_qp* ibqp, ibv_ece* ece) {
  ece->vendor_id = kDroceVendorId;
  ece->options = ToQp(ibqp)->ece_options;
  ece->comp_mask = 0;
  return 0;
}

int SetEce(ibv_qp* ibqp, ibv_ece* ece) {
  if (ece->comp_mask != 0 || ece->vendor_id != kDroceVendorId) return EINVAL;
  DroceQp* qp = ToQp(ibqp);
  // What the peer offered, less what this QP does not: librdmacm sets the
  // REQ's options on the passive side (and answers with what query_ece then
  // reports), the REP's on the active side, both before RTR.
  ece->options &= qp->ece_options;
  qp->ece_options = ece->options;
  qp->ece_set = true;
  return 0;
}

int QueryQp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  DroceQp* qp = ToQp(ibqp);
  Runtime* rt = Rt(ibqp->context);
  AppLock lock(rt);
  transport::Qp* q = rt->dev().qp(qp->qpn);
  if (q == nullptr) return EINVAL;
  const transport::QpAttr& a = q->attr();
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = static_cast<ibv_qp_state>(q->state());
  attr->cur_qp_state = attr->qp_state;
  attr->path_mtu = MtuEnum(a.path_mtu);
  attr->qp_access_flags = static_cast<int>(a.qp_access_flags);
  attr->pkey_index = a.pkey_index;
  attr->port_num = 1;
  attr->qkey = a.qkey;
  attr->rq_psn = q->expected_psn();
  attr->sq_psn = q->next_psn();
  attr->dest_qp_num = a.dest_qp_num;
  attr->ah_attr.is_global = 1;
  std::memcpy(attr->ah_attr.grh.dgid.raw, a.ah.dgid.data(), 16);
  attr->ah_attr.grh.sgid_index = a.ah.sgid_index;
  attr->ah_attr.grh.hop_limit = a.ah.hop_limit;
  attr->ah_attr.grh.traffic_class = a.ah.traffic_class;
  attr->ah_attr.grh.flow_label = a.ah.flow_label;
  attr->ah_attr.port_num = 1;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  const transport::QpCaps& c = q->caps();
  attr->cap.max_send_wr = c.max_send_wr;
  attr->cap.max_recv_wr = c.max_recv_wr;
  attr->cap.max_send_sge = c.max_send_sge;
  attr->cap.max_recv_sge = c.max_recv_sge;
  attr->cap.max_inline_data = c.max_inline_data;
  if (init != nullptr) {
    std::memset(init, 0, sizeof *init);
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = attr->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = c.sq_sig_all ? 1 : 0;
  }
  return 0;
}

int DestroyQp(ibv_qp* ibqp) {
  DroceQp* qp = ToQp(ibqp);
  if (BatchOpenHere(qp)) return EBUSY;  // wr_complete or wr_abort first
  Runtime* rt = Rt(ibqp->context);
  const int err = DestroyLocked(rt, [&] {
    // A held ACK (the program's last receive before it tears down, as
    // ibv_rc_pingpong's) or a deferred doorbell leaves first, as a
    // hardware NIC would have sent it already.
    rt->DrainPostedLocked(NowNs());  // none names this QP after it is gone
    rt->FlushDeferredLocked(NowNs());
    // Frames that already reached the device are taken, and answered, as
    // a NIC took them on arrival: otherwise a program that tears down on a
    // disconnect (libfabric's rxm) leaves the peer's last ACK or request
    // in the socket, and a WR the peer placed or we placed is flushed on
    // one side instead of completing.
    (void)rt->PollLocked(NowNs());
    // A live QP acknowledges what it accepted without AckReq before it goes,
    // as its move to ERR does (EnterError): a program that destroys its QP
    // without moving it to ERR (libfabric's rxm closing its endpoint; the
    // DREQ follows from rdma_destroy_id) otherwise leaves the peer's unasked
    // tail to be flushed when that DREQ arrives. The flushes this makes go
    // with the QP (Device::DestroyQp drops its completions).
    if (Receives(rt->dev().qp(qp->qpn))) {
      transport::QpAttr err;
      err.qp_state = transport::QpState::kErr;
      if (rt->dev().ModifyQp(qp->qpn, err, transport::kAttrState).ok()) (void)rt->dev().Doorbell(qp->qpn, NowNs());
    }
    if (const char* env = std::getenv("DROCE_STATS"); env != nullptr && *env == '1') rt->PrintQpStats(qp->qpn);
    absl::Status s = rt->dev().DestroyQp(qp->qpn);
    if (s.ok()) rt->UnwatchQp(qp->qpn);
    return s;
  });
  if (err != 0) return err;
  rt->CountQp(-1);
  (void)rt->SyncMcastGroups();  // a destroyed QP left its groups
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  delete qp;
  return 0;
}

// A send WR's opcode, id and flags, every other field zeroed but the SGEs
// past num_sge (0) and the bind (read for BIND_MW only, which sets it): `w`
// may be a ring slot holding an older WR.
void StartSendWr(SendWr* w, uint64_t wr_id, transport::WrOpcode op, unsigned int verbs_flags) {
  w->wr_id = wr_id;
  w->opcode = op;
  w->flags = verbs_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
  w->num_sge = 0;
  w->remote_addr = 0;
  w->rkey = 0;
  w->imm_data = 0;
  w->invalidate_rkey = 0;
  w->compare_add = 0;
  w->swap = 0;
  w->ah = 0;
  w->remote_qpn = 0;
  w->remote_qkey = 0;
}

// Copies a verbs send WR; EINVAL for more SGEs than the device has (the
// copy itself must never overrun the fixed SGE array). Every field that
// may be read is written (StartSendWr): `out` may be a ring slot.
int ToSendWr(const ibv_send_wr* in, SendWr* out) {
  if (in->num_sge < 0 || static_cast<uint32_t>(in->num_sge) > transport::kMaxSge) return EINVAL;
  if (in->num_sge > 0 && in->sg_list == nullptr) return EINVAL;
  if (static_cast<uint32_t>(in->opcode) > IBV_WR_SEND_WITH_INV) return EINVAL;
  if (in->opcode == IBV_WR_BIND_MW && in->bind_mw.mw == nullptr) return EINVAL;
  StartSendWr(out, in->wr_id, static_cast<transport::WrOpcode>(in->opcode), in->send_flags);
  out->num_sge = static_cast<uint32_t>(in->num_sge);
  for (int i = 0; i < in->num_sge; ++i) {
    out->sg_list[i] = {in->sg_list[i].addr, in->sg_list[i].length, in->sg_list[i].lkey};
  }
  switch (in->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      out->remote_addr = in->wr.rdma.remote_addr;
      out->rkey = in->wr.rdma.rkey;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      out->remote_addr = in->wr.atomic.remote_addr;
      out->rkey = in->wr.atomic.rkey;
      out->compare_add = in->wr.atomic.compare_add;
      out->swap = in->wr.atomic.swap;
      break;
    case IBV_WR_BIND_MW:
      out->bind = ToBindWr(in->bind_mw.mw, in->bind_mw.rkey, in->bind_mw.bind_info);
      break;
    default:
      break;
  }
  out->imm_data = in->imm_data;  // shares the union with invalidate_rkey
  out->invalidate_rkey = in->invalidate_rkey;
  return 0;
}

// A WRITE or SEND of one SGE without inline data (ib_write_bw's and most
// small messages' WR): the fields Qp::PublishOneSge writes into its WQE.
// False: not such a WR (ToSendWr converts it).
bool ToOneSgeWr(const ibv_send_wr* in, transport::OneSgeWr* out) {
  if (in->num_sge != 1 || in->sg_list == nullptr || (in->send_flags & IBV_SEND_INLINE) ||
      (in->opcode != IBV_WR_RDMA_WRITE && in->opcode != IBV_WR_SEND)) {
    return false;
  }
  const bool write = in->opcode == IBV_WR_RDMA_WRITE;
  out->wr_id = in->wr_id;
  out->opcode = write ? transport::WrOpcode::kRdmaWrite : transport::WrOpcode::kSend;
  out->flags = in->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
  out->sg_list[0] = {in->sg_list[0].addr, in->sg_list[0].length, in->sg_list[0].lkey};
  out->remote_addr = write ? in->wr.rdma.remote_addr : 0;
  out->rkey = write ? in->wr.rdma.rkey : 0;
  return true;
}

// UD: the address handle, destination QP and Q_Key of a send (wr.ud).
int SetUdAddr(ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey, SendWr* out) {
  if (ah == nullptr) return EINVAL;
  out->ah = reinterpret_cast<DroceAh*>(ah)->id;
  out->remote_qpn = remote_qpn;
  out->remote_qkey = remote_qkey;
  return 0;
}

// A post whose doorbell may leave with the posts after it (doorbell_batch,
// DoorbellBatcher): one WR for the wire — not a local bind or invalidation,
// which complete when the QP processes them — of at most kSmallBytes.
bool SmallWirePost(const SendWr& w) {
  if (w.opcode == transport::WrOpcode::kLocalInv || w.opcode == transport::WrOpcode::kBindMw) return false;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < w.num_sge && i < w.sg_list.size(); ++i) bytes += w.sg_list[i].length;
  return bytes <= DoorbellBatcher::kSmallBytes;
}

// A signaled WR after unsignaled ones (completion moderation, as
// perftest's every 100th) on the device's only QP rings its doorbell at
// once, with the batch before it: it is the WR the program waits for, and
// its ACK comes back while the posts after it are made, where at the
// batch's end (up to doorbell_batch - 1 posts later) a window of 128 could
// drain first. Beside other QPs their posts keep the wire busy meanwhile,
// and a QP that signals every WR keeps its batches. Notes this WR's
// signaling for the QP's next post; caller holds qp->send_lock.
bool RingsAtOnce(DroceQp* qp, const Runtime* rt, bool signaled) {
  const bool at_once = signaled && qp->last_post_unsignaled && rt->LoneQp();
  qp->last_post_unsignaled = !signaled;
  return at_once;
}

// Posts under the device's lock: UD (the address handle is the engine's to
// resolve) and QPs not in RTS or SQD (EINVAL, or flushed at once in ERR).
// Caller holds qp->send_lock.
int PostSendLocked(DroceQp* qp, Runtime* rt, ibv_send_wr* wr, ibv_send_wr** bad) {
  ibv_qp* ibqp = &qp->vqp.qp;
  AppLock lock(rt);
  int err = 0;
  uint32_t posted = 0;
  bool small = false;
  for (; wr != nullptr; wr = wr->next) {
    SendWr s;
    err = ToSendWr(wr, &s);
    if (err == 0 && ibqp->qp_type == IBV_QPT_UD) err = SetUdAddr(wr->wr.ud.ah, wr->wr.ud.remote_qpn,
                                                                 wr->wr.ud.remote_qkey, &s);
    if (err == 0) err = rt->dev().PostSend(qp->qpn, s);
    if (err != 0) {
      *bad = wr;
      break;
    }
    const bool at_once = RingsAtOnce(qp, rt, (s.flags & transport::kSendSignaled) != 0);
    small = ++posted == 1 && SmallWirePost(s) && !at_once;
  }
  // This QP transmits now (or with the small posts right behind it);
  // receive and timers are the poll loop's.
  rt->DoorbellLocked(qp->qpn, NowNs(), posted == 1 && small);
  return err;
}

// The verbs post: a WRITE or SEND of one SGE is written straight into its
// WQE (PublishOneSge); any other WR is converted into its slot of the QP's
// send ring (one copy; inline data once more, into the WQE) and published
// without the device's lock; then the doorbell, which transmits now if the
// device is free and is otherwise left to its owner (Runtime::RingPosted).
int PostSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  DroceQp* qp = ToQp(ibqp);
  Runtime* rt = Rt(ibqp->context);
  if (!qp->send_lock.try_lock()) {
    if (BatchOpenHere(qp)) {  // inside this thread's wr_start .. wr_complete: it holds the lock
      *bad = wr;
      return EINVAL;
    }
    qp->send_lock.lock();
  }
  std::lock_guard<PostLock> post(qp->send_lock, std::adopt_lock);
  if (!qp->direct_send) return PostSendLocked(qp, rt, wr, bad);
  int err = 0;
  uint32_t posted = 0;
  bool small = false;
  for (; wr != nullptr; wr = wr->next) {
    transport::OneSgeWr one;
    SendWr* slot;
    if (ToOneSgeWr(wr, &one)) {
      const bool at_once = RingsAtOnce(qp, rt, (one.flags & IBV_SEND_SIGNALED) != 0);
      small = posted == 0 && one.sg_list[0].length <= DoorbellBatcher::kSmallBytes && !at_once;
      err = qp->engine->PublishOneSge(one);
    } else if ((slot = qp->engine->NextSendSlot()) == nullptr) {
      err = ENOMEM;
    } else if ((err = ToSendWr(wr, slot)) == 0) {
      const bool at_once = RingsAtOnce(qp, rt, (slot->flags & transport::kSendSignaled) != 0);
      small = posted == 0 && SmallWirePost(*slot) && !at_once;
      err = qp->engine->PublishSend();
    }
    if (err != 0) {
      *bad = wr;
      break;
    }
    ++posted;
  }
  if (posted > 0) rt->RingPosted(&qp->doorbell, PostedDoorbell::kSend, posted == 1 && small);
  return err;
}

int PostRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  DroceQp* qp = ToQp(ibqp);
  if (ibqp->srq != nullptr) {
    *bad = wr;
    return EINVAL;
  }
  Runtime* rt = Rt(ibqp->context);
  std::lock_guard<PostLock> post(qp->recv_lock);
  if (!qp->direct_recv) {
    return PostRecvList(rt, wr, bad, [&](const RecvWr& r) { return rt->dev().PostRecv(qp->qpn, r); });
  }
  int err = 0;
  uint32_t posted = 0;
  for (; wr != nullptr; wr = wr->next) {
    RecvWr* slot = qp->engine->NextRecvSlot();
    err = slot == nullptr ? ENOMEM : ToRecvWr(wr, slot);
    if (err == 0) err = qp->engine->PublishRecv();
    if (err != 0) {
      *bad = wr;
      break;
    }
    ++posted;
  }
  // Arrivals take published receives themselves (Qp::OnPacket); the
  // doorbell is for a QP the engine moved to ERR meanwhile (they flush).
  if (posted > 0) rt->RingPosted(&qp->doorbell, PostedDoorbell::kRecv, false);
  return err;
}

// ---------------------------------------------------------------- ibv_wr_* API

// A setter's error, kept until wr_complete returns it. Outside this
// thread's batch (no wr_start) nothing is kept: the batch's fields are
// another thread's, and wr_complete then fails anyway.
void FailBatch(DroceQp* qp, int err) {
  if (BatchOpenHere(qp)) qp->batch_error = err;
}

// What the WR calls outside this thread's batch write into: never posted.
SendWr* StrayWr() {
  static thread_local SendWr w;
  return &w;
}

// The next WR of this thread's batch, in its ring slot.
SendWr* NewWr(ibv_qp_ex* qpx, transport::WrOpcode op) {
  DroceQp* qp = ToQp(qpx);
  SendWr* w = StrayWr();
  if (BatchOpenHere(qp)) {
    w = qp->engine->SendSlotAhead(qp->batch_size);
    if (w != nullptr) {
      ++qp->batch_size;
    } else {
      qp->batch_error = ENOMEM;  // more than the send queue holds
      w = &qp->batch_discard;
    }
    qp->batch_wr = w;
  }
  StartSendWr(w, qpx->wr_id, op, qpx->wr_flags);
  return w;
}

// The WR a setter fills; nullptr outside this thread's batch or before its
// first WR (an error wr_complete returns).
SendWr* LastWr(ibv_qp_ex* qpx) {
  DroceQp* qp = ToQp(qpx);
  if (!BatchOpenHere(qp)) return nullptr;
  if (qp->batch_wr == nullptr) qp->batch_error = EINVAL;  // a setter before any WR
  return qp->batch_wr;
}

void WrStart(ibv_qp_ex* qpx) {
  DroceQp* qp = ToQp(qpx);
  // A second wr_start without wr_complete from the same thread starts over
  // rather than waiting for itself.
  if (!BatchOpenHere(qp)) {
    qp->send_lock.lock();
    qp->batch_owner.store(ThisThread(), std::memory_order_relaxed);
  }
  qp->batch_size = 0;
  qp->batch_wr = nullptr;
  qp->batch_error = 0;
}

// Ends this thread's batch and lets go of send_lock; EINVAL without one.
int EndBatch(DroceQp* qp, int err) {
  if (!BatchOpenHere(qp)) return EINVAL;
  qp->batch_size = 0;
  qp->batch_wr = nullptr;
  qp->batch_error = 0;
  qp->batch_owner.store(nullptr, std::memory_order_relaxed);
  qp->send_lock.unlock();
  return err;
}

int WrComplete(ibv_qp_ex* qpx) {
  DroceQp* qp = ToQp(qpx);
  if (!BatchOpenHere(qp)) return EINVAL;
  const uint32_t n = qp->batch_size;
  if (qp->batch_error != 0 || n == 0) return EndBatch(qp, qp->batch_error);
  Runtime* rt = Rt(qpx->qp_base.context);
  transport::Qp* q = qp->engine;
  // Read before the engine may take the WR.
  const SendWr& first = *q->SendSlotAhead(0);
  const bool at_once = RingsAtOnce(qp, rt, (first.flags & transport::kSendSignaled) != 0);
  const bool small = n == 1 && SmallWirePost(first) && !at_once;
  if (qp->direct_send) {
    const int err = q->PublishSends(n);  // all or none
    if (err == 0) rt->RingPosted(&qp->doorbell, PostedDoorbell::kSend, small);
    return EndBatch(qp, err);
  }
  // UD, or not in RTS/SQD: each WR through the engine's post, under the
  // device's lock. The next to post is always in the next slot (the one
  // before it was just appended there), which the engine's post fills from
  // a copy (inline data written in place stays: PrepareSendWqe).
  int err = 0;
  {
    AppLock lock(rt);
    for (uint32_t i = 0; i < n && err == 0; ++i) {
      const SendWr w = *q->SendSlotAhead(0);
      err = rt->dev().PostSend(qp->qpn, w);
    }
    rt->DoorbellLocked(qp->qpn, NowNs(), err == 0 && small);
  }
  return EndBatch(qp, err);
}

void WrAbort(ibv_qp_ex* qpx) { (void)EndBatch(ToQp(qpx), 0); }

void WrSend(ibv_qp_ex* qpx) { NewWr(qpx, transport::WrOpcode::kSend); }
void WrSendImm(ibv_qp_ex* qpx, __be32 imm) { NewWr(qpx, transport::WrOpcode::kSendWithImm)->imm_data = imm; }
void WrSendInv(ibv_qp_ex* qpx, uint32_t rkey) {
  NewWr(qpx, transport::WrOpcode::kSendWithInv)->invalidate_rkey = rkey;
}
// A WR that targets remote memory (RDMA and atomics).
SendWr* NewRemoteWr(ibv_qp_ex* qpx, transport::WrOpcode op, uint32_t rkey, uint64_t addr) {
  SendWr* w = NewWr(qpx, op);
  w->rkey = rkey;
  w->remote_addr = addr;
  return w;
}
void WrRdmaWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  NewRemoteWr(qpx, transport::WrOpcode::kRdmaWrite, rkey, addr);
}
void WrRdmaWriteImm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, __be32 imm) {
  NewRemoteWr(qpx, transport::WrOpcode::kRdmaWriteWithImm, rkey, addr)->imm_data = imm;
}
void WrRdmaRead(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  NewRemoteWr(qpx, transport::WrOpcode::kRdmaRead, rkey, addr);
}
void WrCmpSwp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  SendWr* w = NewRemoteWr(qpx, transport::WrOpcode::kAtomicCmpAndSwp, rkey, addr);
  w->compare_add = compare;
  w->swap = swap;
}
void WrFetchAdd(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t add) {
  NewRemoteWr(qpx, transport::WrOpcode::kAtomicFetchAndAdd, rkey, addr)->compare_add = add;
}
void WrLocalInv(ibv_qp_ex* qpx, uint32_t rkey) { NewWr(qpx, transport::WrOpcode::kLocalInv)->invalidate_rkey = rkey; }
void WrBindMw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  SendWr* w = NewWr(qpx, transport::WrOpcode::kBindMw);
  if (mw == nullptr || info == nullptr) {
    FailBatch(ToQp(qpx), EINVAL);
    return;
  }
  w->bind = ToBindWr(mw, rkey, *info);
}

void WrSetSge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  SendWr* w = LastWr(qpx);
  if (w == nullptr) return;
  w->num_sge = 1;
  w->sg_list[0] = {addr, length, lkey};
}

void WrSetSgeList(ibv_qp_ex* qpx, size_t n, const ibv_sge* sges) {
  SendWr* w = LastWr(qpx);
  if (w == nullptr) return;
  if (n > transport::kMaxSge) {
    FailBatch(ToQp(qpx), EINVAL);
    return;
  }
  w->num_sge = static_cast<uint32_t>(n);
  for (size_t i = 0; i < n; ++i) w->sg_list[i] = {sges[i].addr, sges[i].length, sges[i].lkey};
}

// Inline data may be reused as soon as the setter returns: it is copied
// once, into the WQE of the WR's ring slot, and the sge points there.
void WrSetInlineList(ibv_qp_ex* qpx, size_t n, const ibv_data_buf* bufs) {
  SendWr* w = LastWr(qpx);
  if (w == nullptr) return;
  DroceQp* qp = ToQp(qpx);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += bufs[i].length;
  if (total > transport::kMaxInlineData) {
    qp->batch_error = EINVAL;
    return;
  }
  w->flags |= IBV_SEND_INLINE;
  w->num_sge = total > 0 ? 1 : 0;
  if (w == &qp->batch_discard) return;  // never posted: nothing to keep
  uint8_t* to = qp->engine->InlineBufferAhead(qp->batch_size - 1);
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bufs[i].length > 0) std::memcpy(to + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  w->sg_list[0] = {reinterpret_cast<uintptr_t>(to), static_cast<uint32_t>(total), 0};
}

void WrSetUdAddr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  SendWr* w = LastWr(qpx);
  if (w == nullptr) return;
  if (const int err = SetUdAddr(ah, remote_qpn, remote_qkey, w); err != 0) FailBatch(ToQp(qpx), err);
}

void WrSetInline(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  WrSetInlineList(qpx, 1, &buf);
}

// ---------------------------------------------------------------- address handles

// ibv_create_ah: RoCE addresses by GID, so the GRH is required (as rxe);
// the destination MAC is resolved like an RC path's (ARP / neighbour
// discovery), a multicast GID maps to its group MAC (core::MulticastMac).
ibv_ah* CreateAh(ibv_pd* ibpd, ibv_ah_attr* attr) {
  if (attr == nullptr || attr->port_num != 1 || !attr->is_global) {
    errno = EINVAL;
    return nullptr;
  }
  Runtime* rt = Rt(ibpd->context);
  transport::AddressVector av;
  std::memcpy(av.dgid.data(), attr->grh.dgid.raw, 16);
  av.sgid_index = attr->grh.sgid_index;
  av.hop_limit = attr->grh.hop_limit != 0 ? attr->grh.hop_limit : 64;
  av.traffic_class = attr->grh.traffic_class;
  av.flow_label = attr->grh.flow_label;
  if (!rt->IsLocalGid(av.dgid) && !core::MulticastMac(av.dgid).has_value()) {
    rt->WaitLinkUp();
    if (const int err = rt->ResolveNeighbor(av.dgid, av.sgid_index); err != 0) {
      errno = err;
      return nullptr;
    }
  }
  auto* ah = New<DroceAh>();
  if (ah == nullptr) return nullptr;
  AppLock lock(rt);
  absl::StatusOr<uint32_t> id = rt->dev().CreateAh(reinterpret_cast<DrocePd*>(ibpd)->id, av);
  if (!id.ok()) {
    delete ah;
    errno = ErrnoOf(id.status());
    return nullptr;
  }
  ah->id = *id;
  return &ah->ah;
}

int DestroyAh(ibv_ah* ibah) {
  auto* ah = reinterpret_cast<DroceAh*>(ibah);
  Runtime* rt = Rt(ibah->context);
  const int err = DestroyLocked(rt, [&] { return rt->dev().DestroyAh(ah->id); });
  if (err == 0) delete ah;
  return err;
}

// ibv_attach_mcast / ibv_detach_mcast: RoCEv2 groups are GIDs (the LID is
// ignored, as on rxe); datagrams to the group reach every attached QP.
int AttachMcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t) {
  if (gid == nullptr) return EINVAL;
  Runtime* rt = Rt(ibqp->context);
  core::Gid g;
  std::memcpy(g.data(), gid->raw, 16);
  {
    AppLock lock(rt);
    if (const int err = ErrnoOf(rt->dev().AttachMcast(ToQp(ibqp)->qpn, g)); err != 0) return err;
  }
  // A netdev-bound device's interface joins the group (droced); refused, the QP is not attached.
  const int err = rt->SyncMcastGroups();
  if (err != 0) {
    {
      AppLock lock(rt);
      (void)rt->dev().DetachMcast(ToQp(ibqp)->qpn, g);
    }
    (void)rt->SyncMcastGroups();
  }
  return err;
}

int DetachMcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t) {
  if (gid == nullptr) return EINVAL;
  Runtime* rt = Rt(ibqp->context);
  core::Gid g;
  std::memcpy(g.data(), gid->raw, 16);
  {
    AppLock lock(rt);
    if (const int err = ErrnoOf(rt->dev().DetachMcast(ToQp(ibqp)->qpn, g)); err != 0) return err;
  }
  (void)rt->SyncMcastGroups();  // the last QP of the host gone, the interface leaves the group
  return 0;
}

// ---------------------------------------------------------------- context

void FreeContext(ibv_context* context) {
  DroceContext* ctx = ToCtx(context);
  if (ctx->rt != nullptr) {
    std::lock_guard<DeviceMutex> lock(ctx->rt->mu);
    ctx->rt->RemoveAsyncFd(ctx->async_write_fd);
  }
  Runtime::Release(ctx->rt);
  delete ctx->file;
  if (ctx->async_write_fd >= 0) close(ctx->async_write_fd);
  verbs_uninit_context(&ctx->ibv_ctx);
  free(ctx);
}

const verbs_context_ops kContextOps = [] {
  verbs_context_ops ops{};
  ops.alloc_mw = AllocMw;
  ops.alloc_pd = AllocPd;
  ops.attach_mcast = AttachMcast;
  ops.async_event = AsyncEvent;
  ops.bind_mw = BindMw;
  ops.cq_event = CqEvent;
  ops.create_cq = CreateCq;
  ops.create_ah = CreateAh;
  ops.create_cq_ex = CreateCqEx;
  ops.create_qp = CreateQp;
  ops.create_qp_ex = CreateQpEx;
  ops.create_srq = CreateSrq;
  ops.dealloc_mw = DeallocMw;
  ops.dealloc_pd = DeallocPd;
  ops.destroy_ah = DestroyAh;
  ops.dereg_mr = DeregMr;
  ops.destroy_cq = DestroyCq;
  ops.destroy_qp = DestroyQp;
  ops.destroy_srq = DestroySrq;
  ops.detach_mcast = DetachMcast;
  ops.free_context = FreeContext;
  ops.modify_qp = ModifyQp;
  ops.modify_srq = ModifySrq;
  ops.poll_cq = PollCq;
  ops.post_recv = PostRecv;
  ops.post_send = PostSend;
  ops.post_srq_recv = PostSrqRecv;
  ops.query_device_ex = QueryDeviceEx;
  ops.query_port = QueryPort;
  ops.query_ece = QueryEce;
  ops.query_qp = QueryQp;
  ops.query_srq = QuerySrq;
  ops.reg_mr = RegMr;
  ops.req_notify_cq = ReqNotifyCq;
  ops.resize_cq = ResizeCq;
  ops.rereg_mr = ReregMr;
  ops.set_ece = SetEce;
  return ops;
}();

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

verbs_context* AllocContext(ibv_device* ibdev, int cmd_fd, void*) {
  const std::string conf_path = std::string(ibdev->ibdev_path) + "/" + kConfigFileName;
  absl::StatusOr<DeviceFile> file = ParseDeviceFile(ReadSmallFile(conf_path));
  if (!file.ok()) {
    std::fprintf(stderr, "droce: %s: %s\n", conf_path.c_str(), std::string(file.status().message()).c_str());
    if (cmd_fd >= 0) close(cmd_fd);
    errno = EINVAL;
    return nullptr;
  }
  auto* ctx = static_cast<DroceContext*>(_verbs_init_and_alloc_context(
      ibdev, cmd_fd, sizeof(DroceContext),
      reinterpret_cast<verbs_context*>(offsetof(DroceContext, ibv_ctx)), /*driver_id=*/0));
  if (ctx == nullptr) return nullptr;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    verbs_uninit_context(&ctx->ibv_ctx);
    free(ctx);
    return nullptr;
  }
  ctx->ibv_ctx.context.async_fd = fds[0];
  ctx->async_write_fd = fds[1];
  ctx->ibv_ctx.context.num_comp_vectors = 1;
  ctx->file = new DeviceFile(std::move(*file));
  ctx->rt = nullptr;
  verbs_set_ops(&ctx->ibv_ctx, &kContextOps);
  return &ctx->ibv_ctx;
}

bool MatchDevice(verbs_sysfs_dev* sysfs_dev) {
  const std::string modalias = ReadSmallFile(std::string(sysfs_dev->ibdev_path) + "/device/modalias");
  return modalias.rfind("droce:", 0) == 0;
}

verbs_device* AllocDevice(verbs_sysfs_dev*) {
  auto* d = static_cast<DroceDevice*>(calloc(1, sizeof(DroceDevice)));
  return d == nullptr ? nullptr : &d->vdev;
}

void UninitDevice(verbs_device* vdev) { free(reinterpret_cast<DroceDevice*>(vdev)); }

const verbs_device_ops kDeviceOps = {
    .name = "droce",
    .match_min_abi_version = 1,
    .match_max_abi_version = 1,
    .match_table = nullptr,
    .static_providers = nullptr,
    .match_device = MatchDevice,
    .alloc_context = AllocContext,
    .import_context = nullptr,
    .alloc_device = AllocDevice,
    .uninit_device = UninitDevice,
};

__attribute__((constructor)) void RegisterDriver() { verbs_register_driver_34(&kDeviceOps); }

}  // namespace
}  // namespace droce::verbs

// libdroce-preload.so's ibv_get_cq_event calls this (found by dlsym in the
// library that holds the device's ops): the waiting thread drives the
// dataplane until an event is there. *cq_handle is the event's ibv_cq* when
// it was handed over in the process, or 0 when the channel's fd holds it
// (libibverbs then reads it). Returns 0 or an errno; a channel whose context
// has no dataplane yet (no CQ was created) is left to the plain read.
extern "C" __attribute__((visibility("default"))) int droce_wait_comp_channel(ibv_comp_channel* channel,
                                                                              uint64_t* cq_handle) {
  using droce::verbs::Runtime;
  *cq_handle = 0;
  if (channel == nullptr || channel->context == nullptr) return EINVAL;
  Runtime* rt = droce::verbs::Rt(channel->context);
  if (rt == nullptr) return 0;
  return rt->WaitForChannel(channel->fd, cq_handle);
}

// The progress thread's counters for tests (DROCE_STATS prints them at
// exit): look-backs that found the program polling, and progress_pm_qos_us
// holds. Found like droce_wait_comp_channel (dladdr on the device's ops).
// Returns 0, or EINVAL for a context without a dataplane yet.
extern "C" __attribute__((visibility("default"))) int droce_progress_counters(ibv_context* context,
                                                                              uint64_t* stand_asides,
                                                                              uint64_t* pm_qos_holds) {
  droce::verbs::Runtime* rt = context != nullptr ? droce::verbs::Rt(context) : nullptr;
  if (rt == nullptr) return EINVAL;
  *stand_asides = rt->stats().progress_stand_asides.load(std::memory_order_relaxed);
  *pm_qos_holds = rt->stats().pm_qos_holds.load(std::memory_order_relaxed);
  return 0;
}
