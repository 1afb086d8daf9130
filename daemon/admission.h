#pragma once
// Nodes that were never in the peer list join a running cluster (issue 24, part 1):
// the members' side. A joiner asks any seed (daemon/join_client.h). The seed pings
// every member first (any daemon answers a ping, daemon/inspector.h: on an elastic
// ring a node hears only its neighbors otherwise) and waits for the answers, half
// --dead-after but 0.3 to 1 s at most. The coordinator, the lowest id among the seed and the
// members heard since that ping round began, assigns it the next id above every id it knows, makes
// it a peer of its own channel and strategy, tells every member (an add), and answers the joiner
// with its id and the member list. A seed that is not the coordinator redirects the joiner to it;
// one whose strategy takes no new members refuses, saying why. An answer that got lost is asked
// again: a joiner whose endpoint is a member's already gets that id back.
//
// The joiner then starts as a node without state: it fetches the members' state, and
//  - on an elastic ring asks in as a restarted node does (sgd/membership/peer_ring.h);
//  - in the gossip family's overlay, whose graph every member must change in the same
//    round, it says it is ready (a member message `ready`, sent by the node itself) to
//    the coordinator, which picks the round from which it takes part: a few rounds
//    past its own, so that the news reaches every member first. It tells every member
//    and the joiner with an add that carries that round as its envelope's round (0:
//    not yet scheduled), and each grows its graph from there (sgd/overlay/overlay.h). The
//    joiner runs its rounds alone until then; from then on it is a neighbor like any.
// Scheduling only once the joiner holds a state keeps the graph's change symmetric:
// no member mixes with a joiner that is still starting, nor waits for one.
//
// A member that was down when an add went out, or restarted since with its configured
// list, hears of the joined members when it says hello: every member that knows them
// sends it their adds again (an add of a known member changes nothing). Every message
// carries its sender's epoch (the envelope's), so a member that missed an add while it
// lived (a partition, a lost message) learns of it from the next message of a member
// that knows it: it asks that member (a member `sync`, once a second at most, backing
// off to a minute while the answer brings nothing new) and gets its adds.
//
// A node's checkpoint keeps the joined members it knew (daemon/checkpoint.h): after a
// restart from it, it knows them again (remember()), even when every member that
// could have told it restarted too.
//
// The coordinator gives ids only while it hears a majority of the members it lists
// (itself included; every listed one counts, one that left with a bye too: the sides
// of a partition would not agree on who left), unless --join-quorum any. Nor does it
// give one for 2 s after a member's messages (every pong carries the epoch) first list
// more members than before and than this node does, unless the adds it then asks for
// bring it level sooner. Those keep it from trying in vain; what makes an id given once
// is that a majority accepts it first. The coordinator proposes the id for the joiner's
// endpoint to every member it lists, and answers the joiner (and sends the adds) only
// once more than half of them, itself included, accepted within 2 s. A member accepts
// an id for one endpoint at a time: it promises it (for kPromiseFor, or until the add
// comes) and declines it for any other, as it does an id it knows as another node's.
// Two coordinators that propose one id for two joiners at once (two sides of a cut, or
// a link between them down) need two majorities, which share a member: at most one
// gets its majority, and the other's joiner waits, then gets the next id. A joiner the
// coordinator cannot take now gets a wait, which says why, and asks again. An add of a
// known id with another endpoint (a lying member, or --join-quorum any) is said,
// loudly, on every member that hears both (given_twice), and changes nothing.
//
// Under CURVE a joiner authenticates with a key on the members' admission list
// (--admit-keys, peers/curve_auth.h), which the coordinator gives the id to: adds,
// answers and redirects carry the members' public keys, and a member takes in only
// a key on its own list, so a member's add cannot bring in a stranger.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "base/clock.h"
#include "base/status.h"
#include "daemon/checkpoint.h"
#include "peers/router.h"

namespace gossip::daemon {

class Admission {
 public:
  struct Options {
    std::string self_endpoint;
    std::chrono::milliseconds dead_after{5000};
    bool needs_majority = true;  // --join-quorum majority
    bool curve = false;          // members come with their public keys
    std::string self_key;        // under CURVE: this node's public key (Z85)
    bool joiner = false;         // this node joined by seeds (--join)
    // Empty when the strategy takes new members; else why not (the joiner is told).
    std::string refuse;
    // Whether the strategy can take member `id` now (before anything changes), and
    // why not (the overlay has no graph on id + 1 nodes).
    std::function<Status(uint32_t id)> check;
    // Takes a new member into the strategy (after the channel has it).
    std::function<Status(uint32_t id, const std::string& endpoint)> take;
    // Overlay strategies: the round from which a member that says it is ready now
    // takes part, and what makes member `id` (this node included) a neighbor from
    // round `round` on. Null for a strategy whose members need no schedule.
    std::function<uint64_t()> first_round;
    std::function<void(uint32_t id, uint64_t round)> schedule;
  };
  Admission(peers::Router& router, Options options);
  ~Admission();
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // The member list's epoch, which every message carries (the envelope's): how many
  // members this node lists, itself included. Counted, never taken from a peer.
  uint64_t epoch() const { return epoch_; }
  // The members that joined by seeds as this node knows them, with their rounds: what
  // its checkpoint keeps.
  std::vector<Checkpoint::Member> members() const;
  // After a restart from a checkpoint: its members are known again (those this node
  // does not know yet, checked as a member's add is), and those it had forgotten stay
  // forgotten (members of this node's list only).
  void remember(std::vector<Checkpoint::Member> members,
                const std::vector<uint32_t>& forgotten = {});

