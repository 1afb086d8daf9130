#include "sgd/collectives/all_gather_all_reduce.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "base/finite.h"
#include "base/refusals.h"
#include "compression/error_feedback.h"

namespace gossip::sgd {

AllGatherAllReduce::AllGatherAllReduce(peers::Router& router, uint64_t chunk_bytes,
                                       const compression::Codec* codec,
                                       compression::ThreadPool* pool, uint32_t trim)
    : router_(router),
      transport_(router.transport()),
      chunk_elems_(std::max<uint64_t>(1, chunk_bytes / sizeof(float))),
      codec_(codec),
      pool_(pool),
      trim_(trim),
      subscription_(
          router.subscribe({proto::Kind::kHello, proto::Kind::kBye, proto::Kind::kModelChunk},
                           [this](peers::Incoming& in) { absorb(in); })) {}

Status AllGatherAllReduce::compress(std::span<float> data, uint64_t round, const Compression& c) {
  const uint64_t chunks = (data.size() + chunk_elems_ - 1) / chunk_elems_;
  encoded_.resize(chunks);
  for (uint64_t seq = 0; seq < chunks; ++seq) {
    uint64_t off = seq * chunk_elems_;
    auto chunk = data.subspan(off, std::min<uint64_t>(chunk_elems_, data.size() - off));
    compression::CodecContext ctx{chunk_seed(round, transport_.self(), seq), c.pool};
    if (c.error_feedback) {
      // u and sent alias: ErrorFeedback reads all of u before it writes sent.
      GOSSIP_RETURN_IF_ERROR(c.error_feedback->encode(chunk, off, ctx, encoded_[seq], chunk));
    } else {
      GOSSIP_RETURN_IF_ERROR(c.codec->encode(chunk, ctx, encoded_[seq]));
      GOSSIP_RETURN_IF_ERROR(c.codec->decode(encoded_[seq], ctx, chunk));
    }
  }
  return Status::ok();
}

size_t AllGatherAllReduce::peer_index(uint32_t peer) const {
  const auto& ps = transport_.peers();
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].id == peer) return i;
  return ps.size();
}

AllGatherAllReduce::RoundState& AllGatherAllReduce::state_for(uint64_t round, size_t numel) {
  RoundState& s = states_[round % 2];
  // A state made before the node knew its model's size (a peer's bye, read that early)
  // has no room for the round's elements: start it again.
  if (s.round != round || s.sum.size() != numel) {
    size_t n = transport_.peers().size();
    s.round = round;
    s.sum.assign(numel, 0.0);
    s.received.assign(n, 0);
    s.next_seq.assign(n, 0);
    s.left.assign(n, false);
    s.excluded.clear();
    s.failure = Status::ok();
    s.out.assign(n, false);
    for (size_t i = 0; i < n; ++i) s.out[i] = transport_.peers()[i].banned;
    if (trim_ > 0) s.values.resize(n * numel);
  }
  return s;
}

