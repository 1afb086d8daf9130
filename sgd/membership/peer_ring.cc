#include "sgd/membership/peer_ring.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string_view>

#include "base/failures.h"
#include "base/finite.h"
#include "base/refusals.h"
#include "base/split_mix64.h"
#include "compression/bytes.h"
#include "compression/codec.h"

namespace gossip::sgd {
namespace {
// What a peer's death or departure does to a round: the ring breaks. A peer with
// another model or a cancelled round is not cured by re-forming.
bool breaks_the_ring(const Status& st) {
  switch (st.code()) {
    case Status::Code::kTimeout:
    case Status::Code::kClosed:
    case Status::Code::kIoError:
    case Status::Code::kProtocol:
      return true;
    default:
      return false;
  }
}

constexpr int kMaxProtocolErrors = 3;

// Rounded up: a wait of 0 ms in a deadline's last fraction of a millisecond is a spin
// (for good on a virtual clock, which moves only when someone waits).
std::chrono::milliseconds until(const Clock& clock, TimePoint t) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::ceil<std::chrono::milliseconds>(t - clock.now()));
}
}  // namespace

PeerRing::PeerRing(peers::Router& control, peers::RingTransport& transport,
                   const PeerRingOptions& options)
    : router_(control),
      control_(control.transport()),
      transport_(transport),
      options_(options),
      membership_(control.self(), peers::ids_of(control.peers()),
                  options.elastic && options.admit_joiners),
      subscription_(
          control.subscribe({proto::Kind::kRingAddress, proto::Kind::kHello, proto::Kind::kBye,
                             proto::Kind::kRingProbe, proto::Kind::kStateChunk,
                             proto::Kind::kHeartbeat, proto::Kind::kRingNorms},
                            [this](peers::Incoming& in) { absorb(in); })) {
  g_members_.store(order().ids.size(), std::memory_order_relaxed);
  if (!options_.link_keys.empty())
    spdlog::info("ring links are sealed (AES-256-GCM, keys from the nodes' CURVE keys)");
  // Offered to anyone: before the first round nobody has a state, and a node that
  // asks after it is a restarted one. A node the others left out (alone in its ring)
  // trains on its own: its state is not the cluster's.
  if (admits_joiners())
    state_ = std::make_unique<StateTransfer>(control,
                                             [this](uint32_t) { return order().ids.size() > 1; });
  std::random_device entropy;
  secret_ = (uint64_t{entropy()} << 32) | entropy();
  for (Algorithm a : kAlgorithms)
    if (a != Algorithm::kRing && (!options_.algorithm || *options_.algorithm == a))
      meshes_[a] = make_mesh_all_reduce(a);
  for (const auto& p : control_.peers()) hosts_[p.id] = peers::endpoint_host(p.endpoint);
  result_.kind = proto::Kind::kStateChunk;
  announce();
}

std::vector<Strategy::Gauge> PeerRing::gauges() const {
  return {{"gossipd_ring_epoch", "The ring's epoch: how often it re-formed (--elastic on).",
           static_cast<double>(g_epoch_.load(std::memory_order_relaxed))},
          {"gossipd_ring_members", "Nodes in the ring's current view, this one included.",
           static_cast<double>(g_members_.load(std::memory_order_relaxed))}};
}

PeerRing::~PeerRing() { reset_links(); }

uint64_t PeerRing::token_for(uint32_t peer) const { return mix64(secret_ ^ (peer + 1) * kWeyl); }

Result<std::unique_ptr<peers::RingChannel>> PeerRing::sealed(
    std::unique_ptr<peers::RingChannel> channel, uint64_t right_session,
    uint64_t left_session) const {
  if (options_.link_keys.empty() && !options_.link_keys_of) return channel;  // no CURVE
  const auto to = options_.link_keys.find(channel->right());
  const auto from = options_.link_keys.find(channel->left());
  if (to == options_.link_keys.end() || from == options_.link_keys.end())
    // Cannot happen (every member's keys are known before it is one); were it to,
    // the link fails rather than carrying the model in the clear.
    return Status::invalid(fmt::format("ring link {} -> {} -> {}: no link keys for a neighbor",
                                       channel->left(), control_.self(), channel->right()));
  const peers::SealKeys keys{.to_right = to->second.first,
                             .from_left = from->second.second,
                             .right_session = right_session,
                             .left_session = left_session};
  return peers::seal_ring_channel(std::move(channel), keys);
}

