#pragma once
// What the mesh all-reduces (tree, butterfly, master) share on the wire: message
// tags, waits that keep every link moving, and the codec of a hop.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/ring_channel.h"
#include "sgd/collectives/algorithm.h"
#include "sgd/collectives/all_reduce.h"

namespace gossip::sgd::mesh {

// A message's name: the round, the algorithm (a node that chose another one fails
// on the first message, naming both tags), the step and the message's index in it.
inline constexpr uint64_t kMaxIndex = uint64_t{1} << 20;
inline constexpr uint32_t kMaxStep = 255;
inline uint64_t tag(uint64_t round, Algorithm a, uint32_t step, uint64_t index) {
  return (round << 32) | (uint64_t{static_cast<uint8_t>(a)} << 28) | (uint64_t{step} << 20) | index;
}

// The links of one operation: the channel to each partner rank (null elsewhere).
class Links {
 public:
  Links(std::span<peers::RingChannel* const> by_rank, const peers::WaitOptions& wait)
      : by_rank_(by_rank), wait_(wait) {}

  // The channel to `rank`, or an error naming it when this node has no link there.
  Result<peers::RingChannel*> to(uint32_t rank) const;
  // Waits for the oldest receive posted on the channel to `rank` while every other
  // link moves too: the TCP channel has no thread, and a partner that waits for our
  // queued sends on another link must not wait for this wait to end.
  Result<size_t> wait_recv(uint32_t rank);
  // Waits until every link handed its posted sends to the fabric.
  Status wait_sends();
  Status poke_all();

 private:
  std::span<peers::RingChannel* const> by_rank_;
  peers::WaitOptions wait_;
};

// The codec of a hop; raw fp32 when codec is null.
struct Coder {
  const compression::Codec* codec = nullptr;
  compression::ThreadPool* pool = nullptr;

  uint64_t max_bytes(uint64_t numel) const;
  Status encode(std::span<const float> x, uint64_t seed, std::vector<std::byte>& out) const;
  // Exactly y.size() values from `in`, or an error naming what does not fit.
  Status decode(std::span<const std::byte> in, uint64_t seed, std::span<float> y) const;
};

// The coder of a collective's compression: raw when there is no codec or it is "none".
Coder coder_of(const Compression& c);

}  // namespace gossip::sgd::mesh
