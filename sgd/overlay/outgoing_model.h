#pragma once
// One round's contribution of this node, cut into chunks and encoded once, ready
// to be queued to any number of peers. The chunk buffers are shared with ZeroMQ,
// which keeps each alive until it has been written, so a round never waits for a
// slow or dead receiver before the caller may change its model again.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "peers/channel.h"
#include "proto/message.h"
#include "sgd/collectives/all_reduce.h"

namespace gossip::sgd {

struct OutgoingModel {
  struct Chunk {
    uint64_t offset = 0;
    uint64_t numel = 0;
    std::shared_ptr<const std::vector<std::byte>> payload;
  };
  uint64_t round = 0;
  proto::Kind kind =
      proto::Kind::kModelChunk;  // state-chunk for a joiner (sgd/membership/state_transfer.h)
  proto::CodecId codec = proto::CodecId::kNone;
  uint32_t tensor = 0;  // proto::kPublicCopyTensor for CHOCO's public copy
  std::vector<Chunk> chunks;

  // Encodes x for `round` as node `self` in chunks of `chunk_elems` elements. With
  // a codec (compression.codec not null and not "none"), x is replaced in place by
  // what the receivers will decode, through compression.error_feedback when set.
  Status encode(std::span<float> x, uint32_t self, uint64_t round, uint64_t chunk_elems,
                const Compression& compression);
  // A copy of x, then tail, as one vector in raw fp32 chunks of `chunk_elems`
  // elements (a state or an initial model, sent whole to whoever asks).
  void copy_raw(std::span<const float> x, uint64_t chunk_elems, std::span<const float> tail = {});
  // Queues chunks [first, end) (every chunk by default) to `peer`, each header
  // carrying `weight` (push-sum) and the layout fingerprint.
  Status send(peers::PeerChannel& transport, uint32_t peer, uint64_t layout, double weight = 1.0,
              size_t first = 0, size_t end = SIZE_MAX) const;
  uint64_t payload_bytes() const;

 private:
  std::vector<Chunk> spare_;  // the encoding before the last's buffers (encode())
};

}  // namespace gossip::sgd
