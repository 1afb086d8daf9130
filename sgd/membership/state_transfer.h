#pragma once
// Rejoining after a crash: a node that starts without state asks its peers for
// theirs and resumes from the freshest one, instead of dragging its neighbors back
// to its initial model and round. Every node answers such requests from the state
// it held after its last completed round.
//
//   joiner                         each peer
//   join            ──────────►
//                   ◄──────────    state-offer {has_state, step, numel, chunk_elems}
//                                  for round r; payload: the manifest (a hash per chunk)
//   state-request   ──────────►    to each donor of the chosen state: its share of
//   {first, count}                 the chunks
//                   ◄──────────    state-offer (still held?), then state-chunks (raw fp32)
//
// Donors that hold the same state (an elastic local-SGD ring after a round: the
// all-reduce leaves the same bits everywhere) offer the same manifest; the joiner
// fetches a share of the chunks from each of them at once (at most max_donors) and
// checks every chunk against its hash. A donor that dies, goes silent, no longer
// holds the state or sends a chunk that does not match is dropped, and its missing
// chunks go to the donors left: the transfer resumes where it was. When a state's
// donors are all gone, the next state is fetched, keeping the chunks that match its
// manifest too. The gossip family's nodes hold different models: a state there has
// one donor.
//
// A donor keeps a state it offered for kPinFor after its last request (at most
// kMaxPinned of them besides its newest), so that its rounds going on do not pull
// the state from under a transfer; the manifest is hashed once per offered state.
//
// The state is the model and, after it in the same chunks, what the strategy's
// members hold alike besides it (Strategy::shared_state: local SGD's outer
// momentum), so that a joiner goes on exactly as the members do.
//
// Owned by the sync worker's thread, like the router it subscribes to.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/router.h"
#include "sgd/overlay/outgoing_model.h"

namespace gossip::sgd {

struct NodeState {
  uint32_t from = 0;    // the peer it came from
  uint64_t round = 0;   // the next round to run
  uint64_t step = 0;    // the trainers' step when it was taken
  double weight = 1.0;  // push-sum weight of the model
  std::vector<float> model;
  std::vector<float> shared;  // the strategy's shared state (Strategy::shared_state)
};

struct JoinOptions {
  // How long to wait for offers once asked (every peer answering ends it sooner).
  std::chrono::milliseconds offer_wait{2000};
  uint64_t min_round = 0;      // offers of this round or older are not taken (a fresher checkpoint)
  size_t max_donors = 4;       // donors of one state fetched from at once
  std::vector<uint32_t> only;  // when not empty: offers of other peers are not taken
  // --trim B: the state is the coordinate-wise trimmed mean of 2B + 1 donors' (the
  // median of what came when fewer did), so B hostile donors cannot set it.
  uint64_t trim = 0;
  double max_weight = 0;  // push-sum: a state's weight above this is refused; 0: no bound
  std::chrono::steady_clock::time_point deadline;  // the whole join gives up then
  const std::atomic<bool>* cancel = nullptr;
  // Called between receives: the joiner's heartbeats, so that peers already in their
  // rounds do not take a node that is still joining for dead.
  std::function<void()> tick;
};

class StateTransfer {
 public:
  // Answers joins and state requests from `router` for its lifetime. The state is
  // offered to a joiner only when took_part(joiner): a peer that is merely slow to
  // start must begin from the common initial model, not from this node's.
  StateTransfer(peers::Router& router, std::function<bool(uint32_t peer)> took_part);

  // After every completed round: the state this node offers to joiners.
  void publish(std::span<const float> model, std::span<const float> shared, uint64_t next_round,
               uint64_t step, double weight, uint64_t layout, uint64_t chunk_elems);
  bool has_state() const { return next_round_ > 0; }

  // The joiner's side, for a model of `numel` elements and layout `layout` and a
  // shared strategy state of `shared_numel`: the freshest state a peer offers, or
  // nullopt when none has one (a cluster that starts). An offer of another size is
  // not taken; a peer that fails mid-transfer is replaced by the next offer. Where
  // every offer went stale before it was fetched (more joiners at once than a donor
  // keeps offered states, kMaxPinned), it asks again, up to kStaleAttempts times.
  // Messages of other kinds that arrive meanwhile go to their subscribers, which
  // can ask fetching() to tell a join from a round.
  Result<std::optional<NodeState>> fetch(size_t numel, size_t shared_numel, uint64_t layout,
                                         const JoinOptions& options);
  static constexpr int kStaleAttempts = 3;
  bool fetching() const { return fetch_.has_value(); }

