// Where a program runs from: droce-ctl and droced run from a meson build
// tree use that tree's provider, shims, droced and BPF programs, installed
// ones the installed files. Found at run time from the executable's path,
// so that nothing of the build directory is compiled into the programs (the
// installed binaries are the same whatever directory they were built in).
#ifndef DROCE_DRIVERS_FABRIC_BUILD_TREE_H_
#define DROCE_DRIVERS_FABRIC_BUILD_TREE_H_

#include <filesystem>
#include <string>
#include <system_error>

namespace droce::fabric {

// The build tree the running executable is in: the nearest directory above
// it that holds meson's own `meson-private/coredata.dat`; "" for a program
// that is not in one (installed).
inline std::string BuildTreeRoot() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (fs::path d = self.parent_path(); d.has_relative_path(); d = d.parent_path()) {
    if (fs::exists(d / "meson-private" / "coredata.dat", ec)) return d.string();
  }
  return "";
}

}  // namespace droce::fabric

#endif  // DROCE_DRIVERS_FABRIC_BUILD_TREE_H_
