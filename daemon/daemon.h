#pragma once
// gossipd: one per node. Owns the trainer-facing IPC socket, the shared-memory
// arena, the trainer sessions and the sync worker (peers + strategy). The control
// loop runs in the thread that calls run(); SIGINT/SIGTERM (stop) and SIGHUP (re-read
// the admission list) arrive through a signalfd, so the caller must block them in
// every thread first (block_signals()).

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "daemon/arena.h"
#include "daemon/checkpoint.h"
#include "daemon/config.h"
#include "daemon/divergence.h"
#include "daemon/hooks.h"
#include "daemon/metrics_server.h"
#include "daemon/metrics_text.h"
#include "daemon/nonfinite.h"
#include "daemon/sync_worker.h"
#include "daemon/time_accounts.h"
#include "daemon/trainer_sessions.h"
#include "proto/ipc.h"
#include "proto/layout.h"
#include "sgd/registry.h"
#include "sgd/strategies/sma/sma.h"

namespace gossip::daemon {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and the threads it starts later.
void block_signals();

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> create(const DaemonConfig& config,
                                                const DaemonHooks& hooks = {});
  ~Daemon();

  // Serves until SIGINT/SIGTERM; then tells the trainers, closes the sockets and
  // unlinks the arena. Returns the process exit code.
  int run();

 private:
  explicit Daemon(DaemonConfig config);
  void handle_ipc();
  // SIGINT and SIGTERM shut down (true); SIGHUP re-reads the admission list.
  bool handle_signal();
  void on_ban(const std::string& route, const proto::ipc::Ban& b);
  void on_forget(const std::string& route, const proto::ipc::Forget& f);
  // The answer to gossipctl forget, once the worker has it (checked at every wake-up).
  void answer_forget();
  void reload_admission();
  void guard_result();  // a round's result with NaN or Inf is replaced
  void handle_round_done();
  void handle_trainer_exit(int pidfd);
  void handle_ipc_disconnects();
  void reply(const std::string& route, const proto::ipc::Message& m);
  // What a trainer hears when its replica holds what it waited for: the rounds done,
  // `step` and the node's traffic.
  proto::ipc::SyncOk sync_ok(uint64_t step) const;
  void on_attach(const std::string& route, const proto::ipc::Attach& a, int connection_fd);
  void send_attach_ok(TrainerSession* s, bool initialized);
  void finish_join();
  void on_sync(const std::string& route, const proto::ipc::Sync& s);
  void on_start(const std::string& route);
  void maybe_submit_start();
  void on_sync_range(const std::string& route, const proto::ipc::SyncRange& m);
  void maybe_start_bucket();
  // Whatever the trainers wait for and can start now: a round or a bucket's round.
  void maybe_start_next();
  void finish_bucket();
  void finish_start();
  void on_detach(const std::string& route);
  void on_stats(const std::string& route);
  // gossipctl doctor / status --cluster: the worker gathers, handle_inspected answers.
  void on_inspect(const std::string& route, const proto::ipc::InspectRequest& q);
  void handle_inspected();
  void detach(TrainerSession* s, const std::string& why);
  void maybe_start_round();
  void shutdown(const std::string& reason);
  // The part of the model round `round` synchronizes: all of it, or with streamed
  // syncs (--fragments F) fragment round mod F, [offset, offset + numel).
  struct Fragment {
    uint64_t offset = 0, numel = 0;
  };
  Fragment fragment_of(uint64_t round) const;

  DaemonConfig config_;
  const sgd::StrategyDescriptor* strategy_;  // of config_.strategy.name (validated)
  zmq::context_t context_{1};
  zmq::socket_t ipc_;
  zmq::socket_t ipc_monitor_;  // ipc_'s closed connections
  std::string ipc_path_;
  int signal_fd_ = -1;
  bool running_ = true;
  // gossipctl leave asked from this route: answered and acted on after the IPC batch.
  std::optional<std::string> leave_route_;
  std::optional<std::string> forget_route_;  // gossipctl forget's, while it waits
  proto::ipc::Forget forget_;
  std::chrono::steady_clock::time_point forget_until_{};