void AllGatherAllReduce::absorb(peers::Incoming& in) {
  const uint64_t current = current_;
  const size_t numel = numel_;
  size_t pi = peer_index(in.peer);
  if (early_.size() != transport_.peers().size()) early_.assign(transport_.peers().size(), 0);
  if (in.kind() == proto::Kind::kHello) {
    spdlog::info("peer {} is up", in.peer);
    if (pi < early_.size()) early_[pi] = 0;  // (re)started: its rounds begin again
    return;
  }
  if (in.kind() == proto::Kind::kBye) {
    spdlog::warn("peer {} shut down", in.peer);
    RoundState& s = state_for(current, numel);
    if (s.received[pi] < numel) (trim_ > 0 ? s.out[pi] : s.left[pi]) = true;
    return;
  }
  const auto& h = in.as<proto::ModelChunk>();
  const uint64_t round = in.round();
  auto drop = [&](const std::string& why) { transport_.note_dropped(in.peer, why); };
  auto doom = [&](uint64_t r, Status st) {
    RoundState& s = state_for(r, numel);
    if (trim_ > 0) {  // robust: this peer is out of the round, the others go on
      count_refusal(Refusal::kMalformed);
      transport_.note_dropped(in.peer, st.message() + ": left out of the round");
      s.out[pi] = true;
      return;
    }
    transport_.note_dropped(in.peer, st.message());
    if (s.failure.is_ok()) s.failure = std::move(st);
  };
  if (round != current && round != current + 1) {
    if (trim_ > 0 && pi < early_.size() && round > current + 1 &&
        round - current <= kMaxRoundsAhead)
      early_[pi] = std::max(early_[pi], round);
    return drop(fmt::format("chunk for round {} while this node is in round {}", round, current));
  }
  if (layout_ != 0 && h.layout != layout_)
    return doom(
        round,
        Status::mismatch(fmt::format(
            "peer {} trains a model with another layout (fingerprint {:016x}, ours {:016x}); "
            "every node must attach the same tensors",
            in.peer, h.layout, layout_)));
  if (h.offset + h.numel > numel)
    return doom(round, Status::mismatch(fmt::format(
                           "peer {} sent elements [{}, {}) but the model has {} elements", in.peer,
                           h.offset, h.offset + h.numel, numel)));
  RoundState& s = state_for(round, numel);
  if (s.out[pi]) return;
  if (h.seq != s.next_seq[pi])
    return drop(fmt::format("chunk seq {} in round {}, expected {}", h.seq, round, s.next_seq[pi]));
  s.next_seq[pi]++;
  if (s.received[pi] + h.numel > numel)
    return doom(round, Status::mismatch(
                           fmt::format("peer {} sent more than the model's {} elements in round {}",
                                       in.peer, numel, round)));
  s.received[pi] += h.numel;
  double* sum = s.sum.data() + h.offset;
  const std::byte* bytes = static_cast<const std::byte*>(in.payload.data());
  std::span<const float> x;
  if (h.codec != proto::CodecId::kNone) {
    if (!codec_ || h.codec != codec_->id())
      return doom(round, Status::mismatch(
                             fmt::format("peer {} sends {} payloads; this node decodes none and {}",
                                         in.peer, proto::codec_name(h.codec),
                                         codec_ ? codec_->spec() : std::string("nothing else"))));
    scratch_.resize(h.numel);
    compression::CodecContext ctx{chunk_seed(round, in.peer, h.seq), pool_};
    if (auto st = codec_->decode({bytes, in.payload.size()}, ctx, scratch_); !st)
      return doom(round, st.with_context(fmt::format("payload from peer {}", in.peer)));
    x = scratch_;
  } else if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    x = {reinterpret_cast<const float*>(bytes), h.numel};
  } else {
    scratch_.resize(h.numel);
    std::memcpy(scratch_.data(), bytes, h.numel * sizeof(float));
    x = scratch_;
  }
  const bool nonfinite = any_nonfinite(x);  // one pass over the chunk, whichever mean
  if (nonfinite && trim_ > 0) {
    count_refusal(Refusal::kNonFinite);
    drop(fmt::format("round {}: elements [{}, {}) hold NaN or Inf: left out of the round", round,
                     h.offset, h.offset + h.numel));
    s.out[pi] = true;
    return;
  }
  if (trim_ > 0) {
    std::copy(x.begin(), x.end(), s.values.begin() + static_cast<ptrdiff_t>(pi * numel + h.offset));
    return;
  }
  if (nonfinite) {
    count_refusal(Refusal::kNonFinite);
    drop(fmt::format("round {}: elements [{}, {}) hold NaN or Inf: left out of the mean", round,
                     h.offset, h.offset + h.numel));
    s.excluded.resize(numel, 0);
    for (uint64_t i = 0; i < h.numel; ++i) ++s.excluded[h.offset + i];
    return;
  }
  for (uint64_t i = 0; i < h.numel; ++i) sum[i] += x[i];
}

void AllGatherAllReduce::progress(uint64_t next_round, size_t numel,
                                  std::chrono::milliseconds wait) {
  if (transport_.peers().empty()) return;
  current_ = next_round;
  numel_ = numel;
  router_.poll(wait);
}

