#include "daemon/admission.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>

#include "daemon/config.h"
#include "peers/curve_auth.h"
#include "proto/printable.h"

namespace gossip::daemon {
namespace {

constexpr size_t kMaxMembers = 4096;

std::string text_of(const peers::Incoming& in) {
  return std::string(static_cast<const char*>(in.payload.data()), in.payload.size());
}

// An endpoint other nodes can reach: not a wildcard, and of a host name's length (an
// add, repeated to every member that asks, carries no more).
std::optional<std::string> joiner_endpoint_problem(const std::string& endpoint) {
  if (endpoint.size() > 300)
    return fmt::format("an endpoint of {} characters (at most 300)", endpoint.size());
  if (auto problem = endpoint_problem(endpoint)) return problem;
  const std::string host = peers::endpoint_host(endpoint);
  if (host == "0.0.0.0" || host == "::")
    return fmt::format("'{}' is a wildcard: listen on an address the members can reach", endpoint);
  return std::nullopt;
}

}  // namespace

std::string format_members(const std::vector<peers::Peer>& members) {
  std::string out;
  for (const auto& p : members)
    out += fmt::format("{} {}{}\n", p.id, with_key(p), p.banned ? " banned" : "");
  return out;
}

std::string with_key(const peers::Peer& p) {
  return p.public_key.empty() ? p.endpoint : p.endpoint + " " + p.public_key;
}

Result<std::vector<std::string>> read_admit_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::invalid(fmt::format("--admit-keys {}: cannot read it", path));
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    // '#' is a Z85 character, but no key starts with it (its first 5 characters would
    // be above 2^32): a line that starts with '#' is a comment, and one may follow a
    // key after a space.
    constexpr const char* kSpace = " \t\r";
    const size_t first = line.find_first_not_of(kSpace);
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t end = std::min(line.find_first_of(kSpace, first), line.size());
    const std::string key = line.substr(first, end - first);
    const size_t rest = line.find_first_not_of(kSpace, end);
    if (rest != std::string::npos && line[rest] != '#')
      return Status::invalid(fmt::format("--admit-keys {}: line {}: more than a key", path, n));
    if (Status st = peers::check_curve_key(key, "the key"); !st)
      return Status::invalid(fmt::format("--admit-keys {}: line {}: {}", path, n, st.message()));
    if (keys.size() == kMaxMembers)
      return Status::invalid(fmt::format("--admit-keys {}: more than {} keys", path, kMaxMembers));
    keys.push_back(key);
  }
  return keys;
}

Result<peers::Peer> parse_endpoint_and_key(std::string_view text) {
  const size_t space = text.find(' ');
  peers::Peer p;
  p.endpoint = std::string(text.substr(0, space));
  if (auto problem = endpoint_problem(p.endpoint)) return Status::protocol(*problem);
  if (space != std::string_view::npos) {
    p.public_key = std::string(text.substr(space + 1));
    GOSSIP_RETURN_IF_ERROR(peers::check_curve_key(p.public_key, "its public key"));
  }
  return p;
}

Result<std::vector<peers::Peer>> parse_members(std::string_view text) {
  std::vector<peers::Peer> out;
  std::set<uint32_t> ids;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    if (end == std::string_view::npos) return Status::protocol("member list: a line without '\\n'");
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    const size_t space = line.find(' ');
    uint32_t id = 0;
    const auto digits = line.substr(0, space);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (space == std::string_view::npos || ec != std::errc() ||
        ptr != digits.data() + digits.size() || id == proto::kNoNode)
      return Status::protocol(fmt::format("member list: bad line '{}'", line.substr(0, 80)));
    std::string_view rest = line.substr(space + 1);
    constexpr std::string_view kBanned = " banned";
    const bool banned = rest.ends_with(kBanned);
    if (banned) rest.remove_suffix(kBanned.size());
    auto member = parse_endpoint_and_key(rest);
    if (!member)
      return Status::protocol(
          fmt::format("member list: node {}: {}", id, member.status().message()));
    if (!ids.insert(id).second)
      return Status::protocol(fmt::format("member list: node {} twice", id));
    if (out.size() == kMaxMembers)
      return Status::protocol(fmt::format("member list: more than {} members", kMaxMembers));
    member->id = id;
    member->banned = banned;
    out.push_back(std::move(member).value());
  }
  if (out.empty()) return Status::protocol("member list: empty");
  return out;
}

Admission::Admission(peers::Router& router, Options options)
    : router_(router), options_(std::move(options)) {
  update_epoch();
  router_.set_on_epoch_ahead(
      [this](uint32_t peer, uint64_t epoch) { on_epoch_ahead(peer, epoch); });
  highest_ = router_.self();
  for (const auto& p : router_.peers()) highest_ = std::max(highest_, p.id);
  subscription_ =
      router_.subscribe({proto::Kind::kMember, proto::Kind::kHello}, [this](peers::Incoming& in) {
        if (in.kind() == proto::Kind::kHello)
          on_hello(in.peer);
        else
          on_member(in);
      });
}

