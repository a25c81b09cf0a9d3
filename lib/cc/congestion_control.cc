#include "cc/congestion_control.h"

#include "cc/dcqcn.h"

namespace droce::cc {

// Every algorithm a QP may run: a new one is a file of its own and a line here.
static const Ops* const kAlgorithms[] = {
    &kDcqcnOps,
};

const Ops* FindAlgorithm(std::string_view name) {
  for (const Ops* ops : kAlgorithms) {
    if (name == ops->name) return ops;
  }
  return nullptr;
}

void CongestionControl::Start(const Ops* ops, const void* params) {
  Stop();
  pacer_ = Pacer{};
  if (ops == nullptr) return;
  ops_ = ops;
  out_ = ops_->init(priv_, params);
}

void CongestionControl::Stop() {
  if (ops_ != nullptr && ops_->destroy != nullptr) ops_->destroy(priv_);
  ops_ = nullptr;
  out_ = Output{};
}

}  // namespace droce::cc
