#pragma once
// All-reduce as an all-gather: every node sends its whole model to every other
// node and sums what it receives. Each node sends (n-1) * model bytes per round:
// simple and exact, and the baseline the ring all-reduce is measured against.
//
// With `trim` B > 0 (untrusted peers, --trim), each coordinate is the mean of the
// node's and its peers' values without the B largest and B smallest: the robust
// aggregation a ring cannot do (its partial sums hide who sent what). A round then
// waits for all but B peers and, after a grace as long as that took, leaves the
// rest out; a peer whose chunk holds NaN, does not fit, or who left is out of the
// round instead of failing it.

#include <array>
#include <memory>
#include <vector>

#include "compression/codec.h"
#include "peers/router.h"
#include "sgd/collectives/all_reduce.h"

namespace gossip::sgd {

class AllGatherAllReduce final : public AllReduce {
 public:
  // `codec` (may be null) is the one this node can decode besides raw fp32; every
  // node of a cluster is configured with the same.
  // Subscribes to hello, bye and model-chunk on `router`.
  AllGatherAllReduce(peers::Router& router, uint64_t chunk_bytes,
                     const compression::Codec* codec = nullptr,
                     compression::ThreadPool* pool = nullptr, uint32_t trim = 0);

  Status all_reduce_mean(std::span<float> data, uint64_t round,
                         const CollectiveOptions& options) override;
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override { layout_ = fingerprint; }

 private:
  // What has arrived for one round. A peer can be at most one round ahead of us
  // (it cannot finish a round without our contribution), so two suffice; under a
  // trim it can be further (the others finish rounds without a slow node), and its
  // chunks for those rounds are dropped and remembered in early_.
  struct RoundState {
    uint64_t round = UINT64_MAX;
    std::vector<double> sum;         // fp64 so that the arrival order does not change the result
    std::vector<uint64_t> received;  // elements per peer (index into peers())
    std::vector<uint64_t> next_seq;  // expected chunk sequence per peer
    std::vector<bool> left;          // peer said bye during this round
    // Per element, the peers whose chunk held NaN or Inf and was left out of the
    // mean (empty until one is): a hostile peer cannot poison the others' result.
    std::vector<uint16_t> excluded;
    Status failure;  // set when a peer's message dooms the round
    // Trimmed: each peer's values (peer-major), and the peers left out of the round.
    std::vector<float> values;
    std::vector<bool> out;
  };
  // Trimmed: the round's result from the values of the peers that completed it.
  void trimmed_mean(const RoundState& s, std::span<float> data) const;
  RoundState& state_for(uint64_t round, size_t numel);
  // The router's handler: applies one message to the round states for round
  // current_ of numel_ elements; errors that doom a round are stored in that round's
  // state, so they surface when (or while) the round runs.
  void absorb(peers::Incoming& in);
  size_t peer_index(uint32_t peer) const;

  // Encodes data in place chunk by chunk into encoded_ (data becomes what receivers decode).
  Status compress(std::span<float> data, uint64_t round, const Compression& c);

  peers::Router& router_;
  peers::PeerChannel& transport_;
  uint64_t chunk_elems_;
  const compression::Codec* codec_;
  compression::ThreadPool* pool_;                // decodes received chunks
  std::vector<std::vector<std::byte>> encoded_;  // this round's payload per chunk, sent zero-copy
  std::vector<float> scratch_;                   // a received chunk, decoded
  uint64_t layout_ = 0;
  uint32_t trim_ = 0;
  std::array<RoundState, 2> states_;
  // Trimmed: per peer, the last round whose chunks came too early to be kept (0:
  // none; such a round is at least 2). Its chunks arrive in order, so in any round up to that one
  // whatever it has not delivered is lost: the round leaves it out instead of waiting for it to the
  // deadline. Rounds further ahead than kMaxRoundsAhead are a liar's, not noted.
  std::vector<uint64_t> early_;
  static constexpr uint64_t kMaxRoundsAhead = 1024;
  uint64_t current_ = 0;  // the round in progress, or the next one
  size_t numel_ = 0;
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
