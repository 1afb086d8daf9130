#pragma once
// The strategies a daemon can run, each described once, beside its code: its name,
// what it averages over, what its trainers hand in, which of the strategy options it
// reads, and how to make it. Nothing outside the registry compares a strategy's name:
// the config, the daemon, the sync worker and gossipctl ask for the descriptor.
//
// A new strategy: its files (a folder of its own once it is a family), a function
// that returns its descriptor, and one line in registry.cc's list.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "peers/dead_after.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/overlay/gossip_strategy.h"
#include "sgd/strategies/local_sgd/local_sgd.h"
#include "sgd/strategies/ps/parameter_server.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

// What a strategy averages over.
enum class Fabric {
  kAllReduce,  // one mean over every node: the ring, the all-gather or NCCL
  kOverlay,    // the neighbors of a topology, through the neighbor exchange
  kServers,    // parameter servers over the control channel (sgd/strategies/ps/)
};

// The strategy options (the config's strategy.* keys that only some strategies read).
struct StrategyParams {
  double gamma = 0.0;         // CHOCO's consensus step; 0: the codec's default
  uint64_t delay = 0;         // push-sum: rounds a message may be in flight
  uint64_t staleness = 1;     // async gossip: rounds a node may run ahead of a neighbor
  uint64_t trim = 0;          // gossip: values cut from each end of the trimmed mean; 0: off
  bool clip = false;          // push-sum: CenteredClip of neighbors' models
                              // (sgd/strategies/push_sum/centered_clip.h)
  OuterOptimizer outer;       // local SGD's outer optimizer
  ParameterServerOptions ps;  // servers, mode, fetch, the servers' optimizer
  // SMA: the learners' pull towards the central model, and how many learners a node
  // has (the daemon holds the central model: daemon/rounds.cc).
  double sma_alpha = 0.0;
  uint64_t learners_per_device = 1;
};

// An option of a strategy's that does not fit: its config key and why.
struct OptionProblem {
  std::string key;  // "strategy.servers"
  std::string message;
};

// What the sync worker has made for the strategy, by its fabric.
struct StrategyResources {
  AllReduce* all_reduce = nullptr;            // kAllReduce
  NeighborExchange* exchange = nullptr;       // kOverlay
  const Overlay* overlay = nullptr;           // kOverlay
  GossipOptions gossip;                       // kOverlay: chunking, compression, patience
  const compression::Codec* codec = nullptr;  // never null ("none" is a codec)
  bool error_feedback = false;                // kAllReduce: on for every biased codec
  compression::ThreadPool* pool = nullptr;
  peers::Router* router = nullptr;  // kServers
  std::chrono::milliseconds heartbeat{1000};
  peers::DeadAfter dead_after{std::chrono::milliseconds(3000)};  // peers/dead_after.h
  StrategyParams params;
};

struct StrategyDescriptor {
  std::string_view name;
  std::string_view summary;  // one line, for help texts and the docs
  Fabric fabric = Fabric::kOverlay;
  // The trainers hand in gradients at every step (period 1) and apply the mean with
  // their own optimizer; otherwise they hand in models.
  bool gradients = false;
  // The trainers do not wait for the round: its change is added at their next sync.
  bool asynchronous = false;
  // An elastic ring takes a restarted or left-out node back with a member's model,
  // which the daemon holds (kAllReduce).
  bool takes_nodes_back = false;
  // Keeps state per neighbor, so the neighbors must not change from round to round.
  bool static_topology = false;
  // The node's trainers are learners that follow a central model (Crossbow's SMA,
  // daemon/sma.h) instead of being averaged into one; the round averages the central
  // models across nodes.
  bool central_model = false;
  std::string_view default_topology = "ring";  // kOverlay
  // Which of StrategyParams it reads, by config key ("gamma", "delay", "staleness",
  // "trim", "clip", "outer", "servers", "ps_mode", "ps_fetch", "ps_optimizer"), and
  // which of the daemon's round schedules it allows ("fragments": streamed and
  // overlapped syncs; "tune": the period and ratio --tune auto picks): another
  // strategy given one of them is refused.
  std::vector<std::string_view> options;
  // Checks the strategy's own options against each other and the cluster's size (`nodes`;
  // 0 for a node joining by seeds, which learns it later), beside its code
  // (strategies/<name>/options.cc); unset where there is nothing to check.
  std::function<std::optional<OptionProblem>(const StrategyParams& params, uint64_t nodes)> check;
  // Makes the strategy over `r`; `detail` gets what the log line says of its settings.
  std::function<Result<std::unique_ptr<Strategy>>(const StrategyResources& r, std::string* detail)>
      make;

  bool takes(std::string_view option) const;
};

std::span<const StrategyDescriptor> strategies();
// nullptr when no strategy has that name.
const StrategyDescriptor* find_strategy(std::string_view name);
// "local-sgd, gossip, ..." for error messages and help texts.
std::string strategy_names();

}  // namespace gossip::sgd
