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
// for it, ssp stops bounding by it) and comes back with its next push. A server
// that falls silent fails its workers' rounds within `dead_after`, naming it; its
// shard comes back from its node's checkpoint (save_state holds the shard).

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
#include "peers/router.h"
#include "sgd/all_reduce.h"
#include "sgd/ps/server_optimizer.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct ParameterServerOptions {
  enum class Mode { kBsp, kAsync, kSsp };
  uint32_t servers = 1;
  Mode mode = Mode::kBsp;
  uint64_t staleness = 0;  // ssp's S
  uint64_t fetch = 1;      // async and ssp: pull every `fetch` pushes
  ServerOptimizerConfig optimizer;
  uint64_t chunk_elems = 1 << 20;
  Compression compression;  // error_feedback unused: the strategy keeps its own
  bool error_feedback = false;
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds dead_after{3000};
};
// "bsp", "async" or "ssp:S".
Result<ParameterServerOptions::Mode> parse_ps_mode(const std::string& spec, uint64_t* staleness);

// Shard s of K over numel elements: [offset, offset + numel), the first numel % K one longer.
struct Shard {
  uint64_t offset = 0;
  uint64_t numel = 0;
};
Shard shard_of(uint64_t numel, uint32_t shards, uint32_t s);

class ParameterServer final : public Strategy {
 public:
  // Subscribes to ps-push, ps-pull, ps-params, bye on `router`, which must outlive it.
  ParameterServer(peers::Router& router, ParameterServerOptions options);
  ~ParameterServer() override;

  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override;
  void set_layout_fingerprint(uint64_t fingerprint) override { layout_ = fingerprint; }
  StrategyState save_state() const override;
  Status load_state(const StrategyState& state) override;
  void took_model(std::span<const float> model) override;
  std::vector<Gauge> gauges() const override;

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
  struct Served {  // a shard this node serves
    uint32_t index = 0;
    Shard shard;
    bool ready = false;
    std::vector<float> params;
    std::unique_ptr<ServerOptimizer> optimizer;
    uint64_t version = 0;                // bsp: the last clock applied
    std::map<uint32_t, uint64_t> clock;  // worker -> its last complete push
    std::map<uint32_t, Push> pushes;     // worker -> its push in progress (or complete, bsp)
    std::map<uint32_t, uint64_t> pulls;  // worker -> the clock of its waiting pull
  };

  uint32_t self() const;
  // Every node, self included, ascending (the peer list is fixed).
  const std::vector<uint32_t>& nodes() const { return nodes_; }
  uint32_t server_of(uint32_t shard) const { return nodes()[shard]; }
  bool live(uint32_t worker) const;
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

  // Worker side.
  Status push(std::span<const float> model, uint64_t clock);
  Status pull(std::span<float> model, uint64_t clock, const RoundOptions& options);

  peers::Router& router_;
  peers::PeerChannel& control_;
  ParameterServerOptions options_;
  std::vector<uint32_t> nodes_;
  uint64_t layout_ = 0;
  uint64_t numel_ = 0;
  std::vector<Served> served_;
  std::atomic<uint64_t> max_lead_{0};

  bool started_ = false;
  uint64_t pushes_ = 0;          // since the last pull (fetch)
  std::vector<float> baseline_;  // the model after the last sync
  std::vector<float> update_;
  std::unique_ptr<compression::ErrorFeedback> residual_;
  // The pull in flight: shard -> elements received; the values land in pulled_.
  struct Pulling {
    uint64_t clock = 0;
    std::vector<uint64_t> got;
    std::optional<std::string> failure;  // a server said bye
  };
  std::optional<Pulling> pulling_;
  std::vector<float> pulled_;
  std::chrono::steady_clock::time_point last_heartbeat_{};
  peers::Router::Subscription subscription_;
};

}  // namespace gossip::sgd