void Admission::send_member(uint32_t to, proto::Member m, const std::string& payload,
                            uint64_t round) {
  auto text = std::make_shared<std::vector<std::byte>>(payload.size());
  std::memcpy(text->data(), payload.data(), payload.size());
  (void)router_.transport().send_shared(to, round, m, std::move(text));
}

void Admission::send_add(uint32_t to, const Joined& member) {
  send_member(to, {proto::Member::kAdd, member.peer.id, epoch_}, with_key(member.peer),
              member.first_round);
}

Admission::~Admission() { router_.set_on_epoch_ahead(nullptr); }

std::vector<Checkpoint::Member> Admission::members() const {
  std::vector<Checkpoint::Member> out;
  for (const auto& j : joined_)
    out.push_back({j.peer.id, j.peer.endpoint, j.first_round, j.peer.public_key});
  return out;
}

void Admission::remember(std::vector<Checkpoint::Member> members,
                         const std::vector<uint32_t>& forgotten) {
  std::sort(members.begin(), members.end(), [](auto& a, auto& b) { return a.id < b.id; });
  for (const auto& m : members) {
    const std::string what = fmt::format("the checkpoint's member {} ({})", m.id, m.endpoint);
    if (m.id == router_.self() || joined(m.id)) continue;
    const auto& peers = router_.peers();
    if (std::any_of(peers.begin(), peers.end(), [&](const peers::Peer& p) { return p.id == m.id; }))
      continue;  // configured since
    std::optional<std::string> problem;
    if (!options_.refuse.empty())
      problem = "this node's strategy takes no new members";
    else
      problem = unfit({m.id, m.endpoint, m.public_key});
    if (!problem)
      if (auto st = add({{m.id, m.endpoint, m.public_key}, 0}); !st) problem = st.message();
    if (problem) {
      spdlog::warn("{} is not taken back: {}", what, *problem);
      continue;
    }
    spdlog::info("{} joined by seeds before this node restarted: a member again", what);
    if (m.first_round > 0) set_round(joined_.back(), m.first_round);
  }
  const auto& peers = router_.peers();
  for (const uint32_t id : forgotten) {
    if (id == router_.self() ||
        std::none_of(peers.begin(), peers.end(), [&](const peers::Peer& p) { return p.id == id; }))
      continue;
    forgotten_.insert(id);
    spdlog::info("node {} stays forgotten (the checkpoint): it does not count toward the majority",
                 id);
  }
}

std::optional<std::string> Admission::unfit(const peers::Peer& member) const {
  const uint32_t id = member.id;
  if (auto problem = joiner_endpoint_problem(member.endpoint)) return problem;
  if (id == proto::kNoNode) return "not an id";
  if (options_.curve && member.public_key.empty())
    return "no public key, and this cluster runs CURVE";
  if (!options_.curve && !member.public_key.empty())
    return "a public key, but this node runs without CURVE";
  if (options_.check)
    if (auto st = options_.check(id); !st) return st.message();
  return std::nullopt;
}

void Admission::update_epoch() {
  // Counted here, never taken from a peer: a number a peer claims could hide what
  // this node misses (an add of node 6 heard, of node 5 lost) or switch the asking off.
  epoch_ = router_.peers().size() + 1;
  router_.transport().set_epoch(epoch_);
  if (epoch_ >= catch_up_to_) {  // caught up
    catching_up_until_ = {};
    catch_up_to_ = 0;
  }
}

std::vector<const Admission::Joined*> Admission::by_id() const {
  std::vector<const Joined*> out;
  for (const auto& j : joined_) out.push_back(&j);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->peer.id < b->peer.id; });
  return out;
}

void Admission::on_hello(uint32_t peer) {
  for (const Joined* member : by_id())
    if (member->peer.id != peer) send_add(peer, *member);
}

void Admission::on_sync(uint32_t peer, uint64_t its_epoch) {
  // Only to a member that lists fewer, and once a second: a sync is small, the adds
  // it brings back are not.
  const auto now = this->now();
  auto& last = answered_[peer];
  if (its_epoch >= epoch_ || now - last < std::chrono::seconds(1)) return;
  last = now;
  for (const Joined* member : by_id())
    if (member->peer.id != peer) send_add(peer, *member);
}

