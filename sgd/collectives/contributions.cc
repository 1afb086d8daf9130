#include "sgd/collectives/contributions.h"

#include <fmt/format.h>

#include <algorithm>

#include "compression/error_feedback.h"
#include "sgd/collectives/vector_ops.h"

namespace gossip::sgd::mesh {

std::span<const float> Contributions::chunk_of(std::span<const float> data, uint64_t c) const {
  const uint64_t off = c * chunk_elems_;
  return data.subspan(off, std::min(chunk_elems_, data.size() - off));
}

Status Contributions::encode_own(std::span<const float> data, const RingOptions& o,
                                 const Coder& coder) {
  coder_ = coder;
  numel_ = data.size();
  chunk_elems_ = o.chunk_elems;
  chunks_ = (numel_ + chunk_elems_ - 1) / chunk_elems_;
  ranks_ = o.size;
  if (uint64_t{o.size} * chunks_ >= kMaxIndex)
    return Status::invalid(fmt::format(
        "all-reduce: {} ranks x {} chunks of {} elements is too many messages; raise the chunk "
        "size",
        o.size, chunks_, chunk_elems_));
  payloads_.resize(size_t{o.size} * chunks_);
  for (uint64_t c = 0; c < chunks_; ++c) {
    const auto x = chunk_of(data, c);
    const uint64_t seed = chunk_seed(o.round, o.rank, c);
    if (coder.codec && o.compression.error_feedback) {
      scratch_.resize(x.size());
      GOSSIP_RETURN_IF_ERROR(o.compression.error_feedback->encode(
          x, c * chunk_elems_, {seed, coder.pool}, payload(o.rank, c), scratch_));
    } else {
      GOSSIP_RETURN_IF_ERROR(coder.encode(x, seed, payload(o.rank, c)));
    }
  }
  return Status::ok();
}

Status Contributions::send(Links& links, uint32_t to, std::span<const uint32_t> ranks, Algorithm a,
                           uint32_t step, uint64_t round) {
  auto ch = links.to(to);
  if (!ch.is_ok()) return ch.status();
  for (uint32_t q : ranks)
    for (uint64_t c = 0; c < chunks_; ++c)
      GOSSIP_RETURN_IF_ERROR((*ch)->post_send(tag(round, a, step, q * chunks_ + c), payload(q, c)));
  return Status::ok();
}

Status Contributions::receive(Links& links, uint32_t from, std::span<const uint32_t> ranks,
                              Algorithm a, uint32_t step, uint64_t round) {
  auto ch = links.to(from);
  if (!ch.is_ok()) return ch.status();
  for (uint32_t q : ranks)
    for (uint64_t c = 0; c < chunks_; ++c) {
      auto& p = payload(q, c);
      // The largest payload a chunk can have: a peer's longer message fails the channel.
      p.resize(coder_.max_bytes(std::min(chunk_elems_, numel_ - c * chunk_elems_)));
      GOSSIP_RETURN_IF_ERROR((*ch)->post_recv(tag(round, a, step, q * chunks_ + c), p));
      auto got = links.wait_recv(from);
      if (!got.is_ok()) return got.status();
      p.resize(*got);
    }
  return Status::ok();
}

Status Contributions::sum_into(std::span<float> data, uint64_t round) {
  std::fill(data.begin(), data.end(), 0.0f);
  for (uint32_t q = 0; q < ranks_; ++q)
    for (uint64_t c = 0; c < chunks_; ++c) {
      const uint64_t off = c * chunk_elems_;
      const auto dst = data.subspan(off, std::min(chunk_elems_, data.size() - off));
      scratch_.resize(dst.size());
      if (Status st = coder_.decode(payload(q, c), chunk_seed(round, q, c), scratch_); !st)
        return Status::protocol(
            fmt::format("all-reduce: round {}, the payload of rank {} (chunk {}): {}", round, q, c,
                        st.message()));
      add_into(dst.data(), scratch_.data(), dst.size());
    }
  divide(data.data(), data.size(), static_cast<float>(ranks_));
  return Status::ok();
}

}  // namespace gossip::sgd::mesh
