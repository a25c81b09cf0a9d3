#include "drivers/verbs/device_mutex.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace droce::verbs {
namespace {

long Membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

// Once per process: the expedited private barrier needs a registration.
bool RegisterMembarrier() {
  static const bool ok = [] {
    const long cmds = Membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return ok;
}

}  // namespace

DeviceMutex::DeviceMutex() : DeviceMutex(true) {}
DeviceMutex::DeviceMutex(bool asymmetric_if_possible)
    : asymmetric_(asymmetric_if_possible && RegisterMembarrier()) {}

void DeviceMutex::LockSlow() {
  // The holder keeps the lock for a poll round (microseconds): spin first.
  for (int i = 0; i < 100; ++i) {
    __builtin_ia32_pause();
    if (word_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    // The other half of unlock()'s missing fence (device_mutex.h). It does
    // not fail once registered (a forked child keeps the registration;
    // checked on 6.18); should it ever, register again, and failing that
    // sleep with a short bound: a missed wake-up then costs microseconds.
    long bound_ns = kSleepBoundNs;
    if (asymmetric_ && Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
      Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
      if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) bound_ns = kUnfencedSleepBoundNs;
    }
    if (try_lock()) break;
    // Sleeps only while the word still says held; any unlock after our
    // count is visible wakes us.
    timespec bound{0, bound_ns};
    if (syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, 1, &bound, nullptr, 0) != 0 &&
        errno == ETIMEDOUT) {
      timed_out_waits_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void DeviceMutex::Wake() {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace droce::verbs
