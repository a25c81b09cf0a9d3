#include "drivers/verbs/arrival_wait.h"

#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace droce::verbs {

ArrivalWait::ArrivalWait(uint64_t period_ns) : period_ns_(period_ns > 0 ? period_ns : 1) {
  watchdog_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
}

ArrivalWait::~ArrivalWait() {
  if (watchdog_fd_ >= 0) close(watchdog_fd_);
}

ArrivalWait::End ArrivalWait::Sleep(int fd, uint64_t now_ns) {
  if (now_ns >= watchdog_until_ns_) {
    uint64_t expirations = 0;
    (void)!read(watchdog_fd_, &expirations, sizeof expirations);  // a period that ended unseen
    itimerspec its{};
    its.it_value.tv_sec = static_cast<time_t>(period_ns_ / 1'000'000'000);
    its.it_value.tv_nsec = static_cast<long>(period_ns_ % 1'000'000'000);
    (void)timerfd_settime(watchdog_fd_, 0, &its, nullptr);
    watchdog_until_ns_ = now_ns + period_ns_;
  }
  pollfd pfd[2] = {{fd, POLLIN, 0}, {watchdog_fd_, POLLIN, 0}};
  const int n = ppoll(pfd, 2, nullptr, nullptr);
  if (n > 0 && (pfd[1].revents & POLLIN) != 0) {
    uint64_t expirations = 0;
    (void)!read(watchdog_fd_, &expirations, sizeof expirations);
    watchdog_until_ns_ = 0;  // the next wait arms a new period
  }
  if (n > 0 && (pfd[0].revents & POLLIN) != 0) return End::kArrival;
  return End::kWatchdog;
}

}  // namespace droce::verbs
