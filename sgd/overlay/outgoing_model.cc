#include "sgd/overlay/outgoing_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "compression/codec.h"
#include "compression/error_feedback.h"

namespace gossip::sgd {

namespace {

// Chunk `seq`'s buffer of the last encoding, or else of the one before, when nothing
// else holds it any more (every transport and receiver that had it let it go); a fresh
// one otherwise. Reused, a model's chunks cost no allocation, page faults nor
// zero-filling a round: a tenth of a simulation of 1,000 nodes of 100k parameters, and
// the same in gossipd. Two generations, because a receiver still reading the last
// round's chunk (a slower neighbor) is common and one still reading the round before
// is not.
std::shared_ptr<std::vector<std::byte>> reusable(std::vector<OutgoingModel::Chunk>& last,
                                                 std::vector<OutgoingModel::Chunk>& spare,
                                                 uint64_t seq) {
  for (auto* from : {&last, &spare})
    if (seq < from->size() && (*from)[seq].payload.use_count() == 1) {
      // The holder that let it go last (a transport's thread) read it before it did:
      // its release and this fence order those reads before the writes to come.
      std::atomic_thread_fence(std::memory_order_acquire);
      return std::const_pointer_cast<std::vector<std::byte>>(std::move((*from)[seq].payload));
    }
  return std::make_shared<std::vector<std::byte>>();
}

}  // namespace

Status OutgoingModel::encode(std::span<float> x, uint32_t self, uint64_t for_round,
                             uint64_t chunk_elems, const Compression& c) {
  round = for_round;
  std::vector<Chunk> last = std::exchange(chunks, {});
  const compression::Codec* codec = c.codec;
  if (codec && codec->id() == proto::CodecId::kNone) codec = nullptr;
  this->codec = codec ? codec->id() : proto::CodecId::kNone;
  chunk_elems = std::max<uint64_t>(1, chunk_elems);
  for (uint64_t off = 0, seq = 0; off < x.size(); off += chunk_elems, ++seq) {
    auto part = x.subspan(off, std::min<uint64_t>(chunk_elems, x.size() - off));
    auto buf = reusable(last, spare_, seq);
    if (!codec) {
      const auto* bytes = reinterpret_cast<const std::byte*>(part.data());
      buf->assign(bytes, bytes + part.size_bytes());
    } else {
      buf->clear();  // as a fresh one: the capacity stays
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
  spare_ = std::move(last);
  return Status::ok();
}

void OutgoingModel::copy_raw(std::span<const float> x, uint64_t chunk_elems,
                             std::span<const float> tail) {
  codec = proto::CodecId::kNone;
  std::vector<Chunk> last = std::exchange(chunks, {});
  chunk_elems = std::max<uint64_t>(1, chunk_elems);
  const uint64_t total = x.size() + tail.size();
  for (uint64_t off = 0, seq = 0; off < total; off += chunk_elems, ++seq) {
    const uint64_t n = std::min<uint64_t>(chunk_elems, total - off);
    auto buf = reusable(last, spare_, seq);
    buf->resize(n * sizeof(float));
    // A chunk may hold the end of x and the start of tail.
    const uint64_t from_x = off < x.size() ? std::min<uint64_t>(n, x.size() - off) : 0;
    if (from_x > 0) std::memcpy(buf->data(), x.data() + off, from_x * sizeof(float));
    if (from_x < n)
      std::memcpy(buf->data() + from_x * sizeof(float), tail.data() + (off + from_x - x.size()),
                  (n - from_x) * sizeof(float));
    chunks.push_back({off, n, std::move(buf)});
  }
  spare_ = std::move(last);
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
