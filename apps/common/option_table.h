// A program's command-line options as one table: each entry an option's
// name (and alias), the name of its value, its help and how it sets the
// program's options. The usage text is printed from the table and the parser
// walks it, so an option cannot be parsed without being documented, nor
// documented without being parsed. droce-testpmd and droced use it.
//
// Values are checked where they are set: a number out of range or a word not
// in the list is an error that names the option (the program prints it and
// exits 2), never a silent 0 from strtoul.
#ifndef DROCE_APPS_COMMON_OPTION_TABLE_H_
#define DROCE_APPS_COMMON_OPTION_TABLE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace droce::apps {

// One option. `State` is what the walk sets (the program's options and
// whatever it needs to know about which were given).
template <typename State>
struct OptionSpec {
  const char* name;   // "--mtu"
  const char* alias;  // "-i", or nullptr
  const char* value;  // the value's name in the usage; nullptr: a switch without a value
  const char* help;   // '\n' starts a continuation line
  absl::Status (*set)(State& state, const std::string& name, const std::string& value);
};

// An option as given on the command line, in order.
template <typename State>
struct GivenOption {
  const OptionSpec<State>* spec;
  std::string value;  // "" for a switch
};

absl::Status BadOption(const std::string& what);

// `s` as a decimal integer in [lo, hi]; the error names the option.
absl::Status ParseUnsigned(const std::string& name, const std::string& s, uint64_t lo, uint64_t hi, uint64_t* out);
// `s` as a number (strtod) in [lo, hi].
absl::Status ParseReal(const std::string& name, const std::string& s, double lo, double hi, double* out);
// `s` is one of `allowed`.
absl::Status ParseWord(const std::string& name, const std::string& s, std::initializer_list<const char*> allowed,
                       std::string* out);

template <typename T>
absl::Status Integer(const std::string& name, const std::string& s, uint64_t lo, uint64_t hi, T* out) {
  uint64_t v = 0;
  if (absl::Status st = ParseUnsigned(name, s, lo, hi, &v); !st.ok()) return st;
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

template <typename T>
absl::Status Number(const std::string& name, const std::string& s, double lo, double hi, T* out) {
  double v = 0;
  if (absl::Status st = ParseReal(name, s, lo, hi, &v); !st.ok()) return st;
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

// One usage line per option, its help from `help_column` on.
struct UsageEntry {
  const char* name;
  const char* alias;
  const char* value;
  const char* help;
};
std::string FormatUsage(const std::vector<UsageEntry>& entries, size_t help_column = 25);

template <typename State>
std::string FormatUsage(const std::vector<OptionSpec<State>>& table, size_t help_column = 25) {
  std::vector<UsageEntry> entries;
  entries.reserve(table.size());
  for (const OptionSpec<State>& s : table) entries.push_back({s.name, s.alias, s.value, s.help});
  return FormatUsage(entries, help_column);
}

// True if `args` asks for the usage (-h or --help anywhere).
bool WantsHelp(const std::vector<std::string>& args);

// The options of `args` in order, each with its value; an unknown option, a
// stray argument or a missing value is an error (`help_hint` says how to get
// the usage, e.g. "--help lists the options").
template <typename State>
absl::StatusOr<std::vector<GivenOption<State>>> SplitOptions(const std::vector<OptionSpec<State>>& table,
                                                             const std::vector<std::string>& args,
                                                             const std::string& help_hint) {
  std::vector<GivenOption<State>> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const OptionSpec<State>* spec = nullptr;
    for (const OptionSpec<State>& s : table) {
      if (args[i] == s.name || (s.alias != nullptr && args[i] == s.alias)) spec = &s;
    }
    if (spec == nullptr) {
      return BadOption((args[i].rfind("--", 0) == 0 ? "unknown option " + args[i]
                                                    : "unexpected argument '" + args[i] + "'") +
                       " (" + help_hint + ")");
    }
    if (spec->value == nullptr) {
      given.push_back({spec, ""});
      continue;
    }
    if (i + 1 >= args.size()) return BadOption("missing value for " + args[i]);
    given.push_back({spec, args[++i]});
  }
  return given;
}

// Applies `given` in order.
template <typename State>
absl::Status ApplyOptions(const std::vector<GivenOption<State>>& given, State& state) {
  for (const GivenOption<State>& g : given) {
    if (absl::Status s = g.spec->set(state, g.spec->name, g.value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace droce::apps

#endif  // DROCE_APPS_COMMON_OPTION_TABLE_H_
