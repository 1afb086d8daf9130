#include "sgd/dpsgd.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gossip::sgd {

Status Dpsgd::synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) {
  const uint32_t self = this->self();
  const peers::MixingWeights row = topology_.mixing_row(self, round);
  const auto out = topology_.out_neighbors(self, round);
  const auto start = std::chrono::steady_clock::now();

  std::span<float> sent = model;  // raw: the model itself, copied into the chunks
  if (options_.compression.codec && options_.compression.codec->id() != proto::CodecId::kNone) {
    public_.assign(model.begin(), model.end());
    sent = public_;  // becomes Q(x_i)
  }
  GOSSIP_RETURN_IF_ERROR(
      outgoing_.encode(sent, self, round, options_.chunk_elems, options_.compression));
  exchange_.send(outgoing_, out);

  mix_.assign(model.size(), 0.0f);
  std::vector<uint32_t> sources;
  for (const auto& in : row.peers) sources.push_back(in.node);
  auto delivery = exchange_.receive(
      round, sources, model.size(), start + options_.patience, options,
      [&](size_t s, const proto::Header& h, std::span<const float> v) {
        const float w = static_cast<float>(row.peers[s].weight);
        float* acc = mix_.data() + h.offset;
        const float* x = model.data() + h.offset;
        for (size_t e = 0; e < v.size(); ++e) acc[e] += w * (v[e] - x[e]);
      });
  if (!delivery) return delivery.status();
  if (!delivery->missing.empty())
    spdlog::warn("round {}: mixing without {}", round, delivery->missing);
  for (size_t e = 0; e < model.size(); ++e) model[e] += mix_[e];
  return Status::ok();
}

}  // namespace gossip::sgd
