#pragma once
// The receiving half of a gossip round: the chunks that this round's in-neighbors
// send, validated and decoded, handed to the strategy as they arrive.
//
// Neighbors need not be in step with us. On a time-varying graph a node can run
// rounds ahead of a node it does not talk to this round, so what arrives for a later
// round waits in a bounded buffer; what arrives for a round we have finished (from a
// neighbor we stopped waiting for) is dropped.
//
// A neighbor that misses an exchange is marked absent: later rounds do not wait for
// it until something arrives from it again, so a dead node costs its neighbors one
// timeout, not one per round. While an absent neighbor is alive (its heartbeats are
// fresh) it still gets our model: a straggler then sees that its neighbors moved on
// and catches up, and it keeps sending, so they wait for it again. Sending a hello
// instead would make each side take the other for absent, and two live nodes would
// run rounds on their own for good. Only a neighbor that left or is presumed dead
// gets a hello instead of the model: we are alive, wait for us again.
//
// Liveness: every node sends heartbeats while it waits, so a neighbor that dies is
// dropped from the round within `dead_after` even when it had delivered before.
// Heartbeats go only to the peers that read this node's silence (watchers()): its
// neighbors in the graph's coming period, whichever way the edge points (a sender
// reads it too: it greets a peer presumed dead instead of sending the model), and
// the coordinators, the two lowest live ids, which every member must hear to ask for
// its first round (daemon/admission.h); a coordinator beats every member. So a node
// sends O(degree) heartbeats a period, not one to each of n - 1 peers; a graph
// drawn afresh every round (random-regular) or with a longer period than
// kMaxWatchedPeriod still beats every peer. A
// neighbor that sent a later round but not this one has moved on without us (it
// took us for absent): it is not waited for, nor is one that greeted us in a round
// instead of sending its model (it took us for gone), nor one whose heartbeat says it
// has sent that round (what it sent was lost), and when every source of a round has
// moved on, this node is behind and catches up to their round (catch_up_round()).
// Dropping a neighbor gives its mixing weight to the node's own model, so the
// weights of the nodes that remain still sum to one on both sides of every edge.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "compression/codec.h"
#include "peers/dead_after.h"
#include "peers/router.h"
#include "sgd/membership/membership.h"
#include "sgd/membership/state_transfer.h"
#include "sgd/overlay/outgoing_model.h"
#include "sgd/overlay/overlay.h"
#include "sgd/round_deadline.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct ExchangeLimits {
  uint64_t max_rounds_ahead = 64;  // a message further ahead is refused
  // A chunk this far ahead, or further, is not kept (nor refused): a node that far
  // behind skips to its peers' round (catch_up_round) rather than run its way there.
  // Async gossip keeps its staleness' worth more.
  uint64_t max_rounds_buffered = 64;
  uint64_t max_buffered_bytes = 1ull << 30;   // payload held for later rounds
  std::chrono::milliseconds heartbeat{1000};  // sent to every peer this often while waiting
  // A neighbor silent this long is dropped from the round (peers/dead_after.h).
  peers::DeadAfter dead_after{std::chrono::milliseconds(5000)};
  // Robust mixing (--trim, --clip): a neighbor's malformed chunks leave only its
  // contribution out of their rounds, however many there are. Without it, a neighbor
  // whose chunks are refused in kMismatchRounds rounds in a row fails the round
  // (a misconfiguration), and a refusal now and then only leaves it out.
  bool robust = false;
  // --patience-factor F, --patience-floor: once a round has waited F times the 90th
  // percentile of the last 64 complete rounds' waits for their last neighbor (at least
  // the floor), it asks each neighbor that delivered before and that it still waits for
  // whether its daemon is up (a heartbeat with ask). One that does not answer within the
  // floor (or the 90th percentile, if longer: the answer may come behind a chunk on its
  // way) is given up on for the round, as after the patience; one that answers (its
  // trainer evaluates, say) is waited for up to the patience, so that mixing without a
  // live neighbor does not move the mean. A dead neighbor then costs its neighbors, and
  // the cluster, about twice the floor rather than a dead-after (docs/results/scale.md).
  // 0: the patience and the dead-after alone.
  double patience_factor = 0;
  std::chrono::milliseconds patience_floor{500};
  static constexpr double kPatienceQuantile = 0.9;
};

class NeighborExchange final : public Membership {
 public:
  static constexpr uint64_t kMismatchRounds = 3;
  // A neighbor that receive() waits for whose connection was up, dropped, and refused
  // the transport's next connect (TrafficCounters::link_gone: when a daemon's process
  // dies the kernel closes its sockets and its port, so its peers' connections drop at
  // once and ZeroMQ's first try again, after its reconnect interval of 0.1 s, is
  // refused), and that has sent nothing for this long, is left out of the round without
  // an ask: a kill or a crash costs its neighbors about the reconnect interval. A
  // machine that goes away closes nothing; it is asked (patience_factor). A live
  // daemon's link that drops (a network reset) connects again at that try, and is
  // waited for; one that the network cuts off (5 s of bytes it did not acknowledge:
  // peers/zmq_transport.h's link_silence) fails that try too and is left out.
  static constexpr std::chrono::milliseconds kLinkDownSilence{100};

