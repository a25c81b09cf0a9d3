#include "mem/mr_table.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace droce::mem {
namespace {

constexpr uint32_t kQpn = 0x11;

TEST(MrTable, RemoteAccessChecksKeyPdPermissionAndBounds) {
  MrTable t;
  std::vector<uint8_t> buf(4096);
  const uint32_t pd = t.AllocPd();
  const uint32_t other_pd = t.AllocPd();
  auto keys = t.Register(pd, buf.data(), buf.size(), 0x10000, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(keys.ok());
  const uint32_t rkey = keys->rkey;

  auto ok = t.CheckRemote(rkey, pd, kQpn, 0x10000, 4096, kRemoteWrite);
  EXPECT_EQ(ok.result, AccessResult::kOk);
  EXPECT_EQ(ok.host, buf.data());
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0x10FFF, 1, kRemoteWrite).host, buf.data() + 4095);
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0x11000, 0, kRemoteWrite).result, AccessResult::kOk);

  EXPECT_EQ(t.CheckRemote(rkey + 1, pd, kQpn, 0x10000, 1, kRemoteWrite).result, AccessResult::kBadKey);
  EXPECT_EQ(t.CheckRemote(0, pd, kQpn, 0x10000, 1, kRemoteWrite).result, AccessResult::kBadKey);
  EXPECT_EQ(t.CheckRemote(rkey, other_pd, kQpn, 0x10000, 1, kRemoteWrite).result, AccessResult::kWrongPd);
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0x10000, 1, kRemoteRead).result, AccessResult::kNoPermission);
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0xFFFF, 1, kRemoteWrite).result, AccessResult::kOutOfBounds);
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0x10FFF, 2, kRemoteWrite).result, AccessResult::kOutOfBounds);
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0x11001, 0, kRemoteWrite).result, AccessResult::kOutOfBounds);
  // Lengths that would wrap 64-bit arithmetic.
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, 0x10010, UINT64_MAX - 8, kRemoteWrite).result,
            AccessResult::kOutOfBounds);
  EXPECT_EQ(t.CheckRemote(rkey, pd, kQpn, UINT64_MAX, 2, kRemoteWrite).result, AccessResult::kOutOfBounds);
}

TEST(MrTable, StaleKeysDoNotMatchReusedSlots) {
  MrTable t(4);
  std::vector<uint8_t> buf(64);
  const uint32_t pd = t.AllocPd();
  auto first = t.Register(pd, buf.data(), 64, 0, kLocalWrite);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(t.Deregister(first->lkey).ok());
  auto second = t.Register(pd, buf.data(), 64, 0, kLocalWrite);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(first->lkey, second->lkey);
  EXPECT_EQ(t.CheckLocal(first->lkey, pd, 0, 1, false).result, AccessResult::kBadKey);
  EXPECT_EQ(t.CheckLocal(second->lkey, pd, 0, 1, true).result, AccessResult::kOk);
  EXPECT_FALSE(t.Deregister(first->lkey).ok());
}

// SEND_WITH_INV and LOCAL_INV naming a region registered with
// ibv_reg_mr must not invalidate it (only type-2 windows can be, as in rxe).
TEST(MrTable, RegionsCannotBeInvalidated) {
  MrTable t;
  std::vector<uint8_t> buf(64);
  const uint32_t pd = t.AllocPd();
  auto k = *t.Register(pd, buf.data(), 64, 0, kLocalWrite | kRemoteRead);
  EXPECT_EQ(t.RemoteInvalidate(k.rkey, pd, kQpn), AccessResult::kInvalid);
  EXPECT_EQ(t.LocalInvalidate(k.rkey, pd), AccessResult::kInvalid);
  EXPECT_EQ(t.CheckRemote(k.rkey, pd, kQpn, 0, 8, kRemoteRead).result, AccessResult::kOk);
  EXPECT_EQ(t.CheckLocal(k.lkey, pd, 0, 8, true).result, AccessResult::kOk);
  EXPECT_EQ(t.RemoteInvalidate(k.rkey + 1, pd, kQpn), AccessResult::kBadKey);
}