void Admission::on_epoch_ahead(uint32_t peer, uint64_t epoch) {
  // A node lists its configured peers and at most kMaxJoined more.
  if (epoch > epoch_ + peers::TrafficCounters::kMaxJoined) return;
  const auto now = this->now();
  Ask& ask = asks_[peer];
  if (epoch > ask.claimed) {
    // The peer lists more than it did: news, asked for at once.
    ask.claimed = epoch;
    ask.next = {};
    // Until its adds are here (or for 2 s: a sync is answered once a second) this
    // node gives no id, which it might give again otherwise (two nodes that each took
    // themselves for the coordinator, an add lost before a cut). Once per peer for
    // each epoch of this node's own: a liar's rising claims hold joins up for 2 s
    // per member that joined meanwhile, not for a second per claim.
    if (ask.held_at != epoch_) {
      ask.held_at = epoch_;
      catch_up_to_ = std::max(catch_up_to_, epoch);
      catching_up_until_ = now + std::chrono::seconds(2);
    }
  }
  if (now < ask.next) return;
  // An answer that brought nothing (a member whose epoch is not of joins this node
  // can take: a lying one, or a join on the other side of a partition) is asked
  // less and less often, until the peer lists more again.
  ask.backoff = ask.epoch == epoch_ && ask.next != TimePoint{}
                    ? std::min(ask.backoff * 2, std::chrono::milliseconds(60000))
                    : std::chrono::milliseconds(1000);
  ask.next = now + ask.backoff;
  ask.epoch = epoch_;
  spdlog::info(
      "node {} knows of joins this node missed (it lists {} members, this node {}): asking it",
      peer, epoch, epoch_);
  (void)router_.transport().send(peer, 0,
                                 proto::Member{proto::Member::kSync, router_.self(), epoch_});
}

uint32_t Admission::coordinator(uint64_t bound) const {
  const auto& traffic = router_.transport().traffic();
  uint32_t lowest = router_.self();
  for (const auto& p : router_.peers())
    if (!p.banned && p.id < lowest && traffic.silent_ms(p.id) <= bound) lowest = p.id;
  return lowest;
}

uint64_t Admission::heard_within() const {
  // Anything heard since the last ping round began: the members that answered it.
  const auto since = now() - pinged_;
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(since).count());
}

std::optional<std::string> Admission::no_majority(uint64_t bound_ms) const {
  if (!options_.needs_majority) return std::nullopt;
  const auto& traffic = router_.transport().traffic();
  size_t members = 1, heard = 1;  // this node
  // Every listed member counts, one that left with a bye or is banned too: which
  // members are gone is not something the two sides of a partition agree on. A
  // forgotten one does not: a majority agreed that it is gone (gossipctl forget).
  for (const auto& p : router_.peers()) {
    if (!counts(p.id)) continue;
    ++members;
    heard += !p.banned && traffic.silent_ms(p.id) <= bound_ms;
  }
  if (2 * heard > members) return std::nullopt;
  return fmt::format(
      "the coordinator, node {}, hears {} of the {} members (itself included): an id is given "
      "only while it hears more than half, so that the two sides of a partition cannot give "
      "one twice (--join-quorum any gives it anyway)",
      router_.self(), heard, members);
}

void Admission::ping_members() {
  pinged_ = now();
  pinged_ids_.clear();
  for (const auto& p : router_.peers())
    if (!p.banned && counts(p.id)) {
      (void)router_.transport().send(p.id, 0, proto::Inspect{proto::Inspect::kPing, 0, 0, 0});
      pinged_ids_.push_back(p.id);
    }
}

bool Admission::pings_answered() const {
  const auto& traffic = router_.transport().traffic();
  const uint64_t bound = heard_within();
  return std::all_of(pinged_ids_.begin(), pinged_ids_.end(),
                     [&](uint32_t id) { return traffic.silent_ms(id) <= bound; });
}

std::chrono::milliseconds Admission::pong_wait() const {
  return std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(options_.dead_after / 2),
                    std::chrono::milliseconds(300), std::chrono::milliseconds(1000));
}

void Admission::tick() {
  if (!checks_.empty()) settle_checks();
  if (proposal_) settle_proposal();
  if (parked_.empty()) return;
  if (now() < pinged_ + pong_wait() && !pings_answered()) return;
  auto parked = std::move(parked_);
  parked_.clear();
  for (const auto& [route, endpoint, key] : parked) decide(route, endpoint, key);
}

void Admission::reply(const std::string& route, proto::Member m, const std::string& payload,
                      uint64_t round) {
  if (auto st = router_.transport().reply_to_joiner(route, round, m, payload); !st)
    spdlog::warn("answer to a joiner: {}", st.message());
}

