// Measures the heap memory a piece of control-path code leaves allocated on
// the calling thread, from the allocations themselves: droce-testpmd replaces
// the global operator new/delete (alloc_meter.cc) and, while an AllocMeter is
// alive on a thread, adds malloc_usable_size of every block that thread
// allocates and subtracts that of every block it frees. Used to report the
// memory each QP occupies (qp_memory_bytes): its object, SQ WQE ring, RQ
// ring, responder resources and response queue are all allocated when the
// QP is created. Other threads and code outside a meter are not counted; the
// data path does not allocate, so the replacement costs it nothing.
#ifndef DROCE_APPS_TESTPMD_ALLOC_METER_H_
#define DROCE_APPS_TESTPMD_ALLOC_METER_H_

#include <cstdint>

namespace droce::testpmd {

class AllocMeter {
 public:
  AllocMeter();
  ~AllocMeter();
  AllocMeter(const AllocMeter&) = delete;
  AllocMeter& operator=(const AllocMeter&) = delete;
  // Bytes allocated minus bytes freed on this thread since construction.
  int64_t bytes() const;

 private:
  int64_t start_;
  bool outer_armed_;
};

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_ALLOC_METER_H_
