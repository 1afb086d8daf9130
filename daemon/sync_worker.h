#pragma once
// The thread that owns the peer transport and runs synchronization rounds, so the
// daemon's control loop keeps serving trainers (attach, crash, stats) while a
// round waits on the network. One round at a time.

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "compression/codec_spec.h"
#include "compression/thread_pool.h"
#include "daemon/admission.h"
#include "daemon/checkpoint.h"
#include "daemon/config.h"
#include "daemon/hooks.h"
#include "daemon/inspector.h"
#include "daemon/transfer_histogram.h"
#include "daemon/tuner.h"
#include "peers/ring_channel.h"
#include "peers/router.h"
#include "peers/topology.h"
#include "peers/zmq_transport.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/membership/initial_model.h"
#include "sgd/membership/peer_ring.h"
#include "sgd/membership/state_transfer.h"
#include "sgd/overlay/neighbor_exchange.h"
#include "sgd/overlay/overlay.h"
#include "sgd/registry.h"
#include "sgd/round_deadline.h"
#include "sgd/strategy.h"

namespace gossip::daemon {

class SyncWorker {
 public:
  // Binds the peer endpoint and connects to the peers (in the caller's thread, so a
  // bind error is reported before the daemon starts), then starts the thread.
  // `resume`: the checkpoint the daemon resumes from, whose joined members this node
  // knows again (daemon/admission.h).
  static Result<std::unique_ptr<SyncWorker>> start(const DaemonConfig& config,
                                                   const DaemonHooks& hooks = {},
                                                   const Checkpoint* resume = nullptr);
  ~SyncWorker();  // cancels a running round, says bye to the peers, joins

  // Readable (poll) once a submitted job (round or join) has finished; take_result()
  // or take_join() clears it.
  int done_fd() const { return done_fd_; }
  // Starts a round after `round` completed ones, at the trainers' `step`, on `model`
  // (in place), after set_model(). The caller must not touch model until
  // take_result() returns a value.
  void submit(std::span<float> model, uint64_t round, uint64_t step);
  // A gradient strategy's round over one bucket of the model, `model` being its
  // elements from `offset` on. Not checkpointed (the checkpoint holds whole models).
  void submit_bucket(std::span<float> model, uint64_t offset, uint64_t round, uint64_t step);
  struct RoundResult {
    Status status;
    uint64_t round = 0;  // the round it ran: later than submitted when the node caught up
    // Set when the node came back into an elastic ring with a member's model: the
    // step that model is at, where the node's trainers go on from.
    std::optional<uint64_t> step;
    // Tune auto: the trainers' period up to the next round (daemon/tuner.h).
    std::optional<uint64_t> period;
  };
  std::optional<RoundResult> take_result();
  // Start-up (sgd/membership/initial_model.h), after set_model(), like a round: on node 0,
  // `model` becomes the cluster's initial model; on any other node, node 0's is
  // written into it. take_result() then says how it went (its round is 0).
  void submit_start(std::span<float> model);
  // Once the node's model is known the worker validates and buffers what peers send
  // between rounds too.
  void set_model(size_t numel, uint64_t layout_fingerprint);

  // Start-up, after set_model(): with a gossip strategy (or local SGD on an elastic
  // ring), asks the peers for a state
  // fresher than round `min_round` (sgd/membership/state_transfer.h). Without one, the strategy
  // takes `resume` (a checkpoint's state), if any.
  void submit_join(uint64_t min_round, std::optional<sgd::StrategyState> resume);
  struct JoinResult {
    Status status;  // of fetching, or of restoring `resume`
    std::optional<sgd::NodeState> state;
  };
  std::optional<JoinResult> take_join();

  // Writes the node's model and strategy state after every `every` completed rounds
  // (0: only when the worker stops) to `path` (daemon/checkpoint.h).
  void enable_checkpoints(std::string path, uint64_t every);