TEST(MrTable, RegistrationValidation) {
  MrTable t(3);
  std::vector<uint8_t> buf(64);
  const uint32_t pd = t.AllocPd();
  EXPECT_FALSE(t.Register(99, buf.data(), 64, 0, 0).ok());
  EXPECT_FALSE(t.Register(pd, buf.data(), 64, 0, kRemoteWrite).ok());  // needs local write
  EXPECT_FALSE(t.Register(pd, buf.data(), 64, 0, 1u << 20).ok());
  EXPECT_FALSE(t.Register(pd, buf.data(), 64, UINT64_MAX - 10, 0).ok());
  EXPECT_TRUE(t.Register(pd, buf.data(), 64, 0, 0).ok());
  EXPECT_TRUE(t.Register(pd, buf.data(), 64, 0, 0).ok());
  EXPECT_EQ(t.Register(pd, buf.data(), 64, 0, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(t.DeallocPd(pd).ok());  // regions still registered
}

// The table grows as regions are registered (it starts small so that a
// device with a few regions does not clear 65,536 slots): keys taken before
// a growth still resolve after it, slots are handed out lowest first, and
// the limit is max_regions - 1 (slot 0 is never used).
TEST(MrTable, GrowsOnDemandUpToItsLimit) {
  MrTable t(200);
  std::vector<uint8_t> buf(64);
  const uint32_t pd = t.AllocPd();
  std::vector<uint32_t> keys;
  for (uint32_t i = 1; i < 200; ++i) {
    auto k = t.Register(pd, buf.data(), 64, 0, kLocalWrite);
    ASSERT_TRUE(k.ok()) << i;
    EXPECT_EQ(MrTable::MwHandle(k->lkey), i);
    keys.push_back(k->lkey);
  }
  EXPECT_EQ(t.Register(pd, buf.data(), 64, 0, kLocalWrite).status().code(),
            absl::StatusCode::kResourceExhausted);
  for (uint32_t key : keys) EXPECT_EQ(t.CheckLocal(key, pd, 0, 64, true).result, AccessResult::kOk);
  EXPECT_EQ(t.live_regions(), 199u);
  ASSERT_TRUE(t.Deregister(keys[99]).ok());
  auto again = t.Register(pd, buf.data(), 64, 0, kLocalWrite);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(MrTable::MwHandle(again->lkey), 100u);
}

// The low byte of a key is random per registration (a peer
// cannot guess it from the slot), never the slot's previous one, and the
// slot stays the index (O(1) lookup).
TEST(MrTable, KeyVariantIsRandomPerRegistration) {
  MrTable t(4);
  std::vector<uint8_t> buf(64);
  const uint32_t pd = t.AllocPd();
  std::vector<uint32_t> keys;
  for (int i = 0; i < 64; ++i) {
    auto k = t.Register(pd, buf.data(), 64, 0, kLocalWrite);
    ASSERT_TRUE(k.ok());
    if (!keys.empty()) {
      EXPECT_NE(k->lkey, keys.back());
    }
    keys.push_back(k->lkey);
    EXPECT_EQ(t.Find(k->lkey)->key, k->lkey);
    ASSERT_TRUE(t.Deregister(k->lkey).ok());
  }
  // Not a counter: the variants are not consecutive and cover many values.
  int consecutive = 0;
  std::vector<bool> seen(256);
  int distinct = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i] >> 8, keys[0] >> 8);  // the same slot every time
    if (i > 0 && ((keys[i - 1] + 1) & 0xFF) == (keys[i] & 0xFF)) ++consecutive;
    if (!seen[keys[i] & 0xFF]) ++distinct;
    seen[keys[i] & 0xFF] = true;
  }
  EXPECT_LT(consecutive, 8);
  EXPECT_GT(distinct, 32);
  // Two devices (seeds) hand out different first keys for the same slot.
  MrTable a(4, 1), b(4, 2);
  const uint32_t pa = a.AllocPd(), pb = b.AllocPd();
  uint32_t differ = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t ka = a.Register(pa, buf.data(), 64, 0, 0)->lkey;
    const uint32_t kb = b.Register(pb, buf.data(), 64, 0, 0)->lkey;
    differ += ka != kb;
    ASSERT_TRUE(a.Deregister(ka).ok());
    ASSERT_TRUE(b.Deregister(kb).ok());
  }
  EXPECT_GT(differ, 4u);
}

