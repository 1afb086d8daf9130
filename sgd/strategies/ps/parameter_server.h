#pragma once
// Parameter servers (Li et al., OSDI 2014; Dean et al. 2012's Downpour; Ho et al. 2013's
// stale-synchronous parallel). The model is cut into K contiguous shards of equal
// size (equal bytes); shard s lives on the node of rank s (the K lowest ids), which is
// a worker too. Every node is a worker: after `period` local steps it pushes the
// change its steps made since its last sync (through the codec, with error feedback
// when the codec is biased) to each shard's server, then pulls the shard back.
//
//  - bsp: a server averages the pushes of a clock once every live worker's is in,
//    steps its optimizer, and only then answers that clock's pulls: synchronous SGD
//    through a server (period 1, sgd, lr 1) or local SGD with a server-side outer
//    optimizer (period T).
//  - async (Downpour): a server applies each push as it arrives, scaled by 1/n, and
//    answers every pull at once; nobody waits for anybody. Workers pull every
//    `fetch` pushes and train on their own model in between.
//  - ssp:S (stale-synchronous): as async, but a pull at clock c is answered only
//    when every live worker has pushed clock c - S: no worker runs more than S
//    clocks ahead of the slowest.
//
// A worker silent for longer than `dead_after` leaves the clock (bsp stops waiting
// for it, ssp stops bounding by it) and comes back with its next push.
//
// Without replicas, a server that falls silent fails its workers' rounds within
// `dead_after`, naming it; its shard comes back from its node's checkpoint
// (save_state holds the shard). With R replicas (Li et al.'s chain replication
// after aggregation), shard s is held by a chain of R + 1 nodes, s, s + 1, ... s + R
// (in id order, wrapping): workers talk to the first live holder, which hands every
// update it applies (bsp: the clock's mean; async, ssp: each push) down the chain
// (ps-replica), so that the next holder holds the same bits and the same optimizer
// state. A worker that finds its holder silent or gone re-sends its last push to the
// next holder and pulls from it: training goes on.
//
// Workers join a running cluster (issue 24; daemon/admission.h): a node that joined by
// seeds gets the next id, above every configured one, so it is a worker only (the
// chains are the configured nodes', which is why a cluster whose chains wrap around
// the node list takes no new member). A shard waits for a new worker from its first
// push on, not before. Every pull tells the worker the clock the shards are at
// (ps-params' `clock`: bsp's last applied, else the slowest counted worker's); under
// bsp and ssp a worker behind them (one that joined: its first round is a pull; one
// the others went on without) goes on from there (round_to_run), and its trainers
// from that clock's step. Under async, where nobody waits, it goes on at its own.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "peers/dead_after.h"
#include "peers/router.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/membership/membership.h"
#include "sgd/strategies/ps/server_optimizer.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct ParameterServerOptions {
  enum class Mode { kBsp, kAsync, kSsp };
  uint32_t servers = 1;
  uint32_t replicas = 0;  // holders of each shard besides its server
  Mode mode = Mode::kBsp;
  uint64_t staleness = 0;  // ssp's S
  uint64_t fetch = 1;      // async and ssp: pull every `fetch` pushes
  ServerOptimizerConfig optimizer;
  uint64_t chunk_elems = 1 << 20;
  Compression compression;  // error_feedback unused: the strategy keeps its own
  bool error_feedback = false;
  std::chrono::milliseconds heartbeat{1000};
  peers::DeadAfter dead_after{std::chrono::milliseconds(3000)};  // peers/dead_after.h
};
// "bsp", "async" or "ssp:S".
Result<ParameterServerOptions::Mode> parse_ps_mode(const std::string& spec, uint64_t* staleness);

// Shard s of K over numel elements: [offset, offset + numel), the first numel % K one longer.
struct Shard {
  uint64_t offset = 0;
  uint64_t numel = 0;
};
Shard shard_of(uint64_t numel, uint32_t shards, uint32_t s);

