#include "sgd/membership/state_transfer.h"

#include <fmt/format.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "base/finite.h"
#include "base/refusals.h"

namespace gossip::sgd {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

// A donor that owes chunks and sends none for this long is dropped (alive or not: a
// donor that answers heartbeats but not requests stalls a join as well as a dead
// one); sooner when its connection dropped and it is silent.
constexpr auto kTransferSilence = std::chrono::seconds(10);
constexpr auto kLinkDownSilence = std::chrono::seconds(1);
// Bounds a manifest (a hash per chunk) that a joiner takes from one offer.
constexpr uint64_t kMaxStateChunks = uint64_t{1} << 20;

void hash_chunk(const void* data, size_t bytes, unsigned char* out) {
  crypto_generichash(out, proto::kStateHashBytes, static_cast<const unsigned char*>(data), bytes,
                     nullptr, 0);
}

bool chunk_matches(const void* data, size_t bytes, const std::vector<std::byte>& manifest,
                   uint64_t seq) {
  unsigned char h[proto::kStateHashBytes];
  hash_chunk(data, bytes, h);
  return std::memcmp(h, manifest.data() + seq * proto::kStateHashBytes, sizeof h) == 0;
}

// What names a state in the logs: the first 8 bytes of its manifest's hash, in hex.
std::string manifest_name(const std::vector<std::byte>& manifest) {
  unsigned char h[proto::kStateHashBytes];
  hash_chunk(manifest.data(), manifest.size(), h);
  return fmt::format("{:02x}", fmt::join(h, h + 8, ""));
}

uint64_t chunk_count(uint64_t numel, uint64_t chunk_elems) {
  return numel / chunk_elems + (numel % chunk_elems != 0);
}

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
  auto s = std::make_shared<Snapshot>();
  s->chunks.round = next_round;
  s->chunks.kind = proto::Kind::kStateChunk;
  s->chunk_elems = std::max<uint64_t>(1, chunk_elems);
  s->chunks.copy_raw(model, s->chunk_elems, shared);
  s->numel = model.size() + shared.size();
  s->step = step;
  s->weight = weight;
  s->layout = layout;
  newest_ = std::move(s);
  next_round_ = next_round;
  const auto now = router_.clock().now();
  for (auto& [round, pinned] : pinned_)  // ZeroMQ still holds chunks of it: still being sent
    for (const auto& c : pinned->chunks.chunks)
      if (c.payload.use_count() > 1) {
        pinned->used = now;
        break;
      }
  std::erase_if(pinned_, [&](const auto& kv) { return now - kv.second->used > kPinFor; });
}

void StateTransfer::pin(const std::shared_ptr<Snapshot>& s) {
  s->used = router_.clock().now();
  pinned_[s->chunks.round] = s;
  while (pinned_.size() > kMaxPinned) {
    auto oldest = std::min_element(
        pinned_.begin(), pinned_.end(),
        [](const auto& a, const auto& b) { return a.second->used < b.second->used; });
    pinned_.erase(oldest);
  }
}

void StateTransfer::send_offer(uint32_t peer, uint64_t round, Snapshot* s) {
  Status st;
  if (!s) {
    st = transport_.send(peer, round, proto::StateOffer{});
  } else {
    if (!s->manifest) {
      // Hashed once per offered state, not per round: a round must not pay for joins.
      const auto& chunks = s->chunks.chunks;
      auto m = std::make_shared<std::vector<std::byte>>(chunks.size() * proto::kStateHashBytes);
      for (size_t i = 0; i < chunks.size(); ++i)
        hash_chunk(chunks[i].payload->data(), chunks[i].payload->size(),
                   reinterpret_cast<unsigned char*>(m->data() + i * proto::kStateHashBytes));
      s->manifest = std::move(m);
    }
    st = transport_.send_shared(
        peer, s->chunks.round,
        proto::StateOffer{true, s->step, s->numel, s->layout, s->chunk_elems, s->weight},
        s->manifest);
  }
  if (!st) spdlog::warn("state offer to peer {}: {}", peer, st.message());
}

