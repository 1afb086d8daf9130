#include "sgd/membership/initial_model.h"

#include <fmt/format.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

#include "base/finite.h"
#include "base/refusals.h"

namespace gossip::sgd {

namespace {

// A fetcher that hears nothing for this long asks again (node 0 had not started, or
// restarted).
constexpr auto kAskAgain = std::chrono::seconds(2);
// Node 0 serves one peer at most once per this long (publishing pushes to all at
// once), so that neither the asks again of a slow transfer nor a hostile peer's
// requests make it send the model more than that.
constexpr auto kServeAgain = std::chrono::seconds(30);

}  // namespace

InitialModel::InitialModel(peers::Router& router, uint64_t chunk_elems)
    : router_(router),
      transport_(router.transport()),
      chunk_elems_(std::max<uint64_t>(1, chunk_elems)),
      subscription_(router.subscribe({proto::Kind::kInitialModel},
                                     [this](peers::Incoming& in) { on_message(in); })) {}

uint64_t InitialModel::digest(std::span<const float> model) {
  // A replica that hashes alike holds the same bits: a collision would leave a node
  // apart from the others for good, so a cryptographic hash, not a checksum. Only
  // node 0's digests are taken, and node 0 is the source of the model anyway.
  if (sodium_init() < 0) std::abort();        // idempotent; fails only without entropy
  uint8_t out[crypto_generichash_BYTES_MIN];  // 16 bytes; the first 8 are sent
  crypto_generichash(out, sizeof out, reinterpret_cast<const unsigned char*>(model.data()),
                     model.size_bytes(), nullptr, 0);
  uint64_t d = 0;
  std::memcpy(&d, out, sizeof d);
  return d == 0 ? 1 : d;
}

void InitialModel::publish(std::span<const float> model, uint64_t layout) {
  snapshot_.round = 0;
  snapshot_.copy_raw(model, chunk_elems_);
  layout_ = layout;
  total_ = model.size();
  digest_ = digest(model);
  published_ = true;
  served_.clear();  // a new model: everyone gets it
  for (const auto& p : transport_.peers()) {
    const auto ask = waiting_.find(p.id);
    if (ask == waiting_.end()) {
      answer(p.id, 0, total_, layout_);  // the digest: a peer seeded alike needs no more
    } else {
      answer(p.id, ask->second.digest, ask->second.total, ask->second.layout);
    }
  }
  waiting_.clear();
}

void InitialModel::answer(uint32_t peer, uint64_t asker_digest, uint64_t total, uint64_t layout) {
  // An unasked push (asker_digest 0) and a matching ask get the digest; a peer whose
  // replica differs gets the chunks.
  if (asker_digest != 0 && (asker_digest != digest_ || total != total_ || layout != layout_)) {
    serve(peer);
    return;
  }
  if (asker_digest != 0) settled_.insert(peer);  // it holds the model
  if (Status st = transport_.send(
          peer, 0,
          proto::InitialModel{proto::InitialModel::kDigest, digest_, 0, 0, total_, layout_});
      !st)
    spdlog::warn("initial model's digest for peer {}: {}", peer, st.message());
}

void InitialModel::before_rounds(std::chrono::milliseconds wait,
                                 const std::function<void()>& tick) {
  if (!published_ || pushed_) return;
  pushed_ = true;
  const auto peers = transport_.peers();
  const auto deadline = router_.clock().now() + wait;
  const auto all_settled = [&] {
    for (const auto& p : peers)
      if (!settled_.count(p.id)) return false;
    return true;
  };
  while (!all_settled() && router_.clock().now() < deadline) {
    router_.poll(std::chrono::milliseconds(20));
    if (tick) tick();
  }
  for (const auto& p : peers)
    if (!settled_.count(p.id)) serve(p.id);
}

void InitialModel::serve(uint32_t peer) {
  const auto now = router_.clock().now();
  if (auto it = served_.find(peer); it != served_.end() && now - it->second < kServeAgain) return;
  served_[peer] = now;
  settled_.insert(peer);
  spdlog::debug("sending peer {} the initial model ({} chunks)", peer, snapshot_.chunks.size());
  for (size_t seq = 0; seq < snapshot_.chunks.size(); ++seq) {
    const auto& c = snapshot_.chunks[seq];
    const proto::InitialModel body{
        proto::InitialModel::kChunk, seq, c.offset, c.numel, total_, layout_};
    if (Status st = transport_.send_shared(peer, 0, body, c.payload); !st) {
      spdlog::warn("initial model for peer {}: {}", peer, st.message());
      return;
    }
  }
}

void InitialModel::on_message(peers::Incoming& in) {
  const auto& m = in.as<proto::InitialModel>();
  if (m.what == proto::InitialModel::kRequest) {
    if (router_.self() != kSource) return;  // asked the wrong node: nothing to give
    // An ask without a digest (0) wants the chunks.
    const uint64_t asker = m.seq == 0 ? ~uint64_t{0} : m.seq;
    if (published_)
      answer(in.peer, asker, m.total, m.layout);
    else
      waiting_[in.peer] = {asker, m.total, m.layout};
    return;
  }
  if (in.peer != kSource || router_.self() == kSource || taken_) return;
  if (m.what == proto::InitialModel::kDigest) {
    source_digest_ = {m.seq, m.total, m.layout};
    return;
  }
  on_chunk(in);
}

void InitialModel::on_chunk(const peers::Incoming& in) {
  Received& r = received_;
  const auto& h = in.as<proto::InitialModel>();
  if (h.seq == 0) {  // a copy from the start: node 0 published, or served this node again
    r = Received{};
    r.total = h.total;
    r.layout = h.layout;
  }
  if (!r.failure || h.seq != r.next_seq || r.total == 0)
    return;  // the rest of a copy this node no longer reads
  if (h.total != r.total || h.layout != r.layout) {
    r.failure = Status::protocol(fmt::format(
        "chunk {} is of a model of {} elements, layout {:016x}; chunk 0 said {}, {:016x}", h.seq,
        h.total, h.layout, r.total, r.layout));
    return;
  }
  if (h.offset != r.model.size() || h.numel > r.total - r.model.size()) {
    r.failure =
        Status::protocol(fmt::format("chunk {} covers [{}, {}), expected [{}, ...) of {}", h.seq,
                                     h.offset, h.offset + h.numel, r.model.size(), r.total));
    return;
  }
  const auto* values = static_cast<const float*>(in.payload.data());
  r.model.insert(r.model.end(), values, values + h.numel);
  ++r.next_seq;
}

Status InitialModel::check(std::span<const float> model, uint64_t layout) const {
  const Received& r = received_;
  if (!r.failure) return r.failure;
  if (r.layout != layout)
    return Status::mismatch(fmt::format(
        "node 0's model has layout {:016x}, this node's {:016x}: the trainers attached different "
        "models",
        r.layout, layout));
  if (r.total != model.size())
    return Status::mismatch(fmt::format(
        "node 0's model has {} elements, this node's {}: the trainers attached different models",
        r.total, model.size()));
  if (any_nonfinite(r.model)) {
    count_refusal(Refusal::kNonFinite);
    transport_.note_dropped(kSource, "an initial model with NaN or Inf: not taken");
    return Status::protocol("it holds NaN or Inf");
  }
  return Status::ok();
}

Status InitialModel::fetch(std::span<float> model, uint64_t layout, TimePoint deadline,
                           const std::atomic<bool>* cancel, const std::function<void()>& tick) {
  if (model.empty()) return Status::ok();
  auto last_heard = TimePoint{};  // asks at once unless node 0's push is here
  uint64_t heard = 0;
  const uint64_t own = digest(model);
  while (true) {
    router_.poll(std::chrono::milliseconds(0));
    if (source_digest_.digest == own && source_digest_.total == model.size() &&
        source_digest_.layout == layout) {
      spdlog::info("start-up: this node's model is node 0's already (digest {:016x})", own);
      // Says so, or node 0 pushes the chunks before its first round.
      if (Status st = transport_.send(
              kSource, 0,
              proto::InitialModel{proto::InitialModel::kRequest, own, 0, 0, model.size(), layout});
          !st)
        spdlog::warn("confirming node 0's initial model: {}", st.message());
      taken_ = true;
      received_ = Received{};
      return Status::ok();
    }
    const Received& r = received_;
    if (!r.failure || r.complete()) {
      GOSSIP_RETURN_IF_ERROR(check(model, layout).with_context("the initial model from node 0"));
      std::copy(r.model.begin(), r.model.end(), model.begin());
      taken_ = true;
      received_ = Received{};
      return Status::ok();
    }
    const auto now = router_.clock().now();
    if (cancel && cancel->load()) return Status::closed("start-up cancelled");
    if (now >= deadline)
      return Status::timeout(fmt::format(
          "node 0 did not send its initial model in time ({} of {} elements); is node 0 up, and "
          "did its trainer attach and start?",
          r.model.size(), model.size()));
    if (r.model.size() != heard) {
      heard = r.model.size();
      last_heard = now;
    }
    // Node 0's digest of another model: ask for the chunks at once.
    const bool differs = source_digest_.digest != 0;
    if (now - last_heard >= kAskAgain || (differs && !asked_after_digest_)) {
      asked_after_digest_ = differs;
      if (Status st = transport_.send(
              kSource, 0,
              proto::InitialModel{proto::InitialModel::kRequest, own, 0, 0, model.size(), layout});
          !st)
        spdlog::warn("asking node 0 for the initial model: {}", st.message());
      last_heard = now;
    }
    if (tick) tick();
    router_.poll(std::chrono::milliseconds(20));
  }
}

void InitialModel::discard() {
  received_ = Received{};
  source_digest_ = {};
}

}  // namespace gossip::sgd
