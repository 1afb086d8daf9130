#pragma once
// --peers-from: the cluster's nodes from where batch and container systems already keep
// them, so that nobody writes a peer list by hand.
//
//   hostfile:PATH        one `host[:port]` a line, as MPI's hostfiles ("#" comments,
//                        `slots=N` and other MPI keywords after the host are ignored)
//   slurm[:PORT]         the step's (else the job's) node list and tasks per node; the
//                        node is task SLURM_PROCID, listening on PORT + SLURM_LOCALID
//   dns:PATTERN[:PORT]   names with one {A..B} range, as a StatefulSet's pods behind a
//                        headless service: dns:gossip-{0..3}.gossip:7100
//
// Node ids are positions in the list. Each node also has a name: its host, or
// host:port where several nodes share a host; `--name` picks this node by it.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::daemon {

// A listed port when a line or the spec names none.
inline constexpr uint16_t kDefaultPeerPort = 7100;

struct ListedNode {
  std::string name;  // host, or host:port when the host is listed more than once
  std::string host;
  uint16_t port = 0;
  std::string endpoint() const;  // tcp://host:port
};

struct PeerListing {
  std::vector<ListedNode> nodes;  // id = index
  std::optional<uint32_t> self;   // the source's own answer (Slurm's task id), if any
  std::string self_rule;          // how self was found, for messages
};

// What a source may read besides its spec: environment variables (Slurm's) and files.
struct PeerSourceEnvironment {
  std::function<std::optional<std::string>(const std::string&)> getenv;
  std::function<Result<std::string>(const std::string&)> read_file;
};

// Why `spec` is not a --peers-from spec; nothing when it is (syntax only: no file is read).
std::optional<std::string> peers_from_problem(std::string_view spec);

// The nodes `spec` lists. Every error names the spec, and the line or variable at fault.
Result<PeerListing> list_peers(std::string_view spec, const PeerSourceEnvironment& env);

// Slurm's host list syntax, expanded as `scontrol show hostnames` does:
// "n[01-03,7],gpu" -> n01 n02 n03 n7 gpu; several brackets multiply ("r[1-2]n[1-2]").
Result<std::vector<std::string>> expand_hostlist(std::string_view list);

// Slurm's tasks-per-node syntax: "2(x3),1" -> 2 2 2 1.
Result<std::vector<uint32_t>> expand_tasks_per_node(std::string_view spec);

// Which listed node `name` is: the whole name, the host when one node has it, or the
// first label of a DNS name ("gossip-1" is "gossip-1.gossip.default.svc"). Nothing when
// none or several match.
std::optional<uint32_t> find_node(const std::vector<ListedNode>& nodes, std::string_view name);

}  // namespace gossip::daemon
