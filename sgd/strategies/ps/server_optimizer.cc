#include "sgd/strategies/ps/server_optimizer.h"

#include <fmt/format.h>

#include <cmath>

namespace gossip::sgd {

Result<ServerOptimizerConfig::Kind> parse_server_optimizer(const std::string& name) {
  if (name == "sgd") return ServerOptimizerConfig::Kind::kSgd;
  if (name == "momentum") return ServerOptimizerConfig::Kind::kMomentum;
  if (name == "adam") return ServerOptimizerConfig::Kind::kAdam;
  return Status::invalid(
      fmt::format("unknown server optimizer '{}' (valid: sgd, momentum, adam)", name));
}

ServerOptimizer::ServerOptimizer(ServerOptimizerConfig config, size_t numel) : config_(config) {
  if (config_.kind != ServerOptimizerConfig::Kind::kSgd) m_.assign(numel, 0.0f);
  if (config_.kind == ServerOptimizerConfig::Kind::kAdam) v_.assign(numel, 0.0f);
}

void ServerOptimizer::step(std::span<float> params, std::span<const float> update, float scale) {
  const float lr = static_cast<float>(config_.lr);
  switch (config_.kind) {
    case ServerOptimizerConfig::Kind::kSgd:
      for (size_t i = 0; i < params.size(); ++i) params[i] += lr * scale * update[i];
      return;
    case ServerOptimizerConfig::Kind::kMomentum: {
      const float mu = static_cast<float>(config_.momentum);
      for (size_t i = 0; i < params.size(); ++i) {
        m_[i] = mu * m_[i] - scale * update[i];  // the gradient is -update
        params[i] -= lr * m_[i];
      }
      return;
    }
    case ServerOptimizerConfig::Kind::kAdam: {
      ++t_;
      const double b1 = config_.beta1, b2 = config_.beta2;
      const float c1 = static_cast<float>(1.0 - std::pow(b1, static_cast<double>(t_)));
      const float c2 = static_cast<float>(1.0 - std::pow(b2, static_cast<double>(t_)));
      const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
      const float eps = static_cast<float>(config_.epsilon);
      for (size_t i = 0; i < params.size(); ++i) {
        const float g = -scale * update[i];
        m_[i] = fb1 * m_[i] + (1.0f - fb1) * g;
        v_[i] = fb2 * v_[i] + (1.0f - fb2) * g * g;
        params[i] -= lr * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + eps);
      }
      return;
    }
  }
}

void ServerOptimizer::save(StrategyState& s, const std::string& prefix) const {
  if (!m_.empty()) s.tensors[prefix + ".m"] = m_;
  if (!v_.empty()) s.tensors[prefix + ".v"] = v_;
  s.scalars[prefix + ".t"] = static_cast<double>(t_);
}

Status ServerOptimizer::load(const StrategyState& s, const std::string& prefix) {
  if (!m_.empty()) {
    auto m = s.tensor(prefix + ".m", m_.size());
    if (!m) return m.status();
    m_ = **m;
  }
  if (!v_.empty()) {
    auto v = s.tensor(prefix + ".v", v_.size());
    if (!v) return v.status();
    v_ = **v;
  }
  auto t = s.scalar(prefix + ".t");
  if (!t) return t.status();
  t_ = static_cast<uint64_t>(*t);
  return Status::ok();
}

}  // namespace gossip::sgd