std::vector<uint32_t> PeerRing::mesh_peers() const {
  std::vector<uint32_t> out;
  const auto n = static_cast<uint32_t>(order().ids.size());
  for (const auto& [a, algorithm] : meshes_)
    for (uint32_t q : mesh_partners(a, n, order().rank)) out.push_back(order().ids[q]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Algorithm PeerRing::pick(size_t bytes, bool sparse) const {
  if (options_.algorithm) return *options_.algorithm;
  if (sparse) return Algorithm::kRing;
  return options_.table.choose(static_cast<uint32_t>(order().ids.size()), bytes);
}

uint8_t PeerRing::transport_code() const {
  return std::string_view(transport_.name()) == "rdma" ? proto::RingAddress::kRdma
                                                       : proto::RingAddress::kTcp;
}

Status PeerRing::transport_mismatch(const char* what, uint32_t peer, const Address& a) const {
  if (a.transport == transport_code()) return Status::ok();
  const auto name = [](uint8_t t) { return t == proto::RingAddress::kRdma ? "rdma" : "tcp"; };
  return Status::mismatch(
      fmt::format("{}: peer {}'s ring runs over {}, this node's over {} (--transport auto picks "
                  "RDMA where a device answers, TCP elsewhere): give every node the same "
                  "--transport",
                  what, peer, name(a.transport), name(transport_code())));
}

void PeerRing::announce_to(uint32_t peer) {
  const proto::RingAddress address{transport_.port(), token_for(peer), membership_.view_id(),
                                   layout_, transport_code()};
  (void)control_.send(peer, next_round_, address);  // queued until it is up
}

bool PeerRing::may_ring() const {
  return !options_.algorithm || *options_.algorithm == Algorithm::kRing;
}

void PeerRing::announce() {
  if (order().ids.size() < 2) return;
  if (may_ring()) announce_to(order().left_id());
  for (uint32_t peer : mesh_peers())  // one address per node: the left one has it already
    if (!may_ring() || peer != order().left_id()) announce_to(peer);
}

void PeerRing::reset_links() {
  channel_.reset();
  links_.clear();
  mesh_.clear();
}

void PeerRing::set_layout_fingerprint(uint64_t fingerprint) {
  if (fingerprint == layout_) return;
  layout_ = fingerprint;
  reset_links();
  announce();
}

const PeerRing::Address* PeerRing::address_of(uint32_t peer) const {
  auto it = addresses_.find(peer);
  if (it == addresses_.end() || it->second.view != membership_.view_id()) return nullptr;
  return &it->second;
}

const PeerRing::Address* PeerRing::right_address() const { return address_of(order().right_id()); }

void PeerRing::absorb(const peers::Incoming& in) {
  switch (in.kind()) {
    case proto::Kind::kRingAddress: {
      // Kept whoever sends it: after a re-forming, it may be our right neighbor.
      const auto& h = in.as<proto::RingAddress>();
      Address a{h.port, h.token, h.layout, h.view, h.transport};
      auto it = addresses_.find(in.peer);
      // A neighbor or partner that restarted listens elsewhere, with a new token: the
      // link to it is dead. (Its first address is no news: nothing links to it yet.)
      const bool moved =
          it != addresses_.end() && (it->second.port != a.port || it->second.token != a.token);
      const bool first = it == addresses_.end();
      addresses_[in.peer] = a;
      const auto partners = mesh_peers();
      const bool partner = std::binary_search(partners.begin(), partners.end(), in.peer);
      const bool right = in.peer == order().right_id() && may_ring();
      if ((right || partner) && a.view == membership_.view_id() && (moved || first))
        spdlog::info("peer {} is up, its ring listens on port {}", in.peer, h.port);
      if (a.view != membership_.view_id() || !moved) return;
      if (right) drop(kRingLinks);
      if (partner) drop(kMeshLinks);
      return;
    }
    case proto::Kind::kHello:
      spdlog::info("peer {} is up", in.peer);
      // The left neighbor or a mesh partner (re)started: it needs our port again.
      if (const auto partners = mesh_peers();
          (in.peer == order().left_id() && may_ring()) ||
          std::binary_search(partners.begin(), partners.end(), in.peer))
        announce_to(in.peer);
      if (options_.elastic && !membership_.member(in.peer)) {
        if (admits_joiners())
          spdlog::info(
              "peer {} is up again, outside the ring (epoch {}): it is taken back when it asks",
              in.peer, membership_.epoch());
        else
          spdlog::warn(
              "peer {} is up again, but the elastic ring left it out (epoch {}): it trains alone, "
              "since only local SGD's ring takes a node back",
              in.peer, membership_.epoch());
      }
      return;
    case proto::Kind::kBye: {
      const auto partners = mesh_peers();
      const bool partner = std::binary_search(partners.begin(), partners.end(), in.peer);
      if (in.peer == order().right_id() || partner) addresses_.erase(in.peer);
      if (in.peer == order().right_id() || in.peer == order().left_id()) drop(kRingLinks);
      if (partner) drop(kMeshLinks);
      // A member that leaves in order is left out at once rather than at the next round.
      if (options_.elastic && membership_.member(in.peer)) {
        const bool started = membership_.start(router_.clock().now(), options_.reform_wait);
        membership_.said_bye(in.peer);
        if (started) {
          spdlog::warn("peer {} said bye: re-forming the ring without it", in.peer);
          send_probes();
        }
      }
      return;
    }
    case proto::Kind::kRingProbe:
      if (!options_.elastic) {
        control_.note_dropped(in.peer,
                              "a ring-probe, but this node's ring is not elastic (--elastic)");
        return;
      }
      // Before its first round a node has nothing to re-form, and a probe may be one
      // that ZeroMQ queued for this node's previous process and delivers to this one.
      if (!started_) return;
      {
        const auto& h = in.as<proto::RingProbe>();
        const bool joining = h.restarted;
        const bool joiner = membership_.joiner(in.peer, h.epoch, joining);
        // The length is checked (message.cc); the ids are checked by the membership.
        std::vector<uint32_t> their_view(h.members);
        for (size_t i = 0; i < their_view.size(); ++i)
          their_view[i] =
              compression::load_le32(static_cast<const std::byte*>(in.payload.data()) + 4 * i);
        const auto merge = h.merge == proto::RingProbe::kOffer     ? RingMembership::Merge::kOffer
                           : h.merge == proto::RingProbe::kMerging ? RingMembership::Merge::kMerging
                                                                   : RingMembership::Merge::kNone;
        const bool was_merging = membership_.merging();
        const size_t view_before = membership_.members().size();
        const auto effect =
            membership_.on_probe(in.peer, h.epoch, in.round(), router_.clock().now(),
                                 options_.reform_wait, joining, their_view, merge, h.holds_result);
        const bool left_out = membership_.members().size() < view_before;
        if (left_out)
          spdlog::warn(
              "peer {}'s ring [{}] (epoch {}, next round {}) went on without this node: its "
              "members are out of this node's view, now [{}]",
              in.peer, fmt::join(their_view, ", "), h.epoch, in.round(),
              fmt::join(membership_.members(), ", "));
        if (effect == RingMembership::Probe::kIgnored) return;
        if (membership_.merging() && !was_merging)
          spdlog::warn("peer {}{} [{}] (epoch {}, next round {}): merging the rings", in.peer,
                       membership_.member(in.peer) ? " merges rings into" : " is in another ring",
                       fmt::join(their_view, ", "), h.epoch, in.round());
        if (effect == RingMembership::Probe::kStarted) {
          if (left_out && !membership_.merging())
            spdlog::warn("this node is alone in its view: it asks back in");
          else if (joiner)
            spdlog::info(
                "peer {} asks back into the ring (restarted, or left out; its next round {}): "
                "re-forming",
                in.peer, in.round());
          else
            spdlog::warn("peer {} re-forms the ring (epoch {}): re-forming too", in.peer, h.epoch);
          drop_channel();
          send_probes();
        } else if (membership_.merging() && !was_merging) {
          send_probes();  // now the union, which the members must hear of
        } else {
          probe_outsiders();
          if (membership_.answers(in.peer, their_view)) send_probe(in.peer);
        }
        return;
      }
    case proto::Kind::kStateChunk: {
      // A result this node lost to a break (or missed while it was down), from a
      // member that completed the round.
      const auto& h = in.as<proto::StateChunk>();
      const uint64_t round = in.round();
      if (fetch_ && round > fetch_->round + kMaxResultLead) {
        count_refusal(Refusal::kFarRound);
        return control_.note_dropped(
            in.peer, fmt::format("a ring result of round {}, while this node runs round {}", round,
                                 fetch_->round));
      }
      if (!fetch_ || round < fetch_->round) return;  // late copies are harmless
      auto copy = fetch_->copies.find(in.peer);
      if (copy == fetch_->copies.end()) {
        if (h.offset != 0) return;  // the rest of a copy whose start was dropped
        if (fetch_->copies.size() >= kMaxResultCopies) {
          count_refusal(Refusal::kWrongResult);
          return control_.note_dropped(
              in.peer, fmt::format("a ring result of round {}, from a third sender", round));
        }
        copy = fetch_->copies.emplace(in.peer, ResultCopy{round, 0, {}}).first;
      }
      ResultCopy& c = copy->second;
      if (round == c.of_round && h.offset == c.got && h.numel <= fetch_->numel - c.got &&
          in.payload.size() == h.numel * sizeof(float)) {
        if (c.values.size() != fetch_->numel) c.values.assign(fetch_->numel, 0.0f);
        std::memcpy(c.values.data() + h.offset, in.payload.data(), in.payload.size());
        c.got += h.numel;
      }
      return;  // duplicates, and chunks out of order, are dropped
    }
    case proto::Kind::kRingNorms: {
      if (!options_.clip)
        return control_.note_dropped(in.peer,
                                     "ring-norms, but this node's ring is not robust "
                                     "(--clip on)");
      const auto& h = in.as<proto::RingNorms>();
      if (in.round() > next_round_ + kMaxResultLead) {
        count_refusal(Refusal::kFarRound);
        return control_.note_dropped(
            in.peer, fmt::format("ring-norms of round {}, while this node runs round {}",
                                 in.round(), next_round_));
      }
      Norms& n = norms_[in.peer];
      // One per member, its latest: a retry of a round (another view) follows the last
      // try's, and a peer's messages arrive in order.
      if (in.round() < n.round) return;
      n.round = in.round();
      n.view = h.view;
      n.values.resize(h.chunks);  // the length is checked (message.cc)
      std::memcpy(n.values.data(), in.payload.data(), in.payload.size());
      return;
    }
    default:  // heartbeats: the transport notes when a peer was heard
      return;
  }
}

Result<ContributionBounds> PeerRing::exchange_norms(std::span<const float> data, uint64_t round,
                                                    const CollectiveOptions& options) {
  const uint64_t chunk_elems = std::max<uint64_t>(1, options_.chunk_bytes / sizeof(float));
  const auto& ids = order().ids;
  const std::vector<float> own =
      ring_chunk_norms(data, static_cast<uint32_t>(ids.size()), chunk_elems);
  const uint64_t view = membership_.view_id();
  auto payload = std::make_shared<const std::vector<std::byte>>(
      reinterpret_cast<const std::byte*>(own.data()),
      reinterpret_cast<const std::byte*>(own.data() + own.size()));
  for (uint32_t id : ids)
    if (id != control_.self())
      GOSSIP_RETURN_IF_ERROR(
          control_.send_shared(id, round, proto::RingNorms{view, own.size()}, payload));
  // Every member's, for this round and view; one of another length is another model.
  std::vector<std::vector<float>> announced(ids.size());
  for (;;) {
    std::vector<uint32_t> missing;
    for (size_t r = 0; r < ids.size(); ++r) {
      if (ids[r] == control_.self()) {
        announced[r] = own;
        continue;
      }
      const auto it = norms_.find(ids[r]);
      if (it == norms_.end() || it->second.round != round || it->second.view != view) {
        missing.push_back(ids[r]);
      } else if (it->second.values.size() != own.size()) {
        return Status::protocol(fmt::format(
            "all-reduce: peer {} announced the norms of {} chunks, this node's model has {} "
            "(another model?)",
            ids[r], it->second.values.size(), own.size()));
      } else {
        announced[r] = it->second.values;
      }
    }
    if (missing.empty()) break;
    if (options.cancel && options.cancel->load(std::memory_order_relaxed))
      return Status::closed("all-reduce: cancelled while waiting for the members' chunk norms");
    if (options_.elastic && membership_.reforming())
      return Status::closed("all-reduce: the ring re-forms");
    const auto now = router_.clock().now();
    if (now >= options.deadline)
      return Status::timeout(fmt::format(
          "all-reduce: round {}: no chunk norms from peer(s) {} in time (robust mode, --clip on)",
          round, fmt::join(missing, ", ")));
    drain(std::min(std::chrono::milliseconds(5), until(router_.clock(), options.deadline)));
    if (options_.elastic) offer_merges();
  }
  return bound_contributions(announced);
}

uint64_t PeerRing::merge_round(const RingMembership::Change& change) const {
  std::map<uint32_t, uint64_t> ours{{control_.self(), next_round_}}, theirs;
  for (const auto& [id, next] : change.next_rounds)
    (std::binary_search(change.before.begin(), change.before.end(), id) ? ours : theirs)[id] = next;
  // A side of one heard node is one node's word: it may not send the union (and the
  // trainers' steps, sync_worker.cc) further ahead than a result may be.
  const uint64_t own = lower_median(ours);
  uint64_t other = lower_median(theirs);
  if (theirs.size() < 2 && other > own + kMaxResultLead) {
    count_refusal(Refusal::kFarRound);
    spdlog::warn("merge: peer {} alone claims round {}, this side is at {}: taken as {}",
                 theirs.begin()->first, other, own, own + kMaxResultLead);
    other = own + kMaxResultLead;
  }
  // Members that owe a union its first round: the round they agreed on, as far as a
  // result may be ahead.
  const uint64_t claimed = std::min(change.highest_claim(), own + kMaxResultLead);
  return std::max({own, other, claimed, merge_round_.value_or(0)});
}

uint64_t PeerRing::lower_median(const std::map<uint32_t, uint64_t>& next_rounds) {
  if (next_rounds.empty()) return 0;
  std::vector<uint64_t> v;
  for (const auto& [id, next] : next_rounds) v.push_back(next);
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>((v.size() - 1) / 2), v.end());
  return v[(v.size() - 1) / 2];
}

uint64_t PeerRing::freshest_believed(const std::map<uint32_t, uint64_t>& next_rounds,
                                     uint64_t up_to) {
  const uint64_t median = lower_median(next_rounds);
  uint64_t freshest = 0;
  for (const auto& [id, next] : next_rounds)
    if (next <= up_to || next <= median) freshest = std::max(freshest, next);
  return freshest;
}

void PeerRing::drop_channel() { drop(kRingLinks | kMeshLinks); }

void PeerRing::drop(int which) {
  if (busy_) {
    stale_ |= which;  // the operation in flight uses them: dropped when it returns
    return;
  }
  if (which & kRingLinks) channel_.reset();
  if (which & kMeshLinks) {
    links_.clear();
    mesh_.clear();
  }
}

bool PeerRing::interrupted() {
  // Polled by the ring's waits: cheap enough per wake-up, but the control channel
  // need not be read more often than this.
  const auto now = router_.clock().now();
  if (now - last_poll_ < std::chrono::milliseconds(10)) return membership_.reforming();
  last_poll_ = now;
  drain(std::chrono::milliseconds(0));
  offer_merges();
  return membership_.reforming();
}

void PeerRing::drain(std::chrono::milliseconds wait) { router_.poll(wait); }

void PeerRing::progress(uint64_t next_round, size_t, std::chrono::milliseconds wait) {
  next_round_ = std::max(next_round, merge_round_.value_or(0));
  drain(wait);
  offer_merges();
  // Between rounds a re-forming ends here; in a round, all_reduce_mean ends it.
  if (membership_.ready(router_.clock().now())) apply_view();
}

void PeerRing::offer_merges() {
  if (!admits_joiners() || !started_) return;
  const auto now = router_.clock().now();
  if (now - last_offer_ < options_.reform_wait) return;
  const auto outsiders = membership_.offers();
  if (outsiders.empty()) return;
  last_offer_ = now;
  for (uint32_t id : outsiders) send_probe(id, /*offer=*/true);
}

Status PeerRing::connect(const CollectiveOptions& options) {
  drain(std::chrono::milliseconds(0));  // the freshest address
  // After a re-forming, every member announces its address as it decides, within a
  // wait of ours: one that has not by two waits did not take part, and its absence
  // breaks the ring. Before any (epoch 0), a peer may simply start later.
  const auto address_deadline =
      options_.elastic && membership_.epoch() > 0
          ? std::min(options.deadline, view_since_ + 2 * options_.reform_wait)
          : options.deadline;
  while (!right_address()) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed))
      return Status::closed("ring: cancelled");
    if (membership_.reforming())
      return Status::closed("ring: re-forming (a member's probe arrived)");
    if (router_.clock().now() >= address_deadline)
      return Status::timeout(fmt::format(
          "ring: peer {} (right) has not told its ring address{} (is it up, with the same strategy "
          "and transport?)",
          order().right_id(),
          membership_.epoch() > 0 ? fmt::format(" for the ring of epoch {}", membership_.epoch())
                                  : ""));
    router_.poll(std::min(until(router_.clock(), address_deadline), std::chrono::milliseconds(50)));
  }
  const Address right = *right_address();
  auto mismatch = [&](uint64_t theirs) {
    return Status::mismatch(
        fmt::format("ring: peer {} has another model layout (fingerprint {:#x}, ours {:#x})",
                    order().right_id(), theirs, layout_));
  };
  if (right.layout != 0 && layout_ != 0 && right.layout != layout_) return mismatch(right.layout);
  if (Status st = transport_mismatch("ring", order().right_id(), right); !st) return st;
  const uint64_t view = membership_.view_id();
  const peers::RingEnds ends{.self = control_.self(),
                             .left = order().left_id(),
                             .right = order().right_id(),
                             .right_host = hosts_[order().right_id()],
                             .right_port = right.port,
                             .session = layout_ ^ token_for(order().left_id()) ^ view,
                             .right_session = right.token != 0 ? layout_ ^ right.token ^ view : 0};
  peers::WaitOptions wait{options.deadline, options.cancel, {}};
  // Elastic: a member blocked here (its neighbor died before connecting) still
  // answers probes, and a re-forming abandons the connect.
  if (options_.elastic) wait.interrupt = [this] { return interrupted(); };
  busy_ = true;
  auto channel = transport_.connect(ends, wait);
  busy_ = false;
  if (const int stale = std::exchange(stale_, 0); stale) {
    drop(stale & kMeshLinks);
    if ((stale & kRingLinks) && channel.is_ok())
      return Status::closed("ring: the right neighbor moved while connecting");
  }
  if (!channel.is_ok()) {
    // A neighbor with another model says so in its ring-address, which may have
    // arrived while we waited: that is the better explanation.
    drain(std::chrono::milliseconds(0));
    if (const Address* a = right_address();
        a && a->layout != 0 && layout_ != 0 && a->layout != layout_)
      return mismatch(a->layout);
    return channel.status();
  }
  auto link = sealed(std::move(channel).value(),
                     ends.right_session != 0 ? ends.right_session : ends.session, ends.session);
  if (!link) return link.status();
  channel_ = std::move(link).value();
  return Status::ok();
}