Status AllGatherAllReduce::all_reduce_mean(std::span<float> data, uint64_t round,
                                           const CollectiveOptions& options) {
  const auto& ps = transport_.peers();
  if (ps.empty()) return Status::ok();
  const size_t numel = data.size();
  auto bytes = std::as_bytes(std::span<const float>(data));
  const auto* codec = options.compression.codec;
  if (codec && codec->id() == proto::CodecId::kNone) codec = nullptr;
  if (codec) {
    if (codec != codec_)
      return Status::invalid("round compressed with a codec the all-reduce was not built for");
    GOSSIP_RETURN_IF_ERROR(
        compress(data, round, options.compression)
            .with_context(fmt::format("round {}: compressing {}", round, codec->spec())));
  }

  for (const auto& p : ps) {
    if (p.banned) continue;
    uint64_t seq = 0;
    for (uint64_t off = 0; off < numel; off += chunk_elems_, ++seq) {
      uint64_t len = std::min<uint64_t>(chunk_elems_, numel - off);
      proto::ModelChunk h;
      h.seq = seq;
      h.offset = off;
      h.numel = len;
      h.layout = layout_;
      std::span<const std::byte> payload = bytes.subspan(off * sizeof(float), len * sizeof(float));
      if (codec) {
        h.codec = codec->id();
        payload = encoded_[seq];
      }
      GOSSIP_RETURN_IF_ERROR(transport_.send_zero_copy(p.id, round, h, payload));
    }
  }

  auto missing = [&](const RoundState& s) {
    std::string who;
    for (size_t i = 0; i < ps.size(); ++i)
      if (s.received[i] < numel && !s.out[i])
        who += fmt::format("{}peer {} ({} of {} elements)", who.empty() ? "" : ", ", ps[i].id,
                           s.received[i], numel);
    return who;
  };
  current_ = round;
  numel_ = numel;
  RoundState& s = state_for(round, numel);
  const auto started = router_.clock().now();
  std::optional<TimePoint> grace_end;  // trimmed: when the quorum was reached, + grace
  while (true) {
    if (!s.failure.is_ok()) {
      Status failure = s.failure.with_context(fmt::format("round {}", round));
      s.round = UINT64_MAX;
      return failure;
    }
    bool complete = true;
    size_t in = 0;   // peers whose whole model is here
    size_t out = 0;  // peers left out of this round already
    for (size_t i = 0; i < ps.size(); ++i) {
      if (s.out[i]) {
        ++out;
        continue;
      }
      if (trim_ > 0 && s.received[i] < numel && i < early_.size() && early_[i] != 0 &&
          early_[i] >= round) {
        spdlog::warn(
            "round {}: left out peer {}, which is in round {} already: its model for this round "
            "came before this node was ready for it",
            round, ps[i].id, early_[i]);
        s.out[i] = true;
        ++out;
        continue;
      }
      if (s.received[i] < numel)
        complete = false;
      else
        ++in;
      if (s.left[i])
        return Status::closed(
            fmt::format("round {}: peer {} shut down before sending its model", round, ps[i].id));
    }
    if (complete) break;
    // The trim's quorum: at most `trim` peers still missing besides those already left
    // out (counting the left-out as missing let one silent peer hold a slow node's round
    // to its deadline). Liars whose values came are still trimmed.
    if (trim_ > 0 && in + out + trim_ >= ps.size()) {
      const auto now = router_.clock().now();
      if (!grace_end)
        grace_end = now + std::clamp<Duration>(now - started, std::chrono::milliseconds(20),
                                               std::chrono::seconds(1));
      if (now >= *grace_end) {
        spdlog::warn("round {}: left out {} (late by the grace of the trimmed mean)", round,
                     missing(s));
        for (size_t i = 0; i < ps.size(); ++i)
          if (s.received[i] < numel) s.out[i] = true;
        break;
      }
    }
    if (options.cancel && options.cancel->load()) return Status::closed("round cancelled");
    auto now = router_.clock().now();
    if (now >= options.deadline)
      return Status::timeout(fmt::format("round {}: no complete model from {}", round, missing(s)));
    // Rounded up: the last part of a millisecond rounded down would be polls of 0 ms
    // until the deadline, a spin (forever on the simulation's clock, which only moves
    // when someone waits).
    auto wait = std::min(std::chrono::ceil<std::chrono::milliseconds>(options.deadline - now),
                         std::chrono::milliseconds(grace_end ? 5 : 100));
    router_.poll(wait);
  }

  // Our chunks are still referenced by ZeroMQ until they reach the kernel; the
  // caller may overwrite data as soon as we return, so wait for them.
  for (const auto& p : ps) {
    if (p.banned) continue;
    while (transport_.pending_sends(p.id) > 0) {
      if (options.cancel && options.cancel->load()) return Status::closed("round cancelled");
      if (router_.clock().now() >= options.deadline)
        return Status::timeout(
            fmt::format("round {}: peer {} did not take our model in time", round, p.id));
      router_.clock().sleep_for(std::chrono::microseconds(200));
    }
  }

  if (trim_ > 0) {
    trimmed_mean(s, data);
    s.round = UINT64_MAX;
    return Status::ok();
  }
  // Banned peers are out of every round.
  const size_t in =
      ps.size() + 1 - static_cast<size_t>(std::count(s.out.begin(), s.out.end(), true));
  const double inv_n = 1.0 / static_cast<double>(in);
  const double* sum = s.sum.data();
  if (s.excluded.empty()) {
    for (size_t i = 0; i < numel; ++i)
      data[i] = static_cast<float>((sum[i] + static_cast<double>(data[i])) * inv_n);
  } else {
    for (size_t i = 0; i < numel; ++i)
      data[i] = static_cast<float>((sum[i] + static_cast<double>(data[i])) /
                                   static_cast<double>(in - s.excluded[i]));
  }
  s.round = UINT64_MAX;
  return Status::ok();
}

void AllGatherAllReduce::trimmed_mean(const RoundState& s, std::span<float> data) const {
  const size_t numel = data.size();
  std::vector<const float*> from;  // the peers in the round
  for (size_t i = 0; i < s.out.size(); ++i)
    if (!s.out[i] && s.received[i] >= numel) from.push_back(s.values.data() + i * numel);
  const size_t m = from.size() + 1;
  // Fewer values than the trim needs (peers left out): the median, robust as far as
  // it can be.
  const size_t cut = m > 2 * size_t{trim_} ? trim_ : (m - 1) / 2;
  std::vector<float> v(m);
  for (size_t e = 0; e < numel; ++e) {
    v[0] = data[e];
    for (size_t j = 0; j < from.size(); ++j) v[j + 1] = from[j][e];
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (size_t j = cut; j < m - cut; ++j) sum += v[j];
    data[e] = static_cast<float>(sum / static_cast<double>(m - 2 * cut));
  }
}

}  // namespace gossip::sgd
