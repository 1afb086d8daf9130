#include "sgd/strategies/dpsgd/dpsgd.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "base/mix.h"
#include "sgd/registry.h"

namespace gossip::sgd {

Status Dpsgd::synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) {
  const uint32_t self = this->self();
  const peers::Topology* graph = topology(round);
  if (!graph) return Status::ok();
  const peers::MixingWeights row = graph->mixing_row(self, round);
  const auto out = graph->out_neighbors(self, round);
  const auto start = now();

  std::span<float> sent = model;  // raw: the model itself, copied into the chunks
  if (options_.compression.codec && options_.compression.codec->id() != proto::CodecId::kNone) {
    public_.assign(model.begin(), model.end());
    sent = public_;  // becomes Q(x_i)
  }
  GOSSIP_RETURN_IF_ERROR(
      outgoing_.encode(sent, self, round, options_.chunk_elems, options_.compression));
  exchange_.send(outgoing_, out);

  std::vector<uint32_t> sources;
  for (const auto& in : row.peers) sources.push_back(in.node);
  if (trim_ > 0) return trimmed_mean(model, round, sources, start, options);
  mix_.assign(model.size(), 0.0f);
  auto delivery =
      exchange_.receive(round, sources, model.size(), start + options_.patience, options,
                        [&](size_t s, const proto::ModelChunk& h, std::span<const float> v) {
                          const float w = static_cast<float>(row.peers[s].weight);
                          add_weighted_difference(std::span(mix_).subspan(h.offset, v.size()), v,
                                                  model.subspan(h.offset, v.size()), w);
                        });
  if (!delivery) return delivery.status();
  if (!delivery->missing.empty())
    spdlog::warn("round {}: mixing without {}", round, delivery->missing);
  for (size_t e = 0; e < model.size(); ++e) model[e] += mix_[e];
  return Status::ok();
}

Status Dpsgd::trimmed_mean(std::span<float> model, uint64_t round,
                           std::span<const uint32_t> sources, TimePoint start,
                           const RoundOptions& options) {
  const size_t n = model.size();
  received_.resize(sources.size());
  auto delivery = exchange_.receive(
      round, sources, n, start + options_.patience, options,
      [&](size_t s, const proto::ModelChunk& h, std::span<const float> v) {
        received_[s].resize(n);
        std::copy(v.begin(), v.end(), received_[s].begin() + static_cast<ptrdiff_t>(h.offset));
      });
  if (!delivery) return delivery.status();
  std::vector<const float*> in;
  for (size_t s = 0; s < sources.size(); ++s)
    if (delivery->complete[s]) in.push_back(received_[s].data());
  const size_t k = in.size() + 1;
  if (k <= 2 * trim_) {
    // Too few neighbors delivered for the trim to leave a value: keeping the node's
    // own model is the one choice no faulty peer can steer.
    spdlog::warn(
        "round {}: {} of {} neighbors delivered ({}), too few to trim {} from each end: "
        "keeping this node's model",
        round, in.size(), sources.size(),
        delivery->missing.empty() ? "none missing" : delivery->missing, trim_);
    return Status::ok();
  }
  if (!delivery->missing.empty())
    spdlog::warn("round {}: trimmed mean without {}", round, delivery->missing);
  std::vector<float> v(k);
  const float inv = 1.0f / static_cast<float>(k - 2 * trim_);
  for (size_t e = 0; e < n; ++e) {
    v[0] = model[e];
    for (size_t j = 0; j < in.size(); ++j)
      v[j + 1] = in[j][e];          // finite: the exchange refuses NaN/Inf
    std::sort(v.begin(), v.end());  // k is a node's degree + 1: a handful of values
    float sum = 0.0f;
    for (size_t j = trim_; j < k - trim_; ++j) sum += v[j];
    model[e] = sum * inv;
  }
  return Status::ok();
}

StrategyDescriptor dpsgd_strategy() {
  StrategyDescriptor d;
  d.name = "gossip";
  d.summary = "D-PSGD: mix with the round's neighbors after the local steps";
  d.options = {"trim"};
  d.make = [](const StrategyResources& r,
              std::string* detail) -> Result<std::unique_ptr<Strategy>> {
    if (r.codec->biased())
      spdlog::warn("gossip with the biased codec {} only approaches consensus; choco converges",
                   r.codec->spec());
    if (r.params.trim > 0)
      *detail = fmt::format(", trimmed mean without the {} largest and smallest", r.params.trim);
    return std::unique_ptr<Strategy>(
        std::make_unique<Dpsgd>(*r.exchange, *r.overlay, r.gossip, r.params.trim));
  };
  return d;
}

}  // namespace gossip::sgd
