#pragma once
// gossipd's configuration: a TOML file, GOSSIPD_<FLAG> variables and command-line flags
// (flags win over variables, variables over the file).
// Every error names the source (file or "command line"), the key and the problem.

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/dead_after.h"
#include "peers/peer.h"
#include "sgd/collectives/choice.h"
#include "sgd/round_deadline.h"

namespace gossip::sgd {
struct StrategyParams;
}

namespace gossip::daemon {

// A number setting's "auto" (config_internal.h's NumberRange::or_auto).
inline constexpr double kAuto = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kAutoRoundTimeoutFactor = sgd::RoundDeadline::kGossipFamilyFactor;
inline constexpr double kAutoDeadAfterFactor = 3.0;

struct PeerConfig {
  uint32_t id = 0;
  std::string endpoint;         // tcp://host:port
  std::string public_key = {};  // CURVE (Z85); required of every peer when node.secret_key is set
  bool banned = false;          // its key refused (peers::Peer::banned); needs CURVE
  std::string name = {};        // from --peers-from: its host (or host:port); else empty
};

struct OuterOptimizerConfig {
  std::string kind = "none";  // "none" (plain: x <- x_prev + lr * delta) or "nesterov" (DiLoCo)
  double lr = 1.0;
  double momentum = 0.9;
};

struct StrategyConfig {
  // local-sgd (average every T steps), gossip (D-PSGD), choco (CHOCO-SGD), push-sum (SGP),
  // async-gossip (bounded staleness; trainers do not wait for the round), allreduce
  // (synchronous SGD: the trainers hand in gradients, averaged every step)
  std::string name = "local-sgd";
  uint64_t period = 1;      // T: synchronize after every T steps
  uint64_t post_local = 0;  // K: synchronize every step while step <= K
  // F: local SGD syncs the model in F fragments, fragment f every T steps at an offset
  // of f T / F (Streaming DiLoCo): one fragment every T / F steps.
  uint64_t fragments = 1;
  // TAU: a round runs under the trainers' next TAU steps, its result merged into their
  // replicas then (the outer step on top of the steps taken since); 0: they wait.
  uint64_t overlap_steps = 0;
  // "auto": the period (from `period` on) and a top-k codec's ratio follow what the
  // rounds measure (daemon/tuner.h); "off": as given.
  std::string tune = "off";
  bool tuned() const { return tune == "auto"; }
  double tune_wait = 0.05;       // the trainers' wait fraction auto aims under
  uint64_t tune_every = 4;       // rounds between two plans
  double tune_consensus = 0.02;  // bound of the replicas' relative distance; 0: none
  OuterOptimizerConfig outer;
  // What travels is compressed with this codec (compression/codec_spec.h); biased
  // codecs always get error feedback.
  std::string codec = "none";
  uint32_t codec_threads = 1;     // threads (the sync thread included) that compress and decode
  double round_timeout_s = 60.0;  // a round that takes longer fails, naming the missing peers
  // > 0: the deadline follows the rounds, this times the longest of the last ones, at
  // least round_timeout_floor_s and at most round_timeout_s (sgd/round_deadline.h).
  // kAuto: kAutoRoundTimeoutFactor for the gossip family, whose round goes on without
  // a late peer (it costs the peer's contribution, not the run), else 0: a late round
  // of a synchronous ring or a parameter server's pull fails the run, and a trainer
  // that restarts (loading its framework for many seconds) must not end it. An
  // elastic ring's round must hold a first try, a re-form (--dead-after) and a retry:
  // a deadline of the floor's 5 s failed the churn and partition experiments' rounds
  // (round_timeout_factor_in_force).
  double round_timeout_factor = kAuto;
  double round_timeout_factor_in_force() const;
  bool gossip_family() const;  // the strategy exchanges with the neighbors of an overlay
  double round_timeout_floor_s = 5.0;
  uint64_t chunk_bytes = 4u << 20;  // model slices sent per message
  // How local SGD averages: "tcp" (ring all-reduce over Boost.Asio), "rdma" (ring over
  // verbs), "nccl" (GPU buffers), "allgather" (every model to every node over the
  // ZeroMQ channel, the first release's baseline), or "auto" (rdma where a device is,
  // else tcp).
  std::string transport = "auto";
  // Which all-reduce runs over a tcp ring transport (sgd/collectives/algorithm.h):
  // ring, tree, butterfly, master, or auto (picked per round by size from the table).
  std::string allreduce_algorithm = "auto";
  // auto's table (sgd/collectives/choice.h); "": the built-in one.
  std::string allreduce_table;
  // Microseconds a wait of the tcp ring retries before it sleeps (peers/ring_channel.h);
  // at most 10 ms, since the spin does not look at the deadline or the cancel flag.
  uint64_t ring_busy_poll_us = 0;
  // Top-k codecs over the ring transports: "reduce-scatter" (re-selected at every
  // hop), "all-gather" (every node's top-k to every node), or "auto" (the
  // reduce-scatter from 3 nodes on; sgd/collectives/ring_all_reduce.h).
  std::string sparse_allreduce = "auto";
  // The gossip family (peers/topology.h): the overlay, re-derived by every node for
  // every round; "" picks ring, or one-peer-exponential for push-sum.
  std::string topology;
  double gamma = 0.0;       // CHOCO consensus step size; 0: the codec's default
  uint64_t delay = 0;       // push-sum: rounds a message may be in flight
  uint64_t staleness = 1;   // async-gossip: rounds a node may run ahead of a neighbor
  double patience_s = 5.0;  // how long a gossip round waits for a neighbor heard from before
  // ... or, for a neighbor whose daemon does not answer whether it is up, patience_factor
  // times the 90th percentile of the last rounds' waits for their last neighbor (at least
  // patience_floor_s), then that percentile more, at least patience_floor_s, for its
  // answer (sgd/overlay/neighbor_exchange.h); 0: off.
  double patience_factor = 3.0;
  double patience_floor_s = 0.5;
  uint64_t trim = 0;          // gossip: trimmed-mean mixing, B values cut from each end; 0: off
  std::string clip = "off";   // push-sum: clip neighbors' models around the node's (on)
  double heartbeat_s = 1.0;   // gossip: heartbeat period while waiting
  double dead_after_s = 3.0;  // gossip: a neighbor silent this long is dropped from the round
  // With a factor > 0, each peer's bound is its longest recent silence times the
  // factor, at least dead_after_floor_s and at most round_timeout_s (peers/dead_after.h).
  // kAuto: 3 for the gossip family, which drops a silent neighbor from one round and
  // takes it back at its next message (soaked for an hour: docs/churn.md); 0 for the
  // parameter servers, where a server presumed dead fails the run unless replicated.
  double dead_after_factor = kAuto;
  double dead_after_floor_s = 0.5;
  peers::DeadAfter dead_after() const;
  double join_wait_s = 2.0;  // gossip: wait for state offers at the first attach; 0: never
  uint64_t join_donors = 4;  // donors of one state a joiner fetches from at once
  // Ring all-reduce: "on" re-forms the ring over the live nodes when a peer breaks a
  // round (sgd/membership/peer_ring.h), "off" fails the round.
  std::string elastic = "off";
  bool elastic_ring() const { return elastic == "on"; }
  // Parameter servers (strategy ps, sgd/strategies/ps/parameter_server.h).
  uint32_t servers = 1;              // K: the nodes of the K lowest ids serve a shard each
  uint32_t ps_replicas = 0;          // holders of each shard besides its server
  std::string ps_mode = "bsp";       // bsp, async or ssp:S
  uint64_t ps_fetch = 1;             // async, ssp: pull every N pushes
  std::string ps_optimizer = "sgd";  // the servers' optimizer: sgd, momentum or adam
  double ps_lr = 1.0;
  double ps_momentum = 0.9;
  // Crossbow's SMA (strategy sma, sgd/strategies/sma/sma.h): the trainers a node waits for before
  // its rounds start, the correction factor (0: 1 / learners) and the central momentum
  // (0: the reference trainer's own momentum is enough; 0.9 cost 2-3 points, measured).
  uint32_t learners_per_device = 1;
  double sma_alpha = 0.0;
  double sma_momentum = 0.0;
  // A contribution with NaN or Inf (daemon/nonfinite.h): "refuse" or "clip".
  std::string nonfinite = "refuse";
  // A model whose norm grew past kDivergenceFactor times its norm after the first round
  // (daemon/divergence.h): "warn" (an error in the log, the metric, gossipctl status),
  // "stop" (and every later sync of the trainers fails, naming it) or "off".
  std::string on_divergence = "warn";
};

struct DaemonConfig {
  std::string source;  // the config file, or "command line"
  uint32_t node_id = 0;
  // --peers-from (daemon/peers_from.h): the source of `peers`, and this node's name in it.
  std::string peers_from;
  std::string node_name;
  // --join (daemon/join_client.h): seeds of a running cluster, comma-separated; the
  // node's id and peers then come from the cluster's answer.
  std::string join;
  // "majority": the coordinator gives a joiner an id only while it hears a majority of
  // the members (so the two sides of a partition cannot give one id twice); "any":
  // always (a cluster that lost half its members for good can still grow).
  std::string join_quorum = "majority";
  // Under CURVE: a file of the public keys of nodes that may join by seeds.
  std::string admit_keys;
  // Not an option: after a join, the round from which this node takes part (the
  // overlay's graph includes it from there, sgd/overlay/overlay.h).
  uint64_t joined_round = 0;
  std::string listen;  // tcp endpoint this daemon binds for its peers
  // Names the training run (peers/zmq_transport.h): without CURVE, a node of another run
  // that reaches this one (a stale daemon of an earlier job on a reused port) is not
  // taken for the member with its id. Empty: none.
  std::string run_id;
  std::string run_dir;            // holds gossipd-<node>.sock
  std::vector<PeerConfig> peers;  // the other nodes; an entry for node_id itself is allowed
                                  // and must then equal `listen`
  StrategyConfig strategy;
  uint64_t seed = 0;
  std::string log_level = "info";  // trace, debug, info, warn, error, off
  uint32_t max_trainers = 8;       // trainers per node (replica slots in the arena)
  uint32_t expect_trainers = 0;    // the first round waits for this many; 0: for the first
  // Prometheus text exposition at http://<listen host>:<port>/metrics; 0: not served.
  uint32_t metrics_port = 0;
  // CURVE (Z85, `gossipctl keygen`): set, the peer channel is encrypted and admits only
  // the peers' public keys. Empty: plaintext.
  std::string secret_key;
  // Checkpoint file (daemon/checkpoint.h): written every `checkpoint_every` rounds
  // (0: only at shutdown) and read at start. Empty: none.
  std::string checkpoint;
  uint64_t checkpoint_every = 0;

