// Runs engines on a Session: the client's start handshake, the server's
// serve loop, the result line. In interactive mode a dataplane thread owns
// the Session and runs these; the prompt thread talks to it through
// Dataplane (atomics only, no locks on the data path).
#ifndef DROCE_APPS_TESTPMD_RUNNER_H_
#define DROCE_APPS_TESTPMD_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "apps/testpmd/port_tap.h"
#include "apps/testpmd/session.h"
#include "sim/switch/egress_port_io.h"

namespace droce::testpmd {

class Runner {
 public:
  Runner(Options& opt, Session& s, PortTap& tap, sim::EgressPortIo* bottleneck)
      : opt_(opt), s_(s), tap_(tap), bottleneck_(bottleneck) {}

  // Client: one run of `engine` (connects first if needed). Returns 0 if the
  // run moved data and every check passed.
  int ClientRun(const Engine* engine);
  // Client: tells the server to quit and lets the last packets drain.
  void ClientFinish();
  // Server: connects, then serves the client's runs until it says quit (or
  // the link goes away, or a stop is asked for). 0 if every run passed.
  int Serve();
  // The raw-wire baselines (no QP): one run on either side.
  int RawRun(const Engine* engine);

  bool connected() const { return connected_.load(std::memory_order_acquire); }

 private:
  int Report(const Engine* engine, double secs);
  uint64_t Deadline(uint64_t start) const;

  Options& opt_;
  Session& s_;
  PortTap& tap_;
  sim::EgressPortIo* bottleneck_;
  std::atomic<bool> connected_{false};
};

// The interactive client's dataplane thread: owns the Session from its start
// to its end. The prompt thread asks it to start an engine or stop, reads
// snapshots through the Session, and never touches the device.
class Dataplane {
 public:
  Dataplane(Runner& runner, Session& s, bool server);
  ~Dataplane();  // Quit()
  // Asks for a run of engine `index` (AllEngines()); false if one is running.
  bool Start(int index);
  // Ends the running engine and waits for its result line; false if none ran.
  bool Stop();
  bool running() const { return running_.load(std::memory_order_acquire); }
  bool ever_started() const { return ever_started_.load(std::memory_order_acquire); }
  // Stops, sends the server quit (client), joins the thread. Returns the
  // exit status: non-zero if a run failed.
  int Quit();

 private:
  void Loop();
  Runner& runner_;
  Session& s_;
  const bool server_;
  std::atomic<int> pending_{-1};      // engine index to start
  std::atomic<bool> running_{false};  // a run (or the server's serve loop) is going
  std::atomic<bool> ever_started_{false};
  std::atomic<bool> quit_{false};
  std::atomic<uint64_t> runs_done_{0};
  std::atomic<int> status_{0};
  std::thread thread_;
  bool joined_ = false;
};

// /droce/port, /droce/qp[,N]: telemetry commands reading `s` through
// snapshots. Called after EAL started with telemetry on; `s` must stay
// valid until UnregisterTelemetry().
void RegisterTelemetry(Session* s);
void UnregisterTelemetry();

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_RUNNER_H_