class ParameterServer final : public Strategy, public Membership {
 public:
  // Subscribes to ps-push, ps-pull, ps-params, bye on `router`, which must outlive it.
  ParameterServer(peers::Router& router, ParameterServerOptions options);
  ~ParameterServer() override;

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;
  // After this worker's first pull: the clock after the servers' (a worker that
  // joined, or restarted without its round, goes on from theirs).
  uint64_t round_to_run(uint64_t proposed) const override { return std::max(proposed, jump_to_); }
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  // A server whose trainer attaches after a worker's first pull is not taken for dead.
  void keep_alive() override { heartbeats(); }
  void set_layout_fingerprint(uint64_t fingerprint) override { layout_ = fingerprint; }
  StrategyState save_state() const override;
  Status load_state(const StrategyState& state) override;
  void took_model(std::span<const float> model, std::span<const float> shared) override;
  std::vector<Gauge> gauges() const override;

  // Membership: no state transfer (a worker's first pull is its state); a new member
  // is a worker.
  bool admits_joiners() const override { return false; }
  StateTransfer* state() override { return nullptr; }
  Result<std::optional<uint64_t>> rejoin(uint64_t, std::chrono::steady_clock::time_point,
                                         const std::atomic<bool>*) override {
    return std::optional<uint64_t>();
  }
  std::vector<uint32_t> members() const override { return nodes_; }
  // Only where no chain wraps around the node list: a new id (above every one) at its
  // end then moves no shard's holders.
  bool takes_new_members() const override { return chains_fixed_; }
  Status add_member(uint32_t id, const std::string& endpoint) override;

  // The largest lead of a worker whose pull was answered over the slowest live
  // worker's clock, over this node's shards' lifetime (ssp keeps it <= S); any thread.
  uint64_t max_lead() const { return max_lead_.load(std::memory_order_relaxed); }

 private:
  struct Push {  // a worker's push of one clock to one shard, as its slices arrive
    uint64_t clock = 0;
    uint64_t got = 0;
    bool complete = false;
    bool rejected = false;  // a slice held NaN or Inf: the clock goes on without it
    std::vector<float> update;
  };
  struct Replicated {  // a ps-replica message in progress
    uint64_t round = 0;
    uint64_t got = 0;
    bool snapshot = false;
    uint32_t worker = 0;
    uint32_t divisor = 1;
    std::vector<float> values;
  };
  struct Served {  // a shard this node holds
    uint32_t index = 0;
    uint32_t link = 0;  // its place in the shard's chain: 0 is the server
    Shard shard;
    bool ready = false;
    std::vector<float> params;
    std::unique_ptr<ServerOptimizer> optimizer;
    uint64_t version = 0;                // bsp: the last clock applied
    std::map<uint32_t, uint64_t> clock;  // worker -> its last complete push
    std::map<uint32_t, Push> pushes;     // worker -> its push in progress (or complete, bsp)
    std::map<uint32_t, uint64_t> pulls;  // worker -> the clock of its waiting pull
    // Replication: what an earlier holder of the chain is handing over; the holder
    // it comes from once a snapshot came (synced); the later holder this one feeds,
    // once it answered its request for a snapshot.
    Replicated incoming;
    bool synced = false;
    std::optional<uint32_t> fed_by;
    std::optional<uint32_t> feeds;
    bool took_over = false;  // a worker talks to this replica: its server is gone
    std::chrono::steady_clock::time_point requested{};      // a replica's last request
    std::chrono::steady_clock::time_point snapshot_sent{};  // a holder's last answer
  };

  uint32_t self() const;
  // Every node, self included, ascending: the configured ones, then those that joined.
  const std::vector<uint32_t>& nodes() const { return nodes_; }
  // Link j of shard s's chain (0: its server).
  uint32_t holder(uint32_t shard, uint32_t link) const {
    return nodes()[(shard + link) % nodes().size()];
  }
  // The holder this worker talks to for a shard.
  uint32_t server_of(uint32_t shard) const { return holder(shard, active_[shard]); }
  bool live(uint32_t worker) const;
  // A member that joined and has not pushed to shard `s` yet.
  bool pending(const Served& s, uint32_t worker) const;
  // Whether shard `s` counts `worker` in its clocks: a live worker, but a member that
  // joined only from its first push to the shard on.
  bool counted(const Served& s, uint32_t worker) const;
  void heartbeats();

