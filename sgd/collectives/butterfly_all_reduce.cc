#include "sgd/collectives/butterfly_all_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>

#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "sgd/collectives/vector_ops.h"

namespace gossip::sgd {
namespace {

// Steps of the tags.
constexpr uint32_t kHandOver = 0;     // a helper's vector to its odd partner
constexpr uint32_t kHalving = 1;      // + j
constexpr uint32_t kDoubling = 100;   // + j
constexpr uint32_t kGathering = 150;  // + j
constexpr uint32_t kWhole = 200;      // + j
constexpr uint32_t kHandBack = 250;   // the result to the helper

struct Range {
  uint64_t offset = 0;
  uint64_t numel = 0;
};

// p segments, the first numel % p one element longer (as the ring's).
Range segments(uint64_t numel, uint32_t p, uint32_t first, uint32_t last) {
  const uint64_t base = numel / p, extra = numel % p;
  const auto offset = [&](uint64_t s) { return s * base + std::min(s, extra); };
  return {offset(first), offset(last) - offset(first)};
}

uint64_t chunks_of(uint64_t numel, uint64_t chunk_elems) {
  return (numel + chunk_elems - 1) / chunk_elems;
}

}  // namespace

Butterfly::Butterfly(uint32_t n)
    : p_(std::bit_floor(n)),
      r_(n - std::bit_floor(n)),
      steps_(static_cast<uint32_t>(std::countr_zero(std::bit_floor(n)))) {}

std::optional<uint32_t> Butterfly::member(uint32_t rank) const {
  if (rank >= 2 * r_) return rank - r_;
  if (rank % 2 == 1) return rank / 2;
  return std::nullopt;
}

uint32_t Butterfly::rank_of(uint32_t member) const {
  return member < r_ ? 2 * member + 1 : member + r_;
}

std::optional<uint32_t> Butterfly::helper_of(uint32_t rank) const {
  if (rank < 2 * r_ && rank % 2 == 1) return rank - 1;
  return std::nullopt;
}

std::vector<uint32_t> Butterfly::ranks_of(uint32_t member) const {
  if (member < r_) return {2 * member, 2 * member + 1};
  return {member + r_};
}

std::vector<uint32_t> Butterfly::partners(uint32_t rank) const {
  const auto v = member(rank);
  if (!v) return {rank + 1};
  std::vector<uint32_t> out;
  for (uint32_t j = 0; j < steps_; ++j) out.push_back(rank_of(*v ^ (uint32_t{1} << j)));
  if (auto h = helper_of(rank)) out.push_back(*h);
  std::sort(out.begin(), out.end());
  return out;
}

Status ButterflyAllReduce::run(std::span<peers::RingChannel* const> by_rank, std::span<float> data,
                               const RingOptions& o) {
  const mesh::Coder coder = mesh::coder_of(o.compression);
  const compression::Codec* codec = coder.codec;
  mesh::Links links(by_rank, o.wait);
  const Butterfly b(o.size);
  if (codec && !ring_reduces_compressed(codec->id())) return gather(links, b, data, o, coder);
  if (chunks_of(data.size(), o.chunk_elems) >= mesh::kMaxIndex)
    return Status::invalid(fmt::format(
        "all-reduce: {} elements in chunks of {} is too many chunks; raise the chunk size",
        data.size(), o.chunk_elems));
  const bool whole = !codec && data.size_bytes() <= o.gather_below_bytes;
  const Algorithm a = Algorithm::kButterfly;

  if (codec && o.compression.error_feedback) {  // data <- what the receivers decode
    std::vector<std::byte> payload;
    for (uint64_t off = 0; off < data.size(); off += o.chunk_elems) {
      auto x = data.subspan(off, std::min<uint64_t>(o.chunk_elems, data.size() - off));
      GOSSIP_RETURN_IF_ERROR(o.compression.error_feedback->encode(
          x, off, {chunk_seed(o.round, o.rank, off), coder.pool}, payload, x));
    }
  }
  tx_.clear();
  // Sends the elements [r.offset, + r.numel) in chunks, encoded with the codec.
  const auto send_range = [&](uint32_t to, Range r, uint32_t step) -> Status {
    auto ch = links.to(to);
    if (!ch.is_ok()) return ch.status();
    for (uint64_t i = 0, off = r.offset; off < r.offset + r.numel; ++i, off += o.chunk_elems) {
      const auto x = data.subspan(off, std::min<uint64_t>(o.chunk_elems, r.offset + r.numel - off));
      if (!coder.codec) {
        GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, step, i), std::as_bytes(x)));
        continue;
      }
      auto& out = tx_.emplace_back();
      GOSSIP_RETURN_IF_ERROR(coder.encode(x, chunk_seed(o.round, o.rank, off), out));
      GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, step, i), out));
    }
    return Status::ok();
  };
  // Receives the elements [r.offset, + r.numel) from `from` and adds them to data.
  const auto add_range = [&](uint32_t from, Range r, uint32_t step) -> Status {
    auto ch = links.to(from);
    if (!ch.is_ok()) return ch.status();
    const uint64_t max_bytes = coder.max_bytes(std::min<uint64_t>(o.chunk_elems, data.size()));
    rx_.resize((max_bytes + sizeof(float) - 1) / sizeof(float));
    for (uint64_t i = 0, off = r.offset; off < r.offset + r.numel; ++i, off += o.chunk_elems) {
      const auto dst =
          data.subspan(off, std::min<uint64_t>(o.chunk_elems, r.offset + r.numel - off));
      const auto buffer = std::as_writable_bytes(std::span(rx_)).first(max_bytes);
      GOSSIP_RETURN_IF_ERROR((*ch)->post_recv(mesh::tag(o.round, a, step, i), buffer));
      auto got = links.wait_recv(from);
      if (!got.is_ok()) return got.status();
      if (Status st = add_message(coder, buffer.first(*got), chunk_seed(o.round, from, off), dst);
          !st)
        return Status::protocol(
            fmt::format("all-reduce (butterfly): rank {}, round {}, step {}: {}", from, o.round,
                        step, st.message()));
    }
    return Status::ok();
  };

  const auto member = b.member(o.rank);
  if (!member) {  // a helper: hand the vector over, take the result back
    const uint32_t odd = o.rank + 1;
    GOSSIP_RETURN_IF_ERROR(send_range(odd, {0, data.size()}, kHandOver));
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());
    auto ch = links.to(odd);
    if (!ch.is_ok()) return ch.status();
    if (!coder.codec) {  // in place: it is the members' mean, bit for bit
      for (uint64_t i = 0, off = 0; off < data.size(); ++i, off += o.chunk_elems) {
        const auto dst = data.subspan(off, std::min<uint64_t>(o.chunk_elems, data.size() - off));
        GOSSIP_RETURN_IF_ERROR(
            (*ch)->post_recv(mesh::tag(o.round, a, kHandBack, i), std::as_writable_bytes(dst)));
        auto got = links.wait_recv(odd);
        if (!got.is_ok()) return got.status();
        if (*got != dst.size_bytes())
          return Status::protocol(
              fmt::format("all-reduce (butterfly): rank {} handed back {} bytes for {} fp32", odd,
                          *got, dst.size()));
      }
      return Status::ok();
    }
    // The owners' bytes, segment by segment and chunk by chunk, decoded as the members did.
    uint64_t i = 0;
    std::vector<std::byte> in;
    for (uint32_t s = 0; s < b.group(); ++s) {
      const Range seg = segments(data.size(), b.group(), s, s + 1);
      for (uint64_t off = seg.offset; off < seg.offset + seg.numel; off += o.chunk_elems, ++i) {
        const auto dst =
            data.subspan(off, std::min<uint64_t>(o.chunk_elems, seg.offset + seg.numel - off));
        in.resize(coder.max_bytes(dst.size()));
        GOSSIP_RETURN_IF_ERROR((*ch)->post_recv(mesh::tag(o.round, a, kHandBack, i), in));
        auto got = links.wait_recv(odd);
        if (!got.is_ok()) return got.status();
        if (Status st = coder.decode(std::span(in).first(*got), 0, dst); !st)
          return Status::protocol(fmt::format("all-reduce (butterfly): the result from rank {}: {}",
                                              odd, st.message()));
      }
    }
    return Status::ok();
  }

  if (auto helper = b.helper_of(o.rank))
    GOSSIP_RETURN_IF_ERROR(add_range(*helper, {0, data.size()}, kHandOver));
  GOSSIP_RETURN_IF_ERROR(whole ? doubling(links, b, *member, data, o)
                               : halving_doubling(links, b, *member, data, o, coder));
  if (auto helper = b.helper_of(o.rank)) {
    auto ch = links.to(*helper);
    if (!ch.is_ok()) return ch.status();
    uint64_t i = 0;
    if (!coder.codec) {
      for (uint64_t off = 0; off < data.size(); off += o.chunk_elems, ++i)
        GOSSIP_RETURN_IF_ERROR(
            (*ch)->post_send(mesh::tag(o.round, a, kHandBack, i),
                             std::as_bytes(data.subspan(
                                 off, std::min<uint64_t>(o.chunk_elems, data.size() - off)))));
    } else {
      for (auto& segment : owned_)
        for (auto& bytes : segment)
          GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, kHandBack, i++), bytes));
    }
  }
  return links.wait_sends();
}

