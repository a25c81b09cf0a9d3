// Protection domains and memory regions: the RNIC's security boundary.
//
// A remote request names memory by (rkey, va, length); a local work request
// by (lkey, addr, length). Every access goes through Check*(), which returns
// a host pointer only if the key is valid, belongs to the caller's PD, grants
// the access, and [va, va+length) lies inside the region — with overflow-safe
// arithmetic. Keys are index << 8 | an 8-bit generation, so a stale key to a
// re-used slot does not match (IBTA 10.6.3.1 "key portion").
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
};

struct MrKeys {
  uint32_t lkey;
  uint32_t rkey;
};

enum class AccessResult : uint8_t {
  kOk,
  kBadKey,       // no such key, or the key was invalidated / deregistered
  kWrongPd,      // region belongs to another protection domain
  kNoPermission, // access flags do not grant the operation
  kOutOfBounds,  // [va, va+len) not inside the region
};

struct MemoryRegion {
  uint8_t* host = nullptr;  // host address of the first byte
  uint64_t iova = 0;        // address the region is known by on the wire
  uint64_t length = 0;
  uint32_t pd = 0;
  uint32_t access = 0;
  uint32_t key = 0;         // lkey == rkey here
  bool valid = false;       // registered and not invalidated
  bool in_use = false;      // slot allocated
};

class MrTable {
 public:
  explicit MrTable(uint32_t max_regions = 1u << 16);

  uint32_t AllocPd();
  absl::Status DeallocPd(uint32_t pd);
  bool PdExists(uint32_t pd) const;

  // Registers [host, host+length) known remotely as [iova, iova+length).
  absl::StatusOr<MrKeys> Register(uint32_t pd, void* host, uint64_t length, uint64_t iova,
                                  uint32_t access);
  absl::Status Deregister(uint32_t lkey);

  // Remote invalidation (SEND_WITH_INVALIDATE) and LOCAL_INV: the key stops
  // working until the region is registered again. Only regions of `pd`.
  AccessResult Invalidate(uint32_t key, uint32_t pd);

  // Returns the host address for an access or the reason it is refused.
  struct Resolved {
    AccessResult result;
    uint8_t* host;
  };
  // Inline: every WQE start and every RDMA request makes one or more.
  Resolved CheckRemote(uint32_t rkey, uint32_t pd, uint64_t va, uint64_t length,
                      uint32_t required_access) const {
    return Check(rkey, pd, va, length, required_access);
  }
  // Local SGE: addr is the iova the application registered (ibv_sge.addr).
  Resolved CheckLocal(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t length,
                     bool needs_write) const {
    return Check(lkey, pd, addr, length, needs_write ? uint32_t{kLocalWrite} : 0u);
  }

  const MemoryRegion* Find(uint32_t key) const {
    const uint32_t slot = key >> 8;
    if (slot == 0 || slot >= regions_.size()) return nullptr;
    const MemoryRegion& mr = regions_[slot];
    if (!mr.in_use || mr.key != key) return nullptr;
    return &mr;
  }
  uint32_t live_regions() const { return live_; }
  // Bumped by every deregistration and invalidation: a holder of host
  // pointers resolved at epoch E need not re-check its keys while epoch()
  // is still E.
  uint64_t epoch() const { return epoch_; }

 private:
  Resolved Check(uint32_t key, uint32_t pd, uint64_t va, uint64_t length, uint32_t access) const {
    const MemoryRegion* mr = Find(key);
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

  std::vector<MemoryRegion> regions_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint8_t> generation_;
  std::vector<uint32_t> pd_refs_;  // regions per PD; index = pd id
  std::vector<bool> pd_live_;
  uint32_t live_ = 0;
  uint64_t epoch_ = 0;
};

const char* AccessResultName(AccessResult r);

}  // namespace droce::mem

#endif  // DROCE_LIB_MEM_MR_TABLE_H_