Status PeerRing::connect_mesh(const CollectiveOptions& options) {
  drain(std::chrono::milliseconds(0));  // the freshest addresses
  const auto address_deadline =
      options_.elastic && membership_.epoch() > 0
          ? std::min(options.deadline, view_since_ + 2 * options_.reform_wait)
          : options.deadline;
  const std::vector<uint32_t> partners = mesh_peers();
  const auto missing = [&]() -> std::optional<uint32_t> {
    for (uint32_t peer : partners)
      if (!address_of(peer)) return peer;
    return std::nullopt;
  };
  while (auto peer = missing()) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed))
      return Status::closed("all-reduce: cancelled");
    if (membership_.reforming())
      return Status::closed("all-reduce: re-forming (a member's probe arrived)");
    if (router_.clock().now() >= address_deadline)
      return Status::timeout(fmt::format(
          "all-reduce: peer {} has not told its ring address{} (is it up, with the same strategy, "
          "transport and --allreduce-algorithm?)",
          *peer,
          membership_.epoch() > 0 ? fmt::format(" for the ring of epoch {}", membership_.epoch())
                                  : ""));
    router_.poll(std::min(until(router_.clock(), address_deadline), std::chrono::milliseconds(50)));
  }
  // The first partner whose address names another model layout.
  const auto mismatch = [&]() -> std::optional<Status> {
    for (uint32_t peer : partners)
      if (const Address* a = address_of(peer);
          a && a->layout != 0 && layout_ != 0 && a->layout != layout_)
        return Status::mismatch(fmt::format(
            "all-reduce: peer {} has another model layout (fingerprint {:#x}, ours {:#x})", peer,
            a->layout, layout_));
    return std::nullopt;
  };
  if (auto st = mismatch()) return *st;
  for (uint32_t peer : partners)
    if (Status st = transport_mismatch("all-reduce", peer, *address_of(peer)); !st) return st;
  const uint64_t view = membership_.view_id();
  std::vector<peers::MeshEnd> ends;
  for (uint32_t peer : partners) {
    const Address& a = *address_of(peer);
    ends.push_back({.peer = peer,
                    .host = hosts_[peer],
                    .port = a.port,
                    .session = layout_ ^ token_for(peer) ^ view,
                    .peer_session = layout_ ^ a.token ^ view});
  }
  peers::WaitOptions wait{options.deadline, options.cancel, {}};
  if (options_.elastic) wait.interrupt = [this] { return interrupted(); };
  busy_ = true;
  auto channels = transport_.connect_mesh(control_.self(), ends, wait);
  busy_ = false;
  if (const int stale = std::exchange(stale_, 0); stale) {
    drop(stale & kRingLinks);
    if ((stale & kMeshLinks) && channels.is_ok())
      return Status::closed("all-reduce: a partner moved while connecting");
  }
  if (!channels.is_ok()) {
    // As for the ring: a partner with another model says so in an address that may
    // have come while we waited (it attached after announcing without a layout).
    drain(std::chrono::milliseconds(0));
    if (auto st = mismatch()) return *st;
    return channels.status();
  }
  mesh_ = std::move(channels).value();
  for (size_t i = 0; i < ends.size(); ++i) {
    auto link = sealed(std::move(mesh_[i]), ends[i].peer_session, ends[i].session);
    if (!link) {
      mesh_.clear();
      return link.status();
    }
    mesh_[i] = std::move(link).value();
  }
  links_.assign(order().ids.size(), nullptr);
  for (size_t i = 0; i < ends.size(); ++i) {
    const auto it = std::lower_bound(order().ids.begin(), order().ids.end(), ends[i].peer);
    links_[static_cast<size_t>(it - order().ids.begin())] = mesh_[i].get();
  }
  return Status::ok();
}