Status ButterflyAllReduce::doubling(mesh::Links& links, const Butterfly& b, uint32_t v,
                                    std::span<float> data, const RingOptions& o) {
  const Algorithm a = Algorithm::kButterfly;
  rx_.resize(data.size());
  for (uint32_t j = 0; j < b.steps(); ++j) {
    const uint32_t partner = b.rank_of(v ^ (uint32_t{1} << j));
    auto ch = links.to(partner);
    if (!ch.is_ok()) return ch.status();
    for (uint64_t i = 0, off = 0; off < data.size(); ++i, off += o.chunk_elems) {
      const uint64_t len = std::min<uint64_t>(o.chunk_elems, data.size() - off);
      GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, kWhole + j, i),
                                              std::as_bytes(data.subspan(off, len))));
    }
    for (uint64_t i = 0, off = 0; off < data.size(); ++i, off += o.chunk_elems) {
      const uint64_t len = std::min<uint64_t>(o.chunk_elems, data.size() - off);
      GOSSIP_RETURN_IF_ERROR(
          (*ch)->post_recv(mesh::tag(o.round, a, kWhole + j, i),
                           std::as_writable_bytes(std::span(rx_).subspan(off, len))));
      auto got = links.wait_recv(partner);
      if (!got.is_ok()) return got.status();
      if (*got != len * sizeof(float))
        return Status::protocol(fmt::format(
            "all-reduce (butterfly): rank {} sent {} bytes for {} fp32", partner, *got, len));
    }
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());  // data is read by those sends until here
    add_into(data.data(), rx_.data(), data.size());
  }
  divide(data.data(), data.size(), static_cast<float>(o.size));
  return Status::ok();
}

