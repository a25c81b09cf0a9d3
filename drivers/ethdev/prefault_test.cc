#include "drivers/ethdev/prefault.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace droce::ethdev {
namespace {

constexpr size_t kPages = 256;

long MinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

// A shared memfd mapping named like DPDK's memif regions; 0 faults expected
// when every page is written after PrefaultSharedMappings, kPages without.
struct Region {
  explicit Region(const char* name) {
    fd = memfd_create(name, MFD_CLOEXEC);
    page = static_cast<size_t>(getpagesize());
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(kPages * page)) == 0) {
      void* m = mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) map = static_cast<uint8_t*>(m);
    }
  }
  ~Region() {
    if (map != nullptr) munmap(map, kPages * page);
    if (fd >= 0) close(fd);
  }
  // Not instrumented: ASan's checks of these writes would fault in its
  // shadow pages and count them.
  __attribute__((no_sanitize_address)) long FaultsWritingEveryPage() {
    const long before = MinorFaults();
    for (size_t i = 0; i < kPages; ++i) static_cast<volatile uint8_t*>(map)[i * page] = 1;
    return MinorFaults() - before;
  }
  int fd = -1;
  size_t page = 4096;
  uint8_t* map = nullptr;
};

TEST(Prefault, AMemifRegionTakesNoFaultsAfterItWasPrefaulted) {
  Region r("memif_region_7");
  ASSERT_NE(r.map, nullptr);
  const size_t done = PrefaultSharedMappings(kMemifRegionName);
  if (!PrefaultForWrite(r.map, r.page)) GTEST_SKIP() << "MADV_POPULATE_WRITE refused by this kernel";
  EXPECT_GE(done, kPages * r.page);
  EXPECT_EQ(r.FaultsWritingEveryPage(), 0);
}

TEST(Prefault, OtherMappingsAreLeftAlone) {
  Region other("not_a_wire");
  ASSERT_NE(other.map, nullptr);
  (void)PrefaultSharedMappings(kMemifRegionName);
  EXPECT_GE(other.FaultsWritingEveryPage(), static_cast<long>(kPages) / 2);  // faulted in now, not before
}

TEST(Prefault, TheDataIsUnchanged) {
  Region r("memif_region_8");
  ASSERT_NE(r.map, nullptr);
  for (size_t i = 0; i < kPages; i += 3) r.map[i * r.page + 5] = static_cast<uint8_t>(i);
  (void)PrefaultSharedMappings(kMemifRegionName);
  for (size_t i = 0; i < kPages; ++i) EXPECT_EQ(r.map[i * r.page + 5], i % 3 == 0 ? static_cast<uint8_t>(i) : 0);
}

}  // namespace
}  // namespace droce::ethdev
