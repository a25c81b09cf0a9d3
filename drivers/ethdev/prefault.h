// Prefaulting the wire's shared memory.
//
// A memif connection's rings and buffers (and a droced direct ring) are
// shared memory (a memfd) that each process maps and then touches one
// buffer after another: without this, the first pass over a ring takes a
// page fault per new page (a 10240-byte memif buffer spans three pages),
// ~1,600 faults in the first 25 ms of an ibv_rc_pingpong on the 2-core VM
// (measured with `perf record -e page-faults -d`: all on
// /memfd:memif_region_0), which is where its short runs lost half their
// time. A hardware NIC's rings are pinned before the first doorbell; here
// the page tables are filled when the link comes up.
//
// MADV_POPULATE_WRITE (Linux 5.14) maps the pages writable without writing
// to them (the peer may be using them); where the kernel refuses it nothing
// happens and the pages fault in as before.
#ifndef DROCE_DRIVERS_ETHDEV_PREFAULT_H_
#define DROCE_DRIVERS_ETHDEV_PREFAULT_H_

#include <cstddef>
#include <string_view>

namespace droce::ethdev {

// Fills the page tables of [addr, addr + bytes) for writing. False when the
// kernel refused (the memory is unchanged either way).
bool PrefaultForWrite(void* addr, size_t bytes);

// Every shared mapping of this process whose /proc/self/maps name contains
// `name` (e.g. "memfd:memif_region", DPDK's memif regions): prefaulted for
// writing. Returns the bytes prefaulted. Control path (reads
// /proc/self/maps); call it when a link comes up.
size_t PrefaultSharedMappings(std::string_view name);

// The name DPDK 22.11's memif PMD gives its regions' memfds.
inline constexpr std::string_view kMemifRegionName = "memfd:memif_region";

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_PREFAULT_H_
