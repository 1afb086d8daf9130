// SMA's options checked against each other (StrategyDescriptor::check).
#include <fmt/format.h>

#include "sgd/registry.h"

namespace gossip::sgd {

std::optional<OptionProblem> check_sma_options(const StrategyParams& params, uint64_t) {
  // Crossbow's alpha pulls the central model towards each learner: k learners of alpha
  // each move it k * alpha of the way, past the learners' mean when that is over 1.
  if (params.sma_alpha * static_cast<double>(params.learners_per_device) > 1.0 + 1e-9)
    return OptionProblem{"strategy.sma_alpha",
                         fmt::format("{} x {} learners is over 1: the central model would "
                                     "overshoot the learners' mean (0 picks 1 / learners)",
                                     params.sma_alpha, params.learners_per_device)};
  return std::nullopt;
}

}  // namespace gossip::sgd
