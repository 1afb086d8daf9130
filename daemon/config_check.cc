// The checks of a whole config, each error naming where its value came from.

#include <fcntl.h>
#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>
#include <variant>

#include "base/version.h"
#include "compression/codec_spec.h"
#include "daemon/config.h"
#include "daemon/config_internal.h"
#include "daemon/peers_from.h"
#include "peers/curve_auth.h"
#include "peers/node_ids.h"
#include "peers/topology.h"
#include "sgd/collectives/ring_schedule.h"
#include "sgd/registry.h"

namespace gossip::daemon::config_internal {
Status key_error(const Origins& o, std::string_view key, std::string_view problem) {
  if (auto it = o.flags.find(std::string(key)); it != o.flags.end())
    return Status::invalid(fmt::format("{}: flag '{}': {}", kCommandLine, it->second, problem));
  if (auto it = o.env.find(std::string(key)); it != o.env.end())
    return Status::invalid(fmt::format("{}: variable '{}': {}", kEnvironment, it->second, problem));
  if (auto it = o.derived.find(std::string(key)); it != o.derived.end())
    return Status::invalid(fmt::format("{}: {}", it->second, problem));
  std::string line;
  if (auto it = o.lines.find(std::string(key)); it != o.lines.end())
    line = fmt::format(" (line {})", it->second);
  return Status::invalid(fmt::format("{}: key '{}': {}{}", o.source, key, problem, line));
}

// How a message refers to peer entry `i`: "peers[1]", or the flag that made it.
std::string peer_entry_name(const Origins& o, size_t i) {
  const std::string entry = fmt::format("peers[{}]", i);
  if (auto it = o.flags.find(entry + ".id"); it != o.flags.end())
    return fmt::format("'{}'", it->second);
  if (auto it = o.env.find(entry + ".id"); it != o.env.end())
    return fmt::format("'{}'", it->second);
  if (auto it = o.derived.find(entry + ".id"); it != o.derived.end())
    return fmt::format("'{}'", it->second);
  return entry;
}

// Cross-field and range checks of a whole config; the first problem found.
Status check_config(const DaemonConfig& c, const Origins& o) {
  for (const Field& f : fields())
    if (auto problem = stored_problem(f, c)) return key_error(o, f.key, *problem);
  if (c.expect_trainers > c.max_trainers)
    return key_error(o, "node.expect_trainers",
                     fmt::format("{} trainers cannot attach: node.max_trainers is {}",
                                 c.expect_trainers, c.max_trainers));

  const std::string ipc_path = c.ipc_endpoint().substr(std::string_view("ipc://").size());
  if (ipc_path.size() > kMaxIpcPath)
    return key_error(o, "node.run_dir",
                     fmt::format("the IPC socket path '{}' is {} bytes long; a Unix socket path "
                                 "holds at most {}",
                                 ipc_path, ipc_path.size(), kMaxIpcPath));

  std::map<uint32_t, size_t> index_of_id;
  std::map<std::string_view, size_t> index_of_endpoint;
  for (size_t i = 0; i < c.peers.size(); ++i) {
    const PeerConfig& p = c.peers[i];
    const std::string id_key = fmt::format("peers[{}].id", i);
    const std::string endpoint_key = fmt::format("peers[{}].endpoint", i);
    if (auto problem = endpoint_problem(p.endpoint)) return key_error(o, endpoint_key, *problem);
    if (auto [it, fresh] = index_of_id.emplace(p.id, i); !fresh)
      return key_error(
          o, id_key,
          fmt::format("duplicate peer id {} (also in {})", p.id, peer_entry_name(o, it->second)));
    if (auto [it, fresh] = index_of_endpoint.emplace(p.endpoint, i); !fresh)
      return key_error(o, endpoint_key,
                       fmt::format("endpoint '{}' is also the endpoint of {} (id {})", p.endpoint,
                                   peer_entry_name(o, it->second), c.peers[it->second].id));
    if (p.id == c.node_id && p.endpoint != c.listen)
      return key_error(o, endpoint_key,
                       fmt::format("the entry for this node (id {}) must equal node.listen '{}', "
                                   "got '{}'",
                                   p.id, c.listen, p.endpoint));
    if (p.id != c.node_id && p.endpoint == c.listen)
      return key_error(o, endpoint_key,
                       fmt::format("endpoint '{}' of peer {} is this node's node.listen (id {})",
                                   p.endpoint, p.id, c.node_id));
    const std::string key_key = fmt::format("peers[{}].public_key", i);
    if (!p.public_key.empty()) {
      if (Status st = peers::check_curve_key(p.public_key, "the key"); !st)
        return key_error(o, key_key, st.message());
      if (c.secret_key.empty())
        return key_error(o, key_key,
                         "a peer's public key needs node.secret_key (this node's own key) too");
    } else if (!c.secret_key.empty() && p.id != c.node_id) {
      return key_error(
          o, key_key,
          fmt::format("missing: with node.secret_key set, peer {} needs its public key", p.id));
    }
  }
  for (size_t i = 0; i < c.peers.size(); ++i)
    if (c.peers[i].banned && c.secret_key.empty())
      return key_error(o, fmt::format("peers[{}].banned", i),
                       fmt::format("banning peer {} needs CURVE (node.secret_key and its public "
                                   "key): without keys anyone can speak as any node",
                                   c.peers[i].id));
  if (!c.admit_keys.empty() && c.secret_key.empty())
    return key_error(o, "node.admit_keys",
                     "admitting joiners by key needs CURVE (node.secret_key) on this node");
  if (!c.secret_key.empty() && !peers::curve_available())
    return key_error(o, "node.secret_key", "this libzmq was built without CURVE (libsodium)");
  // One ZeroMQ connection (and file descriptors) per peer: a bound, not a wish.
  if (c.nodes() > kMaxNodes)
    return key_error(o, "peers",
                     fmt::format("{} nodes; at most {} are supported", c.nodes(), kMaxNodes));
  const sgd::StrategyDescriptor* strategy = sgd::find_strategy(c.strategy.name);
  if (!strategy)  // the field's choices are the registry's: a bug, not a user's error
    return key_error(o, "strategy.name", "unknown strategy " + c.strategy.name);
  const bool over_ring = strategy->fabric == sgd::Fabric::kAllReduce &&
                         c.strategy.transport != "allgather" && c.strategy.transport != "nccl";
  // Every cluster gossipd takes fits the ring's message names.
  static_assert(kMaxNodes <= sgd::RingSchedule::kMaxRanks);
  if (c.strategy.elastic_ring() && !over_ring)
    return key_error(
        o, "strategy.elastic",
        fmt::format("an elastic ring is for the ring all-reduce (strategy local-sgd or allreduce, "
                    "transport tcp, rdma or auto), not strategy {} with transport {}",
                    c.strategy.name, c.strategy.transport));
  {
    const StrategyConfig defaults;
    const auto& sc = c.strategy;
    const std::pair<const char*, bool> ps_set[] = {
        {"strategy.servers", sc.servers != defaults.servers},
        {"strategy.ps_replicas", sc.ps_replicas != defaults.ps_replicas},
        {"strategy.ps_mode", sc.ps_mode != defaults.ps_mode},
        {"strategy.ps_fetch", sc.ps_fetch != defaults.ps_fetch},
        {"strategy.ps_optimizer", sc.ps_optimizer != defaults.ps_optimizer},
        {"strategy.ps_lr", sc.ps_lr != defaults.ps_lr},
        {"strategy.ps_momentum", sc.ps_momentum != defaults.ps_momentum}};
    for (const auto& [key, set] : ps_set)
      if (set && !strategy->takes("servers"))
        return key_error(o, key,
                         fmt::format("is for the parameter servers (strategy {}), not strategy {}",
                                     strategies_taking("servers"), sc.name));
    const std::pair<const char*, bool> sma_set[] = {
        {"strategy.learners_per_device", sc.learners_per_device != defaults.learners_per_device},
        {"strategy.sma_alpha", sc.sma_alpha != defaults.sma_alpha},
        {"strategy.sma_momentum", sc.sma_momentum != defaults.sma_momentum}};
    for (const auto& [key, set] : sma_set)
      if (set && !strategy->takes("sma"))
        return key_error(o, key,
                         fmt::format("is for synchronous model averaging (strategy {}), not "
                                     "strategy {}",
                                     strategies_taking("sma"), sc.name));
    // The strategy's own checks, beside its code; a node that joins by seeds learns
    // the members' list later (the strategy checks again then).
    if (strategy->check) {
      auto params = strategy_params(sc);
      if (!params) return params.status();
      if (auto problem = strategy->check(*params, c.join.empty() ? c.nodes() : 0))
        return key_error(o, problem->key, problem->message);
    }
  }
  const bool mesh_algorithm =
      c.strategy.allreduce_algorithm != "auto" && c.strategy.allreduce_algorithm != "ring";
  if (mesh_algorithm && (!over_ring || c.strategy.transport == "rdma"))
    return key_error(
        o, "strategy.allreduce_algorithm",
        fmt::format("the {} all-reduce runs over the tcp transport (strategy local-sgd or "
                    "allreduce, transport tcp or auto), not strategy {} with transport {}",
                    c.strategy.allreduce_algorithm, c.strategy.name, c.strategy.transport));
  if (c.strategy.clip == "on" && !strategy->takes("clip"))
    return key_error(o, "strategy.clip",
                     fmt::format("clipped mixing is not for strategy {} (only for: {})",
                                 c.strategy.name, strategies_taking("clip")));
  if (c.strategy.clip == "on" && strategy->fabric == sgd::Fabric::kAllReduce) {
    // The ring's robust mode bounds fp32 partial sums hop by hop (ring_all_reduce.h).
    const auto why = [&](const std::string& what) {
      return key_error(o, "strategy.clip", "the ring's robust mode " + what);
    };
    if (!over_ring)
      return why(fmt::format("runs over the ring (transport tcp, rdma or auto), not transport {}",
                             c.strategy.transport));
    if (mesh_algorithm)
      return why(
          fmt::format("runs on the ring, not the {} all-reduce", c.strategy.allreduce_algorithm));
    if (auto codec = compression::make_codec(c.strategy.codec);
        codec && codec->codec->id() != proto::CodecId::kNone)
      return why(fmt::format("bounds uncompressed rounds, and the codec is {}", c.strategy.codec));
  }
  if (c.strategy.sparse_allreduce == "reduce-scatter") {
    // Said outright, it must be what runs: not quietly an all-gather.
    auto codec = compression::make_codec(c.strategy.codec);
    const auto why = [&](const std::string& what) {
      return key_error(o, "strategy.sparse_allreduce",
                       "the sparse reduce-scatter " + what + " (or leave it auto)");
    };
    if (codec && !codec->codec->keeps_largest())
      return why(
          fmt::format("re-selects a top-k codec's entries, and the codec is {}", c.strategy.codec));
    if (!over_ring || c.strategy.transport == "allgather")
      return why(
          fmt::format("runs over the ring (strategy local-sgd or allreduce, transport "
                      "tcp, rdma or auto), not strategy {} with transport {}",
                      c.strategy.name, c.strategy.transport));
    if (mesh_algorithm)
      return why(
          fmt::format("runs on the ring, not the {} all-reduce", c.strategy.allreduce_algorithm));
  }
  if (strategy->gradients && (c.strategy.period != 1 || c.strategy.post_local != 0))
    return key_error(
        o, "strategy.period",
        fmt::format("{} averages the trainers' gradients at every step: period must be 1 "
                    "and post_local 0, got {} and {}",
                    c.strategy.name, c.strategy.period, c.strategy.post_local));
  if (c.strategy.overlap_steps > 0) {
    if (!strategy->takes("fragments"))
      return key_error(o, "strategy.overlap_steps",
                       fmt::format("overlapped syncs are for strategy {}, not {}",
                                   strategies_taking("fragments"), c.strategy.name));
    const uint64_t every = c.strategy.period / std::max<uint64_t>(1, c.strategy.fragments);
    if (c.strategy.overlap_steps > every)
      return key_error(
          o, "strategy.overlap_steps",
          fmt::format("a sync every {} steps (period / fragments) merges before the next one "
                      "starts: overlap_steps {} must be at most {}",
                      every, c.strategy.overlap_steps, every));
    if (c.strategy.post_local != 0 || c.strategy.elastic == "on" || !c.checkpoint.empty())
      return key_error(o, "strategy.overlap_steps",
                       "overlapped syncs do not take post_local, elastic = on or a checkpoint");
  }
  if (c.strategy.tuned()) {
    if (!strategy->takes("tune"))
      return key_error(o, "strategy.tune",
                       fmt::format("tune auto is for strategy {}, not {} (the gossip family's "
                                   "degree is not tuned yet)",
                                   strategies_taking("tune"), c.strategy.name));
    if (c.strategy.fragments > 1 || c.strategy.overlap_steps > 0 || c.strategy.post_local != 0)
      return key_error(o, "strategy.tune",
                       "tune auto sets the period itself: it does not take fragments, "
                       "overlap_steps or post_local yet");
    if (c.strategy.elastic == "on" || !c.checkpoint.empty())
      return key_error(o, "strategy.tune",
                       "tune auto does not take elastic = on or a checkpoint yet (a node that "
                       "comes back does not know the plan the others run)");
  }
  if (c.strategy.fragments > 1) {
    if (!strategy->takes("fragments"))
      return key_error(o, "strategy.fragments",
                       fmt::format("streamed syncs are for strategy {}, not {}",
                                   strategies_taking("fragments"), c.strategy.name));
    if (c.strategy.period % c.strategy.fragments != 0)
      return key_error(o, "strategy.fragments",
                       fmt::format("{} fragments, one every period / fragments steps: period {} "
                                   "must be a multiple of it",
                                   c.strategy.fragments, c.strategy.period));
    if (c.strategy.post_local != 0)
      return key_error(o, "strategy.fragments", "streamed syncs do not take post_local");
    if (c.strategy.elastic == "on" || !c.checkpoint.empty())
      return key_error(o, "strategy.fragments",
                       "streamed syncs do not take elastic = on or a checkpoint yet (a node "
                       "holds no one round's whole model to hand over or save)");
  }
  if (c.strategy.trim > 0 && !strategy->takes("trim"))
    return key_error(o, "strategy.trim",
                     fmt::format("trimmed-mean mixing is not for strategy {} (only for: {})",
                                 c.strategy.name, strategies_taking("trim")));
  if (c.strategy.trim > 0 && strategy->fabric == sgd::Fabric::kAllReduce) {
    if (c.strategy.transport != "allgather")
      return key_error(o, "strategy.trim",
                       fmt::format("a trimmed mean needs every node's model, which transport {} "
                                   "does not give (a ring sums as it goes): set transport "
                                   "allgather",
                                   c.strategy.transport));
    if (c.nodes() <= 2 * uint64_t{c.strategy.trim})
      return key_error(o, "strategy.trim",
                       fmt::format("trimming {} from each end needs more than {} nodes, this "
                                   "cluster has {}",
                                   c.strategy.trim, 2 * c.strategy.trim, c.nodes()));
  }
  if (strategy->fabric != sgd::Fabric::kAllReduce &&
      c.strategy.dead_after_s < 2 * c.strategy.heartbeat_s)
    return key_error(
        o, "strategy.dead_after",
        fmt::format("{} s is less than two heartbeats (heartbeat {} s): a live peer that waits "
                    "sends one a period and would be taken for dead; raise dead_after or lower "
                    "heartbeat",
                    c.strategy.dead_after_s, c.strategy.heartbeat_s));
  // A joiner knows its id and the graph's size once a seed answered: checked then.
  const bool before_join = !c.join.empty() && c.remote_peers().empty();
  if (strategy->fabric == sgd::Fabric::kOverlay && !before_join) {
    // The gossip family: every node must derive the same graph over the same ids.
    std::vector<uint32_t> ids{c.node_id};
    for (const auto& p : c.remote_peers()) ids.push_back(p.id);
    if (auto st = peers::check_node_ids(ids, c.node_id); !st)
      return key_error(o, "peers",
                       fmt::format("{} needs node ids 0..n-1: {}", c.strategy.name, st.message()));
    auto topology = peers::make_topology(c.topology_spec(), c.nodes(), c.seed);
    if (!topology) return key_error(o, "strategy.topology", topology.status().message());
    if (c.strategy.trim > 0) {
      // Every round must leave at least one value per coordinate after trimming.
      for (uint64_t r = 0; r < ((*topology)->time_varying() ? 64u : 1u); ++r) {
        const size_t values = (*topology)->mixing_row(c.node_id, r).peers.size() + 1;
        if (values <= 2 * c.strategy.trim)
          return key_error(
              o, "strategy.trim",
              fmt::format("trimming {} from each end needs more than {} values per coordinate, "
                          "but on {} node {} mixes {} in round {} (itself and its neighbors)",
                          c.strategy.trim, 2 * c.strategy.trim, c.topology_spec(), c.node_id,
                          values, r));
      }
    }
    if (strategy->static_topology && (*topology)->time_varying())
      return key_error(o, "strategy.topology",
                       fmt::format("{} keeps state per neighbor and needs a static topology; "
                                   "'{}' changes every round",
                                   c.strategy.name, c.topology_spec()));
  }
  return Status::ok();
}

}  // namespace gossip::daemon::config_internal