  // Moves join-requests on once the members answered (the router's after-poll hook).
  void tick();

  // gossipctl forget: proposes to the members that `peer`, gone for good, no longer
  // counts toward the majority (of ids and of forgets). Every member that does not
  // hear it either accepts; once more than half of those that count accepted, every
  // member is told and `done` gets ok; else `done` gets why not, within 2 s and a
  // --dead-after (members that do not hear the node ask it first: when_heard()).
  void forget(uint32_t peer, std::function<void(Status)> done);
  // The members this node no longer counts (forgotten).
  const std::set<uint32_t>& forgotten() const { return forgotten_; }

  // The joiner, once it holds a state (overlay strategies): says so to the coordinator
  // every second until a member sends it the round it takes part from, which it
  // returns (the schedule callback has run for it). `tick` runs while it waits.
  Result<uint64_t> ask_for_round(TimePoint deadline, const std::atomic<bool>* cancel,
                                 const std::function<void()>& tick);

 private:
  void on_member(peers::Incoming& in);
  void answer_join(peers::Incoming& in, const std::string& endpoint);
  struct Joined {
    peers::Peer peer;
    uint64_t first_round = 0;  // 0: not scheduled yet
  };
  void on_add(uint32_t from, const Joined& member);
  // An add of a known id with another endpoint or key: said once per id, loudly.
  void given_twice(uint32_t from, const peers::Peer& told, const peers::Peer& known);
  // The joiner `from` holds a state: schedules it, or sends the schedule it has.
  void on_ready(uint32_t from);
  void set_round(Joined& member, uint64_t round);
  // A peer (re)started: the members that joined since the peer lists were written.
  void on_hello(uint32_t peer);
  // A member's message carried a later epoch than this node's: asks it for its adds.
  void on_epoch_ahead(uint32_t peer, uint64_t epoch);
  // A member that lists `its_epoch` members asks for this node's adds.
  void on_sync(uint32_t peer, uint64_t its_epoch);
  // Why member `id` at `endpoint` cannot be taken in (as a member's add or from the
  // checkpoint), or nullopt.
  std::optional<std::string> unfit(const peers::Peer& member) const;
  // After the member list changed: the epoch this node's messages carry from now on.
  void update_epoch();
  std::vector<const Joined*> by_id() const;  // joined_, in id order
  void send_add(uint32_t to, const Joined& member);
  Status add(const Joined& member);
  void reply(const std::string& route, proto::Member m, const std::string& payload,
             uint64_t round = 0);
  // The lowest id among this node and the peers heard within `bound_ms`.
  uint32_t coordinator(uint64_t bound_ms) const;
  // Why this node cannot give an id now (it heard no majority of its members within
  // `bound_ms`), or nullopt.
  std::optional<std::string> no_majority(uint64_t bound_ms) const;
  // A join-request of a new node waits (parked) for the members' answers to a ping
  // round, at most pong_wait(): then decide() redirects it, makes it wait, or gives it
  // an id.
  void decide(const std::string& route, const std::string& endpoint, const std::string& key);
  struct Parked {
    std::string route, endpoint, key;  // key: under CURVE, the joiner's
  };
  // Gives `joiner` id `id`: takes it in, tells every member, answers it.
  void admit(const Parked& joiner, uint32_t id);
  // The majority's acceptance first (see above): proposes, then settle_proposal() in
  // tick() admits the joiner or makes it wait.
  void propose(const Parked& joiner, uint32_t id);
  void settle_proposal();
  void on_propose(uint32_t from, uint32_t id, const peers::Peer& told);
  void on_vote(uint32_t from, const proto::Member& m, const std::string& text);
  void on_forget(uint32_t from, uint32_t id);
  void on_forgotten(uint32_t from, uint32_t id);
  // Why this node would not forget `id` (it is itself, not a member, or forgotten), or
  // nullopt; whether it lives is when_heard()'s.
  std::optional<std::string> keeps(uint32_t id) const;
  static std::string lives(uint32_t id, uint64_t heard_ms);
  Status settling() const;  // while proposal_ is set
  void propose_forget(uint32_t peer, std::function<void(Status)> done);
  // Whether `id` lives: heard within --dead-after, or answering one of the pings sent
  // every pong_wait() for up to --dead-after. A node hears heartbeats only from its
  // neighbors and the coordinators (sgd/overlay/neighbor_exchange.h), so a silence says
  // nothing of any other member: that one is asked. `then` gets how long ago it was
  // heard, or nullopt, from tick(); checks of one node share its pings.
  void when_heard(uint32_t id, std::function<void(std::optional<uint64_t>)> then);
  void settle_checks();
  // False when `by` (a member; self for gossipctl forget; kToldForgotten for a
  // forgotten message) asked about `id` already while its check runs: a member that
  // repeats a forget gets one answer, so a flood of them holds one check per node.
  bool asked(uint32_t id, uint32_t by);
  static constexpr uint32_t kToldForgotten = UINT32_MAX;
  // The members that count toward a majority: every listed one, this node included,
  // but the forgotten.
  size_t counted_members() const;
  bool counts(uint32_t id) const { return !forgotten_.count(id); }
  // Why this node cannot accept `id` for `endpoint` now (it knows the id as another
  // node's, or promised it for another endpoint), or nullopt.
  std::optional<std::string> taken_elsewhere(uint32_t id, const std::string& endpoint,
                                             const std::string& key);
  void send_member(uint32_t to, proto::Member m, const std::string& payload, uint64_t round = 0);
  void ping_members();
  bool pings_answered() const;
  uint64_t heard_within() const;  // ms since the last ping round began
  Joined* joined(uint32_t id);
  // The channel's clock (base/clock.h): the real one in gossipd, virtual time in the
  // simulation (sim/joins.h).
  TimePoint now() const { return router_.transport().clock().now(); }

