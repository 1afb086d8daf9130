#pragma once
// The daemon's all-reduce over a ring transport (TCP, RDMA): the node and its peers
// ranked by ascending id, averaging by the ring or, over TCP, by a tree, butterfly or
// master-worker (sgd/collectives/algorithm.h), one algorithm per round, fixed or
// picked by size (--allreduce-algorithm auto, sgd/collectives/choice.h). The
// transports' ports travel over the ZeroMQ control channel: each node tells every
// node that connects to it (its left neighbor, its mesh partners) where to connect,
// with a token of that link's own (a ring-address message, repeated whenever that
// node says hello again, e.g. after a restart). A failed operation drops the
// connections; the next one connects again.
//
// Elastic (options.elastic): a round that a peer breaks (it died, or closed its
// connections) is not failed. The node re-forms the ring with the members that
// answer (sgd/membership/ring_membership.h) and runs the round again over them. A member can
// complete a round just before the break while others do not: each node keeps the
// result of its last round, and one that completed it sends it to the members that
// did not, who take it instead of running the round again. So every member leaves a
// round with the same result and the replicas stay together. A peer that vanishes
// without closing its connections is noticed when a try's wait runs out: each try
// gets half of the round's time left.
//
// Rings that trained apart merge (a partition that healed; sgd/membership/ring_membership.h):
// a live ring offers itself to the configured nodes outside it every reform wait,
// and a ring apart from it re-forms with it. The replicas of the two sides differ,
// and so do their synchronization points (local SGD's x_prev): the union's first
// round runs at the higher side's round, and its owner averages the models
// themselves in it (take_merge()). A merge decided inside a round ends that round
// unaveraged, so that every node of the union runs its first round alike.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "peers/ring_channel.h"
#include "peers/router.h"
#include "peers/sealed_ring_channel.h"
#include "sgd/collectives/algorithm.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/collectives/choice.h"
#include "sgd/collectives/ring_all_reduce.h"
#include "sgd/collectives/ring_schedule.h"
#include "sgd/membership/membership.h"
#include "sgd/membership/ring_membership.h"
#include "sgd/membership/state_transfer.h"
#include "sgd/overlay/outgoing_model.h"
#include "sgd/strategy.h"

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
  // The algorithm of every round; none: picked per round from `table` by size.
  std::optional<Algorithm> algorithm = Algorithm::kRing;
  AlgorithmTable table = AlgorithmTable::measured();
  // Top-k contributions: by a sparse reduce-scatter over the ring or as an
  // all-gather (sgd/collectives/ring_all_reduce.h). Where it is the reduce-scatter, auto's
  // table gives way to the ring, the one algorithm that re-selects at every hop.
  SparseReduce sparse_reduce = SparseReduce::kAuto;
  // Per peer: the keys of the ring-link data to it and from it (peers/curve_auth.h,
  // curve_link_key). Set (under CURVE): every link is sealed
  // (peers/sealed_ring_channel.h); empty: links are plain.
  std::map<uint32_t, std::pair<peers::LinkKey, peers::LinkKey>> link_keys;
  // Under CURVE: the keys of a member that joined by seeds (add_member), from its
  // public key; null without CURVE.
  std::function<Result<std::pair<peers::LinkKey, peers::LinkKey>>(uint32_t peer)> link_keys_of;
  // Robust mode (--clip on): norm-bounded contributions over the ring only
  // (sgd/collectives/ring_all_reduce.h). Before each try the members send each other
  // their chunks' norms over the control channel (authenticated, straight from each
  // member, so no member can alter another's as a ring relay could).
  bool clip = false;
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
  // Rounds completed by each algorithm, by Algorithm's value; read from any thread.
  uint64_t rounds_by(Algorithm a) const {
    return rounds_by_[static_cast<size_t>(a)].load(std::memory_order_relaxed);
  }
  uint64_t round_to_run(uint64_t proposed) const override { return std::max(proposed, jump_to_); }
  bool take_merge() override { return std::exchange(merge_news_, false); }
  // The ring's membership for /metrics: its epoch (0 until it first re-forms) and how
  // many nodes its view holds; any thread.
  std::vector<Strategy::Gauge> gauges() const;

  // Rejoining (options.admit_joiners): the state this node offers to a restarted (or
  // left out) peer, published by the owner after every round, and fetched by such a node.
  // Membership (sgd/membership/membership.h), for an elastic ring that admits joiners.
  bool admits_joiners() const override { return options_.elastic && options_.admit_joiners; }
  StateTransfer* state() override { return state_.get(); }  // admits_joiners() only
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
  bool takes_new_members() const override { return admits_joiners(); }
  Status add_member(uint32_t id, const std::string& endpoint) override;

 private:
  // A peer's last ring-address: where its ring listens, for which view.
  struct Address {
    uint16_t port = 0;
    uint64_t token = 0;
    uint64_t layout = 0;
    uint64_t view = 0;
    uint8_t transport = proto::RingAddress::kTcp;
  };
  uint8_t transport_code() const;  // what this node's ring runs over, as ring-address says it
  // The error for a peer whose ring runs over another transport; ok when it does not.
  Status transport_mismatch(const char* what, uint32_t peer, const Address& a) const;
  void announce();  // tells who connects to us our ring port
  void announce_to(uint32_t peer);
  uint64_t token_for(uint32_t peer) const;  // the secret a link's far end presents
  // `channel` sealed when link_keys are set: to `right`, from `left`; an error when a
  // neighbor's keys are missing.
  Result<std::unique_ptr<peers::RingChannel>> sealed(std::unique_ptr<peers::RingChannel> channel,
                                                     uint64_t right_session,
                                                     uint64_t left_session) const;
  // The node ids this node links with under the mesh algorithms it may run.
  std::vector<uint32_t> mesh_peers() const;
  // The algorithm of a round of `bytes` (uncompressed) whose top-k contributions go
  // by the sparse reduce-scatter when `sparse`.
  Algorithm pick(size_t bytes, bool sparse) const;
  Status connect_mesh(const CollectiveOptions& options);
  void absorb(const peers::Incoming& in);      // the router's handler
  void drain(std::chrono::milliseconds wait);  // absorbs what arrived, waiting at most `wait`
  // Drops links now, or when the operation in flight returns: the ring's, the mesh's.
  static constexpr int kRingLinks = 1, kMeshLinks = 2;
  void drop(int which);
  void drop_channel();    // both
  bool may_ring() const;  // the ring is one of the algorithms this node may run
  void reset_links();     // the ring's channel and the mesh's links
  bool
  interrupted();  // elastic: reads the control channel during a ring wait; true once re-forming
  Status connect(const CollectiveOptions& options);
  const Address* right_address() const;            // the right neighbor's, for the current view
  const Address* address_of(uint32_t peer) const;  // for the current view
  Status attempt(std::span<float> data, uint64_t round, const CollectiveOptions& options);
  // Robust mode: sends this node's chunk norms of `data` to the members and waits for
  // theirs; the bounds of the try.
  Result<ContributionBounds> exchange_norms(std::span<const float> data, uint64_t round,
                                            const CollectiveOptions& options);

  // Elastic.
  void send_probes();
  // Offers this ring to the configured nodes outside it, once every reform wait.
  void offer_merges();
  // Probes the peers outside the view that the re-forming must hear (joiners, peers a
  // member vouched for), each once.
  void probe_outsiders();
  void send_probe(uint32_t to, bool offer = false);
  // The round the union of a merge runs first: the higher of the two sides' (each
  // side's lower median, so that one node cannot send the union far ahead).
  uint64_t merge_round(const RingMembership::Change& change) const;
  // What a re-forming heard: every member's next round, and those whose probe said
  // they hold no result of the round before it.
  struct Heard {
    std::map<uint32_t, uint64_t> next_rounds;
    std::set<uint32_t> without_result;
  };
  // Decides the re-forming, reconnects, and sends this node's last result to members
  // that lost that round.
  Heard apply_view();
  // The member that sends the result that takes a member to round `freshest`: the
  // lowest id heard at that round whose probe said it holds that result (a restarted
  // process, a node left out or one that merged holds none). Senders and receivers
  // apply the same rule to what they heard; the receivers take only its copy.
  static std::optional<uint32_t> result_sender(const Heard& heard, uint64_t freshest);
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
  std::atomic<uint64_t> g_epoch_{0}, g_members_{0};  // for gauges(), set as the view changes
  std::map<uint32_t, std::string> hosts_;
  std::map<uint32_t, Address> addresses_;
  // A random secret from which the token of each link comes (token_for): we hand a
  // node that connects to us its link's token in our ring-address and require it in
  // its ring hello; the one our right neighbor (or a mesh partner) handed us we
  // present. The links are plain TCP or verbs; with CURVE on the control channel,
  // only that authenticated node learns its token, so nobody else (another peer
  // included) can take its place.
  uint64_t secret_ = 0;
  uint64_t layout_ = 0;
  std::unique_ptr<peers::RingChannel> channel_;
  RingAllReduce ring_;
  // The mesh algorithms' links, to mesh_peers(), and by rank for the algorithms.
  std::vector<std::unique_ptr<peers::RingChannel>> mesh_;
  std::vector<peers::RingChannel*> links_;
  std::map<Algorithm, std::unique_ptr<MeshAllReduce>> meshes_;
  std::array<std::atomic<uint64_t>, std::size(kAlgorithms)> rounds_by_{};
  std::optional<Algorithm> last_algorithm_;

  uint64_t next_round_ = 0;  // what a probe tells
  bool started_ = false;     // the first round began (probes before it are not answered)
  bool busy_ = false;        // a ring operation (connect or all-reduce) is in flight
  int stale_ = 0;            // links dropped meanwhile (kRingLinks | kMeshLinks)
  std::chrono::steady_clock::time_point last_poll_;
  std::chrono::steady_clock::time_point view_since_;  // when the last re-forming was decided
  // Robust mode: each member's latest chunk norms, for a round and view.
  struct Norms {
    uint64_t round = 0;
    uint64_t view = 0;
    std::vector<float> values;
  };
  std::map<uint32_t, Norms> norms_;
  // The result of the last completed round (elastic only), for members that lost it.
  OutgoingModel result_;
  bool has_result_ = false;
  std::map<uint32_t, uint64_t> behind_;  // members heard in the last re-forming -> next round
  // A result this node may receive, set for the whole of an elastic round: a member
  // can send it as soon as it heard our probe, before we finish re-forming, so the
  // copies are kept by sender until the view says which one the rule names (the
  // lowest id among the members that completed the freshest round, as the senders
  // decide: result_sender). Taking the first copy that came let any member plant a result: a scaled
  // model was averaged in as the round's (finding 18 of docs/security.md).
  struct ResultCopy {
    uint64_t of_round = 0;  // the round of the result, from its first chunk
    uint64_t got = 0;       // elements received, in order
    std::vector<float> values;
  };
  struct Fetch {
    uint64_t round = 0;  // the round this node runs; a later result is taken too (it caught up)
    size_t numel = 0;
    std::map<uint32_t, ResultCopy> copies;  // by sender, at most kMaxResultCopies
  };
  std::optional<Fetch> fetch_;
  static constexpr uint64_t kMaxResultLead = 64;  // rounds a result may be ahead of this node's
  // Senders whose copies are kept: the one the rule names and one liar that came first;
  // a third sender's copy is dropped (each is a model's worth of memory).
  static constexpr size_t kMaxResultCopies = 2;
  // A result whose norm is more than this times the node's own model's is refused: the
  // members' models were averaged a round ago and moved by a few local steps since, so
  // their mean's norm is close to every member's (at most the largest of them). Not
  // for deltas (CollectiveOptions::deltas): a mean of changes may well be larger than
  // one node's small change.
  static constexpr double kMaxResultGrowth = 2.0;
  static uint64_t lower_median(const std::map<uint32_t, uint64_t>& next_rounds);
  // The freshest round the members claim that is believed: at most `up_to`, or at most
  // the median member's (one member's word does not move it further). The senders of a
  // lost round's result and its receivers name the sender by it alike.
  static uint64_t freshest_believed(const std::map<uint32_t, uint64_t>& next_rounds,
                                    uint64_t up_to);
  uint64_t jump_to_ = 0;  // the next round after taking a later round's result
  // A merge's first round, until a round over the union completes; its news for the owner.
  std::optional<uint64_t> merge_round_;
  bool merge_news_ = false;
  std::chrono::steady_clock::time_point last_offer_;
  std::unique_ptr<StateTransfer> state_;      // admits_joiners() only
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
