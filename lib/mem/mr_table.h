// Protection domains, memory regions and memory windows: the RNIC's
// security boundary.
//
// A remote request names memory by (rkey, va, length); a local work request
// by (lkey, addr, length). Every access goes through Check*(), which returns
// a host pointer only if the key is valid, belongs to the caller's PD (and,
// for a type-2 window, to the caller's QP), grants the access, and
// [va, va+length) lies inside the region or window — with overflow-safe
// arithmetic. Regions and windows share one slot table: a key is
// slot << 8 | an 8-bit variant (IBTA 10.6.3.1 "key portion"), the slot
// found in O(1), the variant random per registration and per bind, so a
// stale key does not match a re-used slot and a peer cannot cheaply guess
// one.
#ifndef DROCE_LIB_MEM_MR_TABLE_H_
#define DROCE_LIB_MEM_MR_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace droce::mem {

// Access flags, numerically equal to ibv_access_flags.
enum Access : uint32_t {
  kLocalWrite = 1 << 0,
  kRemoteWrite = 1 << 1,
  kRemoteRead = 1 << 2,
  kRemoteAtomic = 1 << 3,
  kMwBind = 1 << 4,      // windows may be bound to the region (IBTA 10.6.7.2)
  kZeroBased = 1 << 5,   // windows only: not offered
};

struct MrKeys {
  uint32_t lkey;
  uint32_t rkey;
};

enum class AccessResult : uint8_t {
  kOk,
  kBadKey,       // no such key, or the key was invalidated / deregistered / unbound
  kWrongPd,      // region or window belongs to another protection domain
  kNoPermission, // access flags do not grant the operation
  kOutOfBounds,  // [va, va+len) not inside the region or window
  kWrongQp,      // type-2 window bound through another QP
  kInvalid,      // an operation the key's kind or state does not allow
};

enum class KeyKind : uint8_t { kFree, kRegion, kWindow1, kWindow2 };

// One slot: a memory region, or a memory window (then iova/length/host are
// the bound range, `valid` means bound with a non-zero length).
struct MemoryRegion {
  uint8_t* host = nullptr;  // host address of the first byte
  uint64_t iova = 0;        // address the region is known by on the wire
  uint64_t length = 0;
  uint32_t pd = 0;
  uint32_t access = 0;
  uint32_t key = 0;         // lkey == rkey here
  bool valid = false;       // registered (bound) and not invalidated
  bool in_use = false;      // slot allocated
  KeyKind kind = KeyKind::kFree;
  uint32_t qpn = 0;         // type-2 window: the QP it was bound through
  uint32_t mr_slot = 0;     // window: the region it is bound to
  uint32_t windows = 0;     // region: windows bound to it
  uint64_t bound_at = 0;    // MrTable::epoch() when this key got its current meaning
};

// What a BIND_MW work request asks (ibv_mw_bind_info plus the new key).
struct MwBind {
  uint32_t mw_handle = 0;  // the window (MwHandle of its key)
  uint32_t new_key = 0;    // only the low 8 bits are used: the slot stays
  uint32_t mr_lkey = 0;    // ignored for a zero-length (type-1 unbinding) bind
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;     // the window's rights: kRemote*, kLocalWrite
};

class MrTable {
 public:
  // seed 0: keys vary from a random seed (std::random_device).
  explicit MrTable(uint32_t max_regions = 1u << 16, uint64_t seed = 0);

  uint32_t AllocPd();
  absl::Status DeallocPd(uint32_t pd);
  bool PdExists(uint32_t pd) const;

  // Registers [host, host+length) known remotely as [iova, iova+length).
  absl::StatusOr<MrKeys> Register(uint32_t pd, void* host, uint64_t length, uint64_t iova,
                                  uint32_t access);
  // Fails (InvalidArgument, EINVAL as rxe) while windows are bound to it
  // (IBTA 10.6.7.2.6).
  absl::Status Deregister(uint32_t lkey);
  // ibv_rereg_mr: any of translation (host/length/iova), PD and access
  // change in place; the keys stay. Fails while windows are bound. Messages
  // in flight through the key stop at their next packet.
  enum ReregFlags : uint32_t { kChangeTranslation = 1, kChangePd = 2, kChangeAccess = 4 };
  absl::Status Reregister(uint32_t lkey, uint32_t flags, uint32_t pd, void* host, uint64_t length,
                          uint64_t iova, uint32_t access);