Status PeerRing::attempt(std::span<float> data, uint64_t round, const CollectiveOptions& options) {
  if (order().ids.size() == 1 || data.empty()) return Status::ok();
  const auto nodes = static_cast<uint32_t>(order().ids.size());
  const compression::Codec* codec = options.compression.codec;
  const bool sparse =
      codec && codec->keeps_largest() && sparse_reduce_for(options_.sparse_reduce, nodes);
  const Algorithm algorithm = pick(data.size_bytes(), sparse);
  if (algorithm != last_algorithm_)
    spdlog::info("round {}: all-reduce of {} bytes over {} nodes by the {}{}{}", round,
                 data.size_bytes(), nodes, algorithm_name(algorithm),
                 options_.algorithm ? "" : " (auto)",
                 sparse && algorithm == Algorithm::kRing ? ", a sparse reduce-scatter" : "");
  last_algorithm_ = algorithm;
  const bool ring = algorithm == Algorithm::kRing;
  if (ring && !channel_) GOSSIP_RETURN_IF_ERROR(connect(options));
  if (!ring && mesh_.empty()) GOSSIP_RETURN_IF_ERROR(connect_mesh(options));
  RingOptions ro;
  ro.size = static_cast<uint32_t>(order().ids.size());
  ro.rank = order().rank;
  ro.round = round;
  ro.chunk_elems = std::max<uint64_t>(1, options_.chunk_bytes / sizeof(float));
  ro.depth = options_.depth;
  ro.wait = {options.deadline, options.cancel, {}};
  if (options_.elastic) ro.wait.interrupt = [this] { return interrupted(); };
  ro.compression = options.compression;
  ro.sparse_reduce = sparse;
  std::optional<ContributionBounds> bounds;
  if (options_.clip) {
    if (!ring)
      return Status::invalid("all-reduce: robust mode (--clip on) runs over the ring only");
    auto b = exchange_norms(data, round, options);
    if (!b) {
      reset_links();
      return b.status();
    }
    bounds = std::move(b).value();
    ro.bounds = &*bounds;
  }
  busy_ = true;
  Status st =
      ring ? ring_.mean(*channel_, data, ro) : meshes_.at(algorithm)->mean(links_, data, ro);
  busy_ = false;
  if (ring && ring_.clipped() > 0) {
    spdlog::warn("round {}: {} chunk(s) pulled back to their bounds (robust mode), the first: {}",
                 round, ring_.clipped(), ring_.first_clip());
  }
  if (const int stale = std::exchange(stale_, 0); stale) drop(stale);  // reconnects next time
  if (st.is_ok())
    rounds_by_[static_cast<size_t>(algorithm)].fetch_add(1, std::memory_order_relaxed);
  if (!st.is_ok()) {
    if (!options_.algorithm && st.code() == Status::Code::kProtocol)
      st = Status::protocol(st.message() +
                            " (with --allreduce-algorithm auto, every node must hold the same "
                            "--allreduce-table)");
    spdlog::warn("round {}: {}; the {} reconnects for the next {}", round, st.message(),
                 algorithm_name(algorithm), options_.elastic ? "try" : "round");
    reset_links();  // which fails the neighbors' rounds at once, rather than at their deadline
  }
  return st;
}