  // Peers whose offer said they run rounds (filled by fetch).
  const std::vector<uint32_t>& running_peers() const { return running_; }

 private:
  // A state this node offers: its chunks and, once offered, their manifest.
  struct Snapshot {
    OutgoingModel chunks;  // raw fp32, shared with ZeroMQ while they are sent
    uint64_t step = 0;
    uint64_t numel = 0;  // the shared part included
    uint64_t chunk_elems = 0;
    double weight = 1.0;
    uint64_t layout = 0;
    std::shared_ptr<const std::vector<std::byte>> manifest;  // null until offered
    std::chrono::steady_clock::time_point used;              // last offered or asked for
  };
  struct Offer {
    uint32_t peer = 0;
    uint64_t round = 0;
    uint64_t step = 0;
    uint64_t layout = 0;
    uint64_t chunk_elems = 0;
    double weight = 1.0;
    std::shared_ptr<const std::vector<std::byte>> manifest;
  };
  // Offers of one state: the same round, step, layout, chunking and manifest.
  struct Group {
    std::vector<Offer> offers;  // by peer id
    const Offer& first() const { return offers.front(); }
  };
  // A join in progress: the offers heard, then the download of one state.
  struct Fetch {
    // Out of line: clang (14) takes a nested class with member initializers for not
    // default-constructible inside std::optional of its enclosing class.
    Fetch();
    size_t numel = 0;         // the model's and the shared state's elements
    size_t shared_numel = 0;  // of which the shared state's
    uint64_t layout = 0;
    const JoinOptions* options = nullptr;
    std::vector<Offer> offers;
    std::set<uint32_t> answered;
    // The download: the state's offer (its round, chunking and manifest) and what
    // each donor still owes.
    std::optional<Offer> want;
    struct Donor {
      uint32_t peer = 0;
      std::set<uint64_t> owed;  // chunk indices asked of it and not yet here
      uint64_t delivered = 0;
      std::chrono::steady_clock::time_point progress;  // its last chunk, or our last request
      Status failure;                                  // why it was dropped
      std::chrono::steady_clock::time_point since;     // first asked
    };
    std::vector<Donor> donors;
    std::vector<bool> have;   // per chunk of want: verified and in state.model
    uint64_t missing = 0;     // chunks not yet verified
    NodeState state;          // model: the whole state, filled chunk by chunk
    bool orphans = false;     // a missing chunk may be owed by no live donor
    std::set<uint32_t> gone;  // peers that said bye during this join
  };
  void on_message(peers::Incoming& in);  // the router's handler
  void on_offer(const peers::Incoming& in);
  void on_chunk(const peers::Incoming& in);
  void on_request(const peers::Incoming& in);
  void send_offer(uint32_t peer, uint64_t round, Snapshot* s);
  Snapshot* held(uint64_t round);
  void pin(const std::shared_ptr<Snapshot>& s);
  std::vector<Group> groups(std::vector<Offer> offers) const;
  // One round of offers and downloads; stale_ says whether a donor no longer held what
  // it had offered.
  Result<std::optional<NodeState>> fetch_once(size_t numel, size_t shared_numel, uint64_t layout,
                                              const JoinOptions& options);
  Result<NodeState> download(const Group& group);
  void drop_donor(Fetch::Donor& d, Status why);
  void ask(Fetch::Donor& d, const std::vector<uint64_t>& chunks);
  void hand_out(std::vector<uint32_t>& spares);
  void steal();
  static constexpr std::chrono::seconds kStealAfter{1};
  static constexpr std::chrono::milliseconds kRateAfter{200};  // before: rates are noise
  static constexpr std::chrono::milliseconds kRateGap{50};
  static constexpr uint64_t kMaxLead = 64;  // rounds an offer may lead the median by
  static constexpr size_t kMaxPinned = 2;   // the newest, when asked for, included
  static constexpr std::chrono::seconds kPinFor{30};
  void drop_implausible(std::vector<Offer>& offers) const;
  Result<NodeState> check_state(NodeState state, const JoinOptions& options) const;
  static NodeState robust_state(std::vector<NodeState> states, uint64_t trim);

  peers::Router& router_;
  peers::PeerChannel& transport_;
  std::function<bool(uint32_t)> took_part_;
  uint64_t next_round_ = 0;  // of the newest state; 0: none yet
  std::shared_ptr<Snapshot> newest_;
  std::map<uint64_t, std::shared_ptr<Snapshot>> pinned_;  // by round: offered, still served
  std::vector<uint32_t> running_;
  std::optional<Fetch> fetch_;
  bool stale_ = false;  // in this fetch_once, a donor no longer held the state it offered
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