  // Memory windows (IBTA 10.6.7). A window's handle is its slot; its key
  // changes (low 8 bits) at every bind. Type 1 starts bound to nothing and
  // is (re)bound by BindMw from any QP of its PD; type 2 is bound by a
  // BIND_MW work request, is then reachable only through that QP, and is
  // freed again by LOCAL_INV, SEND_WITH_INV or deallocation.
  struct MwKeys {
    uint32_t handle;
    uint32_t rkey;
  };
  absl::StatusOr<MwKeys> AllocMw(uint32_t pd, int type);
  absl::Status DeallocMw(uint32_t handle);  // unbinds first
  static uint32_t MwHandle(uint32_t key) { return key >> 8; }
  // The window's current key, 0 if the handle names none.
  uint32_t MwKey(uint32_t handle) const;
  // A key for the window's next type-1 bind: its slot, a fresh random variant.
  uint32_t NextMwKey(uint32_t handle);
  // Executes a bind for a QP (qp_pd, qpn): the rules of rxe and IBTA
  // 10.6.7.2 (C10-72..75). Data path: no allocation.
  AccessResult BindMw(const MwBind& b, uint32_t qp_pd, uint32_t qpn);
  // LOCAL_INV: only a bound type-2 window of `pd` (regions registered with
  // ibv_reg_mr and type-1 windows cannot be invalidated, as in rxe).
  AccessResult LocalInvalidate(uint32_t key, uint32_t pd);
  // SEND_WITH_INV's IETH: as LocalInvalidate, and the window must have been
  // bound through the receiving QP.
  AccessResult RemoteInvalidate(uint32_t key, uint32_t pd, uint32_t qpn);
  // A QP is destroyed: its type-2 windows return to the free state.
  void ReleaseQp(uint32_t qpn);

  // Returns the host address for an access or the reason it is refused.
  struct Resolved {
    AccessResult result;
    uint8_t* host;
  };
  // Inline: every WQE start and every RDMA request makes one or more.
  // `qpn` is the QP the request arrived on (type-2 windows).
  Resolved CheckRemote(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t length,
                       uint32_t required_access) const {
    const MemoryRegion* e = Find(rkey);
    if (e != nullptr && e->kind == KeyKind::kWindow2 && e->valid && e->qpn != qpn) {
      return {AccessResult::kWrongQp, nullptr};
    }
    return Check(e, pd, va, length, required_access);
  }
  // Local SGE: addr is the iova the application registered (ibv_sge.addr).
  // Windows have no local use.
  Resolved CheckLocal(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t length,
                      bool needs_write) const {
    const MemoryRegion* e = Find(lkey);
    if (e != nullptr && e->kind != KeyKind::kRegion) return {AccessResult::kBadKey, nullptr};
    return Check(e, pd, addr, length, needs_write ? uint32_t{kLocalWrite} : 0u);
  }

  const MemoryRegion* Find(uint32_t key) const {
    const uint32_t slot = key >> 8;
    if (slot == 0 || slot >= regions_.size()) return nullptr;
    const MemoryRegion& mr = regions_[slot];
    if (!mr.in_use || mr.key != key) return nullptr;
    return &mr;
  }
  // True while `key` still means what it meant at epoch `since` (a holder's
  // last good check): valid, and not registered again, rebound or re-registered
  // in place since — a key that came back to the same value (A, B, A) does
  // not count as still lent.
  bool StillValid(uint32_t key, uint64_t since) const {
    const MemoryRegion* e = Find(key);
    return e != nullptr && e->valid && e->bound_at <= since;
  }
  uint32_t live_regions() const { return live_; }
  // Bumped by every registration, deregistration, bind and invalidation: a
  // holder of host pointers resolved at epoch E need not re-check its keys
  // while epoch() is still E.
  uint64_t epoch() const { return epoch_; }

 private:
  Resolved Check(const MemoryRegion* mr, uint32_t pd, uint64_t va, uint64_t length,
                 uint32_t access) const {
    if (mr == nullptr || !mr->valid) return {AccessResult::kBadKey, nullptr};
    if (mr->pd != pd) return {AccessResult::kWrongPd, nullptr};
    if ((mr->access & access) != access) return {AccessResult::kNoPermission, nullptr};
    // va >= iova and va + length <= iova + mr_length, without overflow.
    if (va < mr->iova) return {AccessResult::kOutOfBounds, nullptr};
    const uint64_t offset = va - mr->iova;
    if (offset > mr->length || length > mr->length - offset) {
      return {AccessResult::kOutOfBounds, nullptr};
    }
    return {AccessResult::kOk, mr->host + offset};
  }
  absl::StatusOr<uint32_t> TakeSlot();
  void FreeSlot(uint32_t slot);
  uint8_t RandomVariant(uint8_t not_this);
  void Unbind(MemoryRegion& mw);
  AccessResult InvalidateWindow(uint32_t key, uint32_t pd, const uint32_t* qpn);

  // Grown on demand up to max_regions_ (TakeSlot): a device that registers a
  // few regions does not clear a table sized for 65,536 of them.
  std::vector<MemoryRegion> regions_;
  std::vector<uint32_t> free_slots_;  // slots below regions_.size() not in use, lowest on top
  uint32_t max_regions_ = 0;
  std::vector<uint32_t> pd_refs_;  // regions and windows per PD; index = pd id
  std::vector<bool> pd_live_;
  uint32_t live_ = 0;
  uint32_t type2_bound_ = 0;  // ReleaseQp scans only when some are bound
  uint64_t epoch_ = 0;
  uint64_t rng_;
};

const char* AccessResultName(AccessResult r);

}  // namespace droce::mem

#endif  // DROCE_LIB_MEM_MR_TABLE_H_
