#include "sgd/overlay/outgoing_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "compression/codec.h"
#include "compression/error_feedback.h"

namespace gossip::sgd {

Status OutgoingModel::encode(std::span<float> x, uint32_t self, uint64_t for_round,
                             uint64_t chunk_elems, const Compression& c) {
  round = for_round;
  chunks.clear();
  const compression::Codec* codec = c.codec;
  if (codec && codec->id() == proto::CodecId::kNone) codec = nullptr;
  this->codec = codec ? codec->id() : proto::CodecId::kNone;
  chunk_elems = std::max<uint64_t>(1, chunk_elems);
  for (uint64_t off = 0, seq = 0; off < x.size(); off += chunk_elems, ++seq) {
    auto part = x.subspan(off, std::min<uint64_t>(chunk_elems, x.size() - off));
    auto buf = std::make_shared<std::vector<std::byte>>();
    if (!codec) {
      buf->resize(part.size_bytes());
      std::memcpy(buf->data(), part.data(), part.size_bytes());
    } else {
      compression::CodecContext ctx{chunk_seed(round, self, seq), c.pool};
      Status st = c.error_feedback
                      // part is both u and sent: encode() reads all of u before writing sent.
                      ? c.error_feedback->encode(part, off, ctx, *buf, part)
                      : codec->encode(part, ctx, *buf);
      if (st && !c.error_feedback) st = codec->decode(*buf, ctx, part);
      if (!st)
        return st.with_context(fmt::format("round {}: compressing elements [{}, {}) with {}", round,
                                           off, off + part.size(), codec->spec()));
    }
    chunks.push_back({off, part.size(), std::move(buf)});
  }
  return Status::ok();
}

void OutgoingModel::copy_raw(std::span<const float> x, uint64_t chunk_elems,
                             std::span<const float> tail) {
  // Fresh buffers each time: ZeroMQ may still hold the last ones for a receiver.
  codec = proto::CodecId::kNone;
  chunks.clear();
  chunk_elems = std::max<uint64_t>(1, chunk_elems);
  const uint64_t total = x.size() + tail.size();
  for (uint64_t off = 0; off < total; off += chunk_elems) {
    const uint64_t n = std::min<uint64_t>(chunk_elems, total - off);
    auto buf = std::make_shared<std::vector<std::byte>>(n * sizeof(float));
    // A chunk may hold the end of x and the start of tail.
    const uint64_t from_x = off < x.size() ? std::min<uint64_t>(n, x.size() - off) : 0;
    if (from_x > 0) std::memcpy(buf->data(), x.data() + off, from_x * sizeof(float));
    if (from_x < n)
      std::memcpy(buf->data() + from_x * sizeof(float), tail.data() + (off + from_x - x.size()),
                  (n - from_x) * sizeof(float));
    chunks.push_back({off, n, std::move(buf)});
  }
}

Status OutgoingModel::send(peers::PeerChannel& transport, uint32_t peer, uint64_t layout,
                           double weight, size_t first, size_t end) const {
  for (size_t seq = first; seq < std::min(end, chunks.size()); ++seq) {
    const Chunk& c = chunks[seq];
    proto::Body body;
    if (kind == proto::Kind::kStateChunk)
      body = proto::StateChunk{seq, c.offset, c.numel, weight, layout};
    else
      body = proto::ModelChunk{seq, tensor, c.offset, c.numel, codec, weight, layout};
    GOSSIP_RETURN_IF_ERROR(transport.send_shared(peer, round, body, c.payload));
  }
  return Status::ok();
}

uint64_t OutgoingModel::payload_bytes() const {
  uint64_t total = 0;
  for (const auto& c : chunks) total += c.payload->size();
  return total;
}

}  // namespace gossip::sgd
