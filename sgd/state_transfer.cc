#include "sgd/state_transfer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "base/finite.h"
#include "base/refusals.h"

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

void StateTransfer::publish(std::span<const float> model, std::span<const float> shared,
                            uint64_t next_round, uint64_t step, double weight, uint64_t layout,
                            uint64_t chunk_elems) {
  snapshot_.round = next_round;
  snapshot_.kind = proto::Kind::kStateChunk;
  snapshot_.copy_raw(model, chunk_elems, shared);
  numel_ = model.size() + shared.size();
  next_round_ = next_round;
  step_ = step;
  weight_ = weight;
  layout_ = layout;
}

void StateTransfer::send_offer(uint32_t peer, bool with_state) {
  with_state = with_state && has_state();
  const proto::StateOffer offer{with_state, with_state ? step_ : 0, with_state ? numel_ : 0,
                                layout_};
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
  if (h.numel != f.numel) {
    // The same model with another strategy state: another --outer-optimizer, say.
    spdlog::warn(
        "peer {} offers a state of {} elements, this node's has {} ({} of the model, {} the "
        "strategy shares with it): not taken; do all nodes run the same strategy options?",
        in.peer, h.numel, f.numel, f.numel - f.shared_numel, f.shared_numel);
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

Result<std::optional<NodeState>> StateTransfer::fetch(size_t numel, size_t shared_numel,
                                                      uint64_t layout, const JoinOptions& options) {
  running_.clear();
  const auto& peers = transport_.peers();
  if (peers.empty()) return std::optional<NodeState>();
  fetch_.emplace();
  struct End {
    std::optional<Fetch>& f;
    ~End() { f.reset(); }
  } end{fetch_};
  fetch_->numel = numel + shared_numel;
  fetch_->shared_numel = shared_numel;
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
  drop_implausible(offers);
  // The freshest first; among equals the lowest id, so that joiners spread no load
  // decisions of their own.
  std::sort(offers.begin(), offers.end(), [](const Offer& a, const Offer& b) {
    return a.round != b.round ? a.round > b.round : a.peer < b.peer;
  });
  const size_t wanted = 2 * options.trim + 1;
  std::vector<NodeState> states;
  std::string failures;
  for (const auto& o : offers) {
    auto state = download(o);
    if (state) state = check_state(std::move(state).value(), options);
    if (state) {
      states.push_back(std::move(state).value());
      if (states.size() == wanted) break;
      continue;
    }
    spdlog::warn("join: the state of peer {} not taken: {}", o.peer, state.status().message());
    failures += fmt::format("{}peer {}: {}", failures.empty() ? "" : "; ", o.peer,
                            state.status().message());
    if (options.cancel && options.cancel->load()) break;
  }
  if (states.empty())
    return Status::timeout("join: no peer that offered its state delivered a usable one (" +
                           failures + ")");
  NodeState state = states.size() == 1 ? std::move(states.front())
                                       : robust_state(std::move(states), options.trim);
  // The chunks held the model and then the shared state.
  state.shared.assign(state.model.begin() + static_cast<ptrdiff_t>(numel), state.model.end());
  state.model.resize(numel);
  return std::optional<NodeState>(std::move(state));
}

// A lone donor that claims a far newer round or step than the others is a hijack
// (it would reset the joiner to any model, round and step): offers beyond the lower
// median by more than kMaxLead rounds (or the steps those rounds take) are refused.
void StateTransfer::drop_implausible(std::vector<Offer>& offers) const {
  if (offers.size() < 2) return;
  const auto lower_median = [&](auto field) {
    std::vector<uint64_t> v;
    for (const Offer& o : offers) v.push_back(field(o));
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>((v.size() - 1) / 2), v.end());
    return v[(v.size() - 1) / 2];
  };
  const uint64_t round = lower_median([](const Offer& o) { return o.round; });
  const uint64_t step = lower_median([](const Offer& o) { return o.step; });
  const uint64_t steps_per_round =
      round > 0 ? std::max<uint64_t>(1, (step + round - 1) / round) : 1;
  std::erase_if(offers, [&](const Offer& o) {
    const bool far = o.round > round + kMaxLead || o.step > step + kMaxLead * steps_per_round;
    if (far) {
      count_refusal(Refusal::kFarRound);
      transport_.note_dropped(
          o.peer, fmt::format("join: an offer of round {} step {}, while the median peer offers "
                              "round {} step {}: not taken",
                              o.round, o.step, round, step));
    }
    return far;
  });
}

Result<NodeState> StateTransfer::check_state(NodeState state, const JoinOptions& options) const {
  if (any_nonfinite(state.model)) {
    count_refusal(Refusal::kNonFinite);
    transport_.note_dropped(state.from, "join: a state with NaN or Inf: not taken");
    return Status::protocol("its state holds NaN or Inf");
  }
  if (!std::isfinite(state.weight) || state.weight < 1e-30 ||
      (options.max_weight > 0 && state.weight > options.max_weight)) {
    count_refusal(Refusal::kBadWeight);
    transport_.note_dropped(state.from,
                            fmt::format("join: a state of weight {}: not taken", state.weight));
    return Status::protocol(fmt::format("its state's weight {} is out of range", state.weight));
  }
  return state;
}

NodeState StateTransfer::robust_state(std::vector<NodeState> states, uint64_t trim) {
  const size_t k = states.size();
  // With fewer than 2B + 1 states, the median: still right with an honest majority.
  const size_t cut = k > 2 * trim ? trim : (k - 1) / 2;
  const size_t keep = k - 2 * cut;
  NodeState out;
  const auto median = [&](auto field) {
    std::vector<decltype(field(states[0]))> v;
    for (const auto& st : states) v.push_back(field(st));
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
  };
  out.round = median([](const NodeState& st) { return st.round; });
  out.step = median([](const NodeState& st) { return st.step; });
  out.weight = median([](const NodeState& st) { return st.weight; });
  out.from = states.front().from;
  out.model.resize(states.front().model.size());
  std::vector<float> column(k);
  for (size_t i = 0; i < out.model.size(); ++i) {
    for (size_t j = 0; j < k; ++j) column[j] = states[j].model[i];
    std::sort(column.begin(), column.end());
    double sum = 0;
    for (size_t j = cut; j < cut + keep; ++j) sum += column[j];
    out.model[i] = static_cast<float>(sum / static_cast<double>(keep));
  }
  std::string from;
  for (const auto& st : states) from += fmt::format("{}{}", from.empty() ? "" : ", ", st.from);
  spdlog::info("join: the state is the trimmed mean of {} donors' ({}), {} cut from each end", k,
               from, cut);
  return out;
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
