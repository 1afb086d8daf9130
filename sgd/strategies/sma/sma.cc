#include "sgd/strategies/sma/sma.h"

#include <algorithm>

#include "sgd/registry.h"
#include "sgd/strategies/local_sgd/local_sgd.h"

namespace gossip::sgd {

float CentralModel::alpha(size_t learners) const {
  return static_cast<float>(alpha_ > 0 ? alpha_ : 1.0 / static_cast<double>(learners));
}

std::span<float> CentralModel::update(std::span<const std::span<float>> learners) {
  const size_t n = learners.front().size();
  if (z_.size() != n) {  // the first sync: the learners' mean
    first_ = true;
    z_.assign(n, 0.0f);
    for (const auto& w : learners)
      for (size_t i = 0; i < n; ++i) z_[i] += w[i];
    const float inv = 1.0f / static_cast<float>(learners.size());
    for (float& v : z_) v *= inv;
    previous_ = z_;
    return z_;
  }
  first_ = false;
  const float a = alpha(learners.size());
  const float mu = static_cast<float>(momentum_);
  std::vector<float> moved(n, 0.0f);
  for (const auto& w : learners)
    for (size_t i = 0; i < n; ++i) moved[i] += a * (w[i] - z_[i]);
  for (size_t i = 0; i < n; ++i) {
    const float z = z_[i];
    z_[i] = z + moved[i] + mu * (z - previous_[i]);
    previous_[i] = z;
  }
  return z_;
}

void CentralModel::took(std::span<const float> z) {
  if (z.size() != z_.size()) return;  // before the first sync: update() takes the mean
  if (z.data() != z_.data()) z_.assign(z.begin(), z.end());
  previous_ = z_;
}

void CentralModel::correct(std::span<const std::span<float>> learners) {
  const float a = first_ ? 1.0f : alpha(learners.size());
  for (const auto& w : learners)
    for (size_t i = 0; i < w.size(); ++i) w[i] -= a * (w[i] - z_[i]);
}

std::optional<OptionProblem> check_sma_options(const StrategyParams& params,
                                               uint64_t nodes);  // options.cc

StrategyDescriptor sma_strategy() {
  StrategyDescriptor d;
  d.name = "sma";
  d.summary =
      "Crossbow's synchronous model averaging: a node's trainers are learners that follow a "
      "central model, averaged across nodes every `period` steps";
  d.fabric = Fabric::kAllReduce;
  d.central_model = true;
  // As local SGD: the round runs on the node's central model, which the daemon holds,
  // so an elastic ring hands a joiner (or a node it left out) a member's, from which
  // its learners start.
  d.takes_nodes_back = true;
  d.options = {"sma"};
  d.check = check_sma_options;
  d.make = [](const StrategyResources& r, std::string*) -> Result<std::unique_ptr<Strategy>> {
    return std::unique_ptr<Strategy>(std::make_unique<LocalSgd>(*r.all_reduce, OuterOptimizer{},
                                                                r.codec, r.error_feedback, r.pool));
  };
  return d;
}

}  // namespace gossip::sgd