Status PeerRing::all_reduce_mean(std::span<float> data, uint64_t round,
                                 const CollectiveOptions& options) {
  // The union's first round after a merge runs at the round the members agreed on.
  if (merge_round_) round = std::max(round, *merge_round_);
  next_round_ = round;
  if (!options_.elastic) return attempt(data, round, options);
  started_ = true;
  fetch_ = Fetch{round, data.size(), {}};
  struct Clear {
    std::optional<Fetch>& f;
    ~Clear() { f.reset(); }
  } clear{fetch_};
  // A peer that dies mid-frame breaks one try with a protocol error; the same error
  // try after try, over re-formed rings, is data that does not fit (another codec).
  int protocol_errors = 0;
  for (;;) {
    if (membership_.reforming()) {
      bool took = false;
      GOSSIP_RETURN_IF_ERROR(finish_reform(data, round, options, &took));
      if (merge_news_)
        return Status::closed(fmt::format(
            "round {}: the ring merged with another that trained apart; the round runs again over "
            "the union, at round {}",
            round, merge_round_.value_or(round)));
      if (took) {
        keep_result(data, round);
        return Status::ok();
      }
    }
    // A peer that dies without closing its connections (or before it connected) is
    // noticed only when the wait runs out: each try gets half of the time left, so
    // that the round can still re-form and run again.
    CollectiveOptions once = options;
    once.deadline = router_.clock().now() + (options.deadline - router_.clock().now()) / 2;
    Status st = attempt(data, round, once);
    if (st.is_ok()) {
      keep_result(data, round);
      return st;
    }
    const bool cancelled = options.cancel && options.cancel->load(std::memory_order_relaxed);
    if (cancelled || !breaks_the_ring(st) || router_.clock().now() >= options.deadline) return st;
    if (st.code() == Status::Code::kProtocol && ++protocol_errors >= kMaxProtocolErrors)
      return Status::protocol(
          fmt::format("{} ({} tries in a row, over re-formed rings: do all nodes run the same "
                      "strategy, codec and model?)",
                      st.message(), protocol_errors));
    if (membership_.start(router_.clock().now(), options_.reform_wait)) {
      spdlog::warn(
          "round {}: {}; re-forming the ring (epoch {}, {} members) over the nodes that answer "
          "within {} ms",
          round, st.message(), membership_.epoch(), order().ids.size(),
          options_.reform_wait.count());
      send_probes();
    }
  }
}