class MrTableWindows : public ::testing::Test {
 protected:
  void SetUp() override {
    pd_ = t_.AllocPd();
    other_pd_ = t_.AllocPd();
    mr_ = *t_.Register(pd_, buf_.data(), buf_.size(), kIova, kLocalWrite | kMwBind);
  }
  MwBind Bind(const MrTable::MwKeys& mw, uint64_t addr, uint64_t len, uint32_t access) {
    MwBind b;
    b.mw_handle = mw.handle;
    b.new_key = t_.NextMwKey(mw.handle);
    b.mr_lkey = mr_.lkey;
    b.addr = addr;
    b.length = len;
    b.access = access;
    return b;
  }
  static constexpr uint64_t kIova = 0x10000;
  MrTable t_;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(4096);
  uint32_t pd_ = 0, other_pd_ = 0;
  MrKeys mr_{};
};

TEST_F(MrTableWindows, Type1BindChecksRegionAndGrantsOnlyTheWindow) {
  auto mw = *t_.AllocMw(pd_, 1);
  EXPECT_EQ(t_.MwKey(mw.handle), mw.rkey);
  // Allocated: no access through it yet; never usable as an lkey.
  EXPECT_EQ(t_.CheckRemote(mw.rkey, pd_, kQpn, kIova, 1, kRemoteRead).result, AccessResult::kBadKey);

  // The window grants remote write although the region has only local
  // write and bind rights (IBTA 10.6.7: rights come from the window).
  MwBind b = Bind(mw, kIova + 0x100, 0x200, kRemoteWrite | kRemoteRead);
  ASSERT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kOk);
  const uint32_t key = b.new_key;
  EXPECT_NE(key, mw.rkey);
  EXPECT_EQ(key >> 8, mw.rkey >> 8);
  EXPECT_EQ(t_.MwKey(mw.handle), key);
  auto ok = t_.CheckRemote(key, pd_, kQpn + 5, kIova + 0x100, 0x200, kRemoteWrite);
  EXPECT_EQ(ok.result, AccessResult::kOk);  // type 1: any QP of the PD
  EXPECT_EQ(ok.host, buf_.data() + 0x100);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova + 0xFF, 1, kRemoteWrite).result,
            AccessResult::kOutOfBounds);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova + 0x2FF, 2, kRemoteWrite).result,
            AccessResult::kOutOfBounds);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova + 0x100, 8, kRemoteAtomic).result,
            AccessResult::kNoPermission);
  EXPECT_EQ(t_.CheckRemote(key, other_pd_, kQpn, kIova + 0x100, 8, kRemoteRead).result,
            AccessResult::kWrongPd);
  EXPECT_EQ(t_.CheckRemote(mw.rkey, pd_, kQpn, kIova + 0x100, 8, kRemoteRead).result,
            AccessResult::kBadKey);  // the key before the bind
  EXPECT_EQ(t_.CheckLocal(key, pd_, kIova + 0x100, 8, false).result, AccessResult::kBadKey);

  // The region stays while a window is bound to it (10.6.7.2.6).
  EXPECT_EQ(t_.Deregister(mr_.lkey).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(t_.Reregister(mr_.lkey, MrTable::kChangeAccess, 0, nullptr, 0, 0, kLocalWrite).ok());
  // Type-1 windows cannot be invalidated; a zero-length bind unbinds them.
  EXPECT_EQ(t_.LocalInvalidate(key, pd_), AccessResult::kInvalid);
  MwBind unbind = Bind(mw, 0, 0, 0);
  unbind.mr_lkey = 0;
  ASSERT_EQ(t_.BindMw(unbind, pd_, kQpn), AccessResult::kOk);
  EXPECT_EQ(t_.CheckRemote(unbind.new_key, pd_, kQpn, kIova + 0x100, 1, 0).result,
            AccessResult::kBadKey);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova + 0x100, 1, 0).result, AccessResult::kBadKey);
  EXPECT_TRUE(t_.Deregister(mr_.lkey).ok());
}

