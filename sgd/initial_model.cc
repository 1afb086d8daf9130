#include "sgd/initial_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "base/finite.h"
#include "base/refusals.h"

namespace gossip::sgd {

using Clock = std::chrono::steady_clock;

namespace {

// A fetcher that hears nothing for this long asks again (node 0 had not started, or
// restarted); node 0 serves one peer at most once per this long, so that the asks
// again of a slow transfer do not multiply it, nor a hostile peer's requests.
constexpr auto kAskAgain = std::chrono::seconds(2);

}  // namespace

InitialModel::InitialModel(peers::Router& router, uint64_t chunk_elems)
    : router_(router),
      transport_(router.transport()),
      chunk_elems_(std::max<uint64_t>(1, chunk_elems)),
      subscription_(router.subscribe({proto::Kind::kInitialModel},
                                     [this](peers::Incoming& in) { on_message(in); })) {}

void InitialModel::publish(std::span<const float> model, uint64_t layout) {
  snapshot_.round = 0;
  snapshot_.chunks.clear();
  for (uint64_t off = 0; off < model.size(); off += chunk_elems_) {
    const auto part = model.subspan(off, std::min<uint64_t>(chunk_elems_, model.size() - off));
    auto buf = std::make_shared<std::vector<std::byte>>(part.size_bytes());
    std::memcpy(buf->data(), part.data(), part.size_bytes());
    snapshot_.chunks.push_back({off, part.size(), std::move(buf)});
  }
  layout_ = layout;
  total_ = model.size();
  published_ = true;
  for (auto& [peer, waiting] : waiting_)
    if (waiting) serve(peer);
  waiting_.clear();
}

void InitialModel::serve(uint32_t peer) {
  const auto now = Clock::now();
  if (auto it = asked_.find(peer); it != asked_.end() && now - it->second < kAskAgain) return;
  asked_[peer] = now;
  spdlog::info("sending peer {} the initial model ({} chunks)", peer, snapshot_.chunks.size());
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
    if (published_)
      serve(in.peer);
    else
      waiting_[in.peer] = true;
    return;
  }
  if (download_ && in.peer == kSource) on_chunk(in);
}

void InitialModel::on_chunk(const peers::Incoming& in) {
  Download& d = *download_;
  const auto& h = in.as<proto::InitialModel>();
  if (!d.failure) return;
  if (h.seq == 0) {
    d.received = 0;  // a copy from the start (node 0 served this node again)
    d.next_seq = 0;
  }
  if (h.seq != d.next_seq) return;  // the rest of a copy this node no longer reads
  if (d.layout != 0 && h.layout != d.layout) {
    d.failure = Status::mismatch(fmt::format(
        "node 0's model has layout {:016x}, this node's {:016x}: the trainers attached different "
        "models",
        h.layout, d.layout));
    return;
  }
  if (h.total != d.model.size()) {
    d.failure = Status::mismatch(fmt::format(
        "node 0's model has {} elements, this node's {}: the trainers attached different models",
        h.total, d.model.size()));
    return;
  }
  if (h.offset != d.received || h.numel > d.model.size() - d.received) {
    d.failure =
        Status::protocol(fmt::format("chunk {} covers [{}, {}), expected [{}, ...) of {}", h.seq,
                                     h.offset, h.offset + h.numel, d.received, d.model.size()));
    return;
  }
  std::memcpy(d.model.data() + d.received, in.payload.data(), h.numel * sizeof(float));
  d.received += h.numel;
  ++d.next_seq;
}

Status InitialModel::fetch(std::span<float> model, uint64_t layout, Clock::time_point deadline,
                           const std::atomic<bool>* cancel, const std::function<void()>& tick) {
  if (model.empty()) return Status::ok();
  Download d;
  d.model = model;
  d.layout = layout;
  download_ = &d;
  struct End {
    Download*& d;
    ~End() { d = nullptr; }
  } end{download_};
  auto last_heard = Clock::time_point{};  // asks at once
  uint64_t heard = 0;
  while (d.received < model.size()) {
    if (!d.failure) return d.failure.with_context("the initial model from node 0");
    const auto now = Clock::now();
    if (cancel && cancel->load()) return Status::closed("start-up cancelled");
    if (now >= deadline)
      return Status::timeout(fmt::format(
          "node 0 did not send its initial model in time ({} of {} elements); is node 0 up, and "
          "did its trainer attach?",
          d.received, model.size()));
    if (d.received != heard) {
      heard = d.received;
      last_heard = now;
    }
    if (now - last_heard >= kAskAgain) {
      if (Status st = transport_.send(
              kSource, 0,
              proto::InitialModel{proto::InitialModel::kRequest, 0, 0, 0, model.size(), layout});
          !st)
        spdlog::warn("asking node 0 for the initial model: {}", st.message());
      last_heard = now;
    }
    if (tick) tick();
    router_.poll(std::chrono::milliseconds(20));
  }
  if (any_nonfinite(model)) {
    count_refusal(Refusal::kNonFinite);
    transport_.note_dropped(kSource, "an initial model with NaN or Inf: not taken");
    return Status::protocol("node 0's initial model holds NaN or Inf");
  }
  return Status::ok();
}

}  // namespace gossip::sgd
