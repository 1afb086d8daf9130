#pragma once
// A simulated cluster: N nodes in one process, each with the real router, neighbor
// exchange, codec and strategy of the registry (as daemon/sync_worker.cc builds them),
// joined by the in-memory channel's link model, on virtual time (sim/sim_clock.h).
// Each node trains on a synthetic objective whose optimum is known
// (sim/quadratic.h) and synchronizes every round; the world records, per round, how
// far apart the replicas are, how far their mean is from the optimum, and the bytes
// sent.
//
// Today: the gossip family (D-PSGD, CHOCO-SGD, push-sum, async gossip), and local SGD
// and allreduce over gossipd's all-reduce (sgd/membership/peer_ring.h: the ring, tree,
// butterfly and master, over the hub's ring transport, peers/memory_ring.h) or over the
// all-gather, SMA (Crossbow's central model per node, over the same all-reduces, with
// --learners-per-device learners a node), and the parameter servers (over the nodes'
// routers, as gossipd's sync worker makes them).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/memory_channel.h"
#include "sgd/registry.h"
#include "sim/mlp.h"

namespace gossip::sim {

struct WorldOptions {
  uint32_t nodes = 16;
  std::string strategy = "gossip";
  std::string topology;        // "": the strategy's default
  sgd::StrategyParams params;  // with SMA's alpha and learners_per_device
  double sma_momentum = 0;     // SMA: the central model's momentum, in [0, 1)
  std::string codec = "none";
  // How local SGD and allreduce average, as gossipd's --transport: "tcp" (the elastic
  // ring's all-reduces, over the simulated links) or "allgather".
  std::string transport = "tcp";
  std::string allreduce_algorithm = "auto";  // ring, tree, butterfly, master or auto
  bool elastic = false;                      // --elastic on: re-form the ring without the dead
  uint64_t chunk_elems = 1 << 20;
  size_t numel = 1000;
  uint64_t rounds = 100;
  uint64_t seed = 1;
  // The objective: "quadratic" (a local step on f_i(x) = |x - b_i|^2 / 2 before every
  // round), "mixing" (no local step: x <- W x, consensus alone) or "mlp" (each node, or
  // each of SMA's learners, trains the reference MLP on its shard of Fashion-MNIST,
  // sim/mlp.h; numel is its).
  std::string model = "quadratic";
  double lr = 0;   // the local step; 0: the model's (quadratic 0.1, mlp 0.05)
  MlpOptions mlp;  // --model mlp: the data, its split, the batch, local steps
  // --model mixing: 0, every node starts at its b_i (random); K, node i starts in the
  // K-th Fourier mode of the node ids, x_i[e] = cos(2 pi (K i / n + e / numel)), an
  // eigenvector of every symmetric graph circulant in the ids (ring, exponential): the
  // distance shrinks by that mode's eigenvalue squared from the first round on, where
  // a random start on a ring of n nodes waits some n^2 / 5 rounds for its faster modes
  // to fade.
  uint32_t start_mode = 0;
  double noise = 0.0;          // the stochastic gradient's noise, per element
  double heterogeneity = 1.0;  // the spread of the nodes' optima b_i (non-IID data)
  peers::LinkModel links;
  Duration step_time{0};  // virtual compute time of a round's local step
  // Node -> how many times step_time its steps take (a straggler: 5; a faster GPU: 0.5).
  std::map<uint32_t, double> slow;
  // The waits, as gossipd's options of the same names (docs/timeouts.md), and their
  // defaults for the gossip family.
  std::chrono::milliseconds patience{5000};
  double patience_factor = 3;  // 0: no asks (sgd/overlay/neighbor_exchange.h)
  std::chrono::milliseconds patience_floor{500};
  std::chrono::milliseconds dead_after{3000};
  double dead_after_factor = 3;  // 0: always dead_after (peers/dead_after.h)
  std::chrono::milliseconds dead_after_floor{500};
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds round_timeout{30000};
  // --round-timeout-factor and --round-timeout-floor (sgd/round_deadline.h), as the sync
  // worker times its rounds; a negative factor is gossipd's auto: 3 for the gossip
  // family, 0 (always round_timeout) otherwise.
  double round_timeout_factor = -1;
  std::chrono::milliseconds round_timeout_floor{5000};
  // A trainer that stops before a round's step (an evaluation, a checkpoint) for
  // `length` of virtual time, while its node answers its peers as gossipd does.
  struct Pause {
    uint32_t node = 0;
    uint64_t round = 0;
    Duration length{0};
  };
  std::vector<Pause> pauses;
  // Node -> the round it dies before: it stops, and what it sends or is sent from then
  // on is lost (peers::MemoryHub::cut).
  std::map<uint32_t, uint64_t> deaths;
  // Churn: the percentage of the nodes that die per minute of virtual time. Each node
  // dies at a time drawn from an exponential distribution of that rate (the seed's),
  // before the first round it would start after it (and again, from when it is back,
  // with --rejoin-after).
  double churn_per_minute = 0;
  // --rejoin-after: a node that died (--kill, --churn) restarts this long after, with
  // the same id, and goes on from the model of a live peer (state transfer,
  // sgd/membership/state_transfer.h: the gossip family's, or an elastic ring's for local
  // SGD and SMA, which it then asks back into), as a restarted gossipd does; it may die
  // again. Unset: none comes back.
  std::optional<Duration> rejoin_after;
  // How a node dies (--kill, --churn): "process" (a kill, a crash, the OOM killer: the
  // kernel closes its sockets, and its peers' connections to it drop at once) or
  // "machine" (power, a cable: its peers' connections stay up, and they find out by
  // asking, or by its silence).
  std::string dies_as = "process";
  // Whom each node lists as a peer: "all" (as gossipd's members do) or "graph" (the
  // gossip family on a periodic graph, without deaths: the nodes it ever exchanges
  // with, its in- and out-neighbors over a period, and the two coordinators, nodes 0
  // and 1, which beat every member and list all). A simulation's economy: every list
  // is held in one process, a row of about 330 bytes a peer, n^2 rows with "all".
  std::string peer_lists = "all";
};

struct RoundRow {
  uint64_t round = 0;
  uint32_t nodes = 0;              // that finished it
  double time_s = 0;               // virtual time when the last of them did
  double consensus = 0;            // mean over nodes of |x_i - mean|^2
  double suboptimality = 0;        // |mean - x*|^2 (quadratic); 0 for mixing
  double wire_bytes_per_node = 0;  // sent by a node so far, on average
  double train_loss = 0;           // mlp: the round's minibatch loss, mean over nodes
};

struct Report {
  std::vector<RoundRow> rounds;
  double virtual_s = 0;
  double real_s = 0;
  uint64_t events = 0;
  uint64_t wire_bytes = 0;  // sent by every node in all
  uint64_t messages = 0;
  std::vector<std::string> failures;  // "node i: round r: why"
  uint32_t died = 0;                  // deaths (--kill, --churn)
  std::vector<double> death_s;        // each: the virtual seconds at which it came
  uint32_t rejoined = 0;              // restarts that took a peer's state (--rejoin-after)
  // Times a node that an elastic ring had left out took a member's state to ask back in.
  uint32_t came_back = 0;
  // Restarts that timed out once some node had run the last round (the others done).
  uint32_t restarts_too_late = 0;
  std::vector<double> rejoin_s;  // each: virtual seconds from restart to its first round
  uint64_t state_bytes = 0;      // the states (model and shared) the restarts took
  // finished[i][r]: the virtual seconds at which node i finished its round r.
  std::vector<std::vector<double>> finished;
  // mlp: the test set's accuracy and loss for the mean of the replicas that finished
  // the last round; -1 for the other models.
  double test_accuracy = -1, test_loss = -1;
};

// Checks the options, builds the world and runs it. `progress` (if set) is called
// with each round's row as it completes.
Result<Report> simulate(const WorldOptions& options,
                        const std::function<void(const RoundRow&)>& progress = {});

}  // namespace gossip::sim
