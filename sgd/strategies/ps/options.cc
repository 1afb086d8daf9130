// The parameter servers' options checked against each other and the cluster
// (StrategyDescriptor::check; daemon/config_check.cc calls it).
#include <fmt/format.h>

#include "sgd/registry.h"

namespace gossip::sgd {

std::optional<OptionProblem> check_parameter_server_options(const StrategyParams& params,
                                                            uint64_t nodes) {
  const ParameterServerOptions& ps = params.ps;
  if (nodes > 0 && ps.servers > nodes)
    return OptionProblem{"strategy.servers", fmt::format("{} servers, but the cluster has {} nodes",
                                                         ps.servers, nodes)};
  if (nodes > 0 && ps.replicas >= nodes)
    return OptionProblem{"strategy.ps_replicas",
                         fmt::format("{} replicas of each shard need {} nodes, the cluster has {}",
                                     ps.replicas, ps.replicas + 1, nodes)};
  if (ps.fetch > 1 && ps.mode == ParameterServerOptions::Mode::kBsp)
    return OptionProblem{"strategy.ps_fetch",
                         "bsp pulls after every push (ps_fetch is for async and ssp)"};
  return std::nullopt;
}

}  // namespace gossip::sgd
