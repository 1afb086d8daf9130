#pragma once
// The schedule of a bandwidth-optimal ring all-reduce (Patarasuk & Yuan 2009), as
// pure logic: which segment a rank sends and receives at every step, and how each
// segment is cut into pipeline chunks. Every rank derives the same schedule from
// (n, numel, chunk_elems), so sender and receiver agree on every message without
// telling each other.
//
// The buffer is cut into n segments (the first numel % n one element longer).
// Reduce-scatter, steps 0..n-2: rank r sends segment (r - k) mod n and receives
// segment (r - k - 1) mod n, which it adds to its own. After it, rank r holds the
// full sum of segment (r + 1) mod n. All-gather, steps 0..n-2: rank r sends segment
// (r + 1 - k) mod n and receives segment (r - k) mod n, which it stores. What a
// rank receives at reduce-scatter step k is what it sends at step k + 1 (and the
// same in the all-gather), so chunk c can go on as soon as it arrived: the pipeline.

#include <cstdint>
#include <vector>

namespace gossip::sgd {

struct Segment {
  uint64_t offset = 0;  // first element
  uint64_t numel = 0;   // may be 0 when numel < n
};

enum class RingPhase : uint8_t { kReduceScatter, kAllGather };

class RingSchedule {
 public:
  // 1 <= n <= kMaxRanks, 0 <= rank < n, chunk_elems >= 1 (asserted: callers validate).
  // sequence() packs a message's (phase, step) slot, 2 (n - 1) of them, and its chunk
  // into 32 bits: kSlotBits for the slot, the rest for the chunk.
  static constexpr uint32_t kSlotBits = 13;
  static constexpr uint32_t kMaxRanks = 4096;  // gossipd's most nodes (daemon/config.h)
  static_assert(2 * (kMaxRanks - 1) < (uint32_t{1} << kSlotBits));
  RingSchedule(uint32_t n, uint32_t rank, uint64_t numel, uint64_t chunk_elems);

  uint32_t size() const { return n_; }
  uint32_t rank() const { return rank_; }
  uint64_t numel() const { return numel_; }
  uint32_t steps() const { return n_ - 1; }  // per phase

  Segment segment(uint32_t s) const;
  // The segment this rank sends / receives at `step` of `phase`.
  uint32_t send_segment(RingPhase phase, uint32_t step) const;
  uint32_t recv_segment(RingPhase phase, uint32_t step) const;
  // The segment this rank holds fully reduced after the reduce-scatter.
  uint32_t owned_segment() const { return (rank_ + 1) % n_; }

  // Pipeline chunks of segment s: ceil(numel / chunk_elems) of them, all of
  // chunk_elems elements except the last; none for an empty segment.
  uint64_t chunks(uint32_t s) const;
  Segment chunk(uint32_t s, uint64_t c) const;

  // A message's name, the same on sender and receiver: (phase, step) in the order
  // they run, times kMaxChunks, plus the chunk. Unique within one operation as long as
  // no segment has more than kMaxChunks chunks (callers check max_chunks()).
  static constexpr uint32_t kChunkBits = 32 - kSlotBits;
  static constexpr uint64_t kMaxChunks = uint64_t{1} << kChunkBits;
  uint32_t sequence(RingPhase phase, uint32_t step, uint64_t chunk) const;
  uint64_t max_chunks() const { return chunks(0); }  // segment 0 is a longest one
  uint64_t message_count() const;  // messages this rank sends (= receives) in one operation

 private:
  uint32_t n_;
  uint32_t rank_;
  uint64_t numel_;
  uint64_t chunk_elems_;
};

// The ring's ranks: node ids in ascending order; rank_of(self) is self's position.
// The left neighbor of rank r is r - 1, the right r + 1 (mod n).
struct RingOrder {
  std::vector<uint32_t> ids;  // sorted
  uint32_t rank = 0;          // of self
  uint32_t left_id() const { return ids[(rank + ids.size() - 1) % ids.size()]; }
  uint32_t right_id() const { return ids[(rank + 1) % ids.size()]; }
};
// ids must not contain self and must hold no duplicates (the peer list's checks).
RingOrder ring_order(uint32_t self, const std::vector<uint32_t>& peer_ids);

}  // namespace gossip::sgd