void StateTransfer::on_message(peers::Incoming& in) {
  switch (in.kind()) {
    case proto::Kind::kJoin: {
      const bool offers = took_part_(in.peer) && newest_;
      if (offers) {
        pin(newest_);
        send_offer(in.peer, newest_->chunks.round, newest_.get());
      } else {
        send_offer(in.peer, 0, nullptr);
      }
      spdlog::info("peer {} {}: offering {}", in.peer, offers ? "rejoins" : "starts",
                   offers ? fmt::format("the state before round {} (manifest {})", next_round_,
                                        manifest_name(*newest_->manifest))
                          : std::string("nothing"));
      return;
    }
    case proto::Kind::kStateRequest:
      on_request(in);
      return;
    case proto::Kind::kStateOffer:
      // Outside a join: an answer that came after its join was over.
      if (fetch_) on_offer(in);
      return;
    case proto::Kind::kStateChunk:
      if (fetch_ && fetch_->want) on_chunk(in);
      return;
    case proto::Kind::kBye:
      if (!fetch_) return;
      fetch_->gone.insert(in.peer);
      if (fetch_->want)
        for (auto& d : fetch_->donors)
          if (d.peer == in.peer) drop_donor(d, Status::closed("it shut down"));
      return;
    default:
      return;
  }
}

void StateTransfer::on_request(const peers::Incoming& in) {
  const auto& h = in.as<proto::StateRequest>();
  std::shared_ptr<Snapshot> s;
  if (newest_ && (in.round() == 0 || newest_->chunks.round == in.round()))
    s = newest_;
  else if (auto it = pinned_.find(in.round()); it != pinned_.end())
    s = it->second;
  if (!s) {
    spdlog::info("peer {} asks for the state before round {}, which this node no longer holds",
                 in.peer, in.round());
    send_offer(in.peer, in.round(), nullptr);
    return;
  }
  pin(s);  // held while it is asked for
  send_offer(in.peer, s->chunks.round, s.get());
  const size_t n = s->chunks.chunks.size();
  const size_t first = std::min<uint64_t>(h.first, n);
  const size_t end = h.count == 0 ? n : first + std::min<uint64_t>(h.count, n - first);
  spdlog::info("sending peer {} chunks [{}, {}) of {} of the state before round {}", in.peer, first,
               end, n, s->chunks.round);
  if (Status st = s->chunks.send(transport_, in.peer, s->layout, s->weight, first, end); !st)
    spdlog::warn("state for peer {}: {}", in.peer, st.message());
}

void StateTransfer::on_offer(const peers::Incoming& in) {
  Fetch& f = *fetch_;
  const auto& h = in.as<proto::StateOffer>();
  const uint64_t round = in.round();
  if (f.want) {  // downloading: a donor's answer to our request
    for (auto& d : f.donors) {
      if (d.peer != in.peer || !d.failure) continue;
      if (!h.has_state || round != f.want->round) {
        stale_ = true;
        drop_donor(d, Status::not_found(fmt::format("it no longer holds the state before round {}",
                                                    f.want->round)));
      } else if (in.payload.size() != f.want->manifest->size() ||
                 std::memcmp(in.payload.data(), f.want->manifest->data(), in.payload.size()) != 0)
        drop_donor(d, Status::protocol(fmt::format("it now offers another state before round {}",
                                                   f.want->round)));
    }
    return;
  }
  const JoinOptions& options = *f.options;
  // A refusal of a round (it no longer holds it) answers an earlier attempt's request,
  // not this attempt's join, whose answers without a state are of round 0.
  if (!h.has_state && round != 0) return;
  if (!f.answered.insert(in.peer).second) return;  // one offer per peer and join
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
  if (chunk_count(h.numel, h.chunk_elems) > kMaxStateChunks) {
    transport_.note_dropped(in.peer,
                            fmt::format("join: an offer in {} chunks (at most {})",
                                        chunk_count(h.numel, h.chunk_elems), kMaxStateChunks));
    return;
  }
  const auto* bytes = static_cast<const std::byte*>(in.payload.data());
  f.offers.push_back(
      {in.peer, round, h.step, h.layout, h.chunk_elems, h.weight,
       std::make_shared<const std::vector<std::byte>>(bytes, bytes + in.payload.size())});
}

