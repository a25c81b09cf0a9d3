#include "apps/common/option_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace droce::apps {

absl::Status BadOption(const std::string& what) { return absl::InvalidArgumentError(what); }

absl::Status ParseUnsigned(const std::string& name, const std::string& s, uint64_t lo, uint64_t hi, uint64_t* out) {
  char* end;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end || errno || s[0] == '-' || s[0] == '+' || s[0] == ' ' || v < lo || v > hi) {
    return BadOption(absl::StrFormat("%s must be an integer in [%u, %u], not '%s'", name, lo, hi, s));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseReal(const std::string& name, const std::string& s, double lo, double hi, double* out) {
  char* end;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  // !(v >= lo && v <= hi) also refuses NaN.
  if (s.empty() || *end || errno || !(v >= lo && v <= hi)) {
    return BadOption(absl::StrFormat("%s must be a number in [%g, %g], not '%s'", name, lo, hi, s));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseWord(const std::string& name, const std::string& s, std::initializer_list<const char*> allowed,
                       std::string* out) {
  for (const char* a : allowed) {
    if (s == a) {
      *out = s;
      return absl::OkStatus();
    }
  }
  return BadOption(absl::StrFormat("%s: expected %s, got '%s'", name, absl::StrJoin(allowed, ", "), s));
}

std::string FormatUsage(const std::vector<UsageEntry>& entries, size_t help_column) {
  std::string u;
  for (const UsageEntry& e : entries) {
    std::string head = "  ";
    if (e.alias != nullptr) absl::StrAppend(&head, e.alias, ", ");
    absl::StrAppend(&head, e.name);
    if (e.value != nullptr) absl::StrAppend(&head, " ", e.value);
    head += head.size() + 1 < help_column ? std::string(help_column - head.size(), ' ') : "  ";
    bool first = true;
    for (absl::string_view line : absl::StrSplit(e.help, '\n')) {
      absl::StrAppend(&u, first ? head : std::string(help_column, ' '), line, "\n");
      first = false;
    }
  }
  return u;
}

bool WantsHelp(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "-h" || a == "--help"; });
}

}  // namespace droce::apps
