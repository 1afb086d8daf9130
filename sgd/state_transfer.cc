#include "sgd/state_transfer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace gossip::sgd {

using Clock = std::chrono::steady_clock;

namespace {

// A peer that sends nothing at all (not even a heartbeat) for this long during a
// transfer is taken for dead.
constexpr auto kTransferSilence = std::chrono::seconds(10);

}  // namespace

StateTransfer::Fetch::Fetch() = default;

StateTransfer::StateTransfer(peers::Router& router, std::function<bool(uint32_t)> took_part)
    : router_(router),
      transport_(router.transport()),
      took_part_(std::move(took_part)),
      subscription_(
          router.subscribe({proto::Kind::kJoin, proto::Kind::kStateRequest,
                            proto::Kind::kStateOffer, proto::Kind::kStateChunk, proto::Kind::kBye},
                           [this](peers::Incoming& in) { on_message(in); })) {}

void StateTransfer::publish(std::span<const float> model, uint64_t next_round, uint64_t step,
                            double weight, uint64_t layout, uint64_t chunk_elems) {
  // Fresh buffers each time: ZeroMQ may still hold the last ones for a joiner.
  snapshot_.round = next_round;
  snapshot_.kind = proto::Kind::kStateChunk;
  snapshot_.codec = proto::CodecId::kNone;
  snapshot_.chunks.clear();
  chunk_elems = std::max<uint64_t>(1, chunk_elems);
  for (uint64_t off = 0; off < model.size(); off += chunk_elems) {
    const auto part = model.subspan(off, std::min<uint64_t>(chunk_elems, model.size() - off));
    auto buf = std::make_shared<std::vector<std::byte>>(part.size_bytes());
    std::memcpy(buf->data(), part.data(), part.size_bytes());
    snapshot_.chunks.push_back({off, part.size(), std::move(buf)});
  }
  next_round_ = next_round;
  step_ = step;
  weight_ = weight;
  layout_ = layout;
}

void StateTransfer::send_offer(uint32_t peer, bool with_state) {
  with_state = with_state && has_state();
  const proto::StateOffer offer{with_state, with_state ? step_ : 0, layout_};
  if (Status st = transport_.send(peer, with_state ? next_round_ : 0, offer); !st)
    spdlog::warn("state offer to peer {}: {}", peer, st.message());
}

void StateTransfer::on_message(peers::Incoming& in) {
  switch (in.kind()) {
    case proto::Kind::kJoin: {
      const bool took_part = took_part_(in.peer);
      spdlog::info("peer {} {}: offering {}", in.peer, took_part ? "rejoins" : "starts",
                   took_part && has_state() ? fmt::format("the model before round {}", next_round_)
                                            : std::string("nothing"));
      send_offer(in.peer, took_part);
      return;
    }
    case proto::Kind::kStateRequest:
      send_offer(in.peer, true);
      if (!has_state()) return;
      spdlog::info("sending peer {} the model before round {} ({} chunks)", in.peer, next_round_,
                   snapshot_.chunks.size());
      if (Status st = snapshot_.send(transport_, in.peer, layout_, weight_); !st)
        spdlog::warn("state for peer {}: {}", in.peer, st.message());
      return;
    case proto::Kind::kStateOffer:
      // Outside a join: an answer that came after its join was over.
      if (fetch_) on_offer(in);
      return;
    case proto::Kind::kStateChunk:
      if (fetch_ && fetch_->from == in.peer) on_chunk(in);
      return;
    case proto::Kind::kBye:
      if (fetch_ && fetch_->from == in.peer && fetch_->failure)
        fetch_->failure = Status::closed(
            fmt::format("shut down after {} of {} elements", fetch_->received, fetch_->numel));
      return;
    default:
      return;
  }
}

void StateTransfer::on_offer(const peers::Incoming& in) {
  Fetch& f = *fetch_;
  const auto& h = in.as<proto::StateOffer>();
  const uint64_t round = in.round();
  if (f.from) {  // downloading: the offer that the chunks of our request belong to
    if (in.peer != *f.from || f.offered || !f.failure) return;
    if (!h.has_state) {
      f.failure = Status::not_found("it no longer has a state");
      return;
    }
    f.offered = true;
    f.state.round = round;
    f.state.step = h.step;
    return;
  }
  const JoinOptions& options = *f.options;
  f.answered.insert(in.peer);
  if (!h.has_state) return;
  running_.push_back(in.peer);
  if (round <= options.min_round) return;
  if (!options.only.empty() &&
      std::find(options.only.begin(), options.only.end(), in.peer) == options.only.end())
    return;
  if (f.layout != 0 && h.layout != 0 && h.layout != f.layout) {
    spdlog::warn(
        "peer {} offers the state of another model (layout {:016x}, ours {:016x}): not taken",
        in.peer, h.layout, f.layout);
    return;
  }
  f.offers.push_back({in.peer, round, h.step, h.layout});
}

