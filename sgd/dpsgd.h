#pragma once
// Synchronous gossip, D-PSGD (Lian et al. 2017): after the local steps of a round
// each node mixes with the round's neighbors, x_i <- x_i + sum_j W_ij (x_j - x_i),
// which is sum_j W_ij x_j written so that a neighbor that does not deliver simply
// drops out (its weight stays with x_i) and the mean over nodes is preserved
// whenever W is symmetric.
//
// With a codec, neighbors receive Q(x_i): naive compressed gossip, the baseline
// CHOCO-SGD improves on (for biased codecs it stalls at a distance from consensus).

#include <chrono>
#include <vector>

#include "peers/topology.h"
#include "sgd/neighbor_exchange.h"
#include "sgd/outgoing_model.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct GossipOptions {
  uint64_t chunk_elems = 1 << 20;
  Compression compression;  // codec may be null (raw fp32)
  // How long a round waits for a neighbor that has delivered before (one that never
  // has is waited for until the round's deadline).
  std::chrono::milliseconds patience{5000};
};

class Dpsgd final : public Strategy {
 public:
  Dpsgd(NeighborExchange& exchange, const peers::Topology& topology, GossipOptions options);

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override;

 private:
  NeighborExchange& exchange_;
  const peers::Topology& topology_;
  GossipOptions options_;
  OutgoingModel outgoing_;
  std::vector<float> public_;  // Q(x_i) when compressing
  std::vector<float> mix_;     // sum_j W_ij (x_j - x_i) as it arrives
};

}  // namespace gossip::sgd
