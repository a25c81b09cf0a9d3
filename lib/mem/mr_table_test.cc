#include "mem/mr_table.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace droce::mem {
namespace {

TEST(MrTable, RemoteAccessChecksKeyPdPermissionAndBounds) {
  MrTable t;
  std::vector<uint8_t> buf(4096);
  const uint32_t pd = t.AllocPd();
  const uint32_t other_pd = t.AllocPd();
  auto keys = t.Register(pd, buf.data(), buf.size(), 0x10000, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(keys.ok());
  const uint32_t rkey = keys->rkey;

  auto ok = t.CheckRemote(rkey, pd, 0x10000, 4096, kRemoteWrite);
  EXPECT_EQ(ok.result, AccessResult::kOk);
  EXPECT_EQ(ok.host, buf.data());
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0x10FFF, 1, kRemoteWrite).host, buf.data() + 4095);
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0x11000, 0, kRemoteWrite).result, AccessResult::kOk);

  EXPECT_EQ(t.CheckRemote(rkey + 1, pd, 0x10000, 1, kRemoteWrite).result, AccessResult::kBadKey);
  EXPECT_EQ(t.CheckRemote(0, pd, 0x10000, 1, kRemoteWrite).result, AccessResult::kBadKey);
  EXPECT_EQ(t.CheckRemote(rkey, other_pd, 0x10000, 1, kRemoteWrite).result, AccessResult::kWrongPd);
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0x10000, 1, kRemoteRead).result, AccessResult::kNoPermission);
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0xFFFF, 1, kRemoteWrite).result, AccessResult::kOutOfBounds);
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0x10FFF, 2, kRemoteWrite).result, AccessResult::kOutOfBounds);
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0x11001, 0, kRemoteWrite).result, AccessResult::kOutOfBounds);
  // Lengths that would wrap 64-bit arithmetic.
  EXPECT_EQ(t.CheckRemote(rkey, pd, 0x10010, UINT64_MAX - 8, kRemoteWrite).result,
            AccessResult::kOutOfBounds);
  EXPECT_EQ(t.CheckRemote(rkey, pd, UINT64_MAX, 2, kRemoteWrite).result, AccessResult::kOutOfBounds);
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

TEST(MrTable, InvalidateStopsKeyWithinPdOnly) {
  MrTable t;
  std::vector<uint8_t> buf(64);
  const uint32_t pd = t.AllocPd();
  const uint32_t other = t.AllocPd();
  auto k = *t.Register(pd, buf.data(), 64, 0, kLocalWrite | kRemoteRead);
  EXPECT_EQ(t.Invalidate(k.rkey, other), AccessResult::kWrongPd);
  EXPECT_EQ(t.Invalidate(k.rkey, pd), AccessResult::kOk);
  EXPECT_EQ(t.CheckRemote(k.rkey, pd, 0, 8, kRemoteRead).result, AccessResult::kBadKey);
  EXPECT_EQ(t.Invalidate(k.rkey, pd), AccessResult::kBadKey);
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

}  // namespace
}  // namespace droce::mem
