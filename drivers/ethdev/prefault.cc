#include "drivers/ethdev/prefault.h"

#include <sys/mman.h>

#include <cinttypes>
#include <cstdio>

namespace droce::ethdev {

bool PrefaultForWrite(void* addr, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  return bytes == 0 || madvise(addr, bytes, MADV_POPULATE_WRITE) == 0;
#else
  (void)addr, (void)bytes;
  return false;
#endif
}

size_t PrefaultSharedMappings(std::string_view name) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return 0;
  size_t done = 0;
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    uintptr_t start = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &start, &end, perms) != 3) continue;
    // Shared and writable (rw-s): the rings and buffers, not a read-only view.
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's' || end <= start) continue;
    if (std::string_view(line).find(name) == std::string_view::npos) continue;
    if (PrefaultForWrite(reinterpret_cast<void*>(start), end - start)) done += end - start;
  }
  std::fclose(maps);
  return done;
}

}  // namespace droce::ethdev