  // Server side.
  void absorb(peers::Incoming& in);
  // Where the slice [offset, + numel) of a worker's push of `clock` lands; empty when
  // it is dropped (noted against the worker).
  std::span<float> slice_of_push(Served& s, uint32_t worker, uint64_t clock, uint64_t offset,
                                 uint64_t numel);
  void landed(Served& s, uint32_t worker, uint64_t numel);  // completes the push at its last slice
  void reject(Served& s, uint32_t worker, uint64_t clock);  // the clock goes on without it
  void on_pull(uint32_t worker, uint32_t shard, uint64_t clock);
  void serve(Served& s);  // applies what can be applied, answers what can be answered
  bool may_answer(const Served& s, uint64_t clock) const;
  void answer(Served& s, uint32_t worker, uint64_t clock);
  Served* served(uint32_t shard);
  // Replication (parameter_server_replicas.cc): hands what a holder applied down its chain.
  void replicate(Served& s, bool snapshot, uint32_t worker, uint32_t divisor, uint64_t round,
                 std::span<const float> values);
  void on_replica(peers::Incoming& in);
  void apply_replica(Served& s, uint32_t from);
  // The first live holder after this one in the shard's chain.
  std::optional<uint32_t> next_holder(const Served& s) const;
  void tend_chain(Served& s);                  // a replica asks for a snapshot until it has one
  void take_over(Served& s, uint32_t worker);  // a worker talks to this replica
  // The worker moves a shard to the next holder of its chain; false when there is none.
  bool fail_over(uint32_t shard, uint64_t clock, const std::string& why);

  // Worker side.
  Status push(std::span<const float> model, uint64_t clock);
  Status pull(std::span<float> model, uint64_t clock, const RoundOptions& options);
  // After a pull at `clock`: where the shards it answered are further on (this worker
  // joined, or the others went on without it), round_to_run goes on from there.
  void catch_up(uint64_t clock);

  peers::Router& router_;
  peers::PeerChannel& control_;
  ParameterServerOptions options_;
  std::vector<uint32_t> nodes_;
  std::vector<uint32_t> joined_;  // members that joined by seeds, as add_member told
  bool chains_fixed_ = true;
  uint64_t jump_to_ =
      0;  // round_to_run's floor: the shards' clock + 1, after a pull found them ahead
  std::vector<uint64_t> at_last_pull_;  // the last pull's clocks, per shard
  uint32_t highest_listed_ = 0;         // the highest id of the peer list this node started with
  uint64_t layout_ = 0;
  uint64_t numel_ = 0;
  std::vector<Served> served_;
  std::vector<uint32_t> active_;  // shard -> the link of its chain this worker talks to
  std::atomic<uint64_t> max_lead_{0};

  bool started_ = false;
  uint64_t pushes_ = 0;          // since the last pull (fetch)
  std::vector<float> baseline_;  // the model after the last sync
  std::vector<float> update_;
  std::unique_ptr<compression::ErrorFeedback> residual_;
  struct Sent {  // the last push, per shard, kept to re-send to a replica that takes over
    uint64_t clock = 0;
    std::vector<std::pair<proto::PsPush, std::shared_ptr<std::vector<std::byte>>>> slices;
  };
  std::vector<Sent> sent_;
  // The pull in flight: shard -> elements received; the values land in pulled_.
  struct Pulling {
    uint64_t clock = 0;
    std::vector<uint64_t> got;
    std::vector<uint64_t> at;                      // per shard: the clock its server says it is at
    std::vector<std::optional<std::string>> gone;  // per shard: its holder said bye
  };
  std::optional<Pulling> pulling_;
  std::vector<float> pulled_;
  std::chrono::steady_clock::time_point last_heartbeat_{};
  peers::Router::Subscription subscription_;
};

}  // namespace gossip::sgd
