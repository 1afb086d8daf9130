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
#include "daemon/config.h"
#include "peers/topology.h"
#include "peers/ring_channel.h"
#include "peers/zmq_transport.h"
#include "sgd/all_reduce.h"
#include "sgd/neighbor_exchange.h"
#include "sgd/strategy.h"

namespace gossip::daemon {

class SyncWorker {
 public:
  // Binds the peer endpoint and connects to the peers (in the caller's thread, so a
  // bind error is reported before the daemon starts), then starts the thread.
  static Result<std::unique_ptr<SyncWorker>> start(const DaemonConfig& config);
  ~SyncWorker();  // cancels a running round, says bye to the peers, joins

  // Readable (poll) once a submitted round has finished; take_result() clears it.
  int done_fd() const { return done_fd_; }
  // Starts round `round` on `model` (in place), after set_model(). The caller must
  // not touch model until take_result() returns a value.
  void submit(std::span<float> model, uint64_t round);
  std::optional<Status> take_result();
  // Once the node's model is known the worker validates and buffers what peers send
  // between rounds too.
  void set_model(size_t numel, uint64_t layout_fingerprint);

  const peers::TrafficCounters& traffic() const { return transport_->traffic(); }
  const std::vector<peers::Peer>& peers() const { return transport_->peers(); }

 private:
  SyncWorker() = default;
  Status make_strategy(const DaemonConfig& config);
  Status make_all_reduce(const DaemonConfig& config, const compression::Codec* codec);
  void run();

  std::unique_ptr<peers::ZmqTransport> transport_;
  compression::CodecSpec codec_;  // outlives the two below, which point at it
  std::unique_ptr<compression::ThreadPool> pool_;  // idem
  // What the strategy runs on: an all-reduce (local SGD) or a neighbor exchange
  // over a topology (the gossip family). Declared before the strategy, which uses them.
  std::unique_ptr<peers::RingTransport> ring_;  // the ring's fabric (tcp, rdma), if any
  std::unique_ptr<sgd::AllReduce> all_reduce_;
  std::unique_ptr<peers::Topology> topology_;
  std::unique_ptr<sgd::NeighborExchange> exchange_;
  std::unique_ptr<sgd::Strategy> strategy_;
  std::chrono::milliseconds round_timeout_{60000};
  int done_fd_ = -1;

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  struct Job {
    std::span<float> model;
    uint64_t round = 0;
  };
  std::optional<Job> job_;        // guarded by mu_
  size_t numel_ = 0;              // guarded by mu_
  uint64_t layout_ = 0;           // guarded by mu_
  uint64_t next_round_ = 0;       // worker thread only
  std::optional<Status> result_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace gossip::daemon