void StateTransfer::on_chunk(const peers::Incoming& in) {
  Fetch& f = *fetch_;
  const Offer& want = *f.want;
  if (in.round() != want.round) return;  // a transfer we did not ask for
  auto d = std::find_if(f.donors.begin(), f.donors.end(),
                        [&](const Fetch::Donor& x) { return x.peer == in.peer; });
  if (d == f.donors.end()) return;
  const auto& h = in.as<proto::StateChunk>();
  const uint64_t n = f.have.size();
  const uint64_t offset = h.seq < n ? h.seq * want.chunk_elems : 0;
  if (h.seq >= n || h.offset != offset ||
      h.numel != std::min<uint64_t>(want.chunk_elems, f.numel - offset))
    return drop_donor(*d, Status::protocol(fmt::format(
                              "chunk {} covers [{}, {}), not chunk {} of {} elements each", h.seq,
                              h.offset, h.offset + h.numel, h.seq, want.chunk_elems)));
  if (f.layout != 0 && h.layout != f.layout)
    return drop_donor(*d, Status::mismatch(fmt::format("its model has layout {:016x}, ours {:016x}",
                                                       h.layout, f.layout)));
  if (f.have[h.seq]) {  // asked twice (a donor was dropped, or slow): here already
    d->owed.erase(h.seq);
    d->progress = router_.clock().now();
    return;
  }
  if (!chunk_matches(in.payload.data(), in.payload.size(), *want.manifest, h.seq)) {
    count_refusal(Refusal::kMalformed);
    transport_.note_dropped(in.peer, fmt::format("join: state chunk {} does not match its hash in "
                                                 "the manifest the donors offered",
                                                 h.seq));
    return drop_donor(*d, Status::protocol(fmt::format(
                              "chunk {} does not match its hash in the manifest", h.seq)));
  }
  // The weight is the offer's (in the group's key), not a chunk's to choose.
  if (h.weight != want.weight)
    return drop_donor(
        *d, Status::protocol(
                fmt::format("its chunk's weight {} is not its offer's {}", h.weight, want.weight)));
  std::memcpy(f.state.model.data() + offset, in.payload.data(), in.payload.size());
  f.have[h.seq] = true;
  --f.missing;
  for (auto& x : f.donors) x.owed.erase(h.seq);
  d->progress = router_.clock().now();
  ++d->delivered;
}

// Called from the download's loop only (not from a handler): a failed send drops
// the donor, and the loop hands its chunks out again.
void StateTransfer::ask(Fetch::Donor& d, const std::vector<uint64_t>& chunks) {
  if (!d.failure) return;
  d.progress = router_.clock().now();
  if (d.since == TimePoint{}) d.since = d.progress;
  d.owed.insert(chunks.begin(), chunks.end());
  for (size_t i = 0; i < chunks.size();) {
    size_t j = i + 1;
    while (j < chunks.size() && chunks[j] == chunks[j - 1] + 1) ++j;
    if (Status st =
            transport_.send(d.peer, fetch_->want->round, proto::StateRequest{chunks[i], j - i});
        !st)
      return drop_donor(d, st);
    i = j;
  }
}

void StateTransfer::drop_donor(Fetch::Donor& d, Status why) {
  if (!d.failure) return;  // dropped already
  Fetch& f = *fetch_;
  d.failure = std::move(why);
  uint64_t owed = 0;
  for (uint64_t c : d.owed) owed += !f.have[c];
  d.owed.clear();
  f.orphans = true;
  spdlog::warn("join: donor {} dropped after {} chunks: {}; {} chunks it owed go to the others",
               d.peer, d.delivered, d.failure.message(), owed);
}

