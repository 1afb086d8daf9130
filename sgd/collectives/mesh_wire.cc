#include "sgd/collectives/mesh_wire.h"

#include <fmt/format.h>

#include <cstring>

#include "compression/codec.h"

namespace gossip::sgd::mesh {

Result<peers::RingChannel*> Links::to(uint32_t rank) const {
  if (rank >= by_rank_.size() || !by_rank_[rank])
    return Status::invalid(fmt::format("all-reduce: no link to rank {}", rank));
  return by_rank_[rank];
}

Status Links::poke_all() {
  for (peers::RingChannel* ch : by_rank_)
    if (ch) GOSSIP_RETURN_IF_ERROR(ch->poke());
  return Status::ok();
}

Result<size_t> Links::wait_recv(uint32_t rank) {
  auto ch = to(rank);
  if (!ch.is_ok()) return ch.status();
  Status other;
  peers::WaitOptions w = wait_;
  w.interrupt = [&] {
    if (wait_.interrupt && wait_.interrupt()) return true;
    for (peers::RingChannel* c : by_rank_)
      if (c && c != *ch) {
        other = c->poke();
        if (!other.is_ok()) return true;
      }
    return false;
  };
  auto got = (*ch)->wait_recv(w);
  if (!other.is_ok()) return other;  // the real cause of the interrupted wait
  return got;
}

Status Links::wait_sends() {
  for (peers::RingChannel* ch : by_rank_)
    if (ch) GOSSIP_RETURN_IF_ERROR(ch->wait_sends(wait_));
  return Status::ok();
}

Coder coder_of(const Compression& c) {
  const bool raw = !c.codec || c.codec->id() == proto::CodecId::kNone;
  return Coder{raw ? nullptr : c.codec, c.pool};
}

uint64_t Coder::max_bytes(uint64_t numel) const {
  return codec ? codec->max_encoded_bytes(numel) : numel * sizeof(float);
}

Status Coder::encode(std::span<const float> x, uint64_t seed, std::vector<std::byte>& out) const {
  if (codec) return codec->encode(x, {seed, pool}, out);
  const auto raw = std::as_bytes(x);
  out.assign(raw.begin(), raw.end());
  return Status::ok();
}

Status Coder::decode(std::span<const std::byte> in, uint64_t seed, std::span<float> y) const {
  if (codec) return codec->decode(in, {seed, pool}, y);
  if (in.size() != y.size_bytes())
    return Status::invalid(fmt::format("{} bytes for {} fp32 values", in.size(), y.size()));
  std::memcpy(y.data(), in.data(), in.size());
  return Status::ok();
}

}  // namespace gossip::sgd::mesh