Result<std::optional<uint64_t>> PeerRing::rejoin(uint64_t next_round, TimePoint deadline,
                                                 const std::atomic<bool>* cancel) {
  started_ = true;
  next_round_ = next_round;
  has_result_ = false;  // a left-out node's last result is its own, not the ring's
  // It takes the members' state: a merge it owed a first round to is theirs to run.
  merge_round_.reset();
  merge_news_ = false;
  membership_.start_rejoin(router_.clock().now(), options_.reform_wait);
  send_probes();
  spdlog::info("asking back into the ring before round {}", next_round);
  while (!membership_.ready(router_.clock().now())) {
    if (cancel && cancel->load()) return Status::closed("rejoin cancelled");
    if (router_.clock().now() >= deadline)
      return Status::timeout("rejoin: the ring was still re-forming at the deadline");
    router_.poll(std::chrono::milliseconds(20));
  }
  // The round the members are at: their lower median, not the largest claim, so that
  // one member cannot send a rejoining node far ahead (a hijack).
  const uint64_t members_next = std::max(next_round, lower_median(apply_view().next_rounds));
  if (members_next > next_round) return std::optional<uint64_t>(members_next);
  return std::optional<uint64_t>();
}

Status PeerRing::add_member(uint32_t id, const std::string& endpoint) {
  if (!takes_new_members()) return Membership::add_member(id, endpoint);
  if (options_.link_keys_of) {  // sealed links: to it and from it too
    auto keys = options_.link_keys_of(id);
    if (!keys) return keys.status().with_context(fmt::format("node {}'s ring link keys", id));
    options_.link_keys[id] = *keys;
  }
  membership_.add_configured(id);
  hosts_[id] = peers::endpoint_host(endpoint);
  return Status::ok();
}

