#pragma once
// Every rank's contribution, encoded once and relayed whole: how the mesh
// all-reduces carry the codecs that do not survive re-encoding a partial sum (top-k,
// rand-k, sign, qsgd), as the ring's all-gather does (sgd/collectives/ring_all_reduce.h). Each
// node ends holding all n payloads, decodes them and sums them in rank order, so
// every node has the same bits.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "sgd/collectives/mesh_wire.h"
#include "sgd/collectives/ring_all_reduce.h"

namespace gossip::sgd::mesh {

class Contributions {
 public:
  // This rank's contribution, cut into chunks of o.chunk_elems, through the error
  // feedback when o.compression has one.
  Status encode_own(std::span<const float> data, const RingOptions& o, const Coder& coder);
  // Sends the payloads of `ranks` (ascending), chunk by chunk, to `to` in `step`.
  Status send(Links& links, uint32_t to, std::span<const uint32_t> ranks, Algorithm a,
              uint32_t step, uint64_t round);
  // Receives the payloads of `ranks` from `from`, as send() sent them.
  Status receive(Links& links, uint32_t from, std::span<const uint32_t> ranks, Algorithm a,
                 uint32_t step, uint64_t round);
  // data <- (1/n) sum of the n decoded contributions, in rank order.
  Status sum_into(std::span<float> data, uint64_t round);

 private:
  std::span<const float> chunk_of(std::span<const float> data, uint64_t c) const;
  std::vector<std::byte>& payload(uint32_t rank, uint64_t c) {
    return payloads_[rank * chunks_ + c];
  }

  Coder coder_;
  uint64_t numel_ = 0;
  uint64_t chunk_elems_ = 1;
  uint64_t chunks_ = 0;
  uint32_t ranks_ = 0;
  std::vector<std::vector<std::byte>> payloads_;  // by (rank, chunk)
  std::vector<float> scratch_;
};

}  // namespace gossip::sgd::mesh