void StateTransfer::hand_out(std::vector<uint32_t>& spares) {
  Fetch& f = *fetch_;
  f.orphans = false;
  std::vector<bool> owed(f.have.size(), false);
  for (const auto& d : f.donors)
    for (uint64_t c : d.owed) owed[c] = true;
  std::vector<uint64_t> todo;
  for (uint64_t c = 0; c < f.have.size(); ++c)
    if (!f.have[c] && !owed[c]) todo.push_back(c);
  if (todo.empty()) return;
  std::vector<size_t> live;
  for (size_t k = 0; k < f.donors.size(); ++k)
    if (f.donors[k].failure) live.push_back(k);
  if (live.empty() && !spares.empty()) {
    f.donors.push_back({spares.front(), {}, 0, router_.clock().now(), Status::ok(), {}});
    spares.erase(spares.begin());
    live.push_back(f.donors.size() - 1);
  }
  // Contiguous shares, so that each donor gets one request.
  for (size_t k = 0; k < live.size(); ++k) {
    const size_t from = todo.size() * k / live.size();
    const size_t to = todo.size() * (k + 1) / live.size();
    if (from < to)
      ask(f.donors[live[k]], std::vector<uint64_t>(todo.begin() + static_cast<ptrdiff_t>(from),
                                                   todo.begin() + static_cast<ptrdiff_t>(to)));
  }
}

// A donor with nothing left to send takes the second half of what a donor still
// owes that sends at less than a third of its rate and is quiet now (kRateGap), or
// that has sent nothing for kStealAfter: a slow donor, alive or not, does not hold
// the join up. Donors that only share the joiner's downlink (or its cores) send at
// about the same rate, a chunk every few milliseconds, and nothing crosses twice. Whichever sends a
// chunk first, the other's copy is skipped: at worst the stolen chunks cross twice.
void StateTransfer::steal() {
  Fetch& f = *fetch_;
  const auto now = router_.clock().now();
  // Chunks a second since a donor was first asked.
  const auto rate = [&](const Fetch::Donor& d) {
    return static_cast<double>(d.delivered) /
           std::max(1e-3, std::chrono::duration<double>(now - d.since).count());
  };
  for (auto& idle : f.donors) {
    if (!idle.failure || !idle.owed.empty() || now - idle.since < kRateAfter) continue;
    Fetch::Donor* slow = nullptr;
    for (auto& d : f.donors)
      if (&d != &idle && d.failure && !d.owed.empty() &&
          (now - d.progress > kStealAfter ||
           (d.owed.size() >= 2 && now - d.since > kRateAfter && now - d.progress > kRateGap &&
            3 * rate(d) < rate(idle))) &&
          (!slow || d.owed.size() > slow->owed.size()))
        slow = &d;
    if (!slow) return;
    // The second half, rounded up: a last chunk too.
    std::vector<uint64_t> taken(
        std::next(slow->owed.begin(), static_cast<ptrdiff_t>(slow->owed.size() / 2)),
        slow->owed.end());
    for (uint64_t c : taken) slow->owed.erase(c);
    spdlog::info("join: donor {} takes {} chunks that donor {} has been slow to send", idle.peer,
                 taken.size(), slow->peer);
    ask(idle, taken);
  }
}

// The order in which states are tried: first the state that the most donors hold
// among those of the freshest round or the one before (a round's donors publish
// a moment apart, and one more donor is worth a round that the joiner catches up
// at once), then the others, the freshest first.
std::vector<StateTransfer::Group> StateTransfer::groups(std::vector<Offer> offers) const {
  std::sort(offers.begin(), offers.end(),
            [](const Offer& a, const Offer& b) { return a.peer < b.peer; });
  std::vector<Group> out;
  for (Offer& o : offers) {
    auto g = std::find_if(out.begin(), out.end(), [&](const Group& x) {
      const Offer& y = x.first();
      return y.round == o.round && y.step == o.step && y.layout == o.layout &&
             y.chunk_elems == o.chunk_elems && y.weight == o.weight && *y.manifest == *o.manifest;
    });
    if (g == out.end())
      out.push_back({{std::move(o)}});
    else
      g->offers.push_back(std::move(o));
  }
  std::sort(out.begin(), out.end(), [](const Group& a, const Group& b) {
    return a.first().round != b.first().round ? a.first().round > b.first().round
                                              : a.first().peer < b.first().peer;
  });
  if (out.size() > 1) {
    const uint64_t freshest = out.front().first().round;
    auto best = out.begin();
    for (auto g = out.begin(); g != out.end() && g->first().round + 1 >= freshest; ++g)
      if (g->offers.size() > best->offers.size()) best = g;
    std::rotate(out.begin(), best, best + 1);
  }
  return out;
}