void Admission::on_member(peers::Incoming& in) {
  const auto& m = in.as<proto::Member>();
  const std::string text = text_of(in);
  if (!in.joiner_route.empty()) {
    if (m.what == proto::Member::kJoinRequest) answer_join(in, text);
    return;
  }
  if (m.what == proto::Member::kReady && m.id == in.peer) {
    on_ready(in.peer);
    return;
  }
  if (m.what == proto::Member::kSync) {
    on_sync(in.peer, m.epoch);
    return;
  }
  if (m.what == proto::Member::kAccept || m.what == proto::Member::kDecline) {
    on_vote(in.peer, m, text);
    return;
  }
  if (m.what == proto::Member::kForget) {
    on_forget(in.peer, m.id);
    return;
  }
  if (m.what == proto::Member::kForgotten) {
    on_forgotten(in.peer, m.id);
    return;
  }
  if (m.what != proto::Member::kAdd && m.what != proto::Member::kPropose) {  // or a joiner's
    router_.transport().note_dropped(in.peer,
                                     fmt::format("a member message what={} from a member", m.what));
    return;
  }
  auto member = parse_endpoint_and_key(text);
  if (!member) {
    router_.transport().note_dropped(
        in.peer, fmt::format("an add of node {}: {}", m.id, member.status().message()));
    return;
  }
  member->id = m.id;
  if (m.what == proto::Member::kPropose)
    on_propose(in.peer, m.id, *member);
  else
    on_add(in.peer, {std::move(member).value(), in.round()});
}

void Admission::answer_join(peers::Incoming& in, const std::string& endpoint) {
  const std::string& route = in.joiner_route;
  std::optional<std::string> problem = joiner_endpoint_problem(endpoint);
  if (!problem && !options_.refuse.empty()) problem = options_.refuse;
  if (!problem && endpoint == options_.self_endpoint)
    problem = fmt::format("{} is this seed's own endpoint", endpoint);
  if (problem) {
    reply(route, {proto::Member::kRefused, 0, epoch_}, *problem);
    return;
  }
  const auto& peers = router_.peers();
  if (std::none_of(peers.begin(), peers.end(),
                   [&](const peers::Peer& p) { return p.endpoint == endpoint; })) {
    // A new node. Who coordinates, and whether it hears a majority, is of every member,
    // but a node hears only its neighbors on an elastic ring: it pings them all first
    // (any daemon answers a ping, daemon/inspector.h) and decides once they answered.
    if (parked_.size() >= kMaxParked) {
      reply(route, {proto::Member::kWait, 0, epoch_}, "this seed is busy with other joiners");
      return;
    }
    if (parked_.empty()) ping_members();  // a fresh round: a stale one may predate a cut
    parked_.push_back({route, endpoint, in.joiner_key});
    return;
  }
  decide(route, endpoint, in.joiner_key);
}

void Admission::decide(const std::string& route, const std::string& endpoint,
                       const std::string& key) {
  const auto& peers = router_.peers();
  const auto same = std::find_if(peers.begin(), peers.end(),
                                 [&](const peers::Peer& p) { return p.endpoint == endpoint; });
  uint32_t id = 0;
  uint64_t first_round = 0;
  if (same != peers.end()) {
    if (same->public_key != key) {  // under CURVE: another node's endpoint
      reply(route, {proto::Member::kRefused, 0, epoch_},
            fmt::format("{} is node {}'s, which holds another key", endpoint, same->id));
      return;
    }
    id = same->id;  // its answer was lost, or it asks again: the same id and round
    if (const Joined* j = joined(id)) first_round = j->first_round;
  } else {
    const uint64_t heard = heard_within();
    if (const uint32_t c = coordinator(heard); c != router_.self()) {
      const auto it =
          std::find_if(peers.begin(), peers.end(), [&](const peers::Peer& p) { return p.id == c; });
      reply(route, {proto::Member::kRedirect, c, epoch_}, with_key(*it));
      return;
    }
    if (now() < catching_up_until_) {
      reply(route, {proto::Member::kWait, 0, epoch_},
            fmt::format("the coordinator, node {}, is catching up with members that list more "
                        "members than it does",
                        router_.self()));
      return;
    }
    if (auto why = no_majority(heard)) {
      if (const auto now = this->now(); now >= waits_logged_) {
        spdlog::warn("a node at {} asks to join; it waits: {}", endpoint, *why);
        waits_logged_ = now + std::chrono::seconds(10);
      }
      reply(route, {proto::Member::kWait, 0, epoch_}, *why);
      return;
    }
    if (highest_ >= proto::kNoNode - 1) {
      reply(route, {proto::Member::kRefused, 0, epoch_}, "no id left");
      return;
    }
    id = highest_ + 1;
    if (options_.check)
      if (auto st = options_.check(id); !st) {
        reply(route, {proto::Member::kRefused, 0, epoch_}, st.message());
        return;
      }
    if (options_.needs_majority)
      propose({route, endpoint, key}, id);
    else
      admit({route, endpoint, key}, id);
    return;
  }
  std::vector<peers::Peer> members{{router_.self(), options_.self_endpoint, options_.self_key}};
  for (const auto& p : router_.peers()) members.push_back(p);
  std::sort(members.begin(), members.end(), [](auto& a, auto& b) { return a.id < b.id; });
  reply(route, {proto::Member::kAnswer, id, epoch_}, format_members(members), first_round);
}

