// A wait for the wire's next frame with no timer of its own, for a progress
// thread inside a stream of frames (doc/verbs.md "Progress thread").
//
// On the 2-core test VM (a Firecracker microVM) a timed sleep costs the
// sleeper 17-42 us of CPU and ~100 us of wall time whatever its length, and
// a wait with a timeout that does not fire still ~11 us (arming and
// cancelling the timer), while a wait without a timeout woken through an
// eventfd costs ~1-2 us. A stream's gaps are short, and its next frame wakes
// the waiter through the wire's arrival descriptor (RxWakeup, the direct
// rings' doorbells), so no per-wait timer is needed. What bounds the wait
// instead is a watchdog: a timerfd armed at most once per `period_ns`, so a
// wait never lasts longer than a period (the link check, timers the engine
// armed meanwhile, a stop) and the watchdog's own cost is one timer a period,
// not one a wait.
//
// The protocol against lost wake-ups is the one every armed sleep keeps:
// ask for the notification, then look at the wire once more (a frame that
// came before the request was seen sends none), and only then sleep.
#ifndef DROCE_DRIVERS_VERBS_ARRIVAL_WAIT_H_
#define DROCE_DRIVERS_VERBS_ARRIVAL_WAIT_H_

#include <cstdint>

namespace droce::verbs {

class ArrivalWait {
 public:
  // What a Wait ended with.
  enum class End : uint8_t {
    kNotArmed,  // the wire cannot notify now (the caller sleeps timed instead)
    kWork,      // the look after arming found work: no sleep
    kArrival,   // the wire's descriptor woke it
    kWatchdog,  // the watchdog's period ended it (nothing arrived meanwhile)
  };

  explicit ArrivalWait(uint64_t period_ns);
  ~ArrivalWait();
  ArrivalWait(const ArrivalWait&) = delete;
  ArrivalWait& operator=(const ArrivalWait&) = delete;

  // False where no timerfd could be made: the caller keeps its timed sleeps.
  bool usable() const { return watchdog_fd_ >= 0; }

  // One wait. The caller holds the device; `w` gives
  //   int Arm()        — ask for notification: the descriptor, or -1;
  //   uint32_t Poll()  — one round, its work;
  //   void Disarm()    — withdraw the request (after a successful Arm);
  //   void Unlock(), void Lock() — let the device go, take it back.
  // Returns with the device let go. *work: the look's work for kWork.
  // now_ns: the caller's clock, for the watchdog's period.
  template <typename Wire>
  End Wait(Wire& w, uint64_t now_ns, uint32_t* work) {
    *work = 0;
    const int fd = w.Arm();
    if (fd < 0) {
      w.Unlock();
      return End::kNotArmed;
    }
    *work = w.Poll();
    if (*work > 0) {
      w.Disarm();
      w.Unlock();
      return End::kWork;
    }
    w.Unlock();
    const End end = Sleep(fd, now_ns);
    w.Lock();
    w.Disarm();
    w.Unlock();
    return end;
  }

 private:
  // Sleeps until `fd` or the watchdog polls readable; arms the watchdog
  // first if its last period has ended.
  End Sleep(int fd, uint64_t now_ns);

  const uint64_t period_ns_;
  int watchdog_fd_ = -1;
  uint64_t watchdog_until_ns_ = 0;  // the armed period's end (0: never armed)
};

}  // namespace droce::verbs

#endif  // DROCE_DRIVERS_VERBS_ARRIVAL_WAIT_H_