void StateTransfer::on_chunk(const peers::Incoming& in) {
  Fetch& f = *fetch_;
  const auto& h = in.as<proto::StateChunk>();
  if (!f.failure || !f.offered || in.round() != f.state.round)
    return;  // a transfer we did not ask for
  if (f.layout != 0 && h.layout != f.layout) {
    f.failure = Status::mismatch(
        fmt::format("its model has layout {:016x}, ours {:016x}", h.layout, f.layout));
    return;
  }
  if (h.seq != f.next_seq || h.offset != f.received || h.numel > f.numel - f.received) {
    f.failure = Status::protocol(
        fmt::format("chunk {} covers [{}, {}), expected chunk {} from {} of {}", h.seq, h.offset,
                    h.offset + h.numel, f.next_seq, f.received, f.numel));
    return;
  }
  std::memcpy(f.state.model.data() + f.received, in.payload.data(), h.numel * sizeof(float));
  f.received += h.numel;
  ++f.next_seq;
  f.state.weight = h.weight;
}

Result<std::optional<NodeState>> StateTransfer::fetch(size_t numel, uint64_t layout,
                                                      const JoinOptions& options) {
  running_.clear();
  const auto& peers = transport_.peers();
  if (peers.empty()) return std::optional<NodeState>();
  fetch_.emplace();
  struct End {
    std::optional<Fetch>& f;
    ~End() { f.reset(); }
  } end{fetch_};
  fetch_->numel = numel;
  fetch_->layout = layout;
  fetch_->options = &options;
  for (const auto& p : peers) (void)transport_.send(p.id, 0, proto::Join{});

  const auto offers_end = std::min(options.deadline, Clock::now() + options.offer_wait);
  while (fetch_->answered.size() < peers.size() && Clock::now() < offers_end) {
    if (options.cancel && options.cancel->load()) return Status::closed("join cancelled");
    if (options.tick) options.tick();
    router_.poll(std::chrono::milliseconds(20));
  }
  std::vector<Offer> offers = std::move(fetch_->offers);
  if (offers.empty()) {
    spdlog::info("join: {} of {} peers answered, none with a state newer than round {}",
                 fetch_->answered.size(), peers.size(), options.min_round);
    return std::optional<NodeState>();
  }
  // The freshest first; among equals the lowest id, so that joiners spread no load
  // decisions of their own.
  std::sort(offers.begin(), offers.end(), [](const Offer& a, const Offer& b) {
    return a.round != b.round ? a.round > b.round : a.peer < b.peer;
  });
  std::string failures;
  for (const auto& o : offers) {
    auto state = download(o);
    if (state) return std::optional<NodeState>(std::move(state).value());
    spdlog::warn("join: the state of peer {} did not arrive: {}", o.peer, state.status().message());
    failures += fmt::format("{}peer {}: {}", failures.empty() ? "" : "; ", o.peer,
                            state.status().message());
    if (options.cancel && options.cancel->load()) break;
  }
  return Status::timeout("join: no peer that offered its state delivered it (" + failures + ")");
}

Result<NodeState> StateTransfer::download(const Offer& offer) {
  Fetch& f = *fetch_;
  const JoinOptions& options = *f.options;
  f.from = offer.peer;
  f.offered = false;
  f.received = 0;
  f.next_seq = 0;
  f.failure = Status::ok();
  f.state = NodeState{};
  f.state.from = offer.peer;
  f.state.model.assign(f.numel, 0.0f);
  GOSSIP_RETURN_IF_ERROR(transport_.send(offer.peer, 0, proto::StateRequest{}));

  // Silence is counted from the request: the peer's every message (heartbeats too)
  // says it is alive.
  const auto asked = Clock::now();
  while (true) {
    if (!f.failure) return f.failure;
    if (f.offered && f.received == f.numel) return std::move(f.state);
    const auto now = Clock::now();
    if (options.cancel && options.cancel->load()) return Status::closed("join cancelled");
    if (now >= options.deadline)
      return Status::timeout(fmt::format("{} of {} elements by the deadline", f.received, f.numel));
    const auto silent = std::min<uint64_t>(
        transport_.traffic().silent_ms(offer.peer),
        std::chrono::duration_cast<std::chrono::milliseconds>(now - asked).count());
    if (silent >
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(kTransferSilence).count()))
      return Status::timeout(
          fmt::format("silent for {} s after {} of {} elements",
                      std::chrono::duration_cast<std::chrono::seconds>(kTransferSilence).count(),
                      f.received, f.numel));
    if (options.tick) options.tick();
    router_.poll(std::chrono::milliseconds(20));
  }
}

}  // namespace gossip::sgd
