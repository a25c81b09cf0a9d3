#include "mem/mr_table.h"

#include <algorithm>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace droce::mem {

namespace {
constexpr uint32_t kRegionAccess = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic | kMwBind;
constexpr uint32_t kWindowAccess = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
}  // namespace

MrTable::MrTable(uint32_t max_regions, uint64_t seed) : max_regions_(max_regions) {
  // Slot 0 is never used so that key 0 is always invalid.
  regions_.resize(1);
  pd_refs_.push_back(0);
  pd_live_.push_back(false);  // PD 0 is never handed out
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  rng_ = seed | 1;
}

// xorshift64*: keys need to be unpredictable to a peer on the wire, not
// cryptographic; the seed comes from the OS.
uint8_t MrTable::RandomVariant(uint8_t not_this) {
  for (;;) {
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    const auto v = static_cast<uint8_t>((rng_ * 0x2545F4914F6CDD1Dull) >> 56);
    if (v != not_this) return v;
  }
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
    return absl::FailedPreconditionError(absl::StrFormat(
        "protection domain %u still has %u memory regions or windows", pd, pd_refs_[pd]));
  }
  pd_live_[pd] = false;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> MrTable::TakeSlot() {
  if (free_slots_.empty() && regions_.size() < max_regions_) {
    // Twice the slots (at least 64), the new ones handed out lowest first.
    const size_t old = regions_.size();
    const size_t grown = std::min<size_t>(max_regions_, std::max<size_t>(64, 2 * old));
    regions_.resize(grown);
    for (size_t i = grown; i-- > old;) free_slots_.push_back(static_cast<uint32_t>(i));
  }
  if (free_slots_.empty()) return absl::ResourceExhaustedError("memory region table full");
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void MrTable::FreeSlot(uint32_t slot) {
  MemoryRegion& e = regions_[slot];
  const uint8_t last_variant = static_cast<uint8_t>(e.key);
  e = MemoryRegion{};
  e.key = last_variant;  // not in use: only remembered so the next key differs
  free_slots_.push_back(slot);
}

absl::StatusOr<MrKeys> MrTable::Register(uint32_t pd, void* host, uint64_t length, uint64_t iova,
                                         uint32_t access) {
  if (!PdExists(pd)) return absl::InvalidArgumentError(absl::StrFormat("no protection domain %u", pd));
  if (access & ~kRegionAccess) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown access flags 0x%x", access));
  }
  // IBTA 10.6.3.1 / verbs: remote write or atomic requires local write.
  if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) {
    return absl::InvalidArgumentError("remote write/atomic access requires local write");
  }
  if (host == nullptr && length != 0) return absl::InvalidArgumentError("null address");
  if (iova + length < iova) return absl::InvalidArgumentError("region wraps the address space");
  absl::StatusOr<uint32_t> slot = TakeSlot();
  if (!slot.ok()) return slot.status();
  MemoryRegion& mr = regions_[*slot];
  const uint8_t variant = RandomVariant(static_cast<uint8_t>(mr.key));
  mr = MemoryRegion{};
  mr.host = static_cast<uint8_t*>(host);
  mr.iova = iova;
  mr.length = length;
  mr.pd = pd;
  mr.access = access;
  mr.key = (*slot << 8) | variant;
  mr.valid = true;
  mr.in_use = true;
  mr.kind = KeyKind::kRegion;
  mr.bound_at = ++epoch_;
  ++pd_refs_[pd];
  ++live_;
  return MrKeys{mr.key, mr.key};
}

absl::Status MrTable::Deregister(uint32_t lkey) {
  const MemoryRegion* found = Find(lkey);
  if (found == nullptr || found->kind != KeyKind::kRegion) {
    return absl::NotFoundError(absl::StrFormat("no memory region 0x%x", lkey));
  }
  if (found->windows != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory region 0x%x has %u memory windows bound", lkey, found->windows));
  }
  ++epoch_;
  --pd_refs_[found->pd];
  --live_;
  FreeSlot(lkey >> 8);
  return absl::OkStatus();
}

