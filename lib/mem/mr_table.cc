#include "mem/mr_table.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace droce::mem {

namespace {
constexpr uint32_t kKnownAccess = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
}

MrTable::MrTable(uint32_t max_regions) {
  regions_.resize(max_regions);
  generation_.resize(max_regions, 0);
  free_slots_.reserve(max_regions);
  // Slot 0 is never used so that key 0 is always invalid.
  for (uint32_t i = max_regions; i-- > 1;) free_slots_.push_back(i);
  pd_refs_.push_back(0);
  pd_live_.push_back(false);  // PD 0 is never handed out
}

uint32_t MrTable::AllocPd() {
  pd_refs_.push_back(0);
  pd_live_.push_back(true);
  return static_cast<uint32_t>(pd_live_.size() - 1);
}

bool MrTable::PdExists(uint32_t pd) const { return pd < pd_live_.size() && pd_live_[pd]; }

absl::Status MrTable::DeallocPd(uint32_t pd) {
  if (!PdExists(pd)) return absl::NotFoundError(absl::StrFormat("no protection domain %u", pd));
  if (pd_refs_[pd] != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("protection domain %u still has %u memory regions", pd, pd_refs_[pd]));
  }
  pd_live_[pd] = false;
  return absl::OkStatus();
}

absl::StatusOr<MrKeys> MrTable::Register(uint32_t pd, void* host, uint64_t length, uint64_t iova,
                                         uint32_t access) {
  if (!PdExists(pd)) return absl::InvalidArgumentError(absl::StrFormat("no protection domain %u", pd));
  if (access & ~kKnownAccess) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown access flags 0x%x", access));
  }
  // IBTA 10.6.3.1 / verbs: remote write or atomic requires local write.
  if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) {
    return absl::InvalidArgumentError("remote write/atomic access requires local write");
  }
  if (host == nullptr && length != 0) return absl::InvalidArgumentError("null address");
  if (iova + length < iova) return absl::InvalidArgumentError("region wraps the address space");
  if (free_slots_.empty()) return absl::ResourceExhaustedError("memory region table full");
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  const uint8_t gen = ++generation_[slot];
  MemoryRegion& mr = regions_[slot];
  mr = MemoryRegion{static_cast<uint8_t*>(host), iova, length, pd, access,
                    (slot << 8) | gen, true, true};
  ++pd_refs_[pd];
  ++live_;
  return MrKeys{mr.key, mr.key};
}

absl::Status MrTable::Deregister(uint32_t lkey) {
  const MemoryRegion* found = Find(lkey);
  if (found == nullptr) return absl::NotFoundError(absl::StrFormat("no memory region 0x%x", lkey));
  MemoryRegion& mr = regions_[lkey >> 8];
  ++epoch_;
  --pd_refs_[mr.pd];
  --live_;
  mr = MemoryRegion{};
  free_slots_.push_back(lkey >> 8);
  return absl::OkStatus();
}

AccessResult MrTable::Invalidate(uint32_t key, uint32_t pd) {
  const MemoryRegion* found = Find(key);
  if (found == nullptr || !found->valid) return AccessResult::kBadKey;
  if (found->pd != pd) return AccessResult::kWrongPd;
  regions_[key >> 8].valid = false;
  ++epoch_;
  return AccessResult::kOk;
}

const char* AccessResultName(AccessResult r) {
  switch (r) {
    case AccessResult::kOk: return "ok";
    case AccessResult::kBadKey: return "bad_key";
    case AccessResult::kWrongPd: return "wrong_pd";
    case AccessResult::kNoPermission: return "no_permission";
    case AccessResult::kOutOfBounds: return "out_of_bounds";
  }
  return "?";
}

}  // namespace droce::mem
