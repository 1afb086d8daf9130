#include "sgd/state_transfer.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gossip::sgd {

using Clock = std::chrono::steady_clock;

namespace {

// A peer that sends nothing at all (not even a heartbeat) for this long during a
// transfer is taken for dead.
constexpr auto kTransferSilence = std::chrono::seconds(10);

}  // namespace

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
  proto::Header h;
  h.kind = proto::Kind::kStateOffer;
  h.from = transport_.self();
  h.round = with_state ? next_round_ : 0;
  h.offset = with_state ? step_ : 0;
  h.layout = layout_;
  if (Status st = transport_.send(peer, h); !st) spdlog::warn("state offer to peer {}: {}", peer, st.message());
}

bool StateTransfer::serve(const peers::Incoming& in, bool took_part) {
  switch (in.header.kind) {
    case proto::Kind::kJoin:
      spdlog::info("peer {} {}: offering {}", in.peer, took_part ? "rejoins" : "starts",
                   took_part && has_state() ? fmt::format("the model before round {}", next_round_)
                                            : std::string("nothing"));
      send_offer(in.peer, took_part);
      return true;
    case proto::Kind::kStateRequest:
      send_offer(in.peer, true);
      if (!has_state()) return true;
      spdlog::info("sending peer {} the model before round {} ({} chunks)", in.peer, next_round_,
                   snapshot_.chunks.size());
      if (Status st = snapshot_.send(transport_, in.peer, layout_, weight_); !st)
        spdlog::warn("state for peer {}: {}", in.peer, st.message());
      return true;
    case proto::Kind::kStateOffer:
    case proto::Kind::kStateChunk:
      return true;  // an answer that came after its join was over
    default:
      return false;
  }
}

Result<std::optional<NodeState>> StateTransfer::fetch(
    size_t numel, uint64_t layout, const JoinOptions& options,
    const std::function<void(peers::Incoming&)>& other) {
  running_.clear();
  const auto& peers = transport_.peers();
  if (peers.empty()) return std::optional<NodeState>();
  proto::Header join;
  join.kind = proto::Kind::kJoin;
  join.from = transport_.self();
  join.layout = layout;
  for (const auto& p : peers) (void)transport_.send(p.id, join);

  std::vector<Offer> offers;
  std::set<uint32_t> answered;
  const auto offers_end = std::min(options.deadline, Clock::now() + options.offer_wait);
  while (answered.size() < peers.size() && Clock::now() < offers_end) {
    if (options.cancel && options.cancel->load()) return Status::closed("join cancelled");
    if (options.tick) options.tick();
    auto in = transport_.recv(std::chrono::milliseconds(20));
    if (!in) continue;
    const auto& h = in->header;
    if (h.kind != proto::Kind::kStateOffer) {
      if (!serve(*in)) other(*in);
      continue;
    }
    answered.insert(in->peer);
    if (h.round == 0) continue;
    running_.push_back(in->peer);
    if (h.round <= options.min_round) continue;
    if (!options.only.empty() && std::find(options.only.begin(), options.only.end(), in->peer) == options.only.end())
      continue;
    if (layout != 0 && h.layout != 0 && h.layout != layout) {
      spdlog::warn("peer {} offers the state of another model (layout {:016x}, ours {:016x}): not taken",
                   in->peer, h.layout, layout);
      continue;
    }
    offers.push_back({in->peer, h.round, h.offset, h.layout});
  }
  if (offers.empty()) {
    spdlog::info("join: {} of {} peers answered, none with a state newer than round {}",
                 answered.size(), peers.size(), options.min_round);
    return std::optional<NodeState>();
  }
  // The freshest first; among equals the lowest id, so that joiners spread no load
  // decisions of their own.
  std::sort(offers.begin(), offers.end(), [](const Offer& a, const Offer& b) {
    return a.round != b.round ? a.round > b.round : a.peer < b.peer;
  });
  std::string failures;
  for (const auto& o : offers) {
    auto state = download(o, numel, layout, options, other);
    if (state) return std::optional<NodeState>(std::move(state).value());
    spdlog::warn("join: the state of peer {} did not arrive: {}", o.peer, state.status().message());
    failures += fmt::format("{}peer {}: {}", failures.empty() ? "" : "; ", o.peer, state.status().message());
    if (options.cancel && options.cancel->load()) break;
  }
  return Status::timeout("join: no peer that offered its state delivered it (" + failures + ")");
}

Result<NodeState> StateTransfer::download(const Offer& offer, size_t numel, uint64_t layout,
                                          const JoinOptions& options,
                                          const std::function<void(peers::Incoming&)>& other) {
  proto::Header req;
  req.kind = proto::Kind::kStateRequest;
  req.from = transport_.self();
  req.layout = layout;
  GOSSIP_RETURN_IF_ERROR(transport_.send(offer.peer, req));

  NodeState state;
  state.from = offer.peer;
  state.model.assign(numel, 0.0f);
  bool offered = false;  // the peer's answer starts with the offer its chunks belong to
  uint64_t received = 0;
  uint64_t next_seq = 0;
  auto last_heard = Clock::now();
  while (true) {
    const auto now = Clock::now();
    if (options.cancel && options.cancel->load()) return Status::closed("join cancelled");
    if (now >= options.deadline)
      return Status::timeout(fmt::format("{} of {} elements by the deadline", received, numel));
    if (now - last_heard > kTransferSilence)
      return Status::timeout(fmt::format("silent for {} s after {} of {} elements",
                                         std::chrono::duration_cast<std::chrono::seconds>(kTransferSilence).count(),
                                         received, numel));
    if (options.tick) options.tick();
    auto in = transport_.recv(std::chrono::milliseconds(20));
    if (!in) continue;
    const auto& h = in->header;
    if (in->peer != offer.peer) {
      if (h.kind == proto::Kind::kStateOffer || h.kind == proto::Kind::kStateChunk) continue;
      if (!serve(*in)) other(*in);
      continue;
    }
    last_heard = Clock::now();
    switch (h.kind) {
      case proto::Kind::kBye:
        return Status::closed(fmt::format("shut down after {} of {} elements", received, numel));
      case proto::Kind::kStateOffer:
        if (offered) continue;
        if (h.round == 0) return Status::not_found("it no longer has a state");
        offered = true;
        state.round = h.round;
        state.step = h.offset;
        continue;
      case proto::Kind::kStateChunk: {
        if (!offered || h.round != state.round) continue;  // a transfer we did not ask for
        if (layout != 0 && h.layout != layout)
          return Status::mismatch(fmt::format("its model has layout {:016x}, ours {:016x}", h.layout, layout));
        if (h.seq != next_seq || h.offset != received || h.numel > numel - received)
          return Status::protocol(fmt::format("chunk {} covers [{}, {}), expected chunk {} from {} of {}",
                                              h.seq, h.offset, h.offset + h.numel, next_seq, received, numel));
        std::memcpy(state.model.data() + received, in->payload.data(), h.numel * sizeof(float));
        received += h.numel;
        ++next_seq;
        state.weight = h.weight;
        if (received == numel) return state;
        continue;
      }
      default:
        if (!serve(*in)) other(*in);
    }
  }
}

}  // namespace gossip::sgd