void Admission::admit(const Parked& joiner, uint32_t id) {
  const Joined member{{id, joiner.endpoint, joiner.key}, 0};
  promises_.erase(id);
  if (auto st = add(member); !st) {
    reply(joiner.route, {proto::Member::kRefused, 0, epoch_}, st.message());
    return;
  }
  for (const auto& p : router_.peers())
    if (p.id != id) send_add(p.id, member);
  spdlog::info("node {} ({}) joined: members' epoch {}, {} members", id, joiner.endpoint, epoch_,
               router_.peers().size() + 1);
  std::vector<peers::Peer> members{{router_.self(), options_.self_endpoint, options_.self_key}};
  for (const auto& p : router_.peers()) members.push_back(p);
  std::sort(members.begin(), members.end(), [](auto& a, auto& b) { return a.id < b.id; });
  reply(joiner.route, {proto::Member::kAnswer, id, epoch_}, format_members(members), 0);
}

std::optional<std::string> Admission::taken_elsewhere(uint32_t id, const std::string& endpoint,
                                                      const std::string& key) {
  if (id == router_.self()) return fmt::format("id {} is this node's", id);
  for (const auto& p : router_.peers())
    if (p.id == id)
      return p.endpoint == endpoint && p.public_key == key
                 ? std::nullopt
                 : std::optional(fmt::format("id {} is node {} here ({})", id, id, p.endpoint));
  const auto now = this->now();
  std::erase_if(promises_, [&](const auto& e) { return now >= e.second.until; });
  const auto it = promises_.find(id);
  if (it != promises_.end() && it->second.endpoint != endpoint)
    return fmt::format("id {} is promised to {} (proposed by node {})", id, it->second.endpoint,
                       it->second.by);
  if (it == promises_.end() && promises_.size() >= kMaxPromises)
    return fmt::format("{} ids are promised already", promises_.size());
  return std::nullopt;
}

void Admission::propose(const Parked& joiner, uint32_t id) {
  if (proposal_) {
    if (proposal_->joiner.endpoint == joiner.endpoint) {  // it asked again: answer the newest
      proposal_->joiner.route = joiner.route;
      return;
    }
    reply(joiner.route, {proto::Member::kWait, 0, epoch_},
          fmt::format("the coordinator, node {}, is settling another proposal ({} {})",
                      router_.self(), proposal_->forgotten ? "forgetting node" : "id",
                      proposal_->id));
    return;
  }
  if (auto why = taken_elsewhere(id, joiner.endpoint, joiner.key)) {
    reply(
        joiner.route, {proto::Member::kWait, 0, epoch_},
        fmt::format("the coordinator, node {}, cannot give the next id: {}", router_.self(), *why));
    return;
  }
  const auto now = this->now();
  promises_[id] = {joiner.endpoint, router_.self(), now + kPromiseFor};
  proposal_ = Proposal{joiner, id, nullptr, {router_.self()}, "", now + kProposalWait};
  const std::string payload = with_key({id, joiner.endpoint, joiner.key});
  for (const auto& p : router_.peers())
    if (!p.banned && counts(p.id))
      send_member(p.id, {proto::Member::kPropose, id, epoch_}, payload);
  settle_proposal();  // a node alone is its own majority
}

size_t Admission::counted_members() const {
  size_t n = 1;  // this node
  for (const auto& p : router_.peers()) n += counts(p.id);
  return n;
}

void Admission::settle_proposal() {
  Proposal& p = *proposal_;
  const size_t members = counted_members();  // every listed one, as no_majority
  if (2 * p.accepted.size() > members) {
    Proposal done = std::move(p);
    proposal_.reset();
    if (done.forgotten) {
      forgotten_.insert(done.id);
      const auto it = std::find_if(router_.peers().begin(), router_.peers().end(),
                                   [&](const peers::Peer& q) { return q.id == done.id; });
      const std::string endpoint = it != router_.peers().end() ? it->endpoint : "?";
      for (const auto& q : router_.peers())
        if (q.id != done.id)
          send_member(q.id, {proto::Member::kForgotten, done.id, epoch_}, endpoint);
      spdlog::warn(
          "node {} is forgotten: {} of the {} members accepted; it no longer counts "
          "toward the majority ({} members count)",
          done.id, done.accepted.size(), members, counted_members());
      done.forgotten(Status::ok());
      return;
    }
    admit(done.joiner, done.id);
    return;
  }
  if (p.declined.empty() && now() < p.until) return;
  const std::string why =
      !p.declined.empty()
          ? p.declined
          : fmt::format(
                "{} of the {} members that count accepted {} within {} s, and more than "
                "half must",
                p.accepted.size(), members,
                p.forgotten ? fmt::format("forgetting node {}", p.id)
                            : fmt::format("id {} (--join-quorum majority)", p.id),
                std::chrono::duration_cast<std::chrono::seconds>(kProposalWait).count());
  if (p.forgotten) {
    auto done = std::move(p.forgotten);
    const uint32_t id = p.id;
    proposal_.reset();
    done(Status::timeout(fmt::format("node {} is not forgotten: {}", id, why)));
    return;
  }
  spdlog::warn("a node at {} asks to join; it waits: {}", p.joiner.endpoint, why);
  reply(p.joiner.route, {proto::Member::kWait, 0, epoch_}, why);
  if (const auto it = promises_.find(p.id);
      it != promises_.end() && it->second.by == router_.self())
    promises_.erase(it);
  proposal_.reset();
}

