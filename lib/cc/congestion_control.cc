#include "cc/congestion_control.h"

#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cc/dcqcn.h"
#include "cc/hpcc.h"
#include "cc/swift.h"
#include "cc/timely.h"

namespace droce::cc {

// Every algorithm a QP may run: a new one is a file of its own and a line here.
static const Ops* const kAlgorithms[] = {
    &kDcqcnOps,
    &kTimelyOps,
    &kHpccOps,
    &kSwiftOps,
};

const Ops* FindAlgorithm(std::string_view name) {
  for (const Ops* ops : kAlgorithms) {
    if (name == ops->name) return ops;
  }
  return nullptr;
}

std::string AlgorithmNames() {
  std::string s;
  for (const Ops* ops : kAlgorithms) absl::StrAppend(&s, ops->name, ", ");
  return s + "none";
}

namespace {

const Param* FindParam(const Ops& ops, std::string_view name) {
  for (size_t i = 0; i < ops.nparams; ++i) {
    if (name == ops.params[i].name) return &ops.params[i];
  }
  return nullptr;
}

double Read(const Param& p, const void* block) {
  const unsigned char* at = static_cast<const unsigned char*>(block) + p.offset;
  switch (p.type) {
    case Param::Type::kU32: {
      uint32_t v;
      std::memcpy(&v, at, sizeof v);
      return v;
    }
    case Param::Type::kU64: {
      uint64_t v;
      std::memcpy(&v, at, sizeof v);
      return static_cast<double>(v);
    }
    case Param::Type::kDouble: {
      double v;
      std::memcpy(&v, at, sizeof v);
      return v;
    }
  }
  return 0;
}

void Write(const Param& p, void* block, double value) {
  unsigned char* at = static_cast<unsigned char*>(block) + p.offset;
  switch (p.type) {
    case Param::Type::kU32: {
      const uint32_t v = static_cast<uint32_t>(value);
      std::memcpy(at, &v, sizeof v);
      break;
    }
    case Param::Type::kU64: {
      const uint64_t v = static_cast<uint64_t>(value);
      std::memcpy(at, &v, sizeof v);
      break;
    }
    case Param::Type::kDouble:
      std::memcpy(at, &value, sizeof value);
      break;
  }
}

std::string Names(const Ops& ops) {
  std::string s;
  for (size_t i = 0; i < ops.nparams; ++i) absl::StrAppend(&s, i ? ", " : "", ops.params[i].name);
  return s;
}

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view algorithm, std::string_view settings, uint64_t line_rate_bps) {
  Config c;
  if (algorithm == "none") {
    if (settings.find_first_not_of(" ,") != std::string_view::npos) {
      return absl::InvalidArgumentError("cc=none takes no parameters");
    }
    return c;
  }
  c.ops = FindAlgorithm(algorithm);
  if (c.ops == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown congestion control '%s' (one of %s)", algorithm, AlgorithmNames()));
  }
  if (line_rate_bps < 1'000'000 || line_rate_bps > 10'000'000'000'000ull) {
    return absl::InvalidArgumentError(absl::StrFormat("line rate %u b/s: outside 1 Mb/s .. 10 Tb/s", line_rate_bps));
  }
  c.ops->defaults(c.params, line_rate_bps);
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(settings.data(), settings.size()), absl::ByAnyChar(", "), absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat("%s parameter '%s': expected name=value", c.ops->name, item));
    }
    const absl::string_view name_sv = item.substr(0, eq), text = item.substr(eq + 1);
    const std::string_view name(name_sv.data(), name_sv.size());
    const Param* p = FindParam(*c.ops, name);
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has no parameter '%s' (it has: %s)", c.ops->name, name, Names(*c.ops)));
    }
    double v = 0;
    if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v < p->min || v > p->max ||
        (p->type != Param::Type::kDouble && v != std::floor(v))) {
      return absl::InvalidArgumentError(absl::StrFormat("%s %s: '%s' is not %s in %g..%g (%s)", c.ops->name, name, text,
                                                        p->type == Param::Type::kDouble ? "a number" : "an integer",
                                                        p->min, p->max, p->help));
    }
    Write(*p, c.params, v);
  }
  return c;
}

bool GetParam(const Config& c, std::string_view name, double* value) {
  if (c.ops == nullptr) return false;
  const Param* p = FindParam(*c.ops, name);
  if (p == nullptr) return false;
  *value = Read(*p, c.params);
  return true;
}

std::string DescribeConfig(const Config& c) {
  if (c.ops == nullptr) return "none";
  std::string s = c.ops->name;
  for (size_t i = 0; i < c.ops->nparams; ++i) {
    absl::StrAppendFormat(&s, " %s=%g", c.ops->params[i].name, Read(c.ops->params[i], c.params));
  }
  return s;
}

void CongestionControl::Start(const Ops* ops, const void* params) {
  Stop();
  pacer_ = Pacer{};
  stats_ = Stats{};
  if (ops == nullptr) return;
  ops_ = ops;
  params_ = params;
  out_ = ops_->init(priv_, params);
}

void CongestionControl::Stop() {
  if (ops_ != nullptr && ops_->destroy != nullptr) ops_->destroy(priv_);
  ops_ = nullptr;
  out_ = Output{};
}

}  // namespace droce::cc
