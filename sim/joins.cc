#include "sim/joins.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>

#include "base/split_mix64.h"
#include "daemon/admission.h"
#include "daemon/inspector.h"
#include "daemon/join_client.h"
#include "peers/router.h"
#include "sim/sim_clock.h"

namespace gossip::sim {
namespace {

using namespace std::chrono_literals;

// Hub addresses of joiners before they have an id: above every id a member can have
// (at most 4,096 members and 256 joins).
constexpr uint32_t kJoinerAddress = 1'000'000;

// Endpoints as gossipd's members have them (admission checks them): a member's from
// its id, a joiner's from its order of arrival, on addresses no member has.
std::string member_endpoint(uint32_t id) {
  return fmt::format("tcp://10.{}.{}.{}:7000", (id >> 16) & 255, (id >> 8) & 255, id & 255);
}
std::string joiner_endpoint(uint32_t j) {
  return fmt::format("tcp://10.250.{}.{}:7000", (j >> 8) & 255, j & 255);
}
// The member at `endpoint`, or nullopt (a joiner's endpoint: nobody listens there).
std::optional<uint32_t> member_at(const std::string& endpoint) {
  unsigned a = 0, b = 0, c = 0;
  if (std::sscanf(endpoint.c_str(), "tcp://10.%u.%u.%u:7000", &a, &b, &c) != 3 || a == 250)
    return std::nullopt;
  return (a << 16) | (b << 8) | c;
}

double to_seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

struct Member {
  uint32_t id = 0;
  std::unique_ptr<peers::MemoryChannel> channel;
  std::unique_ptr<peers::Router> router;
  std::unique_ptr<daemon::Inspector> inspector;
  std::unique_ptr<daemon::Admission> admission;
  size_t listed = 0;                   // peers it listed at the last look
  std::map<uint32_t, double> learned;  // a member that joined -> when this node listed it
};

class JoinWorld {
 public:
  explicit JoinWorld(const JoinOptions& o)
      : o_(o),
        hub_(clock_, o.links),
        slots_(o.members + o.joins),
        rows_(o.joins),
        asked_messages_(o.joins + 1) {
    // Each joiner's seeds: distinct members, drawn from the seed; it asks them in turn.
    for (uint32_t j = 0; j < o.joins; ++j) {
      SplitMix64 draw = SplitMix64::keyed(o.seed, 0x6a6f696e, j);
      std::vector<uint32_t> ids;
      while (ids.size() < std::min(o.seeds, o.members)) {
        const auto id = static_cast<uint32_t>(draw.next() % o.members);
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      std::vector<peers::Peer> seeds;
      for (uint32_t id : ids) seeds.push_back({id, member_endpoint(id), ""});
      seeds_.push_back(std::move(seeds));
      // It asks from where its first seed is: the same side of every partition.
      hub_.place(kJoinerAddress + j, ids.front());
    }
  }

  JoinReport run() {
    const auto real_start = std::chrono::steady_clock::now();
    std::vector<SimClock::Task> tasks;
    for (uint32_t i = 0; i < o_.members; ++i)
      tasks.push_back({fmt::format("member {}", i), [this, i] {
                         std::vector<peers::Peer> peers;
                         for (uint32_t p = 0; p < o_.members; ++p)
                           if (p != i) peers.push_back({p, member_endpoint(p), ""});
                         Member& n = start(i, i, std::move(peers), false);
                         serve(n);
                       }});
    for (uint32_t j = 0; j < o_.joins; ++j)
      tasks.push_back({fmt::format("joiner {}", j), [this, j] { run_joiner(j); }});
    tasks.push_back({"controller", [this] { control(); }});
    clock_.run(std::move(tasks));
    return report(to_seconds(std::chrono::steady_clock::now() - real_start));
  }

 private:
  Member& start(size_t slot, uint32_t id, std::vector<peers::Peer> peers, bool joiner) {
    auto n = std::make_unique<Member>();
    n->id = id;
    n->channel = hub_.join_peers(id, std::move(peers));
    n->router = std::make_unique<peers::Router>(*n->channel);
    daemon::Inspector::Options io;
    io.version = "simulated";
    io.strategy = "none";
    n->inspector = std::make_unique<daemon::Inspector>(
        *n->router, *n->channel, io, [] { return proto::inspect::MemberStatus{}; });
    daemon::Admission::Options ao;
    ao.self_endpoint = member_endpoint(id);
    ao.dead_after = o_.dead_after;
    ao.needs_majority = o_.majority;
    ao.joiner = joiner;
    n->admission = std::make_unique<daemon::Admission>(*n->router, std::move(ao));
    Member* raw = n.get();
    n->router->set_after_poll([raw] { raw->admission->tick(); });
    n->listed = n->channel->peers().size();
    slots_[slot] = std::move(n);
    return *raw;
  }

  // Answers its peers until the controller says the run is over, noting when it first
  // lists each member that joins.
  void serve(Member& n) {
    while (!done_.load()) {
      n.router->poll(100ms);
      const auto& peers = n.channel->peers();
      if (peers.size() == n.listed) continue;
      n.listed = peers.size();
      const double now = to_seconds(clock_.elapsed());
      for (const auto& p : peers)
        if (p.id >= o_.members) n.learned.try_emplace(p.id, now);
    }
  }

  void run_joiner(uint32_t j) {
    clock_.sleep_until(TimePoint(SimClock::kStart) + o_.every * (j + 1));
    JoinRow& row = rows_[j];
    row.joiner = j;
    row.asked_s = to_seconds(clock_.elapsed());
    asked_messages_[j] = hub_.messages();
    const std::string endpoint = joiner_endpoint(j);
    peers::MemoryJoiner port(hub_, kJoinerAddress + j);
    auto ask = [&](const peers::Peer& seed, const std::string& ep,
                   TimePoint until) -> std::optional<daemon::JoinReply> {
      const auto to = member_at(seed.endpoint);
      if (!to) return std::nullopt;
      const std::string route =
          port.ask(*to,
                   proto::encode_head(proto::kNoNode, 0,
                                      proto::Member{proto::Member::kJoinRequest, 0, 0}, ep.size()),
                   ep);
      while (auto reply = port.reply(route, until)) {
        auto h = proto::decode_head(reply->first.data(), reply->first.size());
        if (!h || h->envelope.kind != proto::Kind::kMember ||
            !proto::validate_payload(h->envelope, 1, reply->second.size()))
          continue;
        return daemon::JoinReply{std::get<proto::Member>(h->body), h->envelope.round,
                                 std::move(reply->second)};
      }
      return std::nullopt;
    };
    auto joined = daemon::join_by_seeds(seeds_[j], endpoint, o_.join_timeout, {}, clock_, ask);
    ++finished_;
    if (!joined) {
      row.failure = joined.status().message();
      return;
    }
    row.answered_s = to_seconds(clock_.elapsed());
    row.id = joined->id;
    auto& given = given_[joined->id];
    given.push_back(endpoint);
    // A second node on an id would share the first's mailbox: it is reported, not run.
    if (given.size() > 1 || joined->id < o_.members) return;
    std::vector<peers::Peer> peers;
    for (const auto& p : joined->members)
      if (p.id != joined->id) peers.push_back(p);
    hub_.place(joined->id, seeds_[j].front().id);
    serve(start(o_.members + j, joined->id, std::move(peers), true));
  }

  // Ends the run once every joiner is through, every partition healed, and a while
  // later: time for the adds and syncs that were held to land.
  void control() {
    Duration healed{0};
    for (const auto& outage : o_.links.outages) healed = std::max(healed, outage.until);
    while (finished_.load() < o_.joins) clock_.sleep_for(100ms);
    clock_.sleep_until(std::max(clock_.now(), TimePoint(SimClock::kStart) + healed) +
                       2 * o_.dead_after + 5s);
    done_.store(true);
  }

  JoinReport report(double real_s) {
    JoinReport r;
    r.virtual_s = to_seconds(clock_.elapsed());
    r.real_s = real_s;
    r.messages = hub_.messages();
    for (const auto& [id, endpoints] : given_)
      if (endpoints.size() > 1)
        r.duplicates.push_back(fmt::format("id {}: {}", id, fmt::join(endpoints, " and ")));
    asked_messages_[o_.joins] = r.messages;
    for (uint32_t j = 0; j < o_.joins; ++j) {
      JoinRow& row = rows_[j];
      // Joiners ask in order of arrival, so the messages since its request, until the next
      // joiner's, are those of its join (and of what it set off).
      row.messages = asked_messages_[j + 1] - asked_messages_[j];
      if (row.answered_s < 0 || given_[row.id].size() > 1) continue;
      double last = row.answered_s;
      for (const auto& n : slots_) {
        if (!n || n->id >= row.id) continue;
        ++row.should_know;
        const auto it = n->learned.find(row.id);
        if (it == n->learned.end()) continue;
        ++row.knew;
        last = std::max(last, it->second);
      }
      row.all_knew_s = row.knew == row.should_know ? last : -1;
    }
    r.rows = std::move(rows_);
    return r;
  }

  const JoinOptions o_;
  SimClock clock_;        // before the hub: deliveries it holds refer to the hub
  peers::MemoryHub hub_;  // outlives the channels
  std::vector<std::vector<peers::Peer>> seeds_;
  std::vector<std::unique_ptr<Member>> slots_;  // members, then joiners by arrival
  std::vector<JoinRow> rows_;
  // hub_.messages() at each joiner's first request, and at the end.
  std::vector<uint64_t> asked_messages_;
  std::map<uint32_t, std::vector<std::string>> given_;  // id -> the joiners it went to
  std::atomic<uint32_t> finished_{0};
  std::atomic<bool> done_{false};
};

}  // namespace

Result<JoinReport> simulate_joins(const JoinOptions& options) {
  if (options.members < 2 || options.members > 4096)
    return Status::invalid(fmt::format("{} members: 2 to 4096", options.members));
  if (options.joins < 1 || options.joins > peers::TrafficCounters::kMaxJoined)
    return Status::invalid(fmt::format("--joins {}: 1 to {} (what a node takes in)", options.joins,
                                       peers::TrafficCounters::kMaxJoined));
  if (options.seeds < 1) return Status::invalid("--join-seeds: at least 1");
  if (options.every <= Duration::zero()) return Status::invalid("--join-every: above 0");
  for (const auto& outage : options.links.outages)
    for (uint32_t n : outage.side)
      if (n >= options.members)
        return Status::invalid(fmt::format("a partition names node {}, not a member", n));
  JoinWorld world(options);
  return world.run();
}

}  // namespace gossip::sim