void Admission::on_propose(uint32_t from, uint32_t id, const peers::Peer& told) {
  if (auto why = taken_elsewhere(id, told.endpoint, told.public_key)) {
    send_member(from, {proto::Member::kDecline, id, epoch_}, *why);
    return;
  }
  if (!joined(id) && std::none_of(router_.peers().begin(), router_.peers().end(),
                                  [&](const peers::Peer& p) { return p.id == id; }))
    promises_[id] = {told.endpoint, from, now() + kPromiseFor};
  send_member(from, {proto::Member::kAccept, id, epoch_}, told.endpoint);
}

Status Admission::settling() const {
  return Status::invalid(
      fmt::format("node {} is settling another proposal (id {}); try again in a few seconds",
                  router_.self(), proposal_->id));
}

void Admission::forget(uint32_t peer, std::function<void(Status)> done) {
  if (auto why = keeps(peer)) return done(Status::invalid(*why));
  if (proposal_) return done(settling());
  if (!asked(peer, router_.self()))
    return done(Status::invalid(fmt::format(
        "node {} is asking node {} whether it lives already; try again in a few seconds",
        router_.self(), peer)));
  when_heard(peer, [this, peer, done = std::move(done)](std::optional<uint64_t> heard) mutable {
    if (heard) return done(Status::invalid(lives(peer, *heard)));
    propose_forget(peer, std::move(done));
  });
}

void Admission::propose_forget(uint32_t peer, std::function<void(Status)> done) {
  if (auto why = keeps(peer)) return done(Status::invalid(*why));  // it changed meanwhile
  if (proposal_) return done(settling());
  Proposal p;
  p.id = peer;
  p.forgotten = std::move(done);
  p.accepted = {router_.self()};
  // A member that does not hear the node asks it, for up to a --dead-after, first.
  p.until = now() + kProposalWait + options_.dead_after;
  const auto it = std::find_if(router_.peers().begin(), router_.peers().end(),
                               [&](const peers::Peer& q) { return q.id == peer; });
  p.joiner.endpoint = it->endpoint;
  proposal_ = std::move(p);
  for (const auto& q : router_.peers())
    if (!q.banned && counts(q.id) && q.id != peer)
      send_member(q.id, {proto::Member::kForget, peer, epoch_}, it->endpoint);
  settle_proposal();
}

std::optional<std::string> Admission::keeps(uint32_t id) const {
  if (id == router_.self()) return fmt::format("node {} is this node", id);
  const auto& peers = router_.peers();
  if (std::none_of(peers.begin(), peers.end(), [&](const peers::Peer& p) { return p.id == id; }))
    return fmt::format("node {} is not a member here", id);
  if (forgotten_.count(id)) return fmt::format("node {} is forgotten already", id);
  return std::nullopt;
}

std::string Admission::lives(uint32_t id, uint64_t heard_ms) {
  return fmt::format(
      "node {} is alive here (heard {} ms ago): a member that lives is not "
      "forgotten; stop it first (gossipctl leave)",
      id, heard_ms);
}

bool Admission::asked(uint32_t id, uint32_t by) { return checks_[id].askers.insert(by).second; }

void Admission::when_heard(uint32_t id, std::function<void(std::optional<uint64_t>)> then) {
  const uint64_t silent = router_.transport().traffic().silent_ms(id);
  Check& c = checks_[id];
  if (silent <= static_cast<uint64_t>(options_.dead_after.count())) {
    if (c.then.empty()) checks_.erase(id);
    return then(silent);
  }
  c.then.push_back(std::move(then));
  if (c.then.size() > 1) return;  // its ping is out already
  spdlog::info("node {} is silent here ({}): asking it whether it lives", id,
               silent == proto::ipc::kNeverHeard ? std::string("never heard")
                                                 : fmt::format("{} ms", silent));
  c.since = now();
  c.pinged = c.since;
  (void)router_.transport().send(id, 0, proto::Inspect{proto::Inspect::kPing, 0, 0, 0});
}