  const peers::TrafficCounters& traffic() const { return transport_->traffic(); }
  // The channel's peers (any thread: a copy, since nodes that join add to them).
  std::vector<peers::Peer> peers() const {
    std::lock_guard lock(peers_mu_);
    return peers_copy_;
  }
  // Rounds each all-reduce algorithm completed, by name; empty without a ring
  // transport (any thread).
  std::vector<std::pair<std::string, uint64_t>> allreduce_rounds() const;
  // The strategy's gauges, and the tuner's under tune auto (any thread).
  std::vector<sgd::Strategy::Gauge> strategy_gauges() const;
  // The node's state transfers as a joiner, how long each took (any thread).
  TransferHistogram::Snapshot transfers() const { return transfers_.snapshot(); }

  // gossipctl doctor and status --cluster (daemon/inspector.h), from any thread: starts
  // gathering; false while an earlier question is being answered. inspect_fd() is
  // readable once take_inspection() has the answer.
  bool inspect(const proto::ipc::InspectRequest& request);
  int inspect_fd() const { return inspect_fd_; }
  std::optional<proto::ipc::InspectReply> take_inspection();
  // What the node's status says besides the rounds (any thread): its trainers, and
  // the last error outside the worker (a refused trainer, NaN in an update).
  void set_trainers(uint32_t n) { trainers_.store(n, std::memory_order_relaxed); }
  void note_error(std::string what);
  // gossipctl ban (any thread): the worker bans the peer at its next poll
  // (peers::ZmqTransport::ban), within milliseconds.
  void ban(uint32_t peer);
  // gossipctl forget (any thread): the worker proposes it at its next poll
  // (Admission::forget); take_forgotten() has the outcome within about 2 s.
  void forget(uint32_t peer);
  std::optional<Status> take_forgotten();
  // Re-reads the admission list (--admit-keys) into the authenticator (any thread):
  // how many keys it holds now, or why it was kept as it was.
  Result<size_t> reload_admit_keys(const std::string& path);

 private:
  SyncWorker() = default;
  Status make_strategy(const DaemonConfig& config, const DaemonHooks& hooks);
  Status make_all_reduce(const DaemonConfig& config, const sgd::StrategyDescriptor& strategy,
                         const compression::Codec* codec, const DaemonHooks& hooks);
  void run();
  void run_join(uint64_t min_round, std::optional<sgd::StrategyState> resume);
  // A peer's state fresher than `min_round` (nullopt: none offered); on an elastic
  // local-SGD ring, then asks back into the ring, and takes the members' state again
  // if they went on meanwhile.
  Result<std::optional<sgd::NodeState>> fetch_state(size_t numel, uint64_t layout,
                                                    uint64_t min_round);
  // After a round that left this node alone in an elastic local-SGD ring: takes a
  // member's model into `model` and asks back in. Returns the round that model is
  // the result of and the members' step at it; nullopt when nobody offered one (it
  // tries again later).
  std::optional<RoundResult> come_back(std::span<float> model);
  void after_round(std::span<const float> model, uint64_t ran, uint64_t step);
  Status make_tuner(const DaemonConfig& config);
  // After a round under tune auto: its sample to the tuner, the next period to `result`.
  void tune(RoundResult& result, uint64_t step, std::chrono::steady_clock::time_point began,
            uint64_t sent_before);
  void write_checkpoint_now();
  void signal_done();
  // The sync thread's part of inspect(): after every poll of the router.
  void serve_inspector();
  proto::inspect::MemberStatus member_status();

