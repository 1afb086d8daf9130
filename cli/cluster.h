#pragma once
// `gossipctl cluster`: starts N gossipd daemons and N trainers on loopback, reports
// progress, stops everything, and prints a summary (or one JSON object with --json).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "cli/command.h"
#include "daemon/config.h"

namespace gossip::cli {

inline constexpr int kMaxClusterNodes = 64;

struct ClusterOptions {
  int nodes = 4;
  int64_t steps = 600;
  std::string partition = "iid";  // iid | dirichlet:ALPHA
  std::string out;                // run directory kept afterwards; empty: a temp dir, removed
  bool json = false;
  std::string straggler;  // "NODE:FACTOR": that node's trainer runs FACTOR x slower
  int batch = 64;
  // The trainers' model: mlp (235k parameters) or cnn (3.2M; gossip-train --model).
  std::string model = "mlp";
  double lr = 0.05;
  // Evaluate every this many steps; 0: at the end only (as gossip-train); unset: steps / 10.
  std::optional<int64_t> eval_every;
  int base_port = 0;          // 0: free loopback ports picked by the kernel
  double timeout_s = 600;     // overall deadline
  double stop_grace_s = 15;   // SIGTERM to SIGKILL: above NCCL's 10 s finalize (docs/timeouts.md)
  double socket_wait_s = 10;  // for every daemon's IPC socket to appear
  std::string gossipd;        // empty: `gossipd` beside gossipctl
  // "NODE=PATH": that node runs another gossipd build (another version, or the
  // hostile node of the attack tests); checked by validate_cluster_options.
  std::vector<std::string> gossipd_on;
  std::vector<int> banned;  // nodes every other node bans (--curve)
  // CURVE on the peer channel: a key pair per node, each node's secret in
  // node-<i>.toml (mode 0600) in the run directory, the peers' public keys as flags.
  bool curve = false;
  std::string trainer;       // empty: `gossip-train` beside gossipctl
  bool evaluations = false;  // evaluations.csv: the average model and consensus at each evaluation
  std::vector<std::string> hosts;  // node i's daemon listens on hosts[i]; empty: 127.0.0.1
  std::string netns;               // daemon i runs in network namespace <netns><i> (ip netns exec)

  // gossipd's settings, flag -> value as given, passed unchanged to every node: any
  // setting of gossipd's schema that is the same on all nodes (daemon::settings(),
  // not per_node). What is not set takes gossipd's default; gossipd's checks judge it.
  // One default of the cluster's own: a run whose model diverged is a failed run (its
  // daemons fail the trainers' syncs, naming why, and the report says "ok": false).
  std::map<std::string, std::string> daemon_flags = {{"--on-divergence", "stop"}};
  // The settings every gossipd of the cluster runs with, as gossipd reads them
  // (strategy, period, codec, seed, log level...); resolve_cluster_options fills it.
  daemon::DaemonConfig daemon;

  int64_t effective_eval_every() const;
};

// Checks every value; the error names the flag ("--nodes: ...", "--period: ...").
Status validate_cluster_options(const ClusterOptions& options);
// validate_cluster_options, then fills options.daemon.
Status resolve_cluster_options(ClusterOptions& options);
// "iid" or "dirichlet:ALPHA" with ALPHA a positive number.
Status validate_partition(std::string_view partition);

// --straggler NODE:FACTOR: node NODE's trainer takes FACTOR times as long a step.
struct Straggler {
  int node = 0;
  double factor = 1;
};
Result<Straggler> parse_straggler(const std::string& text, int nodes);
// The options' straggler, or none (also when --straggler does not parse).
std::optional<Straggler> straggler_of(const ClusterOptions& o);
// --gossipd-on NODE=PATH: node NODE's daemon is the program at PATH.
Result<std::pair<int, std::string>> parse_gossipd_on(const std::string& text, int nodes);

// Registers `cluster` and its flags on parent.
Subcommand add_cluster_command(CLI::App& parent);

// Runs the cluster and prints the report; returns the process exit code.
int run_cluster(const ClusterOptions& options);

}  // namespace gossip::cli