void Admission::settle_checks() {
  using Then = std::function<void(std::optional<uint64_t>)>;
  const auto now = this->now();
  std::vector<std::pair<std::optional<uint64_t>, std::vector<Then>>> ready;
  for (auto it = checks_.begin(); it != checks_.end();) {
    Check& c = it->second;
    if (c.then.empty()) {  // no check runs: its askers may ask again
      it = checks_.erase(it);
      continue;
    }
    const auto waited = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - c.since).count());
    const uint64_t silent = router_.transport().traffic().silent_ms(it->first);
    // Alive: heard since the first ping. Gone: silent through a whole --dead-after of
    // pings, as a neighbor must be to be presumed dead.
    if (silent <= waited || now >= c.since + options_.dead_after) {
      ready.emplace_back(silent <= waited ? std::optional<uint64_t>(silent) : std::nullopt,
                         std::move(c.then));
      it = checks_.erase(it);
      continue;
    }
    if (now >= c.pinged + pong_wait()) {  // a ping lost, or the node was busy: again
      c.pinged = now;
      (void)router_.transport().send(it->first, 0, proto::Inspect{proto::Inspect::kPing, 0, 0, 0});
    }
    ++it;
  }
  // Run after the map is settled: a callback may ask again.
  for (auto& [heard, thens] : ready)
    for (auto& then : thens) then(heard);
}

void Admission::on_forget(uint32_t from, uint32_t id) {
  if (!counts(from)) return;  // a forgotten member has no say (its votes are not counted)
  if (auto why = keeps(id)) {
    if (forgotten_.count(id))  // it asks again: the same answer as the first time
      send_member(from, {proto::Member::kAccept, id, epoch_}, "forget");
    else
      send_member(from, {proto::Member::kDecline, id, epoch_}, *why);
    return;
  }
  if (!asked(id, from)) return;  // it asked already: one answer, when the check ends
  when_heard(id, [this, from, id](std::optional<uint64_t> heard) {
    if (heard)
      send_member(from, {proto::Member::kDecline, id, epoch_}, lives(id, *heard));
    else
      send_member(from, {proto::Member::kAccept, id, epoch_}, "forget");
  });
}

void Admission::on_forgotten(uint32_t from, uint32_t id) {
  if (!counts(from)) return;
  if (id == router_.self()) {
    spdlog::error(
        "node {} says the members forgot this node, which lives: it no longer counts "
        "toward their majority",
        from);
    return;
  }
  const auto& peers = router_.peers();
  if (std::none_of(peers.begin(), peers.end(), [&](const peers::Peer& p) { return p.id == id; }) ||
      forgotten_.count(id))
    return;
  // A member's word is not enough while this node hears the node itself (a forget is
  // accepted only by members that do not): a liar would shrink the majority. This node
  // may not watch that node (heartbeats go to neighbors), so it asks it first.
  if (!asked(id, kToldForgotten)) return;  // one check at a time decides
  when_heard(id, [this, from, id](std::optional<uint64_t> heard) {
    if (heard) {
      router_.transport().note_dropped(
          from, fmt::format("a forgotten of node {}, which this node heard {} ms ago", id, *heard));
      return;
    }
    if (forgotten_.count(id)) return;
    forgotten_.insert(id);
    spdlog::warn(
        "node {} is forgotten (told by node {}): it no longer counts toward the majority "
        "({} members count)",
        id, from, counted_members());
  });
}

void Admission::on_vote(uint32_t from, const proto::Member& m, const std::string& text) {
  if (!proposal_ || m.id != proposal_->id) return;  // late: for a proposal settled already
  if (!counts(from) || (proposal_->forgotten && from == proposal_->id)) return;  // no vote
  if (m.what == proto::Member::kAccept) {
    if (text == (proposal_->forgotten ? std::string("forget") : proposal_->joiner.endpoint))
      proposal_->accepted.insert(from);
  } else if (proposal_->declined.empty()) {
    proposal_->declined = fmt::format("node {} declines {} {}: {}", from,
                                      proposal_->forgotten ? "forgetting node" : "id", m.id,
                                      proto::printable_text(text, 200, "..."));
  }
  settle_proposal();
}

