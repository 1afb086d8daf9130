#include "sgd/collectives/ring_all_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/finite.h"
#include "base/refusals.h"
#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "sgd/collectives/vector_ops.h"

namespace gossip::sgd {
namespace {

using compression::CodecContext;

uint64_t tag_of(uint64_t round, uint32_t sequence) { return (round << 32) | sequence; }

bool is_raw(const Compression& c) { return !c.codec || c.codec->id() == proto::CodecId::kNone; }

// x <- x scaled to norm `bound` where it is longer; zeros where it holds NaN or Inf.
void clip_to(std::span<float> x, double bound) {
  const double norm = l2_norm(x);
  if (!std::isfinite(norm)) {
    std::fill(x.begin(), x.end(), 0.0f);
    return;
  }
  if (!(norm > bound)) return;
  const float f = norm > 0 ? static_cast<float>(bound / norm) : 0.0f;
  for (float& v : x) v *= f;
}

bool reduces_sparse(const RingOptions& o) {
  return o.sparse_reduce && !is_raw(o.compression) && o.compression.codec->keeps_largest();
}

}  // namespace

bool ring_reduces_compressed(proto::CodecId id) {
  return id == proto::CodecId::kFp16 || id == proto::CodecId::kBf16 || id == proto::CodecId::kInt8;
}

std::optional<SparseReduce> parse_sparse_reduce(std::string_view name) {
  if (name == "auto") return SparseReduce::kAuto;
  if (name == "reduce-scatter") return SparseReduce::kReduceScatter;
  if (name == "all-gather") return SparseReduce::kAllGather;
  return std::nullopt;
}

std::vector<float> ring_chunk_norms(std::span<const float> data, uint32_t ranks,
                                    uint64_t chunk_elems) {
  std::vector<float> norms;
  if (ranks == 0 || ranks > RingSchedule::kMaxRanks || chunk_elems == 0) return norms;
  const RingSchedule s(ranks, 0, data.size(), chunk_elems);  // segments: the same on every rank
  for (uint32_t seg = 0; seg < ranks; ++seg)
    for (uint64_t c = 0; c < s.chunks(seg); ++c) {
      const Segment ck = s.chunk(seg, c);
      norms.push_back(static_cast<float>(l2_norm(data.subspan(ck.offset, ck.numel))));
    }
  return norms;
}

ContributionBounds bound_contributions(const std::vector<std::vector<float>>& announced) {
  ContributionBounds b;
  b.ranks = static_cast<uint32_t>(announced.size());
  b.chunks = announced.empty() ? 0 : announced[0].size();
  b.limit.resize(b.chunks);
  b.admitted.resize(size_t{b.ranks} * b.chunks);
  std::vector<double> column(b.ranks);
  for (uint64_t c = 0; c < b.chunks; ++c) {
    for (uint32_t r = 0; r < b.ranks; ++r) {
      const float v = c < announced[r].size() ? announced[r][c] : 0.0f;
      column[r] = std::isfinite(v) && v > 0 ? v : 0.0;
    }
    // The lower median: with one liar among n >= 2 it is at most an honest rank's norm.
    auto mid = column.begin() + (b.ranks - 1) / 2;
    std::nth_element(column.begin(), mid, column.end());
    b.limit[c] = kClipFactor * *mid;
    for (uint32_t r = 0; r < b.ranks; ++r) {
      const float v = c < announced[r].size() ? announced[r][c] : 0.0f;
      b.admitted[r * b.chunks + c] =
          std::isfinite(v) && v > 0 ? std::min<double>(v, b.limit[c]) : 0;
    }
  }
  return b;
}

Status RingAllReduce::mean(peers::RingChannel& channel, std::span<float> data,
                           const RingOptions& o) {
  clipped_ = 0;
  first_clip_.clear();
  if (o.size == 0 || o.size > RingSchedule::kMaxRanks || o.rank >= o.size)
    return Status::invalid(fmt::format("ring: rank {} of {} (at most {} nodes)", o.rank, o.size,
                                       RingSchedule::kMaxRanks));
  if (o.chunk_elems == 0 || o.depth == 0)
    return Status::invalid("ring: chunk size and receive depth must be at least 1");
  if (o.size == 1 || data.empty()) return Status::ok();
  compression::ErrorFeedback* ef = is_raw(o.compression) ? nullptr : o.compression.error_feedback;
  if (o.restore_on_failure) {
    backup_.assign(data.begin(), data.end());
    if (ef) residual_backup_.assign(ef->residual().begin(), ef->residual().end());
  }
  if (o.bounds) {
    if (!is_raw(o.compression))
      return Status::invalid("ring: robust mode (--clip on) takes uncompressed rounds only");
    const RingSchedule s(o.size, o.rank, data.size(), o.chunk_elems);
    uint64_t chunks = 0;
    for (uint32_t seg = 0; seg < o.size; ++seg) chunks += s.chunks(seg);
    if (o.bounds->ranks != o.size || o.bounds->chunks != chunks)
      return Status::invalid(fmt::format(
          "ring: robust mode's bounds are for {} ranks and {} chunks, the round has {} and {}",
          o.bounds->ranks, o.bounds->chunks, o.size, chunks));
  }
  // Robust mode checks partial sums against their contributors' norms: hop by hop.
  const bool hop = o.bounds != nullptr ||
                   (is_raw(o.compression)
                        ? data.size_bytes() > o.gather_below_bytes
                        : ring_reduces_compressed(o.compression.codec->id()) || reduces_sparse(o));
  Status st = hop ? reduce(channel, data, o) : gather(channel, data, o);
  if (!st.is_ok() && o.restore_on_failure) {
    std::copy(backup_.begin(), backup_.end(), data.begin());
    if (ef) ef->restore(residual_backup_);
  }
  return st;
}

Status RingAllReduce::reduce(peers::RingChannel& ch, std::span<float> data, const RingOptions& o) {
  const RingSchedule s(o.size, o.rank, data.size(), o.chunk_elems);
  if (s.max_chunks() >= RingSchedule::kMaxChunks)
    return Status::invalid(
        fmt::format("ring: {} elements in chunks of {} is too many chunks; raise the chunk size",
                    data.size(), o.chunk_elems));
  const compression::Codec* codec = is_raw(o.compression) ? nullptr : o.compression.codec;
  const uint32_t left_rank = (o.rank + o.size - 1) % o.size;
  const uint64_t longest = std::min(o.chunk_elems, s.segment(0).numel);
  const uint64_t max_bytes = codec ? codec->max_encoded_bytes(longest) : longest * sizeof(float);
  const bool sparse = reduces_sparse(o);
  compression::ErrorFeedback* const ef = codec ? o.compression.error_feedback : nullptr;

  // Robust mode: a chunk's index in the bounds, and this node's chunks clipped.
  std::vector<uint64_t> first_chunk(o.size + 1, 0);
  for (uint32_t seg = 0; seg < o.size; ++seg)
    first_chunk[seg + 1] = first_chunk[seg] + s.chunks(seg);
  const ContributionBounds* const bounds = o.bounds;
  if (bounds)
    for (uint32_t seg = 0; seg < o.size; ++seg)
      for (uint64_t c = 0; c < s.chunks(seg); ++c) {
        const Segment ck = s.chunk(seg, c);
        clip_to(data.subspan(ck.offset, ck.numel), bounds->limit[first_chunk[seg] + c]);
      }
  // Pulls a chunk that arrived back to `bound`, and says so.
  const auto bound_chunk = [&](std::span<float> x, double bound, uint32_t seq, const char* what) {
    const double norm = l2_norm(x);
    // Honest sums stay within the triangle inequality up to fp32 rounding.
    if (norm <= bound * (1 + 1e-4) + 1e-30) return;
    clip_to(x, bound);
    count_refusal(Refusal::kClipped);
    if (clipped_++ == 0)
      first_clip_ = fmt::format(
          "peer {} (left), round {}, message {:#x}: {} of norm {:.4g} past the bound {:.4g} of its "
          "contributors' announced norms",
          ch.left(), o.round, seq, what, norm, bound);
  };

  // This node's contribution through error feedback: data <- what receivers decode.
  // The sparse reduce-scatter feeds every hop's encode through it instead.
  if (ef && !sparse) {
    std::vector<std::byte> payload;
    for (uint64_t off = 0; off < data.size(); off += o.chunk_elems) {
      auto x = data.subspan(off, std::min<uint64_t>(o.chunk_elems, data.size() - off));
      const CodecContext ctx{chunk_seed(o.round, o.rank, off), o.compression.pool};
      GOSSIP_RETURN_IF_ERROR(o.compression.error_feedback->encode(x, off, ctx, payload, x));
    }
  }

  struct Item {
    RingPhase phase;
    uint32_t step;
    uint32_t segment;
    uint64_t chunk;
  };
  std::vector<Item> recvs;
  for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather})
    for (uint32_t step = 0; step < s.steps(); ++step) {
      const uint32_t seg = s.recv_segment(phase, step);
      for (uint64_t c = 0; c < s.chunks(seg); ++c) recvs.push_back({phase, step, seg, c});
    }
  if (recvs.empty()) return Status::ok();  // numel < n and this node's neighbors hold nothing
  const size_t depth = std::min<size_t>(o.depth, recvs.size());
  if (rx_.size() < depth) rx_.resize(depth);
  for (size_t i = 0; i < depth; ++i) rx_[i].resize((max_bytes + sizeof(float) - 1) / sizeof(float));
  // One buffer per encoded message, none reallocated while the operation runs.
  size_t tx_used = 0;
  if (codec && tx_.size() < s.message_count()) tx_.resize(s.message_count());

  const auto chunk_of = [&](uint32_t seg, uint64_t c) {
    const Segment ck = s.chunk(seg, c);
    return data.subspan(ck.offset, ck.numel);
  };
  // Uncompressed all-gather chunks land in place: a segment's final values reach this
  // node only after its own reduce-scatter send of that segment was read downstream,
  // so nothing still being sent from there is overwritten.
  const auto in_place = [&](const Item& it) { return !codec && it.phase == RingPhase::kAllGather; };
  const auto post_recv = [&](size_t i) {
    const Item& it = recvs[i];
    auto buffer = in_place(it) ? std::as_writable_bytes(chunk_of(it.segment, it.chunk))
                               : std::as_writable_bytes(std::span(rx_[i % depth])).first(max_bytes);
    return ch.post_recv(tag_of(o.round, s.sequence(it.phase, it.step, it.chunk)), buffer);
  };
  // Encodes chunk c of segment seg as message seq. The sparse reduce-scatter's
  // goes through error feedback, which leaves in x what the receiver decodes.
  const auto encode = [&](uint32_t seg, uint64_t c, uint32_t seq,
                          std::vector<std::byte>& out) -> Status {
    const CodecContext ctx{chunk_seed(o.round, o.rank, seq), o.compression.pool};
    const auto x = chunk_of(seg, c);
    if (sparse && ef) return ef->encode(x, s.chunk(seg, c).offset, ctx, out, x);
    return codec->encode(x, ctx, out);
  };
  const auto send = [&](RingPhase phase, uint32_t step, uint32_t seg, uint64_t c) -> Status {
    const uint32_t seq = s.sequence(phase, step, c);
    if (!codec) return ch.post_send(tag_of(o.round, seq), std::as_bytes(chunk_of(seg, c)));
    auto& out = tx_[tx_used++];
    GOSSIP_RETURN_IF_ERROR(encode(seg, c, seq, out));
    return ch.post_send(tag_of(o.round, seq), out);
  };

  for (size_t i = 0; i < depth; ++i) GOSSIP_RETURN_IF_ERROR(post_recv(i));
  const uint32_t first = s.send_segment(RingPhase::kReduceScatter, 0);
  for (uint64_t c = 0; c < s.chunks(first); ++c)
    GOSSIP_RETURN_IF_ERROR(send(RingPhase::kReduceScatter, 0, first, c));

  const float n = static_cast<float>(o.size);
  for (size_t i = 0; i < recvs.size(); ++i) {
    auto got = ch.wait_recv(o.wait);
    if (!got.is_ok()) return got.status();
    const Item& it = recvs[i];
    const auto msg = std::as_bytes(std::span(rx_[i % depth])).first(*got);
    const std::span<float> dst = chunk_of(it.segment, it.chunk);
    const uint32_t seq = s.sequence(it.phase, it.step, it.chunk);
    const auto bad = [&](const std::string& why) {
      return Status::protocol(fmt::format("ring: peer {} (left), round {}, message {:#x}: {}",
                                          ch.left(), o.round, seq, why));
    };
    if (!codec && msg.size() != dst.size_bytes())
      return bad(fmt::format("{} bytes for a chunk of {} fp32", msg.size(), dst.size()));
    const bool last_step = it.step + 1 == s.steps();

    if (it.phase == RingPhase::kReduceScatter) {
      std::span<const float> in(rx_[i % depth].data(), dst.size());
      if (bounds) {  // ranks rank - 1 ... rank - 1 - step added to it so far
        const uint64_t gc = first_chunk[it.segment] + it.chunk;
        double bound = 0;
        for (uint32_t j = 0; j <= it.step; ++j)
          bound +=
              bounds
                  ->admitted[size_t{(o.rank + 2 * o.size - 1 - j) % o.size} * bounds->chunks + gc];
        bound_chunk(std::span<float>(rx_[i % depth].data(), dst.size()), bound, seq,
                    "a partial sum");
      }
      if (codec) {
        scratch_.resize(dst.size());
        Status st = codec->decode(msg, {chunk_seed(o.round, left_rank, seq), nullptr}, scratch_);
        if (!st.is_ok()) return bad(st.message());
        in = scratch_;
      }
      add_into(dst.data(), in.data(), dst.size());
      if (!last_step) {
        GOSSIP_RETURN_IF_ERROR(send(RingPhase::kReduceScatter, it.step + 1, it.segment, it.chunk));
      } else if (sparse) {
        // Fully reduced: this node owns the chunk. The all-gather carries its sum's
        // top-k (the residual keeps the rest); every node decodes it and divides.
        // Error feedback has left in dst what the others decode already.
        auto& out = tx_[tx_used++];
        const uint32_t ag = s.sequence(RingPhase::kAllGather, 0, it.chunk);
        GOSSIP_RETURN_IF_ERROR(encode(it.segment, it.chunk, ag, out));
        if (!ef)
          GOSSIP_RETURN_IF_ERROR(
              codec->decode(out, {chunk_seed(o.round, o.rank, ag), nullptr}, dst));
        divide(dst.data(), dst.size(), n);
        GOSSIP_RETURN_IF_ERROR(ch.post_send(tag_of(o.round, ag), out));
      } else {
        // Fully reduced: this node owns the chunk. The all-gather carries its mean.
        divide(dst.data(), dst.size(), n);
        if (codec) {
          // Keep exactly what the others will decode.
          auto& out = tx_[tx_used++];
          const uint32_t ag = s.sequence(RingPhase::kAllGather, 0, it.chunk);
          GOSSIP_RETURN_IF_ERROR(
              codec->encode(dst, {chunk_seed(o.round, o.rank, ag), o.compression.pool}, out));
          GOSSIP_RETURN_IF_ERROR(
              codec->decode(out, {chunk_seed(o.round, o.rank, ag), nullptr}, dst));
          GOSSIP_RETURN_IF_ERROR(ch.post_send(tag_of(o.round, ag), out));
        } else {
          GOSSIP_RETURN_IF_ERROR(send(RingPhase::kAllGather, 0, it.segment, it.chunk));
        }
      }
    } else if (!codec) {  // received in place
      if (bounds) {       // a mean of every rank's contribution
        const uint64_t gc = first_chunk[it.segment] + it.chunk;
        double bound = 0;
        for (uint32_t r = 0; r < o.size; ++r)
          bound += bounds->admitted[size_t{r} * bounds->chunks + gc];
        bound_chunk(dst, bound / o.size, seq, "a mean");
      }
      if (!last_step)
        GOSSIP_RETURN_IF_ERROR(send(RingPhase::kAllGather, it.step + 1, it.segment, it.chunk));
    } else {
      Status st = codec->decode(msg, {0, nullptr}, dst);
      if (!st.is_ok()) return bad(st.message());
      if (sparse) divide(dst.data(), dst.size(), n);
      if (!last_step) {
        // Forward the owner's bytes unchanged, so every node decodes the same values.
        auto& out = tx_[tx_used++];
        out.assign(msg.begin(), msg.end());
        GOSSIP_RETURN_IF_ERROR(ch.post_send(
            tag_of(o.round, s.sequence(RingPhase::kAllGather, it.step + 1, it.chunk)), out));
      }
    }
    if (i + depth < recvs.size()) GOSSIP_RETURN_IF_ERROR(post_recv(i + depth));
  }
  return ch.wait_sends(o.wait);
}

