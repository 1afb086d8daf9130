#include "sgd/local_sgd.h"

#include <fmt/format.h>

namespace gossip::sgd {

Result<OuterOptimizer::Kind> parse_outer_kind(const std::string& name) {
  if (name == "none") return OuterOptimizer::Kind::kNone;
  if (name == "nesterov") return OuterOptimizer::Kind::kNesterov;
  return Status::invalid(fmt::format("unknown outer optimizer '{}' (valid: none, nesterov)", name));
}

LocalSgd::LocalSgd(AllReduce& all_reduce, OuterOptimizer outer)
    : all_reduce_(all_reduce), outer_(outer) {}

Status LocalSgd::synchronize(std::span<float> model, uint64_t round,
                             const CollectiveOptions& options) {
  GOSSIP_RETURN_IF_ERROR(all_reduce_.all_reduce_mean(model, round, options));
  if (plain()) return Status::ok();
  if (previous_.size() != model.size()) {
    previous_.assign(model.begin(), model.end());
    momentum_.assign(model.size(), 0.0f);
    return Status::ok();
  }
  // Pseudo-gradient g = x_prev - x_avg. Every node holds the same x_prev and x_avg,
  // so every node takes the same outer step and the replicas stay equal.
  const float lr = static_cast<float>(outer_.lr);
  const float mu = static_cast<float>(outer_.momentum);
  const bool nesterov = outer_.kind == OuterOptimizer::Kind::kNesterov;
  for (size_t i = 0; i < model.size(); ++i) {
    float g = previous_[i] - model[i];
    float step = g;
    if (nesterov) {
      momentum_[i] = mu * momentum_[i] + g;
      step = g + mu * momentum_[i];
    }
    float x = previous_[i] - lr * step;
    model[i] = x;
    previous_[i] = x;
  }
  return Status::ok();
}

}  // namespace gossip::sgd
