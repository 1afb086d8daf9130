#pragma once
// The optimizer a parameter server applies to its shard. What it is given is the
// workers' update (the change their local steps made, averaged under BSP); the
// gradient it steps along is the negative of that, as for DiLoCo's outer optimizer
// (sgd/strategies/local_sgd/local_sgd.h). sgd with lr 1 adds the update as it is: synchronous SGD
// through a server when the workers take one step between pushes.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct ServerOptimizerConfig {
  enum class Kind { kSgd, kMomentum, kAdam };
  Kind kind = Kind::kSgd;
  double lr = 1.0;
  double momentum = 0.9;                              // kMomentum
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;  // kAdam
};
Result<ServerOptimizerConfig::Kind> parse_server_optimizer(const std::string& name);

class ServerOptimizer {
 public:
  ServerOptimizer(ServerOptimizerConfig config, size_t numel);
  // params <- params + the step for `update` (scaled by `scale` first).
  void step(std::span<float> params, std::span<const float> update, float scale = 1.0f);
  // Into and from a strategy's checkpoint state, under `prefix`.
  void save(StrategyState& s, const std::string& prefix) const;
  Status load(const StrategyState& s, const std::string& prefix);

 private:
  ServerOptimizerConfig config_;
  std::vector<float> m_, v_;  // momentum / Adam's moments
  uint64_t t_ = 0;            // Adam's step count
};

}  // namespace gossip::sgd