TEST_F(MrTableWindows, BindRules) {
  auto mw = *t_.AllocMw(pd_, 1);
  // Whole region, and a zero-length window at its end, are inside it.
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova, 4096, kRemoteRead), pd_, kQpn), AccessResult::kOk);
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova - 1, 2, kRemoteRead), pd_, kQpn), AccessResult::kOutOfBounds);
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova + 1, 4096, kRemoteRead), pd_, kQpn),
            AccessResult::kOutOfBounds);
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova + 8, UINT64_MAX - 4, kRemoteRead), pd_, kQpn),
            AccessResult::kOutOfBounds);
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova, 8, kZeroBased | kRemoteRead), pd_, kQpn),
            AccessResult::kInvalid);
  // The region must allow binding (C10-73) and local write for a writable
  // window (C10-74), and be of the window's PD.
  auto plain = *t_.Register(pd_, buf_.data(), 64, 0, kLocalWrite | kRemoteWrite);
  MwBind b = Bind(mw, 0, 8, kRemoteRead);
  b.mr_lkey = plain.lkey;
  EXPECT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kNoPermission);
  auto ro = *t_.Register(pd_, buf_.data(), 64, 0, kMwBind | kRemoteRead);
  b.mr_lkey = ro.lkey;
  EXPECT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kOk);
  b.access = kRemoteWrite;
  EXPECT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kNoPermission);
  auto foreign = *t_.Register(other_pd_, buf_.data(), 64, 0, kLocalWrite | kMwBind);
  b.mr_lkey = foreign.lkey;
  b.access = kRemoteRead;
  EXPECT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kWrongPd);
  b.mr_lkey = ro.lkey + 1;
  EXPECT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kBadKey);
  b.mw_handle = mr_.lkey >> 8;  // a region is not a window
  b.mr_lkey = ro.lkey;
  EXPECT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kBadKey);
  EXPECT_FALSE(t_.AllocMw(pd_, 3).ok());
  EXPECT_FALSE(t_.AllocMw(99, 1).ok());
}

TEST_F(MrTableWindows, Type2BelongsToItsQpUntilInvalidated) {
  auto mw = *t_.AllocMw(pd_, 2);
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova, 64, kRemoteRead), other_pd_, kQpn),
            AccessResult::kWrongPd);  // QP of another PD (C10-72)
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova, 0, kRemoteRead), pd_, kQpn), AccessResult::kInvalid);
  MwBind b = Bind(mw, kIova, 64, kRemoteRead);
  b.new_key = mw.rkey + 12;  // type 2: the program chooses the low byte
  ASSERT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kOk);
  const uint32_t key = (mw.rkey & ~0xFFu) | ((mw.rkey + 12) & 0xFF);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova, 64, kRemoteRead).result, AccessResult::kOk);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn + 1, kIova, 64, kRemoteRead).result,
            AccessResult::kWrongQp);
  // Bound: not bindable again until invalidated (o10-37.2.30).
  EXPECT_EQ(t_.BindMw(Bind(mw, kIova, 64, kRemoteRead), pd_, kQpn), AccessResult::kInvalid);
  EXPECT_EQ(t_.LocalInvalidate(key, other_pd_), AccessResult::kWrongPd);
  EXPECT_EQ(t_.RemoteInvalidate(key, pd_, kQpn + 1), AccessResult::kWrongQp);
  EXPECT_EQ(t_.RemoteInvalidate(key, other_pd_, kQpn), AccessResult::kWrongPd);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova, 64, kRemoteRead).result, AccessResult::kOk);
  EXPECT_EQ(t_.RemoteInvalidate(key, pd_, kQpn), AccessResult::kOk);
  EXPECT_EQ(t_.CheckRemote(key, pd_, kQpn, kIova, 64, kRemoteRead).result, AccessResult::kBadKey);
  EXPECT_EQ(t_.RemoteInvalidate(key, pd_, kQpn), AccessResult::kBadKey);
  EXPECT_TRUE(t_.Deregister(mr_.lkey).ok());  // no window bound any more
}

