// DPDK 22.11's memif PMD unmaps an interface's shared regions from its
// interrupt thread the moment the peer's control socket closes (the peer
// exited or was killed: memif_disconnect clears the link and then calls
// memif_free_regions), with no lock against a burst running in another
// thread. A burst that had passed the PMD's "connected" check, or was
// preempted inside, then reads unmapped memory and the process dies of
// SIGSEGV (doc/ethdev.md "Link state"; seen killing droced under
// ib_write_bw traffic: the program's CQ poll was inside rte_eth_rx_burst).
//
// The guard runs a burst so that such a fault ends the burst instead: a
// process-wide SIGSEGV handler that, only when the faulting thread is inside
// a guarded burst AND the PMD already reports that port's link down (memif
// marks it down before it unmaps), jumps back out of the burst. Any other
// fault goes to the handler that was installed before (by default: the
// process dies with its core dump, as without the guard).
#ifndef DROCE_DRIVERS_ETHDEV_UNMAP_GUARD_H_
#define DROCE_DRIVERS_ETHDEV_UNMAP_GUARD_H_

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstdint>

struct rte_mbuf;

namespace droce::ethdev {

namespace unmap_guard_detail {
// The guarded thread's way back out of its burst, and the port it polls
// (unmap_guard.cc). initial-exec: the provider is dlopen'ed, and the
// default model for a shared object calls __tls_get_addr on every access.
extern __thread sigjmp_buf* t_env __attribute__((tls_model("initial-exec")));
extern __thread uint16_t t_port __attribute__((tls_model("initial-exec")));
}  // namespace unmap_guard_detail

// A burst guarded in its caller's own frame, for the hottest burst (the
// direct memif receive, polled every round, mostly empty): the caller
// calls sigsetjmp(env, 0) itself (a function that calls it is never
// inlined, so GuardedCall's wrapper, function pointer and argument block
// cost a call chain per burst), handles a non-zero return as the caught
// fault, then EnterGuard(port, &env), the burst, LeaveGuard(). Locals the
// caller reads after the fault must not change between its sigsetjmp and
// the fault.
// The signal fences keep the compiler from moving the burst's loads outside
// the guarded span (they emit no instruction).
inline void EnterGuard(uint16_t port, sigjmp_buf* env) {
  unmap_guard_detail::t_port = port;
  unmap_guard_detail::t_env = env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void LeaveGuard() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  unmap_guard_detail::t_env = nullptr;
}

// The signals a droce thread blocks when it blocks "every signal" (its
// progress thread, EAL's threads, a program thread waiting in a verb): all
// but the synchronous faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP,
// SIGSYS). The kernel delivers a fault a thread causes even while it is
// blocked, but with the handler reset to the default action: a thread that
// blocked SIGSEGV dies of the unmap race with the guard armed.
void FillBlockableSignals(sigset_t* set);

// Installs the handler once per process; false if sigaction failed.
bool InstallUnmapGuard();

// rte_eth_rx_burst / rte_eth_tx_burst on queue 0 under the guard. On a
// caught fault *faulted is set: a receive returns 0 (the mbufs the PMD had
// taken are lost), a transmit returns n (the PMD may have freed some of
// them: claiming all sent leaks the rest rather than freeing any twice).
uint16_t GuardedRxBurst(uint16_t port, rte_mbuf** mbufs, uint16_t n, bool* faulted);
uint16_t GuardedTxBurst(uint16_t port, rte_mbuf** mbufs, uint16_t n, bool* faulted);
// fn(arg) under the guard for `port` (a burst that reads the port's rings
// itself: MemifTx); on a caught fault *faulted is set and it returns on_fault.
uint16_t GuardedCall(uint16_t port, uint16_t (*fn)(void*), void* arg, uint16_t on_fault, bool* faulted);

// Faults caught in this process (for stats and tests).
uint64_t UnmapFaultsCaught();

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_UNMAP_GUARD_H_