  std::unique_ptr<peers::PeerChannel> transport_;  // ZeroMQ (wrapped by hooks)
  peers::ZmqTransport* zmq_ = nullptr;             // transport_, or what it wraps
  // The one reader of transport_; the components below subscribe to it.
  std::unique_ptr<peers::Router> router_;
  std::unique_ptr<sgd::InitialModel> initial_;
  compression::CodecSpec codec_;                   // outlives the two below, which point at it
  std::unique_ptr<compression::ThreadPool> pool_;  // idem
  // What the strategy runs on: an all-reduce (local SGD) or a neighbor exchange
  // over a topology (the gossip family). Declared before the strategy, which uses them.
  std::unique_ptr<peers::RingTransport> ring_;  // the ring's fabric (tcp, rdma), if any
  std::unique_ptr<sgd::AllReduce> all_reduce_;
  // Who takes part (sgd/membership/membership.h): the exchange, or all_reduce_ when it is an
  // elastic ring that takes nodes back; null for a fabric without churn.
  sgd::Membership* membership_ = nullptr;
  const sgd::PeerRing* peer_ring_ = nullptr;  // the all-reduce, where it is a PeerRing
  std::unique_ptr<sgd::Overlay> overlay_;     // the gossip family's graphs, as nodes join
  bool joined_by_seeds_ = false;              // and not yet scheduled (worker thread only)
  uint64_t period_ = 1;                       // the trainers' steps between rounds
  std::unique_ptr<sgd::NeighborExchange> exchange_;
  std::unique_ptr<sgd::Strategy> strategy_;
  std::unique_ptr<Tuner> tuner_;          // tune auto; after the router it subscribes to
  std::unique_ptr<Inspector> inspector_;  // idem
  std::unique_ptr<Admission> admission_;  // idem: nodes that join by seeds
  mutable std::mutex peers_mu_;
  std::vector<peers::Peer> peers_copy_;                                 // guarded by peers_mu_
  std::optional<std::chrono::steady_clock::time_point> tune_last_end_;  // worker thread only
  uint64_t tune_last_step_ = 0;
  std::chrono::milliseconds round_timeout_{60000};      // joins and start-up
  std::unique_ptr<sgd::RoundDeadline> round_deadline_;  // rounds (worker thread only)
  int done_fd_ = -1;
  int inspect_fd_ = -1;
  TransferHistogram transfers_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  struct Job {
    std::span<float> model;
    uint64_t round = 0;
    uint64_t step = 0;
    bool start = false;              // the initial model, not a round
    std::optional<uint64_t> bucket;  // a bucket's round: its offset in the model
  };
  void run_start(std::span<float> model);
  std::pair<size_t, uint64_t> model_shape();  // numel_ and layout_, read under mu_
  struct JoinJob {
    uint64_t min_round = 0;
    std::optional<sgd::StrategyState> resume;
  };
  std::optional<Job> job_;                                   // guarded by mu_
  std::optional<JoinJob> join_;                              // guarded by mu_
  size_t numel_ = 0;                                         // guarded by mu_
  uint64_t layout_ = 0;                                      // guarded by mu_
  uint64_t next_round_ = 0;                                  // worker thread only
  std::optional<RoundResult> result_;                        // guarded by mu_
  std::optional<JoinResult> joined_;                         // guarded by mu_
  std::optional<proto::ipc::InspectRequest> inspect_asked_;  // guarded by mu_
  std::optional<proto::ipc::InspectReply> inspected_;        // guarded by mu_
  bool inspecting_ = false;                                  // guarded by mu_
  void apply_bans();                                         // the worker thread's side of ban()
  std::vector<uint32_t> bans_;                               // guarded by mu_
  std::atomic<bool> bans_pending_{false};
  std::optional<uint32_t> forget_;            // guarded by mu_
  size_t budgeted_numel_ = 0;                 // the model size the peers' send queues are sized for
  std::optional<Status> forgotten_;           // guarded by mu_
  std::atomic<bool> inspect_pending_{false};  // inspect_asked_ is set
  // member_status()'s sources: the worker's own (its thread) and the daemon's.
  std::atomic<uint32_t> trainers_{0};
  std::string last_error_;                                 // guarded by mu_
  std::chrono::steady_clock::time_point last_error_at_{};  // guarded by mu_
  bool joining_ = false;                                   // worker thread only
  bool in_round_ = false;                                  // idem
  uint64_t rounds_done_ = 0, last_step_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_round_end_;
  double last_round_ms_ = -1;
  std::vector<float> samples_;      // of the model after the last round
  bool model_is_gradient_ = false;  // the strategy's rounds average gradients
  uint32_t node_ = 0;
  std::string strategy_name_;
  sgd::JoinOptions join_options_;
  uint64_t chunk_elems_ = 1 << 20;
  // Checkpoints: the state after the last completed round (worker thread only).
  std::string checkpoint_path_;
  uint64_t checkpoint_every_ = 0;
  std::optional<Checkpoint> last_;
  bool last_written_ = true;
  // Coming back into an elastic ring after being left out (worker thread only).
  std::chrono::steady_clock::time_point next_come_back_{};
  std::chrono::milliseconds come_back_backoff_{0};
  std::thread thread_;
};

}  // namespace gossip::daemon
