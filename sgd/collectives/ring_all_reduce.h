#pragma once
// Ring all-reduce over one RingChannel (Patarasuk & Yuan 2009): reduce-scatter then
// all-gather along sgd/collectives/ring_schedule.h, each segment cut into pipeline chunks that
// are forwarded as soon as they are reduced. Each node sends 2(n-1)/n of the buffer.
//
// With a codec, what travels depends on it:
//  - fp16, bf16, int8: every hop is compressed; partial sums are decoded and added
//    in fp32. The owner of a reduced segment encodes it once and keeps the decoded
//    values itself, and the all-gather forwards those bytes unchanged, so every
//    node ends with the same bits.
//  - top-k and its chains, with RingOptions::sparse_reduce: a sparse reduce-scatter
//    (gTop-k, Shi et al. 2019; Ok-Topk, Li & Hoefler 2022). Every hop adds the
//    partial sum it received to its own contribution and re-selects the top-k of
//    the chunk, so each message keeps k/n of the model's k entries and a node sends
//    about 2k(n-1)/n entries per round whatever n is. What a hop drops goes into
//    this node's error-feedback residual (its own and the forwarded mass alike):
//    every chunk passes through exactly one encode per node and round, so the
//    residual is the chunk's undelivered mass and nothing is lost. The owner encodes
//    the full sum once, and the all-gather forwards those bytes unchanged.
//  - the others (rand-k, sign, qsgd, top-k without sparse_reduce), and small
//    uncompressed buffers (see RingOptions::gather_below_bytes): each node's
//    contribution is encoded once and the payloads go round the ring (an all-gather
//    of (index, value) pairs for the sparse codecs, as in Deep Gradient Compression,
//    Lin et al. 2018); every node decodes all n and sums them in rank order, so
//    again every node ends with the same bits. A node sends (n-1)k entries.
// Error feedback, when given, applies to this node's own contribution (and, in the
// sparse reduce-scatter, to what its hops drop). A failed operation leaves both the
// data and the residual as they were.
//
// Robust mode (RingOptions::bounds; --clip on, sgd/membership/peer_ring.h exchanges
// the norms): norm-bounded contributions for a ring that may hold a liar. Before the
// round every rank announces the norm of each pipeline chunk of its contribution
// (ring_chunk_norms), straight to every other rank. A chunk's limit is kClipFactor
// times the lower median of the announced norms: each rank clips its own chunk to
// it, and takes another rank's norm as the smaller of its announcement and the
// limit. A partial sum that arrives must be no longer than the sum of its
// contributors' norms (the triangle inequality: an honest one never is), an
// all-gathered mean no longer than their mean; one that is, is pulled back to its
// bound before it is added or passed on, and counted (Refusal::kClipped). So a liar
// moves each chunk of the result by at most its bound, not by whatever it sends; it
// can still steer a chunk within the bound, and the nodes after it then hold a
// result slightly apart from the others' (docs/security.md). Uncompressed only.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "peers/ring_channel.h"
#include "proto/message.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/collectives/ring_schedule.h"

namespace gossip::sgd {

// Robust mode's bounds, by pipeline chunk in schedule order (segment by segment).
struct ContributionBounds {
  uint32_t ranks = 0;
  uint64_t chunks = 0;
  std::vector<double> limit;     // [chunk]: kClipFactor x the lower median of the norms
  std::vector<double> admitted;  // [rank * chunks + chunk]: min(announced, limit)
};
inline constexpr double kClipFactor = 2.0;
// The norms of data's pipeline chunks as a ring of `ranks` cuts it.
std::vector<float> ring_chunk_norms(std::span<const float> data, uint32_t ranks,
                                    uint64_t chunk_elems);
// From every rank's announced norms, in rank order, each as long as the chunk count.
// A norm that is not a finite number >= 0 counts as 0: that rank may add nothing.
ContributionBounds bound_contributions(const std::vector<std::vector<float>>& announced);

struct RingOptions {
  uint32_t size = 1;  // nodes in the ring (<= RingSchedule::kMaxRanks)
  uint32_t rank = 0;
  uint64_t round = 0;  // names the messages together with their place in the schedule
  uint64_t chunk_elems = uint64_t{1} << 18;  // pipeline chunk
  uint32_t depth = 4;                        // receives posted ahead
  // Uncompressed buffers up to this size go round as whole vectors (an all-gather,
  // summed in rank order): n - 1 hops instead of 2(n - 1), for (n - 2)/n more bytes
  // sent. Below a few tens of KiB each hop's latency costs more than its bytes.
  uint64_t gather_below_bytes = 32 << 10;
  peers::WaitOptions wait;
  Compression compression;
  // A codec that keeps the largest entries (Codec::keeps_largest) reduces hop by hop,
  // re-selecting at every hop, instead of gathering every contribution. Every node
  // of the ring must hold the same (sparse_reduce_for gives it from the node count).
  bool sparse_reduce = false;
  // Restore data when the operation fails (a copy of the buffer per call). Off only
  // where a failed result is thrown away anyway (benchmarks).
  bool restore_on_failure = true;
  // Robust mode (above); null: off. Every rank holds the same bounds.
  const ContributionBounds* bounds = nullptr;
};

// Whether a codec travels hop by hop (true) or as an all-gather of contributions.
bool ring_reduces_compressed(proto::CodecId id);

// --sparse-allreduce: how top-k contributions are reduced. Auto takes the sparse
// reduce-scatter from 3 nodes on, where it sends fewer bytes (2(n-1)/n against n-1
// times k entries); on 2 nodes both send k entries and the gather re-selects nothing.
enum class SparseReduce : uint8_t { kAuto, kReduceScatter, kAllGather };
std::optional<SparseReduce> parse_sparse_reduce(std::string_view name);
inline bool sparse_reduce_for(SparseReduce mode, uint32_t nodes) {
  return mode == SparseReduce::kReduceScatter || (mode == SparseReduce::kAuto && nodes >= 3);
}

// One algorithm instance per ring; it keeps its buffers between calls.
class RingAllReduce {
 public:
  // In place: data <- (1/n) sum over the ring. Every node calls it with the same
  // size, round and options. On failure data is unchanged and the channel must
  // not be used again (it is poisoned or out of step).
  Status mean(peers::RingChannel& channel, std::span<float> data, const RingOptions& options);
  // Robust mode: the chunks the last mean() pulled back to their bounds, and the first.
  uint64_t clipped() const { return clipped_; }
  const std::string& first_clip() const { return first_clip_; }

 private:
  Status reduce(peers::RingChannel& channel, std::span<float> data, const RingOptions& o);
  Status gather(peers::RingChannel& channel, std::span<float> data, const RingOptions& o);

  std::vector<float> backup_;                     // data as it was, restored on failure
  std::vector<float> residual_backup_;            // the error feedback's, likewise
  std::vector<std::vector<float>> rx_;            // receive buffers (float-aligned)
  std::vector<std::vector<std::byte>> tx_;        // encoded messages, alive until sent
  std::vector<std::vector<std::byte>> payloads_;  // gather: every (rank, chunk) payload
  std::vector<float> scratch_;                    // a decoded chunk
  uint64_t clipped_ = 0;
  std::string first_clip_;
};

}  // namespace gossip::sgd