  // Number of nodes, self included.
  uint32_t nodes() const;
  // Peers other than this node, sorted by id.
  std::vector<PeerConfig> remote_peers() const;
  std::string ipc_endpoint() const;
  // strategy.topology, or the strategy's default overlay when it is not set.
  std::string topology_spec() const;  // "ipc://<run_dir>/gossipd-<node_id>.sock"
};

// Every setting of gossipd, from the one table that the TOML reader and the flags
// use: key, flag, valid values, default, the strategies that read it, help. As a
// markdown table (docs/options.md is this, verbatim) or as JSON for programs (the
// Python package, gossipctl): `gossipd --print-options [--json]`.
std::string describe_options(bool json);

// One row of that table, for programs that pass settings on to gossipd.
struct Setting {
  std::string key, flag, arg, type, valid, fallback, help;
  std::vector<std::string> strategies;  // the strategies that read it
  // Differs from node to node (its id, addresses, key, files): a launcher sets it per
  // node rather than passing one value to all (gossipctl cluster).
  bool per_node = false;
  std::string env;  // the variable that sets it: GOSSIPD_<FLAG>
};
std::vector<Setting> settings();

// Nodes in a cluster, this one included.
inline constexpr uint32_t kMaxNodes = 4096;

// Parses a TOML document; `source` names it in error messages.
Result<DaemonConfig> parse_config(const std::string& toml_text, const std::string& source);
Result<DaemonConfig> load_config_file(const std::string& path);
// Cross-field checks: peer ids unique, endpoints well-formed tcp://host:port,
// listen set, run_dir set, strategy known, period >= 1, timeouts > 0, ...
Status validate_config(const DaemonConfig& config);
// Why `endpoint` is not tcp://HOST:PORT with a port in 1..65535, or nothing.
std::optional<std::string> endpoint_problem(std::string_view endpoint);
// The seeds of --join, each a valid endpoint.
// [KEY@]tcp://HOST:PORT each: the endpoint and, under CURVE, the seed's public key.
std::vector<peers::Peer> join_seeds(const DaemonConfig& config);

// What the strategy reads of `sc` (sgd/registry.h); an error names a value that does
// not parse (validate_config refuses those first).
Result<sgd::StrategyParams> strategy_params(const StrategyConfig& sc);

// --allreduce-table's file, read and parsed; an error names the file and the line.
Result<sgd::AlgorithmTable> read_allreduce_table(const std::string& path);

// What the configuration may read of the process: variables (GOSSIPD_<FLAG> settings,
// Slurm's for --peers-from slurm), files (hostfiles) and the host name.
struct Environment {
  std::map<std::string, std::string> variables;
  std::string hostname;
  static Environment of_process();
};

// The variable that sets a flag's setting: --round-timeout -> GOSSIPD_ROUND_TIMEOUT.
std::string env_name(std::string_view flag);

// argv -> config: --config FILE (or GOSSIPD_CONFIG), then GOSSIPD_<FLAG> variables, then
// flags, each overriding the one before. On --help it returns Status::closed with the
// help text as message (the caller prints it and exits 0).
Result<DaemonConfig> config_from_args(int argc, const char* const* argv, const Environment& env);
Result<DaemonConfig> config_from_args(int argc, const char* const* argv);

}  // namespace gossip::daemon