void PeerRing::send_probe(uint32_t to, bool offer) {
  // An offer lists the view; a merging probe the union it expects.
  const std::vector<uint32_t> ids = offer ? order().ids : membership_.probe_list();
  const auto merge = offer ? proto::RingProbe::kOffer
                     : !membership_.rejoining() && (membership_.merging() || merge_round_)
                         ? proto::RingProbe::kMerging
                         : proto::RingProbe::kReform;
  const proto::RingProbe probe{membership_.epoch(),
                               membership_.view_id(),
                               membership_.rejoining(),
                               ids.size(),
                               merge,
                               has_result_ && result_.round + 1 == next_round_};
  auto members = std::make_shared<std::vector<std::byte>>(4 * ids.size());
  for (size_t i = 0; i < ids.size(); ++i) compression::store_le32(members->data() + 4 * i, ids[i]);
  (void)control_.send_shared(to, next_round_, probe, std::move(members));
}

void PeerRing::send_probes() {
  for (uint32_t id : order().ids)
    if (id != control_.self()) send_probe(id);
  probe_outsiders();
}

void PeerRing::probe_outsiders() {
  for (uint32_t id : membership_.take_to_probe()) send_probe(id);
}

std::optional<uint32_t> PeerRing::result_sender(const Heard& heard, uint64_t freshest) {
  for (const auto& [id, next] : heard.next_rounds)  // by id
    if (next == freshest && !heard.without_result.count(id)) return id;
  return std::nullopt;
}

PeerRing::Heard PeerRing::apply_view() {
  RingMembership::Change change = membership_.decide();
  view_since_ = router_.clock().now();
  count_failure(Failure::kPeerLeftOut, change.lost.size());
  g_epoch_.store(membership_.epoch(), std::memory_order_relaxed);
  g_members_.store(order().ids.size(), std::memory_order_relaxed);
  reset_links();
  if (change.lost.empty() && change.joined.empty())
    spdlog::info("ring re-formed at epoch {} with all {} members", membership_.epoch(),
                 order().ids.size());
  else
    spdlog::warn(
        "ring re-formed at epoch {} over {} node{} [{}]{}{}", membership_.epoch(),
        order().ids.size(), order().ids.size() == 1 ? "" : "s", fmt::join(order().ids, ", "),
        change.lost.empty()
            ? std::string()
            : fmt::format(": left out {} (no answer within {} ms)", fmt::join(change.lost, ", "),
                          options_.reform_wait.count()),
        change.joined.empty() ? std::string()
                              : fmt::format("; took back {}", fmt::join(change.joined, ", ")));
  announce();
  // A member that merged with nodes since gone owes the union its first round, at a
  // later round than this node's: this node merges too, rather than leave the two
  // running rounds apart. (One at this node's round or behind lost the union's first
  // round to a break, and takes it from a member that completed it, below.)
  if (change.highest_claim() > next_round_) change.merged = true;
  // A merge, or a union whose first round is still owed: its round, as agreed now.
  if (change.merged || merge_round_) {
    merge_round_ = merge_round(change);
    jump_to_ = std::max(jump_to_, *merge_round_);
    next_round_ = std::max(next_round_, *merge_round_);
  }
  if (change.merged) {
    // The two sides' results and synchronization points differ: none is sent, and
    // the union's first round averages the models themselves.
    has_result_ = false;
    merge_news_ = true;
    spdlog::warn(
        "ring merged at epoch {} over {} nodes [{}], this node's ring was [{}]: the union's first "
        "round, {}, averages the models themselves",
        membership_.epoch(), order().ids.size(), fmt::join(order().ids, ", "),
        fmt::join(change.before, ", "), *merge_round_);
    return {};
  }
  // Members behind the freshest round (they lost it to the break, or were down) get
  // its result from the lowest-id member that completed it, so that exactly one sends;
  // they take it from that member only (finish_reform). The freshest round is the
  // freshest believable one, as there: a claim past this node's is believed only when
  // the median member makes it.
  const uint64_t freshest =
      std::max(next_round_, freshest_believed(change.next_rounds, next_round_));
  Heard heard{std::move(change.next_rounds), std::move(change.without_result)};
  if (!has_result_ || next_round_ != freshest || result_.round + 1 != freshest) return heard;
  if (const auto sender = result_sender(heard, freshest); sender && *sender < control_.self())
    return heard;
  for (const auto& [id, next] : heard.next_rounds) {
    if (next >= freshest) continue;
    spdlog::info("round {}: peer {} is behind (next round {}); sending it this node's result",
                 result_.round, id, next);
    if (Status st = result_.send(control_, id, layout_); !st)
      spdlog::warn("round {}: result to peer {}: {}", result_.round, id, st.message());
  }
  return heard;
}

