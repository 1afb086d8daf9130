#pragma once
// gossipctl run: gossipd's counterpart of torchrun, one per node. It starts the node's
// daemon and its trainers (one per GPU, or --nproc-per-node), tells each trainer its
// endpoint, rank and device in the environment, forwards SIGINT/SIGTERM, stops every
// part when one fails, and exits with the status of the first that failed.
//
//   srun gossipctl run --peers-from slurm -- gossip-train --steps 2000

#include <map>
#include <string>
#include <vector>

#include "cli/command.h"

namespace gossip::cli {

struct RunOptions {
  int nproc_per_node = 0;         // 0: one per GPU (CUDA_VISIBLE_DEVICES or /dev/nvidiaN), else 1
  std::string gossipd;            // empty: beside gossipctl
  std::string config;             // gossipd --config
  double grace_s = 15;            // SIGTERM to SIGKILL: above NCCL's 10 s finalize
  double startup_timeout_s = 60;  // GOSSIP_STARTUP_TIMEOUT for the trainers, unless set
  std::map<std::string, std::string> daemon_flags;  // --flag -> value, passed to gossipd
  std::vector<std::string> peers;                   // --peer ID=EP
  std::vector<std::string> command;                 // the trainer and its arguments
};

// The variables a trainer gets: GOSSIP_ENDPOINT, GOSSIP_NODE, GOSSIP_NODES,
// GOSSIP_LOCAL_RANK, GOSSIP_LOCAL_WORLD_SIZE, GOSSIP_RANK, GOSSIP_WORLD_SIZE,
// GOSSIP_DEVICE, and torchrun's LOCAL_RANK, RANK, WORLD_SIZE, LOCAL_WORLD_SIZE.
std::vector<std::string> trainer_environment(const std::string& endpoint, uint32_t node,
                                             uint32_t nodes, int local, int per_node, bool gpus);

// GPUs this process may use: CUDA_VISIBLE_DEVICES's entries when set, else /dev/nvidiaN.
int visible_gpus();

Subcommand add_run_command(CLI::App& parent);

}  // namespace gossip::cli
