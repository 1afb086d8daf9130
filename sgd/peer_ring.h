#pragma once
// The daemon's ring all-reduce: the node and its peers in a ring (ascending ids),
// over a ring transport (TCP, RDMA). The transports' ports travel over the ZeroMQ
// control channel: each node tells its left neighbor where to connect (a
// ring-address message, repeated whenever that neighbor says hello again, e.g.
// after a restart). A failed operation drops the ring's connections; the next one
// connects again.
//
// Elastic (options.elastic): a round that a peer breaks (it died, or closed its
// connections) is not failed. The node re-forms the ring with the members that
// answer (sgd/ring_membership.h) and runs the round again over them. A member can
// complete a round just before the break while others do not: each node keeps the
// result of its last round, and one that completed it sends it to the members that
// did not, who take it instead of running the round again. So every member leaves a
// round with the same result and the replicas stay together. A peer that vanishes
// without closing its connections is noticed when a try's wait runs out: each try
// gets half of the round's time left.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "peers/ring_channel.h"
#include "peers/router.h"
#include "sgd/all_reduce.h"
#include "sgd/membership.h"
#include "sgd/outgoing_model.h"
#include "sgd/ring_all_reduce.h"
#include "sgd/ring_membership.h"
#include "sgd/ring_schedule.h"
#include "sgd/state_transfer.h"

namespace gossip::sgd {

struct PeerRingOptions {
  uint64_t chunk_bytes = 1 << 20;  // pipeline chunk
  uint32_t depth = 4;              // receives posted ahead
  bool elastic = false;            // re-form over the live nodes instead of failing the round
  // How long a re-forming node listens for the members' probes: those it does not
  // hear from by then are left out.
  std::chrono::milliseconds reform_wait{3000};
  // Elastic, where the daemon holds the model (local SGD): a restarted node takes a
  // member's state at its first attach (state()) and is then taken back into the ring.
  bool admit_joiners = false;
};

class PeerRing final : public AllReduce, public Membership {
 public:
  // `control` and `transport` must outlive this object. Subscribes to hello, bye,
  // heartbeat, ring-address, ring-probe and state-chunk on `control` (and, where it
  // admits joiners, its state transfer to the join kinds).
  PeerRing(peers::Router& control, peers::RingTransport& transport, const PeerRingOptions& options);
  ~PeerRing() override;

  Status all_reduce_mean(std::span<float> data, uint64_t round,
                         const CollectiveOptions& options) override;
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override;

  const RingOrder& order() const { return membership_.order(); }
  uint64_t round_to_run(uint64_t proposed) const override { return std::max(proposed, jump_to_); }

  // Rejoining (options.admit_joiners): the state this node offers to a restarted (or
  // left out) peer, published by the owner after every round, and fetched by such a node.
  // Membership (sgd/membership.h), for an elastic ring that admits joiners.
  bool admits_joiners() const override { return options_.elastic && options_.admit_joiners; }
  StateTransfer& state() override { return *state_; }  // admits_joiners() only
  // After a restarted or left-out node fetched a state for `next_round`: asks back into
  // the ring; the members' next round when they went on meanwhile.
  Result<std::optional<uint64_t>> rejoin(uint64_t next_round,
                                         std::chrono::steady_clock::time_point deadline,
                                         const std::atomic<bool>* cancel) override;
  // The ring this node is in now, not a node left out.
  std::vector<uint32_t> members() const override { return order().ids; }
  // After its first round: the others left this node out (its sync thread stalled
  // past --dead-after, say) and it runs rounds alone. Like a restarted node, it can
  // fetch a member's state and rejoin() (admitted joiners only).
  bool left_out() const override { return admits_joiners() && started_ && membership_.alone(); }

 private:
  // A peer's last ring-address: where its ring listens, for which view.
  struct Address {
    uint16_t port = 0;
    uint64_t token = 0;
    uint64_t layout = 0;
    uint64_t view = 0;
  };
  void announce();                             // tells the left neighbor our ring port
  void absorb(const peers::Incoming& in);      // the router's handler
  void drain(std::chrono::milliseconds wait);  // absorbs what arrived, waiting at most `wait`
  void drop_channel();                         // now, or when the operation in flight returns
  bool
  interrupted();  // elastic: reads the control channel during a ring wait; true once re-forming
  Status connect(const CollectiveOptions& options);
  const Address* right_address() const;  // the right neighbor's, for the current view
  Status attempt(std::span<float> data, uint64_t round, const CollectiveOptions& options);

  // Elastic.
  void send_probes();
  void send_probe(uint32_t to);
  // Decides the re-forming, reconnects, and sends this node's last result to members
  // that lost that round; returns the next round of every member heard.
  std::map<uint32_t, uint64_t> apply_view();
  // Waits for the re-forming to be decided; then, when a member completed `round`,
  // takes its result into data and sets *took.
  Status finish_reform(std::span<float> data, uint64_t round, const CollectiveOptions& options,
                       bool* took);
  void keep_result(std::span<float> data, uint64_t round);

  peers::Router& router_;
  peers::PeerChannel& control_;
  peers::RingTransport& transport_;
  PeerRingOptions options_;
  RingMembership membership_;
  std::map<uint32_t, std::string> hosts_;
  std::map<uint32_t, Address> addresses_;
  // A random token we hand our left neighbor in our ring-address and require in its
  // ring hello, and the one our right neighbor handed us. The ring's links are plain
  // TCP or verbs; with CURVE on the control channel, only an authenticated neighbor
  // learns the token, so nobody else can take its place in the ring.
  uint64_t token_ = 0;
  uint64_t layout_ = 0;
  std::unique_ptr<peers::RingChannel> channel_;
  RingAllReduce ring_;

  uint64_t next_round_ = 0;  // what a probe tells
  bool started_ = false;     // the first round began (probes before it are not answered)
  bool busy_ = false;        // a ring operation (connect or all-reduce) is in flight
  bool stale_ = false;       // the channel was dropped meanwhile
  std::chrono::steady_clock::time_point last_poll_;
  std::chrono::steady_clock::time_point view_since_;  // when the last re-forming was decided
  // The result of the last completed round (elastic only), for members that lost it.
  OutgoingModel result_;
  bool has_result_ = false;
  std::map<uint32_t, uint64_t> behind_;  // members heard in the last re-forming -> next round
  // A result this node may receive, set for the whole of an elastic round: a member
  // can send it as soon as it heard our probe, before we finish re-forming.
  struct Fetch {
    uint64_t round = 0;  // the round this node runs; a later result is taken too (it caught up)
    size_t numel = 0;
    std::optional<uint32_t> from;  // the first sender; copies of others are ignored
    uint64_t of_round = 0;         // the round of the result being received
    uint64_t got = 0;
  };
  std::optional<Fetch> fetch_;
  std::vector<float> fetched_;                // its values, allocated when the first chunk arrives
  uint64_t jump_to_ = 0;                      // the next round after taking a later round's result
  std::unique_ptr<StateTransfer> state_;      // admits_joiners() only
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
