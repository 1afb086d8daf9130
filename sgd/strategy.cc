#include "sgd/strategy.h"

#include <fmt/format.h>

namespace gossip::sgd {

Result<const std::vector<float>*> StrategyState::tensor(const std::string& name,
                                                        size_t numel) const {
  auto it = tensors.find(name);
  if (it == tensors.end())
    return Status::not_found(fmt::format("strategy state has no tensor '{}'", name));
  if (numel != 0 && it->second.size() != numel)
    return Status::mismatch(fmt::format("strategy state tensor '{}' has {} elements, expected {}",
                                        name, it->second.size(), numel));
  return &it->second;
}

Result<double> StrategyState::scalar(const std::string& name) const {
  auto it = scalars.find(name);
  if (it == scalars.end())
    return Status::not_found(fmt::format("strategy state has no value '{}'", name));
  return it->second;
}

}  // namespace gossip::sgd
