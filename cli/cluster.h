#pragma once
// `gossipctl cluster`: starts N gossipd daemons and N trainers on loopback, reports
// progress, stops everything, and prints a summary (or one JSON object with --json).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cli/command.h"

namespace gossip::cli {

inline constexpr int kMaxClusterNodes = 64;

struct ClusterOptions {
  int nodes = 4;
  std::string strategy = "local-sgd";
  int period = 4;
  int64_t steps = 600;
  uint64_t seed = 1;
  std::string partition = "iid";  // iid | dirichlet:ALPHA
  std::string out;                // run directory kept afterwards; empty: a temp dir, removed
  bool json = false;
  int post_local = 0;
  std::string outer_optimizer = "none";  // none | nesterov
  std::string codec = "none";            // compression/codec_spec.h; canonicalized by validation
  std::string transport = "auto";  // local SGD's averaging: auto | tcp | rdma | nccl | allgather
  std::string topology;            // gossip family: peers/topology.h; "" the strategy's default
  double gamma = 0;                // choco consensus step size; 0: the codec's default
  int delay = 0;                   // push-sum: rounds a message may be in flight
  int staleness = 1;               // async-gossip: rounds ahead of the slowest neighbor
  std::string straggler;           // "NODE:FACTOR": that node's trainer runs FACTOR x slower
  double patience_s = 5;           // gossip: wait for a silent neighbor at most this long
  double outer_lr = 1.0;
  double outer_momentum = 0.9;
  int batch = 64;
  double lr = 0.05;
  int64_t eval_every = 0;     // 0: steps / 10
  int base_port = 0;          // 0: free loopback ports picked by the kernel
  double timeout_s = 600;     // overall deadline
  double stop_grace_s = 5;    // SIGTERM to SIGKILL
  double socket_wait_s = 10;  // for every daemon's IPC socket to appear
  std::string gossipd;        // empty: `gossipd` beside gossipctl
  std::string trainer;        // empty: `gossip-train` beside gossipctl
  std::string log_level = "info";
  bool evaluations = false;  // evaluations.csv: the average model and consensus at each evaluation
  std::vector<std::string> hosts;  // node i's daemon listens on hosts[i]; empty: 127.0.0.1
  std::string netns;               // daemon i runs in network namespace <netns><i> (ip netns exec)

  int64_t effective_eval_every() const;
};

// Checks every value; the error names the flag ("--nodes: ...").
Status validate_cluster_options(const ClusterOptions& options);
// "iid" or "dirichlet:ALPHA" with ALPHA a positive number.
Status validate_partition(std::string_view partition);

// n distinct loopback TCP ports that were free a moment ago (bound to 127.0.0.1:0 together).
Result<std::vector<int>> pick_loopback_ports(int n);

// Registers `cluster` and its flags on parent.
Subcommand add_cluster_command(CLI::App& parent);

// Runs the cluster and prints the report; returns the process exit code.
int run_cluster(const ClusterOptions& options);

}  // namespace gossip::cli
