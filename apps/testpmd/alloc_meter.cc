// Replacement global operator new/delete that feed AllocMeter (see
// alloc_meter.h). Every block comes from malloc (or aligned_alloc), so
// malloc_usable_size works for all of them.
#include "apps/testpmd/alloc_meter.h"

#include <malloc.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace droce::testpmd {
namespace {

thread_local bool t_armed = false;
thread_local int64_t t_net = 0;

void* Allocate(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  if (t_armed) t_net += static_cast<int64_t>(malloc_usable_size(p));
  return p;
}

void Free(void* p) {
  if (p == nullptr) return;
  if (t_armed) t_net -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

AllocMeter::AllocMeter() : start_(t_net), outer_armed_(t_armed) { t_armed = true; }
AllocMeter::~AllocMeter() { t_armed = outer_armed_; }
int64_t AllocMeter::bytes() const { return t_net - start_; }

}  // namespace droce::testpmd

using droce::testpmd::Allocate;
using droce::testpmd::Free;

void* operator new(std::size_t n) { return Allocate(n, 0); }
void* operator new[](std::size_t n) { return Allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return Allocate(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return Allocate(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { Free(p); }
void operator delete[](void* p) noexcept { Free(p); }
void operator delete(void* p, std::size_t) noexcept { Free(p); }
void operator delete[](void* p, std::size_t) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t) noexcept { Free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { Free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { Free(p); }