  // `codec` (may be null) is the one this node decodes besides raw fp32. Subscribes
  // to hello, bye, heartbeat, copy-request and model-chunk on `router` (its state
  // transfer to the join kinds) for its lifetime.
  NeighborExchange(peers::Router& router, const compression::Codec* codec,
                   compression::ThreadPool* pool, ExchangeLimits limits = {});

  void set_layout_fingerprint(uint64_t fingerprint) { layout_ = fingerprint; }
  uint64_t layout_fingerprint() const { return layout_; }
  peers::PeerChannel& transport() { return transport_; }
  peers::Router& router() { return router_; }
  // Membership (sgd/membership/membership.h): every peer that delivers or heartbeats is in; a
  // joiner takes a live peer's state and goes on from its round, nothing more.
  bool admits_joiners() const override { return true; }
  StateTransfer* state() override { return &state_; }
  void tick(uint64_t next_round) override { beat(next_round); }
  Result<std::optional<uint64_t>> rejoin(uint64_t, std::chrono::steady_clock::time_point,
                                         const std::atomic<bool>*) override {
    return std::optional<uint64_t>();
  }
  std::vector<uint32_t> members() const override;
  // A node that took a running cluster's state: every peer runs rounds, or is down (one
  // whose offer did not come may be dead, and must not be waited for until the round's
  // deadline, as a starting one is: a restarted node with a dead neighbor waited 30 s
  // of a simulation's time for it). Without a state, the peers that said they run.
  void joined(bool took_state) override;
  // A node that joined by seeds, already the channel's peer: its per-peer state. The
  // overlay's graph, which the daemon grows once the node is ready, says from which
  // round it is a neighbor; from then on it is waited for as a running node.
  bool takes_new_members() const override { return true; }
  Status add_member(uint32_t id, const std::string& endpoint) override;
  // Such a node takes part from `round`: it waits there for the members, which may be
  // far behind it, so its chunks of that round are kept however far ahead they are.
  void schedule(uint32_t peer, uint64_t round);
  // After a join: these peers run rounds, so they are waited for with patience (not
  // until the deadline, as nodes that may still be starting are).
  void assume_running(std::span<const uint32_t> peers);
  // The round this node's neighbors have moved on to, when the last round found
  // every source ahead of it; 0 otherwise.
  uint64_t catch_up_round() const { return catch_up_round_; }
  // Sends a heartbeat to the watchers when the last one is `heartbeat` old.
  void beat(uint64_t next_round);
  // The graph whose neighbors watch this node; until it is set, every peer does.
  void watched_over(const Overlay* overlay) { overlay_ = overlay; }
  // The peers that read this node's silence from `next_round` on (see the top), by id.
  std::vector<uint32_t> watchers(uint64_t next_round) const;
  static constexpr uint64_t kMaxWatchedPeriod = 64;
  static constexpr size_t kCoordinators = 2;

  // CHOCO's resynchronization (sgd/strategies/choco/choco_sgd.h). Until this is called, a public
  // copy (tensor kPublicCopyTensor) or a copy-request from a peer is refused as another strategy's
  // message.
  void accept_public_copies() { public_copies_ = true; }
  // Asks `peer` for its public copy itself: ours went stale.
  void request_copy(uint32_t peer, uint64_t next_round);
  // The peers that asked for this node's public copy since the last call.
  std::vector<uint32_t> take_copy_requests();

  bool absent(uint32_t peer) const;
  // Absent, and left or presumed dead (silent for dead_after, or never heard): the
  // peers that send() greets instead of sending the model.
  bool gone(uint32_t peer) const;
  // Queues `model` to each of `to`, and a hello (we are alive: wait for us again)
  // to those that left or are presumed dead. A failed send is logged: that peer will
  // miss us.
  void send(const OutgoingModel& model, std::span<const uint32_t> to, double weight = 1.0);
  // A hello: we are alive, wait for us again. For a strategy that sends a gone
  // peer nothing else (push-sum gives it no share of its mass).
  void greet(uint32_t peer);

