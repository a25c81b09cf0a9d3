// The command line of sim/ns3's programs: --name value or --name=value, one
// table of (name, help, setter).
#ifndef DROCE_SIM_NS3_OPTIONS_H_
#define DROCE_SIM_NS3_OPTIONS_H_

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

namespace droce::ns3glue {

struct Option {
  const char* name;
  const char* help;
  std::function<bool(const std::string&)> set;
};

inline bool ParseU64(const std::string& v, uint64_t* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v[0] == '-') return false;
  *out = x;
  return true;
}

inline bool ParseDouble(const std::string& v, double* out) {
  char* end = nullptr;
  *out = std::strtod(v.c_str(), &end);
  return !v.empty() && *end == '\0';
}

// A setter for an unsigned field.
template <typename T>
std::function<bool(const std::string&)> U(T* field) {
  return [field](const std::string& v) {
    uint64_t x;
    if (!ParseU64(v, &x) || x > std::numeric_limits<T>::max()) return false;
    *field = static_cast<T>(x);
    return true;
  };
}

// A setter for a choice between "on" and "off".
inline std::function<bool(const std::string&)> OnOff(bool* field) {
  return [field](const std::string& v) {
    *field = v == "on";
    return v == "on" || v == "off";
  };
}

// Applies argv's options. Returns -1 to go on, else the exit status (0 after --help).
template <size_t N>
int ParseOptions(int argc, char** argv, const char* program, const Option (&options)[N]) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: %s [--option value | --option=value] ...\n", program);
      for (const Option& o : options) std::printf("  --%-12s %s\n", o.name, o.help);
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "%s: unexpected argument '%s' (--help)\n", program, arg.c_str());
      return 2;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "%s: --%s needs a value\n", program, name.c_str());
      return 2;
    }
    const Option* o = nullptr;
    for (const Option& c : options) o = name == c.name ? &c : o;
    if (o == nullptr) {
      std::fprintf(stderr, "%s: unknown option --%s (--help)\n", program, name.c_str());
      return 2;
    }
    if (!o->set(value)) {
      std::fprintf(stderr, "%s: bad value '%s' for --%s: %s\n", program, value.c_str(), name.c_str(), o->help);
      return 2;
    }
  }
  return -1;
}

}  // namespace droce::ns3glue

#endif  // DROCE_SIM_NS3_OPTIONS_H_