void Admission::on_add(uint32_t from, const Joined& member) {
  const uint32_t id = member.peer.id;
  promises_.erase(id);
  const std::string& endpoint = member.peer.endpoint;
  if (id == router_.self()) {  // this joiner's first round, once a member scheduled it
    // (A configured node's listen may be a wildcard: only a joiner's is its endpoint.)
    if (options_.joiner && endpoint != options_.self_endpoint) {
      given_twice(from, member.peer, {router_.self(), options_.self_endpoint, options_.self_key});
      return;
    }
    if (member.first_round > 0 && own_round_ == 0) {
      own_round_ = member.first_round;
      if (options_.schedule) options_.schedule(id, own_round_);
    }
    return;
  }
  if (Joined* known = joined(id)) {  // its schedule, when this add brings the first
    if (known->peer.endpoint != endpoint || known->peer.public_key != member.peer.public_key) {
      given_twice(from, member.peer, known->peer);
      return;
    }
    if (member.first_round > 0 && known->first_round == 0) set_round(*known, member.first_round);
    return;
  }
  if (!options_.refuse.empty()) {  // no member of this cluster admits one: a made-up add
    router_.transport().note_dropped(
        from, fmt::format("an add of node {}, but this node's strategy takes no new members", id));
    return;
  }
  const auto& peers = router_.peers();
  if (const auto p = std::find_if(peers.begin(), peers.end(),
                                  [&](const peers::Peer& q) { return q.id == id; });
      p != peers.end()) {  // a configured peer (or, on a joiner, one its answer listed)
    if (p->endpoint != endpoint || p->public_key != member.peer.public_key)
      given_twice(from, member.peer, *p);
    return;
  }
  if (auto problem = unfit(member.peer)) {
    router_.transport().note_dropped(from, fmt::format("an add of node {}: {}", id, *problem));
    return;
  }
  if (auto st = add({member.peer, 0}); !st) {
    spdlog::warn("node {} says node {} ({}) joined, but it cannot be taken in: {}", from, id,
                 endpoint, st.message());
    return;
  }
  spdlog::info("node {} ({}) joined (told by node {}): members' epoch {}, {} members", id, endpoint,
               from, epoch_, router_.peers().size() + 1);
  if (member.first_round > 0) set_round(joined_.back(), member.first_round);
}

void Admission::given_twice(uint32_t from, const peers::Peer& told, const peers::Peer& known) {
  if (!given_twice_.insert(told.id).second) return;  // once per id: adds come again
  spdlog::error(
      "node {} says node {} is {}, but this node knows node {} as {}: one id was given to two "
      "nodes (two coordinators decided at once, or an add was lost before a cut); stop the "
      "one that joined last and let it join again from another endpoint (a known one keeps "
      "its id)",
      from, told.id, told.endpoint, known.id, known.endpoint);
}

Admission::Joined* Admission::joined(uint32_t id) {
  for (auto& j : joined_)
    if (j.peer.id == id) return &j;
  return nullptr;
}

void Admission::set_round(Joined& member, uint64_t round) {
  member.first_round = round;
  if (options_.schedule) options_.schedule(member.peer.id, round);
  spdlog::info("node {} takes part from round {}", member.peer.id, round);
}

void Admission::on_ready(uint32_t from) {
  Joined* member = joined(from);
  if (!member || !options_.schedule || !options_.first_round) {
    router_.transport().note_dropped(
        from, member ? "a ready, but this node's strategy schedules no member"
                     : "a ready from a node that did not join by seeds");
    return;
  }
  if (member->first_round > 0) {  // scheduled already (the answer got lost): the same round
    send_add(from, *member);
    return;
  }
  // Joins are scheduled in order: a later member never takes part before an earlier one.
  last_first_round_ = std::max(options_.first_round(), last_first_round_);
  set_round(*member, last_first_round_);
  for (const auto& p : router_.peers()) send_add(p.id, *member);  // the joiner too
}

Result<uint64_t> Admission::ask_for_round(TimePoint deadline, const std::atomic<bool>* cancel,
                                          const std::function<void()>& tick) {
  TimePoint next_ask{};
  while (own_round_ == 0) {
    const auto now = this->now();
    if (now >= deadline)
      return Status::timeout(
          "no member scheduled the round this node takes part from: is the coordinator up?");
    if (cancel && cancel->load()) return Status::closed("join cancelled");
    if (const uint32_t c = coordinator(static_cast<uint64_t>(options_.dead_after.count()));
        now >= next_ask && c != router_.self()) {
      send_member(c, {proto::Member::kReady, router_.self(), epoch_}, options_.self_endpoint);
      next_ask = now + std::chrono::seconds(1);
    }
    if (tick) tick();
    router_.poll(std::chrono::milliseconds(20));
  }
  return own_round_;
}

Status Admission::add(const Joined& member) {
  GOSSIP_RETURN_IF_ERROR(router_.transport().add_peer(member.peer));
  highest_ = std::max(highest_, member.peer.id);  // never given again, taken or not
  // Known here only once the strategy took it; one it refused is no member at all
  // (an add of it again is tried again).
  if (options_.take)
    if (Status st = options_.take(member.peer.id, member.peer.endpoint); !st) {
      router_.transport().remove_peer(member.peer.id);
      return st;
    }
  update_epoch();
  joined_.push_back(member);
  return Status::ok();
}

}  // namespace gossip::daemon