TEST_F(MrTableWindows, LocalInvalidateAndQpDestruction) {
  auto mw = *t_.AllocMw(pd_, 2);
  MwBind b = Bind(mw, kIova, 64, kRemoteWrite);
  ASSERT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kOk);
  EXPECT_EQ(t_.LocalInvalidate(b.new_key, pd_), AccessResult::kOk);  // from any QP of the PD
  EXPECT_EQ(t_.CheckRemote(b.new_key, pd_, kQpn, kIova, 8, kRemoteWrite).result,
            AccessResult::kBadKey);
  MwBind again = Bind(mw, kIova, 64, kRemoteWrite);
  ASSERT_EQ(t_.BindMw(again, pd_, kQpn), AccessResult::kOk);
  t_.ReleaseQp(kQpn + 1);
  EXPECT_EQ(t_.CheckRemote(again.new_key, pd_, kQpn, kIova, 8, kRemoteWrite).result,
            AccessResult::kOk);
  t_.ReleaseQp(kQpn);  // a later QP with the same number gets nothing
  EXPECT_EQ(t_.CheckRemote(again.new_key, pd_, kQpn, kIova, 8, kRemoteWrite).result,
            AccessResult::kBadKey);
  EXPECT_TRUE(t_.Deregister(mr_.lkey).ok());
}

TEST_F(MrTableWindows, DeallocUnbindsAndHoldsThePd) {
  auto mw1 = *t_.AllocMw(pd_, 1);
  auto mw2 = *t_.AllocMw(pd_, 2);
  MwBind b1 = Bind(mw1, kIova, 64, kRemoteRead);
  MwBind b2 = Bind(mw2, kIova, 64, kRemoteRead);
  ASSERT_EQ(t_.BindMw(b1, pd_, kQpn), AccessResult::kOk);
  ASSERT_EQ(t_.BindMw(b2, pd_, kQpn), AccessResult::kOk);
  EXPECT_FALSE(t_.Deregister(mr_.lkey).ok());
  ASSERT_TRUE(t_.DeallocMw(mw1.handle).ok());
  EXPECT_FALSE(t_.DeallocMw(mw1.handle).ok());
  EXPECT_FALSE(t_.Deregister(mr_.lkey).ok());
  ASSERT_TRUE(t_.DeallocMw(mw2.handle).ok());
  EXPECT_EQ(t_.CheckRemote(b1.new_key, pd_, kQpn, kIova, 8, kRemoteRead).result,
            AccessResult::kBadKey);
  EXPECT_EQ(t_.CheckRemote(b2.new_key, pd_, kQpn, kIova, 8, kRemoteRead).result,
            AccessResult::kBadKey);
  EXPECT_TRUE(t_.Deregister(mr_.lkey).ok());
  auto held = *t_.AllocMw(pd_, 1);
  EXPECT_FALSE(t_.DeallocPd(pd_).ok());  // a window holds its PD
  ASSERT_TRUE(t_.DeallocMw(held.handle).ok());
  EXPECT_TRUE(t_.DeallocPd(pd_).ok());
}