  peers::Router& router_;
  Options options_;
  uint64_t epoch_ = 0;
  uint32_t highest_ = 0;  // the highest id this node has known
  // Of the last member this node admitted (not one it heard of: a member's add cannot
  // push the joins this node admits out of reach).
  uint64_t last_first_round_ = 0;
  std::vector<Joined> joined_;  // members that joined by seeds, as this node knows
  uint64_t own_round_ = 0;      // a joiner: the round it takes part from; 0 until told
  struct Ask {                  // on_epoch_ahead's, per peer
    TimePoint next{};
    std::chrono::milliseconds backoff{1000};
    uint64_t epoch = 0;    // this node's when it last asked
    uint64_t claimed = 0;  // the highest epoch the peer's messages carried
    uint64_t held_at = 0;  // this node's epoch when a claim of it last held ids up
  };
  std::map<uint32_t, Ask> asks_;
  std::map<uint32_t, TimePoint> answered_;  // on_sync's, per peer
  // A member listed more members than this node, and its adds are not here yet.
  TimePoint catching_up_until_{};
  uint64_t catch_up_to_ = 0;        // the highest epoch claimed since this node was level
  std::set<uint32_t> given_twice_;  // ids said to be given twice, once logged
  std::vector<Parked> parked_;
  struct Proposal {
    Parked joiner;  // a forget's has none
    uint32_t id = 0;
    std::function<void(Status)> forgotten;  // set: a forget of `id`, not an id for a joiner
    std::set<uint32_t> accepted;            // this node included
    std::string declined;                   // why, from the first member that declined
    TimePoint until{};
  };
  std::optional<Proposal> proposal_;  // one at a time
  struct Promise {
    std::string endpoint;
    uint32_t by = 0;  // the coordinator that proposed it
    TimePoint until{};
  };
  std::map<uint32_t, Promise> promises_;  // id -> the endpoint this node accepted it for
  std::set<uint32_t> forgotten_;
  static constexpr auto kPromiseFor = std::chrono::seconds(10);
  static constexpr auto kProposalWait = std::chrono::seconds(2);
  static constexpr size_t kMaxPromises = 64;
  static constexpr size_t kMaxParked = 16;
  std::chrono::milliseconds pong_wait() const;  // half --dead-after, 0.3 to 1 s
  struct Check {                                // when_heard()'s, per node asked about
    TimePoint since{}, pinged{};
    std::vector<std::function<void(std::optional<uint64_t>)>> then;
    std::set<uint32_t> askers;
  };
  std::map<uint32_t, Check> checks_;
  TimePoint pinged_{};
  std::vector<uint32_t> pinged_ids_;
  TimePoint waits_logged_{};
  peers::Router::Subscription subscription_;
};

// "<id> <endpoint>" a line, under CURVE "<id> <endpoint> <public key>", and " banned"
// after a peer the seed bans (under CURVE): the member list of an answer. Parsed strictly: ids
// unique, endpoints valid (daemon/config.h), keys Z85, at most 4096 lines.
std::string format_members(const std::vector<peers::Peer>& members);
Result<std::vector<peers::Peer>> parse_members(std::string_view text);
// --admit-keys: the public keys (Z85) a file lists, one a line, each maybe followed by
// a space and a `#` comment; blank lines and lines that start with `#` are skipped,
// anything else is an error that names the line.
Result<std::vector<std::string>> read_admit_keys(const std::string& path);
// A member's endpoint, and its public key after a space where it has one: an add's,
// a redirect's payload.
std::string with_key(const peers::Peer& p);
Result<peers::Peer> parse_endpoint_and_key(std::string_view text);

}  // namespace gossip::daemon
