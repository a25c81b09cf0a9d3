#include "drivers/ethdev/unmap_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <mutex>

#include <rte_ethdev.h>

namespace droce::ethdev {

namespace unmap_guard_detail {
// The faulting thread's way back out of its burst, and the port it polls.
// Set before every guarded burst, so the thread's TLS block exists before
// the handler ever reads it. initial-exec: the provider is dlopen'ed, and
// the default model for a shared object calls __tls_get_addr on every
// access (~100 instructions per posted 64 B WRITE in callgrind, two bursts);
// these 10 bytes fit glibc's static TLS surplus for dlopen'ed objects.
// __thread (no dynamic initialisation): port.cc's inline EnterGuard reaches
// them without a TLS wrapper call.
__thread sigjmp_buf* t_env __attribute__((tls_model("initial-exec"))) = nullptr;
__thread uint16_t t_port __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace unmap_guard_detail

namespace {

using unmap_guard_detail::t_env;
using unmap_guard_detail::t_port;

struct sigaction g_previous;
std::atomic<uint64_t> g_caught{0};

void OnSegv(int sig, siginfo_t* info, void* context) {
  sigjmp_buf* env = t_env;
  if (env != nullptr) {
    rte_eth_link link{};
    // memif_disconnect stores RTE_ETH_LINK_DOWN before memif_free_regions.
    if (rte_eth_link_get_nowait(t_port, &link) == 0 && link.link_status == RTE_ETH_LINK_DOWN) {
      t_env = nullptr;
      g_caught.fetch_add(1, std::memory_order_relaxed);
      siglongjmp(*env, 1);
    }
  }
  // Not the race: whatever handled SIGSEGV before us.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default: restore it and return; the faulting instruction runs again and
  // the process dies of the signal with its core dump.
  signal(SIGSEGV, SIG_DFL);
}

template <typename Burst>
uint16_t Guarded(uint16_t port, uint16_t n, bool* faulted, uint16_t on_fault, Burst burst) {
  sigjmp_buf env;
  t_port = port;
  // No signal mask is saved: the handler runs with SA_NODEFER, so SIGSEGV
  // is not left blocked after the jump.
  if (sigsetjmp(env, 0) != 0) {
    *faulted = true;
    return on_fault;
  }
  t_env = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  const uint16_t got = burst();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_env = nullptr;
  (void)n;
  return got;
}

}  // namespace

void FillBlockableSignals(sigset_t* set) {
  sigfillset(set);
  for (const int fault : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS}) sigdelset(set, fault);
}

bool InstallUnmapGuard() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSegv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ok = sigaction(SIGSEGV, &sa, &g_previous) == 0;
  });
  return ok;
}

uint16_t GuardedRxBurst(uint16_t port, rte_mbuf** mbufs, uint16_t n, bool* faulted) {
  return Guarded(port, n, faulted, 0, [&] { return rte_eth_rx_burst(port, 0, mbufs, n); });
}

uint16_t GuardedTxBurst(uint16_t port, rte_mbuf** mbufs, uint16_t n, bool* faulted) {
  return Guarded(port, n, faulted, n, [&] { return rte_eth_tx_burst(port, 0, mbufs, n); });
}

uint16_t GuardedCall(uint16_t port, uint16_t (*fn)(void*), void* arg, uint16_t on_fault, bool* faulted) {
  return Guarded(port, 0, faulted, on_fault, [&] { return fn(arg); });
}

uint64_t UnmapFaultsCaught() { return g_caught.load(std::memory_order_relaxed); }

}  // namespace droce::ethdev