// A message in flight resolved its key at some epoch; the key must still
// mean the same binding at each later packet, even if it came back to the
// same value (invalidate, then bind again with the same key).
TEST_F(MrTableWindows, StillValidSeesRebindsWithTheSameKey) {
  auto mw = *t_.AllocMw(pd_, 2);
  MwBind b = Bind(mw, kIova, 64, kRemoteRead);
  ASSERT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kOk);
  const uint64_t resolved_at = t_.epoch();
  EXPECT_TRUE(t_.StillValid(b.new_key, resolved_at));
  ASSERT_EQ(t_.LocalInvalidate(b.new_key, pd_), AccessResult::kOk);
  EXPECT_FALSE(t_.StillValid(b.new_key, resolved_at));
  b.addr = kIova + 64;  // same key, another range
  ASSERT_EQ(t_.BindMw(b, pd_, kQpn), AccessResult::kOk);
  EXPECT_TRUE(t_.Find(b.new_key) != nullptr);
  EXPECT_FALSE(t_.StillValid(b.new_key, resolved_at));
  EXPECT_TRUE(t_.StillValid(b.new_key, t_.epoch()));
  // The same for a region re-registered in place.
  const uint64_t before = t_.epoch();
  ASSERT_EQ(t_.LocalInvalidate(b.new_key, pd_), AccessResult::kOk);
  ASSERT_TRUE(t_.Reregister(mr_.lkey, MrTable::kChangeAccess, 0, nullptr, 0, 0, kLocalWrite).ok());
  EXPECT_FALSE(t_.StillValid(mr_.lkey, before));
}

TEST_F(MrTableWindows, ReregisterKeepsKeysAndChangesWhatWasAsked) {
  std::vector<uint8_t> other(128);
  ASSERT_TRUE(t_.Reregister(mr_.lkey, MrTable::kChangeAccess, 0, nullptr, 0, 0,
                            kLocalWrite | kRemoteWrite).ok());
  EXPECT_EQ(t_.CheckRemote(mr_.rkey, pd_, kQpn, kIova, 8, kRemoteWrite).result, AccessResult::kOk);
  ASSERT_TRUE(t_.Reregister(mr_.lkey, MrTable::kChangeAccess, 0, nullptr, 0, 0, kLocalWrite).ok());
  EXPECT_EQ(t_.CheckRemote(mr_.rkey, pd_, kQpn, kIova, 8, kRemoteWrite).result,
            AccessResult::kNoPermission);
  ASSERT_TRUE(t_.Reregister(mr_.lkey, MrTable::kChangePd, other_pd_, nullptr, 0, 0, 0).ok());
  EXPECT_EQ(t_.CheckLocal(mr_.lkey, pd_, kIova, 8, true).result, AccessResult::kWrongPd);
  EXPECT_EQ(t_.CheckLocal(mr_.lkey, other_pd_, kIova, 8, true).result, AccessResult::kOk);
  EXPECT_FALSE(t_.DeallocPd(other_pd_).ok());  // the region moved there
  EXPECT_TRUE(t_.DeallocPd(pd_).ok());
  ASSERT_TRUE(t_.Reregister(mr_.lkey, MrTable::kChangeTranslation, 0, other.data(), other.size(),
                            0x7000, 0).ok());
  auto r = t_.CheckLocal(mr_.lkey, other_pd_, 0x7000, 128, true);
  EXPECT_EQ(r.result, AccessResult::kOk);
  EXPECT_EQ(r.host, other.data());
  EXPECT_EQ(t_.CheckLocal(mr_.lkey, other_pd_, kIova, 8, true).result, AccessResult::kOutOfBounds);
  EXPECT_FALSE(t_.Reregister(mr_.lkey, 0, 0, nullptr, 0, 0, 0).ok());
  EXPECT_FALSE(t_.Reregister(mr_.lkey, MrTable::kChangeAccess, 0, nullptr, 0, 0, kRemoteWrite).ok());
  EXPECT_FALSE(t_.Reregister(mr_.lkey, MrTable::kChangePd, 99, nullptr, 0, 0, 0).ok());
  EXPECT_FALSE(t_.Reregister(mr_.lkey, MrTable::kChangeTranslation, 0, nullptr, 8, 0, 0).ok());
  EXPECT_FALSE(t_.Reregister(mr_.lkey + 1, MrTable::kChangeAccess, 0, nullptr, 0, 0, 0).ok());
}

}  // namespace
}  // namespace droce::mem
