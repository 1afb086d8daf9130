#include "sgd/registry.h"

#include <algorithm>

namespace gossip::sgd {

// Each returns its strategy's descriptor, defined beside the strategy's code.
StrategyDescriptor local_sgd_strategy();
StrategyDescriptor synchronous_sgd_strategy();
StrategyDescriptor dpsgd_strategy();
StrategyDescriptor choco_strategy();
StrategyDescriptor push_sum_strategy();
StrategyDescriptor async_gossip_strategy();
StrategyDescriptor parameter_server_strategy();
StrategyDescriptor sma_strategy();

std::span<const StrategyDescriptor> strategies() {
  // In the order help texts list them.
  static const std::vector<StrategyDescriptor> kAll = {
      local_sgd_strategy(),        dpsgd_strategy(),        choco_strategy(),
      push_sum_strategy(),         async_gossip_strategy(), synchronous_sgd_strategy(),
      parameter_server_strategy(), sma_strategy(),
  };
  return kAll;
}

bool StrategyDescriptor::takes(std::string_view option) const {
  return std::find(options.begin(), options.end(), option) != options.end();
}

const StrategyDescriptor* find_strategy(std::string_view name) {
  for (const StrategyDescriptor& d : strategies())
    if (d.name == name) return &d;
  return nullptr;
}

std::string strategy_names() {
  std::string out;
  for (const StrategyDescriptor& d : strategies()) {
    if (!out.empty()) out += ", ";
    out += d.name;
  }
  return out;
}

}  // namespace gossip::sgd