absl::Status MrTable::Reregister(uint32_t lkey, uint32_t flags, uint32_t pd, void* host,
                                 uint64_t length, uint64_t iova, uint32_t access) {
  const MemoryRegion* found = Find(lkey);
  if (found == nullptr || found->kind != KeyKind::kRegion) {
    return absl::NotFoundError(absl::StrFormat("no memory region 0x%x", lkey));
  }
  if (flags == 0 || (flags & ~(kChangeTranslation | kChangePd | kChangeAccess))) {
    return absl::InvalidArgumentError(absl::StrFormat("bad rereg flags 0x%x", flags));
  }
  if (found->windows != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory region 0x%x has %u memory windows bound", lkey, found->windows));
  }
  MemoryRegion next = *found;
  if (flags & kChangePd) {
    if (!PdExists(pd)) return absl::InvalidArgumentError(absl::StrFormat("no protection domain %u", pd));
    next.pd = pd;
  }
  if (flags & kChangeAccess) {
    if (access & ~kRegionAccess) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown access flags 0x%x", access));
    }
    if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) {
      return absl::InvalidArgumentError("remote write/atomic access requires local write");
    }
    next.access = access;
  }
  if (flags & kChangeTranslation) {
    if (host == nullptr || length == 0) return absl::InvalidArgumentError("null address or length");
    if (iova + length < iova) return absl::InvalidArgumentError("region wraps the address space");
    next.host = static_cast<uint8_t*>(host);
    next.length = length;
    next.iova = iova;
  }
  --pd_refs_[found->pd];
  ++pd_refs_[next.pd];
  next.valid = true;
  next.bound_at = ++epoch_;  // what was resolved through the key before is not lent any more
  regions_[lkey >> 8] = next;
  return absl::OkStatus();
}

absl::StatusOr<MrTable::MwKeys> MrTable::AllocMw(uint32_t pd, int type) {
  if (!PdExists(pd)) return absl::InvalidArgumentError(absl::StrFormat("no protection domain %u", pd));
  if (type != 1 && type != 2) {
    return absl::InvalidArgumentError(absl::StrFormat("memory window type %d", type));
  }
  absl::StatusOr<uint32_t> slot = TakeSlot();
  if (!slot.ok()) return slot.status();
  MemoryRegion& mw = regions_[*slot];
  const uint8_t variant = RandomVariant(static_cast<uint8_t>(mw.key));
  mw = MemoryRegion{};
  mw.pd = pd;
  mw.key = (*slot << 8) | variant;
  mw.in_use = true;
  mw.kind = type == 1 ? KeyKind::kWindow1 : KeyKind::kWindow2;
  mw.bound_at = ++epoch_;
  ++pd_refs_[pd];
  return MwKeys{*slot, mw.key};
}

void MrTable::Unbind(MemoryRegion& mw) {
  if (mw.valid) {
    --regions_[mw.mr_slot].windows;
    if (mw.kind == KeyKind::kWindow2) --type2_bound_;
  }
  mw.valid = false;
  mw.host = nullptr;
  mw.iova = 0;
  mw.length = 0;
  mw.access = 0;
  mw.qpn = 0;
  mw.mr_slot = 0;
  ++epoch_;
}

absl::Status MrTable::DeallocMw(uint32_t handle) {
  if (handle == 0 || handle >= regions_.size() || !regions_[handle].in_use ||
      regions_[handle].kind == KeyKind::kRegion) {
    return absl::NotFoundError(absl::StrFormat("no memory window %u", handle));
  }
  MemoryRegion& mw = regions_[handle];
  Unbind(mw);
  --pd_refs_[mw.pd];
  FreeSlot(handle);
  return absl::OkStatus();
}

uint32_t MrTable::MwKey(uint32_t handle) const {
  if (handle == 0 || handle >= regions_.size()) return 0;
  const MemoryRegion& mw = regions_[handle];
  return mw.in_use && mw.kind != KeyKind::kRegion ? mw.key : 0;
}

uint32_t MrTable::NextMwKey(uint32_t handle) {
  const uint32_t key = MwKey(handle);
  if (key == 0) return 0;
  return (key & ~0xFFu) | RandomVariant(static_cast<uint8_t>(key));
}

