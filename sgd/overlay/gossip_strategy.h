#pragma once
// What the gossip family (D-PSGD, CHOCO-SGD, push-sum, async gossip) shares: the
// neighbor exchange, the overlay (which grows as nodes join, sgd/overlay/overlay.h), the options
// and this round's outgoing payload. A strategy that consumes the messages of round t − lag in
// round t (push-sum's delay, async gossip's staleness) says so, so that messages of rounds still to
// be consumed are buffered between rounds rather than dropped as late.

#include <algorithm>
#include <chrono>

#include "peers/topology.h"
#include "sgd/overlay/neighbor_exchange.h"
#include "sgd/overlay/outgoing_model.h"
#include "sgd/overlay/overlay.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct GossipOptions {
  uint64_t chunk_elems = 1 << 20;
  Compression compression;  // codec may be null (raw fp32)
  // How long a round waits for a neighbor that has delivered before (one that never
  // has is waited for until the round's deadline).
  std::chrono::milliseconds patience{5000};
};

class GossipStrategy : public Strategy {
 public:
  void progress(uint64_t next_round, size_t /*numel*/, std::chrono::milliseconds wait) override {
    exchange_.progress(next_round >= lag_ ? next_round - lag_ : 0, wait);
  }
  uint64_t round_to_run(uint64_t proposed) const override {
    const uint64_t behind = exchange_.catch_up_round();  // of the round received, `lag_` before
    return behind == 0 ? proposed : std::max(proposed, behind + lag_);
  }
  void set_layout_fingerprint(uint64_t fingerprint) override {
    exchange_.set_layout_fingerprint(fingerprint);
  }

 protected:
  GossipStrategy(NeighborExchange& exchange, const Overlay& overlay, GossipOptions options,
                 uint64_t lag = 0)
      : exchange_(exchange), overlay_(overlay), options_(options), lag_(lag) {}
  uint32_t self() const { return exchange_.transport().self(); }
  // The node's clock (peers::PeerChannel::clock): real, or the simulation's.
  TimePoint now() { return exchange_.router().clock().now(); }
  // The graph of `round`, or null when this node joined for a later round: until
  // then it runs its rounds alone, and no member sends to it or waits for it.
  const peers::Topology* topology(uint64_t round) const {
    const peers::Topology& t = overlay_.at(round);
    return self() < t.size() ? &t : nullptr;
  }

  NeighborExchange& exchange_;
  const Overlay& overlay_;
  GossipOptions options_;
  uint64_t lag_;
  OutgoingModel outgoing_;
};

}  // namespace gossip::sgd