Status ButterflyAllReduce::add_message(const mesh::Coder& coder, std::span<const std::byte> msg,
                                       uint64_t seed, std::span<float> dst) {
  if (!coder.codec) {  // straight from the receive buffer (rx_, fp32-aligned): no copy
    assert(reinterpret_cast<uintptr_t>(msg.data()) % alignof(float) == 0);
    if (msg.size() != dst.size_bytes())
      return Status::invalid(fmt::format("{} bytes for {} fp32 values", msg.size(), dst.size()));
    add_into(dst.data(), reinterpret_cast<const float*>(msg.data()), dst.size());
    return Status::ok();
  }
  scratch_.resize(dst.size());
  GOSSIP_RETURN_IF_ERROR(coder.decode(msg, seed, scratch_));
  add_into(dst.data(), scratch_.data(), dst.size());
  return Status::ok();
}

Status ButterflyAllReduce::halving_doubling(mesh::Links& links, const Butterfly& b, uint32_t v,
                                            std::span<float> data, const RingOptions& o,
                                            const mesh::Coder& coder) {
  const Algorithm a = Algorithm::kButterfly;
  const uint32_t p = b.group();
  const uint64_t max_bytes = coder.max_bytes(std::min<uint64_t>(o.chunk_elems, data.size()));
  rx_.resize((max_bytes + sizeof(float) - 1) / sizeof(float));

  // Reduce-scatter: the block of segments [lo, hi) this member still holds halves.
  uint32_t lo = 0, hi = p;
  for (uint32_t j = 0; j < b.steps(); ++j) {
    const uint32_t mask = p >> (j + 1), mid = lo + (hi - lo) / 2;
    const uint32_t partner = b.rank_of(v ^ mask);
    const bool upper = (v & mask) != 0;
    const Range send =
        upper ? segments(data.size(), p, lo, mid) : segments(data.size(), p, mid, hi);
    const Range keep =
        upper ? segments(data.size(), p, mid, hi) : segments(data.size(), p, lo, mid);
    auto ch = links.to(partner);
    if (!ch.is_ok()) return ch.status();
    for (uint64_t i = 0, off = send.offset; off < send.offset + send.numel;
         ++i, off += o.chunk_elems) {
      const auto x =
          data.subspan(off, std::min<uint64_t>(o.chunk_elems, send.offset + send.numel - off));
      if (!coder.codec) {
        GOSSIP_RETURN_IF_ERROR(
            (*ch)->post_send(mesh::tag(o.round, a, kHalving + j, i), std::as_bytes(x)));
        continue;
      }
      auto& out = tx_.emplace_back();
      GOSSIP_RETURN_IF_ERROR(coder.encode(x, chunk_seed(o.round, o.rank, off), out));
      GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, kHalving + j, i), out));
    }
    for (uint64_t i = 0, off = keep.offset; off < keep.offset + keep.numel;
         ++i, off += o.chunk_elems) {
      const auto dst =
          data.subspan(off, std::min<uint64_t>(o.chunk_elems, keep.offset + keep.numel - off));
      const auto buffer = std::as_writable_bytes(std::span(rx_)).first(max_bytes);
      GOSSIP_RETURN_IF_ERROR((*ch)->post_recv(mesh::tag(o.round, a, kHalving + j, i), buffer));
      auto got = links.wait_recv(partner);
      if (!got.is_ok()) return got.status();
      if (Status st =
              add_message(coder, buffer.first(*got), chunk_seed(o.round, partner, off), dst);
          !st)
        return Status::protocol(
            fmt::format("all-reduce (butterfly): rank {}, round {}, halving step {}: {}", partner,
                        o.round, j, st.message()));
    }
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());
    if (upper)
      lo = mid;
    else
      hi = mid;
  }

  // This member owns segment v: the mean, and with a codec the bytes every node decodes.
  const Range own = segments(data.size(), p, v, v + 1);
  divide(data.data() + own.offset, own.numel, static_cast<float>(o.size));
  if (coder.codec) {
    owned_.resize(p);
    for (auto& s : owned_) s.clear();
    for (uint64_t off = own.offset; off < own.offset + own.numel; off += o.chunk_elems) {
      const auto x =
          data.subspan(off, std::min<uint64_t>(o.chunk_elems, own.offset + own.numel - off));
      auto& out = owned_[v].emplace_back();
      GOSSIP_RETURN_IF_ERROR(coder.encode(x, chunk_seed(o.round, o.rank, off), out));
      GOSSIP_RETURN_IF_ERROR(coder.decode(out, 0, x));
    }
  }

  // All-gather: the block [lo, lo + mask) this member holds doubles every step.
  for (uint32_t j = 0; j < b.steps(); ++j) {
    const uint32_t mask = uint32_t{1} << j;
    const uint32_t partner = b.rank_of(v ^ mask);
    const uint32_t mine = v & ~(mask - 1), theirs = mine ^ mask;
    auto ch = links.to(partner);
    if (!ch.is_ok()) return ch.status();
    const uint32_t step = kDoubling + j;
    if (!coder.codec) {
      const Range send = segments(data.size(), p, mine, mine + mask);
      const Range recv = segments(data.size(), p, theirs, theirs + mask);
      for (uint64_t i = 0, off = send.offset; off < send.offset + send.numel;
           ++i, off += o.chunk_elems)
        GOSSIP_RETURN_IF_ERROR((*ch)->post_send(
            mesh::tag(o.round, a, step, i),
            std::as_bytes(data.subspan(
                off, std::min<uint64_t>(o.chunk_elems, send.offset + send.numel - off)))));
      for (uint64_t i = 0, off = recv.offset; off < recv.offset + recv.numel;
           ++i, off += o.chunk_elems) {
        const auto dst =
            data.subspan(off, std::min<uint64_t>(o.chunk_elems, recv.offset + recv.numel - off));
        GOSSIP_RETURN_IF_ERROR(
            (*ch)->post_recv(mesh::tag(o.round, a, step, i), std::as_writable_bytes(dst)));
        auto got = links.wait_recv(partner);
        if (!got.is_ok()) return got.status();
        if (*got != dst.size_bytes())
          return Status::protocol(
              fmt::format("all-reduce (butterfly): rank {} sent {} bytes for {} fp32", partner,
                          *got, dst.size()));
      }
    } else {
      uint64_t i = 0;
      for (uint32_t s = mine; s < mine + mask; ++s)
        for (auto& bytes : owned_[s])
          GOSSIP_RETURN_IF_ERROR((*ch)->post_send(mesh::tag(o.round, a, step, i++), bytes));
      i = 0;
      for (uint32_t s = theirs; s < theirs + mask; ++s) {
        const Range seg = segments(data.size(), p, s, s + 1);
        owned_[s].clear();
        for (uint64_t off = seg.offset; off < seg.offset + seg.numel; off += o.chunk_elems) {
          const auto dst =
              data.subspan(off, std::min<uint64_t>(o.chunk_elems, seg.offset + seg.numel - off));
          auto& in = owned_[s].emplace_back(coder.max_bytes(dst.size()));
          GOSSIP_RETURN_IF_ERROR((*ch)->post_recv(mesh::tag(o.round, a, step, i++), in));
          auto got = links.wait_recv(partner);
          if (!got.is_ok()) return got.status();
          in.resize(*got);
          if (Status st = coder.decode(in, 0, dst); !st)
            return Status::protocol(
                fmt::format("all-reduce (butterfly): the mean of segment {} from rank {}: {}", s,
                            partner, st.message()));
        }
      }
    }
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());
  }
  return Status::ok();
}