AccessResult MrTable::BindMw(const MwBind& b, uint32_t qp_pd, uint32_t qpn) {
  if (b.mw_handle == 0 || b.mw_handle >= regions_.size()) return AccessResult::kBadKey;
  MemoryRegion& mw = regions_[b.mw_handle];
  if (!mw.in_use || mw.kind == KeyKind::kRegion || mw.kind == KeyKind::kFree) {
    return AccessResult::kBadKey;
  }
  const bool type2 = mw.kind == KeyKind::kWindow2;
  if (b.access & ~kWindowAccess) return AccessResult::kInvalid;  // zero-based windows: not offered
  if (type2) {
    if (mw.valid) return AccessResult::kInvalid;           // o10-37.2.30: only a free window
    if (qp_pd != mw.pd) return AccessResult::kWrongPd;     // C10-72
    if (b.length == 0) return AccessResult::kInvalid;      // o10-37.2.40
  }
  const MemoryRegion* mr = nullptr;
  if (b.length != 0) {
    mr = Find(b.mr_lkey);
    if (mr == nullptr || mr->kind != KeyKind::kRegion || !mr->valid) return AccessResult::kBadKey;
    if (mr->pd != mw.pd) return AccessResult::kWrongPd;
    if (!(mr->access & kMwBind)) return AccessResult::kNoPermission;  // C10-73
    if ((b.access & (kRemoteWrite | kRemoteAtomic)) && !(mr->access & kLocalWrite)) {
      return AccessResult::kNoPermission;  // C10-74
    }
    // C10-75: [addr, addr+length) inside the region, without overflow.
    if (b.addr < mr->iova || b.addr - mr->iova > mr->length ||
        b.length > mr->length - (b.addr - mr->iova)) {
      return AccessResult::kOutOfBounds;
    }
  }
  // Bound: the previous binding (type 1 may be rebound at any time) ends.
  Unbind(mw);
  mw.key = (mw.key & ~0xFFu) | (b.new_key & 0xFFu);
  mw.bound_at = epoch_;  // Unbind bumped it
  if (mr == nullptr) return AccessResult::kOk;  // type 1, zero length: unbound
  const uint32_t mr_slot = b.mr_lkey >> 8;
  mw.mr_slot = mr_slot;
  mw.host = mr->host + (b.addr - mr->iova);
  mw.iova = b.addr;
  mw.length = b.length;
  mw.access = b.access;
  mw.qpn = type2 ? qpn : 0;
  mw.valid = true;
  ++regions_[mr_slot].windows;
  if (type2) ++type2_bound_;
  return AccessResult::kOk;
}

AccessResult MrTable::InvalidateWindow(uint32_t key, uint32_t pd, const uint32_t* qpn) {
  const MemoryRegion* found = Find(key);
  if (found == nullptr || !found->valid) return AccessResult::kBadKey;
  // Regions registered with ibv_reg_mr and type-1 windows cannot be
  // invalidated (o10-37.2.26; rxe invalidates only fast-registration MRs,
  // which user space cannot create).
  if (found->kind != KeyKind::kWindow2) return AccessResult::kInvalid;
  if (found->pd != pd) return AccessResult::kWrongPd;
  if (qpn != nullptr && found->qpn != *qpn) return AccessResult::kWrongQp;
  Unbind(regions_[key >> 8]);
  return AccessResult::kOk;
}

AccessResult MrTable::LocalInvalidate(uint32_t key, uint32_t pd) {
  return InvalidateWindow(key, pd, nullptr);
}

AccessResult MrTable::RemoteInvalidate(uint32_t key, uint32_t pd, uint32_t qpn) {
  return InvalidateWindow(key, pd, &qpn);
}

void MrTable::ReleaseQp(uint32_t qpn) {
  for (uint32_t slot = 1; type2_bound_ != 0 && slot < regions_.size(); ++slot) {
    MemoryRegion& e = regions_[slot];
    if (e.in_use && e.kind == KeyKind::kWindow2 && e.valid && e.qpn == qpn) Unbind(e);
  }
}

const char* AccessResultName(AccessResult r) {
  switch (r) {
    case AccessResult::kOk: return "ok";
    case AccessResult::kBadKey: return "bad_key";
    case AccessResult::kWrongPd: return "wrong_pd";
    case AccessResult::kNoPermission: return "no_permission";
    case AccessResult::kOutOfBounds: return "out_of_bounds";
    case AccessResult::kWrongQp: return "wrong_qp";
    case AccessResult::kInvalid: return "invalid";
  }
  return "?";
}

}  // namespace droce::mem