Result<std::optional<NodeState>> StateTransfer::fetch(size_t numel, size_t shared_numel,
                                                      uint64_t layout, const JoinOptions& options) {
  for (int attempt = 1;; ++attempt) {
    auto got = fetch_once(numel, shared_numel, layout, options);
    // A donor keeps kMaxPinned states it offered: with more joiners at once than that
    // (a rack that restarts), the first one's offers were gone by the time it had heard
    // every peer's (simulated: 3 of 16 nodes restarting within a second). Asked again,
    // the donors offer what they hold now.
    if (got || !stale_ || attempt == kStaleAttempts || router_.clock().now() >= options.deadline ||
        (options.cancel && options.cancel->load()))
      return got;
    spdlog::info("join: the states offered went stale before they were fetched ({}); asking again",
                 got.status().message());
  }
}

Result<std::optional<NodeState>> StateTransfer::fetch_once(size_t numel, size_t shared_numel,
                                                           uint64_t layout,
                                                           const JoinOptions& options) {
  stale_ = false;
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

  const auto offers_end = std::min(options.deadline, router_.clock().now() + options.offer_wait);
  while (fetch_->answered.size() < peers.size() && router_.clock().now() < offers_end) {
    if (options.cancel && options.cancel->load()) return Status::closed("join cancelled");
    if (options.tick) options.tick();
    router_.poll(milliseconds(20));
  }
  std::vector<Offer> offers = std::move(fetch_->offers);
  if (offers.empty()) {
    spdlog::info("join: {} of {} peers answered, none with a state newer than round {}",
                 fetch_->answered.size(), peers.size(), options.min_round);
    return std::optional<NodeState>();
  }
  drop_implausible(offers);
  std::vector<Group> states = groups(offers);
  std::string failures;
  const auto failed = [&](const Group& g, const Status& st) {
    std::string who;
    for (const Offer& o : g.offers) who += fmt::format("{}{}", who.empty() ? "" : ", ", o.peer);
    spdlog::warn("join: the state of peer(s) {} not taken: {}", who, st.message());
    failures += fmt::format("{}peer(s) {}: {}", failures.empty() ? "" : "; ", who, st.message());
  };
  const auto take = [&](const Group& g) -> Result<NodeState> {
    auto state = download(g);
    if (state) state = check_state(std::move(state).value(), options);
    if (!state) failed(g, state.status());
    return state;
  };
  const auto split = [&](NodeState state) {
    // The chunks held the model and then the shared state.
    state.shared.assign(state.model.begin() + static_cast<ptrdiff_t>(numel), state.model.end());
    state.model.resize(numel);
    return std::optional<NodeState>(std::move(state));
  };
  // Under --trim B, a state that B + 1 donors offer alike is an honest donor's, and
  // its chunks are checked against its manifest: it is taken as it is. Otherwise
  // the coordinate-wise trimmed mean of 2B + 1 donors' states.
  for (const Group& g : states) {
    if (g.offers.size() < options.trim + 1) continue;
    if (auto state = take(g)) return split(std::move(state).value());
    if (options.cancel && options.cancel->load()) break;
  }
  if (options.trim == 0)
    return Status::timeout("join: no peer that offered its state delivered a usable one (" +
                           failures + ")");
  std::sort(offers.begin(), offers.end(), [](const Offer& a, const Offer& b) {
    return a.round != b.round ? a.round > b.round : a.peer < b.peer;
  });
  const size_t wanted = 2 * options.trim + 1;
  std::vector<NodeState> got;
  for (const Offer& o : offers) {
    auto state = take(Group{{o}});
    if (state) {
      got.push_back(std::move(state).value());
      if (got.size() == wanted) break;
    }
    if (options.cancel && options.cancel->load()) break;
  }
  if (got.empty())
    return Status::timeout("join: no peer that offered its state delivered a usable one (" +
                           failures + ")");
  return split(got.size() == 1 ? std::move(got.front())
                               : robust_state(std::move(got), options.trim));
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

Result<NodeState> StateTransfer::download(const Group& group) {
  Fetch& f = *fetch_;
  const JoinOptions& options = *f.options;
  const Offer& want = group.first();
  const uint64_t n = chunk_count(f.numel, want.chunk_elems);
  // What came from an earlier state and matches this one's manifest is kept: the
  // transfer resumes where it was when that state's donors were all lost.
  if (f.have.size() != n || !f.want || f.want->chunk_elems != want.chunk_elems) {
    f.have.assign(n, false);
    f.state.model.assign(f.numel, 0.0f);
  }
  f.missing = 0;
  for (uint64_t c = 0; c < n; ++c) {
    const uint64_t off = c * want.chunk_elems;
    const uint64_t len = std::min<uint64_t>(want.chunk_elems, f.numel - off);
    if (f.have[c])
      f.have[c] = chunk_matches(f.state.model.data() + off, len * sizeof(float), *want.manifest, c);
    f.missing += !f.have[c];
  }
  const uint64_t resumed = n - f.missing;
  f.want = want;
  f.state.from = want.peer;
  f.state.round = want.round;
  f.state.step = want.step;
  f.state.weight = want.weight;
  f.donors.clear();
  std::vector<uint32_t> spares;
  for (const Offer& o : group.offers) {
    if (f.gone.count(o.peer)) continue;  // it said bye since it offered
    if (f.donors.size() < std::max<size_t>(1, options.max_donors))
      f.donors.push_back({o.peer, {}, 0, router_.clock().now(), Status::ok(), {}});
    else
      spares.push_back(o.peer);
  }
  spdlog::info(
      "join: fetching the state before round {} (step {}, manifest {}): {} chunks from {} "
      "donor(s){}",
      want.round, want.step, manifest_name(*want.manifest), f.missing, f.donors.size(),
      resumed > 0 ? fmt::format(", {} kept from the last try", resumed) : std::string());
  f.orphans = true;  // every missing chunk, at first
  const auto describe = [&] {
    std::string s;
    for (const auto& d : f.donors)
      s += fmt::format("{}peer {}: {} chunks{}", s.empty() ? "" : ", ", d.peer, d.delivered,
                       d.failure ? std::string() : " (dropped: " + d.failure.message() + ")");
    return s;
  };
  while (true) {
    if (f.missing == 0) {
      spdlog::info(
          "join: the state before round {} is here, every chunk as its manifest {} says ({})",
          want.round, manifest_name(*want.manifest), describe());
      f.have.clear();  // what is returned is no longer kept for a later state
      f.state.from = std::max_element(f.donors.begin(), f.donors.end(),
                                      [](const Fetch::Donor& a, const Fetch::Donor& b) {
                                        return a.delivered < b.delivered;
                                      })
                         ->peer;
      return std::move(f.state);
    }
    // Chunks that no live donor owes (at first all; then a dropped donor's) go to the
    // live ones, or to a spare of the same state when none is left.
    while (f.orphans) hand_out(spares);
    bool any_live = false;
    for (const auto& d : f.donors) any_live |= d.failure.is_ok();
    if (!any_live)
      return Status::closed(fmt::format("{} of {} chunks here when every donor was lost ({})",
                                        n - f.missing, n, describe()));
    steal();
    const auto now = router_.clock().now();
    if (options.cancel && options.cancel->load()) return Status::closed("join cancelled");
    if (now >= options.deadline)
      return Status::timeout(
          fmt::format("{} of {} chunks by the deadline ({})", n - f.missing, n, describe()));
    for (auto& d : f.donors) {
      if (!d.failure || d.owed.empty()) continue;
      const auto stalled = duration_cast<milliseconds>(now - d.progress);
      const auto silent = milliseconds(std::min<uint64_t>(transport_.traffic().silent_ms(d.peer),
                                                          static_cast<uint64_t>(stalled.count())));
      // A link that was up, dropped and refused a new connect (the transport's monitor
      // says so; the in-process hub, for a node cut as a process) and a donor silent
      // since: it is gone.
      if (transport_.traffic().link_gone(d.peer) && silent > kLinkDownSilence)
        drop_donor(d, Status::closed(
                          fmt::format("its connection dropped ({} ms silent)", silent.count())));
      if (d.failure && stalled > kTransferSilence)
        drop_donor(
            d, Status::timeout(fmt::format("no chunk for {} s",
                                           duration_cast<std::chrono::seconds>(stalled).count())));
    }
    if (options.tick) options.tick();
    router_.poll(milliseconds(20));
  }
}

}  // namespace gossip::sgd