  std::unique_ptr<SyncWorker> worker_;
  TrainerSessions sessions_;
  TimeAccounts time_;                    // where the trainers' and the rounds' time goes
  Fragment fragment_;                    // of the round in flight
  std::optional<proto::Layout> layout_;  // fixed by the first trainer that attaches
  std::optional<Arena> arena_;
  std::vector<float> node_model_;  // the mean of several local trainers' replicas
  // Strategy sma: the node's trainers follow this central model (sgd/strategies/sma/sma.h).
  std::unique_ptr<sgd::CentralModel> central_;
  bool waiting_for_learners_logged_ = false;
  bool waiting_for_trainers_logged_ = false;  // node.expect_trainers
  bool round_started_ = false;                // a round ever started (node.expect_trainers)
  std::span<float> round_model_;              // what the running (or last) round averaged in place
  uint64_t round_ = 0;                        // rounds completed
  uint64_t step_ = 0;                         // the node's step at the last round
  uint64_t tuned_period_ = 0;  // tune auto: the trainers' period now (SyncOk.period); 0: off
  bool round_running_ = false;
  // The running round covers a bucket of the gradients (SyncRange), not the model.
  bool bucket_round_ = false;
  proto::ipc::SyncRange bucket_;  // the running bucket round's
  // Start-up: the first attach waits while the worker asks the peers for a fresher
  // state than ours (a restarted node) and the checkpoint, if any, is restored.
  bool joining_ = false;
  std::vector<std::string> pending_attach_;  // routes answered when the join is done
  std::optional<Checkpoint> resume_;         // read at start from config.checkpoint
  std::vector<std::string> participants_;    // routes waiting on the running round
  // Start-up (ipc::Start): the cluster's initial model, node 0's. While the worker
  // publishes or fetches it, start_waiters_ wait; once it is here (start_done_) a
  // later Start takes it at once.
  bool starting_ = false;
  bool start_done_ = false;
  std::vector<float> start_model_;
  std::vector<std::string> start_waiters_;
  // async-gossip, and local SGD with --overlap-steps: trainers do not wait for their
  // round. It runs on a copy of the node's model (or of the round's fragment); the
  // change it made (staged_) is added to the replicas at a later sync point, on top of
  // the steps they took meanwhile: async-gossip's next, local SGD's TAU steps later.
  bool async() const { return strategy_->asynchronous; }
  bool overlapped() const { return async() || config_.strategy.overlap_steps > 0; }
  void stage_async_change();
  std::vector<float> async_model_;  // the round's copy, mixed in place
  std::vector<float> staged_;       // before the round: its input; after: the change it made
  Fragment staged_fragment_;        // where staged_ goes in the model
  bool staged_ready_ = false;
  bool round_overlapped_ = false;  // the round in flight runs under the trainers' steps
  uint64_t ipc_dropped_ = 0;
  std::string inspect_route_;  // the gossipctl waiting for an inspection
  bool warned_no_credentials_ = false;

  // NaN/Inf guard: the model after the last successful round (not for gradients).
  void guard_nonfinite();
  NonFinitePolicy nonfinite_policy_ = NonFinitePolicy::kRefuse;
  std::vector<float> last_good_;
  std::atomic<uint64_t> nonfinite_updates_{0};  // rounds whose contribution was repaired
  std::atomic<uint64_t> nonfinite_values_{0};   // non-finite elements found in them

  // After every round of the whole model (not of gradients): its norm, and the error
  // once it diverged (--on-divergence).
  void watch_divergence();
  // A trainer's loss (ipc::Sync's), whatever the strategy.
  void watch_loss(double loss, uint64_t step);
  // Logs, counts and records the reason the watch gave, with what the node knows of
  // the cause.
  void report_divergence();
  DivergenceWatch divergence_;
  std::atomic<double> gauge_model_norm_{0};
  std::atomic<double> gauge_trainer_loss_{0};

  // Prometheus: the server's thread reads the traffic counters (atomics) and these
  // copies of the loop's state, refreshed after every turn of run().
  MetricsSnapshot metrics_snapshot() const;
  void publish_gauges();
  // Every 30 s: the heaps' free memory back to the system (malloc_trim).
  void release_free_memory();
  std::chrono::steady_clock::time_point last_trim_ = std::chrono::steady_clock::now();
  std::atomic<uint64_t> gauge_rounds_{0};
  std::atomic<uint64_t> gauge_step_{0};
  std::atomic<uint32_t> gauge_trainers_{0};
  std::atomic<uint64_t> gauge_ipc_dropped_{0};
  mutable std::mutex time_mu_;              // the metrics thread reads time_published_
  TimeAccounts::Snapshot time_published_;   // refreshed by publish_gauges
  std::unique_ptr<MetricsServer> metrics_;  // stopped before worker_ goes away
};

}  // namespace gossip::daemon
