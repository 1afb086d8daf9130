#pragma once
// Who takes part in the cluster's rounds, as the daemon's churn handling asks it: the
// state a node offers to joiners and fetches when it starts without one, whether it
// was left out, and how it gets back in. One per node, from the fabric its strategy
// runs on:
//  - the neighbor exchange (sgd/overlay/neighbor_exchange.h), for the gossip family: a peer is
//    in while its heartbeats and chunks arrive; a joiner takes a live peer's state and
//    goes on from its round; a node that joined by seeds is in the overlay from the
//    round the coordinator chose (sgd/overlay/overlay.h);
//  - the elastic ring (sgd/membership/peer_ring.h), for local SGD: the ring's view and epochs
//    (sgd/membership/ring_membership.h); a joiner takes a member's state, then asks back into
//    the ring;
//  - the parameter servers (sgd/strategies/ps/parameter_server.h): no state transfer (a worker's
//    first pull is its state), and a node that joined by seeds is one more worker.
// The sync worker talks to this interface only, so neither it nor a strategy keeps a
// view of its own. A fabric without churn (a fixed ring, all-gather, NCCL) has none.

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sgd/membership/state_transfer.h"

namespace gossip::sgd {

class Membership {
 public:
  virtual ~Membership() = default;

  // Whether this node offers its state to joiners and asks for one when it starts
  // without state; state() is null where it does not.
  virtual bool admits_joiners() const = 0;
  virtual StateTransfer* state() = 0;
  // While a fetch waits: what keeps this node visible to its peers (heartbeats).
  virtual void tick(uint64_t next_round) { (void)next_round; }
  // After a state for `next_round` was fetched: takes this node back in. Returns the
  // round the members will run next when that is later than the state's (they went
  // on while it fetched: the caller fetches again, from members()), or nullopt.
  virtual Result<std::optional<uint64_t>> rejoin(uint64_t next_round,
                                                 std::chrono::steady_clock::time_point deadline,
                                                 const std::atomic<bool>* cancel) = 0;
  // The peers a second fetch after rejoin() takes its state from.
  virtual std::vector<uint32_t> members() const = 0;
  // After a join, whether or not it found a state: the peers that said they run
  // rounds are waited for from now on as running nodes; once it took a state (the
  // cluster runs), every peer.
  virtual void joined(bool took_state) { (void)took_state; }
  // The others left this node out after its first round (it runs rounds alone) and it
  // may fetch a member's state and rejoin().
  virtual bool left_out() const { return false; }
  // A node that joined by seeds (daemon/admission.h), already a peer of the channel:
  // from now on it is one of the configured peers of the elastic ring (it asks in as a
  // restarted node does), a peer the overlay's graph gives this node as a neighbor
  // from the round it was scheduled for (the gossip family, sgd/overlay/overlay.h), a worker
  // of the parameter servers.
  virtual bool takes_new_members() const { return false; }
  virtual Status add_member(uint32_t id, const std::string& endpoint) {
    (void)endpoint;
    return Status::invalid(fmt::format("this fabric takes no new member ({})", id));
  }
};

}  // namespace gossip::sgd