Status RingAllReduce::gather(peers::RingChannel& ch, std::span<float> data, const RingOptions& o) {
  const compression::Codec* codec = is_raw(o.compression) ? nullptr : o.compression.codec;
  const uint64_t chunks = (data.size() + o.chunk_elems - 1) / o.chunk_elems;
  if (chunks >= RingSchedule::kMaxChunks)
    return Status::invalid(
        fmt::format("ring: {} elements in chunks of {} is too many chunks; raise the chunk size",
                    data.size(), o.chunk_elems));
  const auto chunk_of = [&](uint64_t c) {
    const uint64_t off = c * o.chunk_elems;
    return data.subspan(off, std::min<uint64_t>(o.chunk_elems, data.size() - off));
  };
  const auto sequence = [](uint32_t step, uint64_t c) {
    return static_cast<uint32_t>((uint64_t{step} << RingSchedule::kChunkBits) | c);
  };
  payloads_.resize(size_t{o.size} * chunks);
  const auto payload = [&](uint32_t rank, uint64_t c) -> std::vector<std::byte>& {
    return payloads_[size_t{rank} * chunks + c];
  };

  // This node's contribution, encoded once (through error feedback when given).
  for (uint64_t c = 0; c < chunks; ++c) {
    auto x = chunk_of(c);
    const CodecContext ctx{chunk_seed(o.round, o.rank, c), o.compression.pool};
    if (!codec) {
      const auto raw = std::as_bytes(x);
      payload(o.rank, c).assign(raw.begin(), raw.end());
    } else if (o.compression.error_feedback) {
      scratch_.resize(x.size());
      GOSSIP_RETURN_IF_ERROR(o.compression.error_feedback->encode(x, c * o.chunk_elems, ctx,
                                                                  payload(o.rank, c), scratch_));
    } else {
      GOSSIP_RETURN_IF_ERROR(codec->encode(x, ctx, payload(o.rank, c)));
    }
  }

  // Step k sends the payloads of rank r - k and receives those of rank r - k - 1.
  struct Item {
    uint32_t step;
    uint32_t source;
    uint64_t chunk;
  };
  std::vector<Item> recvs;
  for (uint32_t k = 0; k + 1 < o.size; ++k)
    for (uint64_t c = 0; c < chunks; ++c)
      recvs.push_back({k, (o.rank + 2 * o.size - k - 1) % o.size, c});
  const size_t depth = std::min<size_t>(o.depth, recvs.size());
  const auto post_recv = [&](size_t i) {
    const Item& it = recvs[i];
    auto& p = payload(it.source, it.chunk);
    const size_t numel = chunk_of(it.chunk).size();
    p.resize(codec ? codec->max_encoded_bytes(numel) : numel * sizeof(float));
    return ch.post_recv(tag_of(o.round, sequence(it.step, it.chunk)), p);
  };
  for (size_t i = 0; i < depth; ++i) GOSSIP_RETURN_IF_ERROR(post_recv(i));
  for (uint64_t c = 0; c < chunks; ++c)
    GOSSIP_RETURN_IF_ERROR(ch.post_send(tag_of(o.round, sequence(0, c)), payload(o.rank, c)));
  for (size_t i = 0; i < recvs.size(); ++i) {
    auto got = ch.wait_recv(o.wait);
    if (!got.is_ok()) return got.status();
    const Item& it = recvs[i];
    auto& p = payload(it.source, it.chunk);
    p.resize(*got);
    if (it.step + 2 < o.size)
      GOSSIP_RETURN_IF_ERROR(ch.post_send(tag_of(o.round, sequence(it.step + 1, it.chunk)), p));
    if (i + depth < recvs.size()) GOSSIP_RETURN_IF_ERROR(post_recv(i + depth));
  }
  GOSSIP_RETURN_IF_ERROR(ch.wait_sends(o.wait));

  // Sum in rank order, the same on every node, then divide.
  std::fill(data.begin(), data.end(), 0.0f);
  for (uint32_t rank = 0; rank < o.size; ++rank)
    for (uint64_t c = 0; c < chunks; ++c) {
      auto dst = chunk_of(c);
      scratch_.resize(dst.size());
      const auto& p = payload(rank, c);
      Status st;
      if (!codec && p.size() == dst.size_bytes())
        std::memcpy(scratch_.data(), p.data(), p.size());
      else if (!codec)
        st = Status::invalid(fmt::format("{} bytes for a chunk of {} fp32", p.size(), dst.size()));
      else
        st = codec->decode(p, {chunk_seed(o.round, rank, c), o.compression.pool}, scratch_);
      if (!st.is_ok())
        return Status::protocol(
            fmt::format("ring: round {}, the payload of rank {} (chunk {}) relayed by peer {}: {}",
                        o.round, rank, c, ch.left(), st.message()));
      add_into(dst.data(), scratch_.data(), dst.size());
    }
  divide(data.data(), data.size(), static_cast<float>(o.size));
  return Status::ok();
}

}  // namespace gossip::sgd