Status ButterflyAllReduce::gather(mesh::Links& links, const Butterfly& b, std::span<float> data,
                                  const RingOptions& o, const mesh::Coder& coder) {
  const Algorithm a = Algorithm::kButterfly;
  GOSSIP_RETURN_IF_ERROR(contributions_.encode_own(data, o, coder));
  const auto member = b.member(o.rank);
  if (!member) {
    const uint32_t odd = o.rank + 1;
    const uint32_t self[] = {o.rank};
    GOSSIP_RETURN_IF_ERROR(contributions_.send(links, odd, self, a, kHandOver, o.round));
    std::vector<uint32_t> others;
    for (uint32_t q = 0; q < o.size; ++q)
      if (q != o.rank) others.push_back(q);
    GOSSIP_RETURN_IF_ERROR(contributions_.receive(links, odd, others, a, kHandBack, o.round));
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());
    return contributions_.sum_into(data, o.round);
  }
  const auto helper = b.helper_of(o.rank);
  if (helper) {
    const uint32_t from[] = {*helper};
    GOSSIP_RETURN_IF_ERROR(contributions_.receive(links, *helper, from, a, kHandOver, o.round));
  }
  const auto ranks_in = [&](uint32_t first, uint32_t count) {
    std::vector<uint32_t> out;
    for (uint32_t w = first; w < first + count; ++w)
      for (uint32_t q : b.ranks_of(w)) out.push_back(q);
    return out;
  };
  for (uint32_t j = 0; j < b.steps(); ++j) {
    const uint32_t mask = uint32_t{1} << j;
    const uint32_t partner = b.rank_of(*member ^ mask);
    const uint32_t mine = *member & ~(mask - 1);
    GOSSIP_RETURN_IF_ERROR(
        contributions_.send(links, partner, ranks_in(mine, mask), a, kGathering + j, o.round));
    GOSSIP_RETURN_IF_ERROR(contributions_.receive(links, partner, ranks_in(mine ^ mask, mask), a,
                                                  kGathering + j, o.round));
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());
  }
  if (helper) {
    std::vector<uint32_t> others;
    for (uint32_t q = 0; q < o.size; ++q)
      if (q != *helper) others.push_back(q);
    GOSSIP_RETURN_IF_ERROR(contributions_.send(links, *helper, others, a, kHandBack, o.round));
    GOSSIP_RETURN_IF_ERROR(links.wait_sends());
  }
  return contributions_.sum_into(data, o.round);
}

}  // namespace gossip::sgd