Status PeerRing::finish_reform(std::span<float> data, uint64_t round,
                               const CollectiveOptions& options, bool* took) {
  auto cancelled = [&] {
    return options.cancel && options.cancel->load(std::memory_order_relaxed);
  };
  while (!membership_.ready(router_.clock().now())) {
    if (cancelled()) return Status::closed("ring: cancelled");
    if (router_.clock().now() >= options.deadline)
      return Status::timeout(
          fmt::format("round {}: the ring was still re-forming at the round's deadline", round));
    router_.poll(std::chrono::milliseconds(20));
  }
  const Heard heard = apply_view();
  const auto& next_rounds = heard.next_rounds;
  // A member that completed this round is at round + 1; one that claims more is
  // believed only when the median member is past this round too (this node was left
  // out and catches up), never on its own word (finding 4 of the security review).
  const uint64_t median = lower_median(next_rounds);
  const bool completed_elsewhere =
      std::any_of(next_rounds.begin(), next_rounds.end(),
                  [&](const auto& e) { return e.second == round + 1; }) ||
      median > round + 1;
  for (const auto& [id, next] : next_rounds)
    if (next > round + 1 && next > median) {
      count_refusal(Refusal::kFarRound);
      spdlog::warn("round {}: peer {} claims round {}, the median member is at {}: not believed",
                   round, id, next, median);
    }
  if (completed_elsewhere) {
    // The member that sends the result, by the senders' rule (apply_view).
    const std::optional<uint32_t> sender =
        result_sender(heard, freshest_believed(next_rounds, round + 1));
    const auto complete = [&] {
      auto c = sender ? fetch_->copies.find(*sender) : fetch_->copies.end();
      return c != fetch_->copies.end() && c->second.got == data.size();
    };
    // No member that holds a result is at that round (those there asked back in):
    // nothing will come, so the round runs again at once.
    const auto give_up =
        sender ? std::min(options.deadline, router_.clock().now() + options_.reform_wait)
               : router_.clock().now();
    if (!sender) spdlog::info("round {}: the members past it hold no result of it", round);
    while (!complete() && router_.clock().now() < give_up && !cancelled())
      router_.poll(std::min(until(router_.clock(), give_up), std::chrono::milliseconds(20)));
    for (const auto& [from, copy] : fetch_->copies) {
      if (from == sender) continue;
      count_refusal(Refusal::kWrongResult);
      spdlog::warn("round {}: a result of round {} from peer {} is not taken: peer {} sends it",
                   round, copy.of_round, from, sender ? fmt::format("{}", *sender) : "none");
    }
    std::optional<ResultCopy> taken;
    if (complete()) {
      taken = std::move(fetch_->copies.at(*sender));
      const bool plausible = taken->of_round == round || taken->of_round < median;
      const double own = l2_norm(data), theirs = l2_norm(taken->values);
      std::string why;
      if (!plausible) {
        count_refusal(Refusal::kFarRound);
        why = "further than the median member";
      } else if (any_nonfinite(taken->values)) {
        count_refusal(Refusal::kNonFinite);
        why = "it holds NaN or Inf";
      } else if (!options.deltas && own > 0 && theirs > kMaxResultGrowth * own) {
        count_refusal(Refusal::kWrongResult);
        why = fmt::format("its norm is {:.4g}, {:.3g} times this node's model's", theirs,
                          theirs / own);
      }
      if (!why.empty()) {
        spdlog::warn("round {}: the result of round {} from peer {} is not taken ({})", round,
                     taken->of_round, *sender, why);
        taken.reset();
      }
    }
    fetch_->copies.clear();  // a model's worth each, needed again only after another break
    if (taken) {
      std::copy(taken->values.begin(), taken->values.end(), data.begin());
      if (taken->of_round == round) {
        spdlog::info(
            "round {}: took the result of peer {}, which completed the round before the ring broke",
            round, *sender);
      } else {
        spdlog::info(
            "round {}: took the result of round {} from peer {}: the ring is ahead, catching up",
            round, taken->of_round, *sender);
        jump_to_ = taken->of_round + 1;
      }
      *took = true;
    } else if (sender) {
      spdlog::warn(
          "round {}: a member completed it before the break, but no result of it was taken "
          "within {} ms; running the round again",
          round, options_.reform_wait.count());
    }
  }
  return cancelled() ? Status::closed("ring: cancelled") : Status::ok();
}

void PeerRing::keep_result(std::span<float> data, uint64_t round) {
  // Fresh buffers each time (encode without a codec copies): ZeroMQ may still hold
  // the last ones for a member behind.
  (void)result_.encode(data, control_.self(), round,
                       std::max<uint64_t>(1, options_.chunk_bytes / sizeof(float)), Compression{});
  has_result_ = true;
  next_round_ = round + 1;
  if (merge_round_) {
    spdlog::info("round {}: the merged ring's first round is done: one model again", round);
    jump_to_ = std::max(jump_to_, round + 1);
    merge_round_.reset();
  }
}

}  // namespace gossip::sgd