  // values are the decoded elements [c.offset, c.offset + c.numel) of source
  // `source` (an index into the sources passed to receive()): a block of a chunk at a
  // time, each checked finite. A block with NaN or Inf ends the source's round: the
  // blocks before it have been handed on, and the source is not complete.
  using ChunkFn =
      std::function<void(size_t source, const proto::ModelChunk& c, std::span<const float> values)>;
  struct Delivery {
    std::vector<bool> complete;  // per source: all numel elements arrived
    std::string missing;         // who did not deliver, and why; empty when all did
  };
  // Receives round `round` (numel elements per source) from `sources`, calling
  // on_chunk for every valid chunk. Returns when every source has delivered, left,
  // or is absent and silent; a source that is still incomplete at `patience` (or
  // sooner, ExchangeLimits::patience_factor) is marked absent (at options.deadline when it has
  // never delivered anything, so that start-up is not mistaken for death). A source's message that
  // is malformed for this model (layout, range, codec, payload) leaves it out of the round; errors:
  // such messages from one source in kMismatchRounds rounds in a row (without robust
  // mixing), and cancellation.
  Result<Delivery> receive(uint64_t round, std::span<const uint32_t> sources, size_t numel,
                           TimePoint patience, const RoundOptions& options,
                           const ChunkFn& on_chunk);

  // Between rounds: takes what peers already sent (for `next_round` and later) into
  // the buffer, waiting at most `wait`.
  void progress(uint64_t next_round, std::chrono::milliseconds wait);

 private:
  struct Live;  // the round being received
  // The router's handler: files one message into live_ when it belongs to its round,
  // into the buffer when it is ahead of next_round_, or away. A message that fails
  // the live round is kept in live_'s failure. While a join fetches a state (no round
  // can run yet), it keeps what says who is alive and which rounds the peers are in,
  // and buffers the chunks of a cluster's first rounds.
  void dispatch(peers::Incoming& in);
  Status consume(peers::Incoming& in, Live& live);
  void wait(uint64_t next_round, std::chrono::milliseconds wait);  // polls the router
  size_t peer_index(uint32_t peer) const;
  // Counts a refusal of peer pi's chunk in `round`: the rounds in a row it was refused.
  uint64_t refusal_streak(size_t pi, uint64_t round);
  void mark_absent(size_t pi, const std::string& why);
  void mark_present(size_t pi);
  bool presumed_gone(size_t pi) const;  // left, never heard, or silent for dead_after
  // A node the overlay's graph has that the channel does not know yet (its add is
  // still on the way) counts as absent.
  bool absent_at(size_t pi) const { return pi >= absent_.size() || absent_[pi]; }

  peers::Router& router_;
  peers::PeerChannel& transport_;
  const compression::Codec* codec_;
  compression::ThreadPool* pool_;
  ExchangeLimits limits_;
  RoundDeadline ask_after_;  // when receive() asks the neighbors it waits for (above)
  uint64_t layout_ = 0;
  std::vector<bool> absent_;          // per transport peer
  std::vector<bool> send_failing_;    // per transport peer: its last send failed (said once)
  std::vector<bool> left_;            // per transport peer: said bye, and nothing since
  std::vector<bool> ever_delivered_;  // per transport peer
  std::vector<uint64_t> newest_;      // per transport peer: 1 + the newest round it sent a chunk of
  // Per transport peer: 1 + the newest round in which it greeted us instead of sending
  // its model (it took us for gone): it sends nothing of that round, so the round
  // does not wait for it.
  std::vector<uint64_t> greeted_;
  // Per transport peer: when this node last answered its ask (a heartbeat with ask): at
  // most one answer per kAnswerGap, so that a peer's flood of asks costs it, not us.
  std::vector<TimePoint> answered_;
  static constexpr std::chrono::milliseconds kAnswerGap{10};
  // Per transport peer: the round of its newest heartbeat. A node beats R only once it
  // has sent its messages of every round below R (before a round it beats that
  // round, while it waits in one the next), and a peer's messages arrive in order: a
  // round below it of which nothing came from that peer was lost (a queue dropped
  // while the link was down) or skipped, and is not waited for.
  std::vector<uint64_t> beat_round_;
  std::vector<bool> copy_requested_;   // per transport peer
  std::vector<uint64_t> first_round_;  // per transport peer: joined by seeds, scheduled then
  struct Streak {
    uint64_t last = 0;    // the last round with a refused chunk
    uint64_t rounds = 0;  // rounds in a row, up to `last`, with one
  };
  std::vector<Streak> streaks_;  // per transport peer
  bool public_copies_ = false;
  uint64_t catch_up_round_ = 0;
  TimePoint last_beat_{};
  const Overlay* overlay_ = nullptr;
  std::vector<uint32_t> watched_;  // the last beat's watchers, by id
  TimePoint started_{};
  uint64_t next_round_ = 0;  // where dispatch() files what arrives
  Live* live_ = nullptr;     // during receive()
  StateTransfer state_;
  std::map<uint64_t, std::vector<peers::Incoming>> ahead_;  // by round
  uint64_t ahead_bytes_ = 0;
  std::vector<float> scratch_;
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
