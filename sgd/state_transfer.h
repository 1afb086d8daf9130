#pragma once
// Rejoining after a crash: a node that starts without state asks its peers for
// theirs and resumes from the freshest one, instead of dragging its neighbors back
// to its initial model and round. Every node answers such requests from the state
// it held after its last completed round.
//
//   joiner                         each peer
//   join            ──────────►
//                   ◄──────────    state-offer {has_state, step, numel} for round r
//   state-request   ──────────►    (to the freshest offer only)
//                   ◄──────────    state-offer, then state-chunks (raw fp32)
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
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "base/status.h"
#include "peers/router.h"
#include "sgd/outgoing_model.h"

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
  uint64_t chunk_elems = 1 << 20;
  uint64_t min_round = 0;      // offers of this round or older are not taken (a fresher checkpoint)
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
  // not taken; a peer that fails mid-transfer is replaced by the next offer.
  // Messages of other kinds that arrive meanwhile go to their subscribers, which
  // can ask fetching() to tell a join from a round.
  Result<std::optional<NodeState>> fetch(size_t numel, size_t shared_numel, uint64_t layout,
                                         const JoinOptions& options);
  bool fetching() const { return fetch_.has_value(); }

  // Peers whose offer said they run rounds (filled by fetch).
  const std::vector<uint32_t>& running_peers() const { return running_; }

 private:
  struct Offer {
    uint32_t peer = 0;
    uint64_t round = 0;
    uint64_t step = 0;
    uint64_t layout = 0;
  };
  // A join in progress: the offers heard, then the download of one.
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
    std::optional<uint32_t> from;  // the peer being downloaded from
    bool offered = false;          // its answer starts with the offer its chunks belong to
    uint64_t received = 0;
    uint64_t next_seq = 0;
    NodeState state;
    Status failure;  // of the download
  };
  void on_message(peers::Incoming& in);  // the router's handler
  void on_offer(const peers::Incoming& in);
  void on_chunk(const peers::Incoming& in);
  void send_offer(uint32_t peer, bool with_state);
  Result<NodeState> download(const Offer& offer);
  static constexpr uint64_t kMaxLead = 64;  // rounds an offer may lead the median by
  void drop_implausible(std::vector<Offer>& offers) const;
  Result<NodeState> check_state(NodeState state, const JoinOptions& options) const;
  static NodeState robust_state(std::vector<NodeState> states, uint64_t trim);

  peers::Router& router_;
  peers::PeerChannel& transport_;
  std::function<bool(uint32_t)> took_part_;
  OutgoingModel snapshot_;  // raw fp32 chunks, shared with ZeroMQ while they are sent
  uint64_t next_round_ = 0;
  uint64_t step_ = 0;
  uint64_t numel_ = 0;  // of the published state, the shared part included
  double weight_ = 1.0;
  uint64_t layout_ = 0;
  std::vector<uint32_t> running_;
  std::optional<Fetch> fetch_;
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
