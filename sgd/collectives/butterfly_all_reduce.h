#pragma once
// Recursive halving and doubling (Rabenseifner 2004; Thakur, Rabenseifner & Gropp
// 2005), the butterfly all-reduce of MPI libraries, over p = 2^k ranks:
//  - reduce-scatter by recursive halving: in step j a rank exchanges half of what it
//    still holds with the rank whose number differs in bit k - 1 - j, and adds what it
//    receives to the half it keeps; after k steps rank v holds segment v, summed;
//  - all-gather by recursive doubling: the segments travel back the same way, the
//    block a rank holds doubling every step.
// Each rank sends 2(p - 1)/p of the buffer in 2 log2 p messages (the ring: the same
// bytes in 2(p - 1) messages). Buffers up to RingOptions::gather_below_bytes, raw,
// take whole-vector recursive doubling instead: log2 p exchanges of the whole sum
// (a + b is b + a in IEEE arithmetic, so both sides of every exchange hold the same bits).
//
// A rank count that is not a power of two (n = p + r, r < p), as MPICH does: the
// first 2r ranks pair up, each even one hands its vector to the odd one after it and
// waits; the p remaining ranks run the algorithm; the odd ranks hand the result back.
//
// Codecs: fp16, bf16 and int8 compress every halving hop; each segment's owner
// encodes the mean once and keeps the decoded values, and the doubling forwards those
// bytes unchanged. The others travel as whole contributions, exchanged by recursive
// doubling (sgd/collectives/contributions.h).

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "sgd/collectives/algorithm.h"
#include "sgd/collectives/contributions.h"

namespace gossip::sgd {

// Rank numbers in the power-of-two group.
class Butterfly {
 public:
  explicit Butterfly(uint32_t n);
  uint32_t group() const { return p_; }  // p: the largest power of two <= n
  uint32_t extras() const { return r_; }
  uint32_t steps() const { return steps_; }  // log2 p
  // The rank's number in the group; none for an even rank below 2r (it waits).
  std::optional<uint32_t> member(uint32_t rank) const;
  uint32_t rank_of(uint32_t member) const;  // the inverse
  // The even rank that hands its vector to `rank` (an odd rank below 2r), if any.
  std::optional<uint32_t> helper_of(uint32_t rank) const;
  // The ranks a group member stands for: itself and its helper, ascending.
  std::vector<uint32_t> ranks_of(uint32_t member) const;
  std::vector<uint32_t> partners(uint32_t rank) const;  // ascending

 private:
  uint32_t p_, r_, steps_;
};

class ButterflyAllReduce final : public MeshAllReduce {
 protected:
  Status run(std::span<peers::RingChannel* const> links, std::span<float> data,
             const RingOptions& o) override;
  Algorithm algorithm() const override { return Algorithm::kButterfly; }

 private:
  Status halving_doubling(mesh::Links& links, const Butterfly& b, uint32_t v, std::span<float> data,
                          const RingOptions& o, const mesh::Coder& coder);
  Status doubling(mesh::Links& links, const Butterfly& b, uint32_t v, std::span<float> data,
                  const RingOptions& o);
  Status gather(mesh::Links& links, const Butterfly& b, std::span<float> data, const RingOptions& o,
                const mesh::Coder& coder);
  // Adds a message that arrived to dst: raw fp32 straight from the receive buffer, a
  // codec's payload decoded through scratch_.
  Status add_message(const mesh::Coder& coder, std::span<const std::byte> msg, uint64_t seed,
                     std::span<float> dst);

  std::vector<float> rx_;
  std::deque<std::vector<std::byte>> tx_;  // encoded halves, alive until sent
  std::vector<std::vector<std::vector<std::byte>>>
      owned_;  // the owners' encoded means, by (segment, chunk)
  std::vector<float> scratch_;
  mesh::Contributions contributions_;
};

}  // namespace gossip::sgd
