// The settings' table: every scalar setting once, with its key, flag, type, range and
// how it is stored, and the value readers and checks that work from it.

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
#include "peers/ring_channel.h"
#include "peers/topology.h"
#include "sgd/collectives/ring_schedule.h"
#include "sgd/registry.h"

namespace gossip::daemon {
namespace config_internal {

// ---------------------------------------------------------------------------------------
// Value checks, shared by the TOML reader, the flag reader and validate_config. Each
// returns the problem ("must be ..., got ...") or nothing.

std::string must_be(std::string_view what, std::string_view got) {
  return fmt::format("must be {}, got {}", what, got);
}

std::string quote(std::string_view s) { return fmt::format("'{}'", s); }

}  // namespace config_internal

// Why `ep` is not tcp://HOST:PORT with a port in 1..65535, or nothing when it is.
// HOST is a name or IPv4 address, or an IPv6 address in brackets: tcp://[::1]:7000.
std::optional<std::string> endpoint_problem(std::string_view ep) {
  auto bad = [ep](std::string_view why) {
    return fmt::format(
        "invalid endpoint '{}': {} (expected tcp://HOST:PORT with a port in 1..65535)", ep, why);
  };
  constexpr std::string_view kScheme = "tcp://";
  if (!ep.starts_with(kScheme)) return bad("it must start with tcp://");
  std::string_view rest = ep.substr(kScheme.size());
  std::string_view host;
  std::string_view port;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']' around the IPv6 address");
    host = rest.substr(1, close - 1);
    if (host.empty() ||
        host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return bad(fmt::format("invalid IPv6 address '{}'", host));
    rest = rest.substr(close + 1);
    if (!rest.starts_with(':')) return bad("no ':PORT' after the host");
    port = rest.substr(1);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("no ':PORT' after the host");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.empty()) return bad("no host");
    if (host == "*") return bad("'*' is not a host: 0.0.0.0 listens on every IPv4 address");
    if (host.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
        std::string_view::npos)
      return bad(fmt::format("invalid host '{}' (IPv6 addresses go in brackets)", host));
  }
  if (port.empty()) return bad("no port");
  if (port.find_first_not_of("0123456789") != std::string_view::npos)
    return bad(fmt::format("port '{}' is not a number", port));
  unsigned value = 0;
  const bool parsed =
      port.size() <= 5 &&
      std::from_chars(port.data(), port.data() + port.size(), value).ec == std::errc();
  if (!parsed || value < 1 || value > 65535)
    return bad(fmt::format("port {} is out of range", port));
  return std::nullopt;
}

namespace config_internal {

Problem codec_problem(std::string_view spec) {
  auto c = compression::make_codec(spec);
  if (c) return std::nullopt;
  return c.status().message();
}

}  // namespace config_internal

Result<sgd::AlgorithmTable> read_allreduce_table(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::invalid(fmt::format("cannot read the all-reduce table '{}'", path));
  std::stringstream text;
  text << f.rdbuf();
  return sgd::AlgorithmTable::parse(text.str(), path);
}

namespace config_internal {

Problem allreduce_table_problem(std::string_view path) {
  if (path.empty()) return std::nullopt;  // the built-in table
  auto table = read_allreduce_table(std::string(path));
  if (table) return std::nullopt;
  return table.status().message();
}

Problem ps_mode_problem(std::string_view spec) {
  uint64_t staleness = 0;
  auto mode = sgd::parse_ps_mode(std::string(spec), &staleness);
  if (mode) return std::nullopt;
  return mode.status().message();
}

Problem secret_key_problem(std::string_view key) {
  if (key.empty()) return std::nullopt;  // no CURVE
  if (Status st = peers::check_curve_key(key, "the key"); !st) return st.message();
  return std::nullopt;
}

Problem peers_from_check(std::string_view spec) {
  if (spec.empty()) return std::nullopt;  // a peer list instead
  return peers_from_problem(spec);
}

std::vector<std::string> split_seeds(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    out.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

// "KEY@tcp://HOST:PORT" (KEY a 40-character Z85 public key, under CURVE) or the
// endpoint alone.
peers::Peer split_seed(std::string_view seed) {
  peers::Peer p;
  if (seed.size() > peers::kCurveKeyText + 1 && seed[peers::kCurveKeyText] == '@') {
    p.public_key = std::string(seed.substr(0, peers::kCurveKeyText));
    seed.remove_prefix(peers::kCurveKeyText + 1);
  }
  p.endpoint = std::string(seed);
  return p;
}

Problem join_check(std::string_view seeds) {
  if (seeds.empty()) return std::nullopt;  // no join: the peer list
  for (const auto& text : split_seeds(seeds)) {
    const peers::Peer seed = split_seed(text);
    if (auto problem = endpoint_problem(seed.endpoint)) return problem;
    if (!seed.public_key.empty())
      if (Status st = peers::check_curve_key(seed.public_key, "the seed's key"); !st)
        return st.message();
  }
  return std::nullopt;
}

Problem run_id_problem(std::string_view id) {
  if (id.size() > 64) return "must be at most 64 characters";
  for (char ch : id)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      return "may hold only letters, digits, '.', '_' and '-'";
  return std::nullopt;
}

Problem run_dir_problem(std::string_view dir) {
  if (dir.empty()) return "must not be empty";
  return std::nullopt;
}

// The registry's strategy names (sgd/registry.h), and the flag's help that lists them.
std::span<const std::string_view> strategy_choices() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& d : sgd::strategies()) v.push_back(d.name);
    return v;
  }();
  return names;
}

std::string strategies_taking(std::string_view option) {
  std::string out;
  for (const auto& d : sgd::strategies())
    if (d.takes(option)) out += fmt::format("{}{}", out.empty() ? "" : ", ", d.name);
  return out;
}

std::string_view strategy_help() {
  static const std::string help = [] {
    std::string h = "synchronization strategy: ";
    for (const auto& d : sgd::strategies())
      h += fmt::format("{}{}", h.back() == ' ' ? "" : "|", d.name);
    return h;
  }();
  return help;
}

const std::array<Field, 68>& fields() {
  using C = DaemonConfig;
  static const std::array<Field, 68> kFields = {{
      {"node.id", "--id", "N", "this node's id",
       IntegerSpec{kNodeIdRange, [](const C& c) -> uint64_t { return c.node_id; },
                   [](C& c, uint64_t v) { c.node_id = static_cast<uint32_t>(v); }}},
      {"node.peers_from", "--peers-from", "SOURCE",
       "take the nodes from hostfile:PATH, slurm[:PORT] or dns:NAME-{A..B}.SERVICE[:PORT] "
       "instead of a peer list; node.id, node.name or the host name picks this node, "
       "node.listen defaults to tcp://0.0.0.0:<its port>",
       TextSpec{{},
                "a string hostfile:PATH, slurm[:PORT] or dns:PATTERN[:PORT]",
                peers_from_check,
                [](const C& c) -> const std::string& { return c.peers_from; },
                [](C& c, std::string v) { c.peers_from = std::move(v); }}},
      {"node.join", "--join", "SEEDS",
       "join a running cluster through one of these members (tcp://HOST:PORT, "
       "comma-separated; under CURVE KEY@tcp://HOST:PORT, KEY the member's public key) "
       "instead of a peer list: the cluster assigns node.id and gives the members; every "
       "strategy but synchronous SGD and the fixed fabrics",
       TextSpec{{},
                "a string of comma-separated [KEY@]tcp://HOST:PORT",
                join_check,
                [](const C& c) -> const std::string& { return c.join; },
                [](C& c, std::string v) { c.join = std::move(v); }}},
      {"node.admit_keys", "--admit-keys", "FILE",
       "under CURVE: the public keys (Z85, one a line; # starts a comment line or, after a "
       "space, a comment) of nodes that may join "
       "by seeds; a member takes in only a joiner whose key is here",
       TextSpec{{},
                "a string (a path)",
                nullptr,
                [](const C& c) -> const std::string& { return c.admit_keys; },
                [](C& c, std::string v) { c.admit_keys = std::move(v); }}},
      {"node.join_quorum", "--join-quorum", "RULE",
       "when the coordinator gives a joining node an id: majority (only while it hears "
       "more than half of the members it lists, so that the two sides of a partition "
       "cannot give one id twice; a joiner waits meanwhile) or any (always: for a cluster "
       "that lost half its members for good)",
       TextSpec{kJoinQuorums, "", nullptr,
                [](const C& c) -> const std::string& { return c.join_quorum; },
                [](C& c, std::string v) { c.join_quorum = std::move(v); }}},
      {"node.name", "--name", "NAME",
       "with node.peers_from: this node's name in the list (a host, host:port or pod name); "
       "empty: the host name",
       TextSpec{{},
                "a string",
                nullptr,
                [](const C& c) -> const std::string& { return c.node_name; },
                [](C& c, std::string v) { c.node_name = std::move(v); }}},
      {"node.listen", "--listen", "EP", "tcp://HOST:PORT where peers reach this daemon",
       TextSpec{{},
                "a string tcp://HOST:PORT",
                endpoint_problem,
                [](const C& c) -> const std::string& { return c.listen; },
                [](C& c, std::string v) { c.listen = std::move(v); }}},
      {"node.run_id", "--run-id", "ID",
       "names the training run, the same on every node (gossipctl cluster picks one): "
       "without CURVE, a node of another run that reaches this one (a stale daemon of an "
       "earlier job on a reused port) is not taken for the member with its id; up to 64 "
       "letters, digits, '.', '_' or '-'; empty: none",
       TextSpec{{},
                "a string of up to 64 letters, digits, '.', '_' or '-'",
                run_id_problem,
                [](const C& c) -> const std::string& { return c.run_id; },
                [](C& c, std::string v) { c.run_id = std::move(v); }}},
      {"node.run_dir", "--run-dir", "DIR", "directory of the IPC socket gossipd-<id>.sock",
       TextSpec{{},
                "a string (a directory)",
                run_dir_problem,
                [](const C& c) -> const std::string& { return c.run_dir; },
                [](C& c, std::string v) { c.run_dir = std::move(v); }}},
      {"node.seed", "--seed", "S", "random seed",
       IntegerSpec{{},
                   [](const C& c) -> uint64_t { return c.seed; },
                   [](C& c, uint64_t v) { c.seed = v; }}},
      {"node.log_level", "--log-level", "L", "trace|debug|info|warn|error|off",
       TextSpec{kLogLevels, "", nullptr,
                [](const C& c) -> const std::string& { return c.log_level; },
                [](C& c, std::string v) { c.log_level = std::move(v); }}},
      {"node.max_trainers", "--max-trainers", "N", "trainers per node, 1..64",
       IntegerSpec{{1, 64, 1},
                   [](const C& c) -> uint64_t { return c.max_trainers; },
                   [](C& c, uint64_t v) { c.max_trainers = static_cast<uint32_t>(v); }}},
      {"node.expect_trainers", "--expect-trainers", "N",
       "the node's first round waits until N trainers have attached (gossipctl run sets it to "
       "--nproc-per-node), 0..64; 0: the first trainer starts it",
       IntegerSpec{{0, 64, 1},
                   [](const C& c) -> uint64_t { return c.expect_trainers; },
                   [](C& c, uint64_t v) { c.expect_trainers = static_cast<uint32_t>(v); }}},
      {"node.metrics_port", "--metrics-port", "PORT",
       "serve Prometheus metrics at http://<listen host>:PORT/metrics, 1..65535; 0: off",
       IntegerSpec{{0, 65535, 1},
                   [](const C& c) -> uint64_t { return c.metrics_port; },
                   [](C& c, uint64_t v) { c.metrics_port = static_cast<uint32_t>(v); }}},
      {"node.secret_key", "--secret-key", "Z85",
       "CURVE secret key (gossipctl keygen): encrypt the peer channel and admit only the peers' "
       "public keys (prefer the config file: flags show in ps)",
       TextSpec{{},
                "a string (a Z85 key)",
                secret_key_problem,
                [](const C& c) -> const std::string& { return c.secret_key; },
                [](C& c, std::string v) { c.secret_key = std::move(v); }}},
      {"strategy.name", "--strategy", "NAME", strategy_help(),
       TextSpec{strategy_choices(), "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.name; },
                [](C& c, std::string v) { c.strategy.name = std::move(v); }}},
      {"strategy.period", "--period", "T", "synchronize every T steps (T >= 1)",
       IntegerSpec{{1, kMaxI64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.period; },
                   [](C& c, uint64_t v) { c.strategy.period = v; }}},
      {"strategy.fragments", "--fragments", "F",
       "stream the syncs: the model in F fragments, each synchronized every T steps, one every "
       "T/F steps (T a multiple of F); 1: the whole model every T steps",
       IntegerSpec{{1, 4096, 1},
                   [](const C& c) -> uint64_t { return c.strategy.fragments; },
                   [](C& c, uint64_t v) { c.strategy.fragments = v; }}},
      {"strategy.overlap_steps", "--overlap-steps", "TAU",
       "the trainers do not wait for a sync: it runs under their next TAU steps (TAU <= T/F) and "
       "its result is merged into their replicas then, on top of the steps taken since; 0: they "
       "wait for it",
       IntegerSpec{{},
                   [](const C& c) -> uint64_t { return c.strategy.overlap_steps; },
                   [](C& c, uint64_t v) { c.strategy.overlap_steps = v; }}},
      {"strategy.tune", "--tune", "off|auto",
       "local SGD: auto picks the period (from T on) and a top-k codec's ratio from the measured "
       "rounds and step time, so that the rounds hide under compute (daemon/tuner.h); off: as "
       "given",
       TextSpec{kTune, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.tune; },
                [](C& c, std::string v) { c.strategy.tune = std::move(v); }}},
      {"strategy.tune_wait", "--tune-wait", "FRACTION",
       "tune auto: the trainers' wait for a round it aims under, as a fraction of their time",
       NumberSpec{{0, false, 1.0},
                  [](const C& c) { return c.strategy.tune_wait; },
                  [](C& c, double v) { c.strategy.tune_wait = v; }}},
      {"strategy.tune_every", "--tune-every", "ROUNDS",
       "tune auto: rounds between two plans (each node reports what it measured over them)",
       IntegerSpec{{2, 1u << 20, 1},
                   [](const C& c) -> uint64_t { return c.strategy.tune_every; },
                   [](C& c, uint64_t v) { c.strategy.tune_every = v; }}},
      {"strategy.tune_consensus", "--tune-consensus", "BOUND",
       "tune auto: the longest period keeps the replicas' distance from their mean under BOUND "
       "times the model's norm; 0: no bound",
       NumberSpec{{0, true, std::nullopt},
                  [](const C& c) { return c.strategy.tune_consensus; },
                  [](C& c, double v) { c.strategy.tune_consensus = v; }}},
      {"strategy.post_local", "--post-local", "K", "synchronize every step while step <= K",
       IntegerSpec{{},
                   [](const C& c) -> uint64_t { return c.strategy.post_local; },
                   [](C& c, uint64_t v) { c.strategy.post_local = v; }}},
      {"strategy.round_timeout", "--round-timeout", "SECONDS",
       "a round that takes longer fails, naming the peers missing (a gossip round goes on "
       "without them instead); docs/timeouts.md",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.round_timeout_s; },
                  [](C& c, double v) { c.strategy.round_timeout_s = v; }}},
      {"strategy.round_timeout_factor", "--round-timeout-factor", "F",
       "the round's deadline follows the rounds: F times the longest of the last 64, between "
       "--round-timeout-floor and --round-timeout; 0: always --round-timeout; auto: 3 for the "
       "gossip family, whose round goes on without a late peer, else 0",
       NumberSpec{{0, true, std::nullopt, /*or_auto=*/true},
                  [](const C& c) { return c.strategy.round_timeout_factor; },
                  [](C& c, double v) { c.strategy.round_timeout_factor = v; }}},
      {"strategy.round_timeout_floor", "--round-timeout-floor", "SECONDS",
       "the shortest deadline --round-timeout-factor gives a round",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.round_timeout_floor_s; },
                  [](C& c, double v) { c.strategy.round_timeout_floor_s = v; }}},
      {"strategy.chunk_bytes", "--chunk-bytes", "N",
       "bytes per message: >= 4096, a multiple of 4, <= 256 MiB",
       IntegerSpec{{4096, kMaxChunkBytes, 4},
                   [](const C& c) -> uint64_t { return c.strategy.chunk_bytes; },
                   [](C& c, uint64_t v) { c.strategy.chunk_bytes = v; }}},
      {"strategy.transport", "--transport", "NAME",
       "how local SGD averages: auto|tcp|rdma|nccl|allgather",
       TextSpec{kTransports, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.transport; },
                [](C& c, std::string v) { c.strategy.transport = std::move(v); }}},
      {"strategy.allreduce_algorithm", "--allreduce-algorithm", "NAME",
       "the all-reduce over the tcp transport: ring|tree|butterfly|master, or auto (picked per "
       "round by size and node count from --allreduce-table)",
       TextSpec{kAllReduceAlgorithms, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.allreduce_algorithm; },
                [](C& c, std::string v) { c.strategy.allreduce_algorithm = std::move(v); }}},
      {"strategy.ring_busy_poll", "--ring-busy-poll", "MICROSECONDS",
       "a wait of the tcp all-reduces retries for this long before it sleeps, so that a message "
       "that comes within it costs no wake-up; for nodes whose daemon has a core to spare, not "
       "for ranks that share cores; 0: sleep at once; at most 10 ms",
       IntegerSpec{{0, static_cast<uint64_t>(peers::kMaxBusyPoll.count()), 1},
                   [](const C& c) -> uint64_t { return c.strategy.ring_busy_poll_us; },
                   [](C& c, uint64_t v) { c.strategy.ring_busy_poll_us = v; }}},
      {"strategy.sparse_allreduce", "--sparse-allreduce", "MODE",
       "top-k codecs (and their chains) over the tcp or rdma ring: reduce-scatter (every hop "
       "adds its own and re-selects the top-k, about 2k(n-1)/n entries sent per node), "
       "all-gather (every node's top-k to every node, (n-1)k), or auto (reduce-scatter from 3 "
       "nodes on); the same on every node",
       TextSpec{kSparseAllReduce, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.sparse_allreduce; },
                [](C& c, std::string v) { c.strategy.sparse_allreduce = std::move(v); }}},
      {"strategy.allreduce_table", "--allreduce-table", "FILE",
       "auto's table, one \"RANKS BYTES ALGORITHM\" row a line (bench/allreduce.sh "
       "--write-table); the same file on every node; empty: the built-in one",
       TextSpec{{},
                "a path (or empty)",
                allreduce_table_problem,
                [](const C& c) -> const std::string& { return c.strategy.allreduce_table; },
                [](C& c, std::string v) { c.strategy.allreduce_table = std::move(v); }}},
      {"strategy.codec", "--codec", "SPEC",
       "compression of what is exchanged, e.g. none, int8, topk:0.01+ef",
       TextSpec{{},
                "a string (a codec spec)",
                codec_problem,
                [](const C& c) -> const std::string& { return c.strategy.codec; },
                [](C& c, std::string v) { c.strategy.codec = std::move(v); }}},
      {"strategy.codec_threads", "--codec-threads", "N",
       "threads that compress and decode large models, 1..64",
       IntegerSpec{{1, 64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.codec_threads; },
                   [](C& c, uint64_t v) { c.strategy.codec_threads = static_cast<uint32_t>(v); }}},
      {"strategy.nonfinite", "--nonfinite", "refuse|clip",
       "an update with NaN or Inf: refuse it (send the last synchronized model) or clip "
       "(only those elements take their last synchronized values)",
       TextSpec{kNonFinitePolicies, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.nonfinite; },
                [](C& c, std::string v) { c.strategy.nonfinite = std::move(v); }}},
      {"strategy.on_divergence", "--on-divergence", "warn|stop|off",
       "a model whose norm grows past 10 times its norm after the first round, or a trainer's "
       "loss that is NaN or 10 times its first, has diverged: warn (an error in the log, "
       "gossipd_failures_total{cause=\"diverged\"}, gossipctl status), stop (and fail every "
       "later sync of the trainers with the reason) or off",
       TextSpec{kDivergenceActions, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.on_divergence; },
                [](C& c, std::string v) { c.strategy.on_divergence = std::move(v); }}},
      {"strategy.servers", "--servers", "K",
       "ps: how many parameter servers (the nodes of the K lowest ids), each holding an equal "
       "shard of the model",
       IntegerSpec{{1, kMaxNodes, 1},
                   [](const C& c) -> uint64_t { return c.strategy.servers; },
                   [](C& c, uint64_t v) { c.strategy.servers = static_cast<uint32_t>(v); }}},
      {"strategy.ps_replicas", "--ps-replicas", "R",
       "ps: replicas of each shard on the next R nodes (chain replication): when a server dies "
       "its workers go on with the next holder; 0: none",
       IntegerSpec{{0, kMaxNodes - 1, 1},
                   [](const C& c) -> uint64_t { return c.strategy.ps_replicas; },
                   [](C& c, uint64_t v) { c.strategy.ps_replicas = static_cast<uint32_t>(v); }}},
      {"strategy.ps_mode", "--ps-mode", "bsp|async|ssp:S",
       "ps: bsp (every clock waits for every live worker), async (Downpour: nobody waits) or "
       "ssp:S (no worker more than S clocks ahead of the slowest)",
       TextSpec{{},
                "bsp, async or ssp:S",
                ps_mode_problem,
                [](const C& c) -> const std::string& { return c.strategy.ps_mode; },
                [](C& c, std::string v) { c.strategy.ps_mode = std::move(v); }}},
      {"strategy.ps_fetch", "--ps-fetch", "N",
       "ps async and ssp: pull the parameters every N pushes (Downpour's n_fetch / n_push)",
       IntegerSpec{{1, 1000000, 1},
                   [](const C& c) -> uint64_t { return c.strategy.ps_fetch; },
                   [](C& c, uint64_t v) { c.strategy.ps_fetch = v; }}},
      {"strategy.ps_optimizer", "--ps-optimizer", "sgd|momentum|adam",
       "ps: the servers' optimizer on the workers' (averaged) change; sgd with lr 1 adds it as it "
       "is",
       TextSpec{kServerOptimizers, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.ps_optimizer; },
                [](C& c, std::string v) { c.strategy.ps_optimizer = std::move(v); }}},
      {"strategy.ps_lr", "--ps-lr", "X", "ps: the servers' learning rate (> 0)",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.ps_lr; },
                  [](C& c, double v) { c.strategy.ps_lr = v; }}},
      {"strategy.ps_momentum", "--ps-momentum", "X", "ps: the servers' momentum, in [0, 1)",
       NumberSpec{{0, true, 1},
                  [](const C& c) { return c.strategy.ps_momentum; },
                  [](C& c, double v) { c.strategy.ps_momentum = v; }}},
      {"strategy.learners_per_device", "--learners-per-device", "N",
       "sma: the learners (trainers) each node waits for before its rounds start; each keeps its "
       "own replica and follows the node's central model",
       IntegerSpec{
           {1, 64, 1},
           [](const C& c) -> uint64_t { return c.strategy.learners_per_device; },
           [](C& c, uint64_t v) { c.strategy.learners_per_device = static_cast<uint32_t>(v); }}},
      {"strategy.sma_alpha", "--sma-alpha", "X",
       "sma: how far each learner is pulled towards the central model per sync (alpha x learners "
       "<= 1); 0: 1 / the learners",
       NumberSpec{{0, true, std::nullopt},
                  [](const C& c) { return c.strategy.sma_alpha; },
                  [](C& c, double v) { c.strategy.sma_alpha = v; }}},
      {"strategy.sma_momentum", "--sma-momentum", "X",
       "sma: the central model's momentum, in [0, 1)",
       NumberSpec{{0, true, 1.0},
                  [](const C& c) { return c.strategy.sma_momentum; },
                  [](C& c, double v) { c.strategy.sma_momentum = v; }}},
      {"strategy.outer.optimizer", "--outer-optimizer", "none|nesterov",
       "outer optimizer on the averaged delta",
       TextSpec{kOuterOptimizers, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.outer.kind; },
                [](C& c, std::string v) { c.strategy.outer.kind = std::move(v); }}},
      {"strategy.outer.lr", "--outer-lr", "X", "outer learning rate (> 0)",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.outer.lr; },
                  [](C& c, double v) { c.strategy.outer.lr = v; }}},
      {"strategy.outer.momentum", "--outer-momentum", "X", "outer Nesterov momentum, in [0, 1)",
       NumberSpec{{0, true, 1.0},
                  [](const C& c) { return c.strategy.outer.momentum; },
                  [](C& c, double v) { c.strategy.outer.momentum = v; }}},
      {"strategy.topology", "--topology", "SPEC",
       "gossip overlay: ring|torus|exponential|one-peer-exponential|random-regular:D|complete",
       TextSpec{{},
                "a string (a topology spec)",
                nullptr,  // whether it fits the number of nodes is a cross-field check
                [](const C& c) -> const std::string& { return c.strategy.topology; },
                [](C& c, std::string v) { c.strategy.topology = std::move(v); }}},
      {"strategy.gamma", "--gamma", "G", "CHOCO consensus step size in [0, 1]; 0: codec default",
       NumberSpec{{0, true, 1.0 + 1e-12},
                  [](const C& c) { return c.strategy.gamma; },
                  [](C& c, double v) { c.strategy.gamma = v; }}},
      {"strategy.delay", "--delay", "D", "push-sum: rounds a message may be in flight, 0..64",
       IntegerSpec{{0, 64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.delay; },
                   [](C& c, uint64_t v) { c.strategy.delay = v; }}},
      {"strategy.staleness", "--staleness", "S",
       "async-gossip: rounds a node may run ahead of its slowest neighbor, 0..64",
       IntegerSpec{{0, 64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.staleness; },
                   [](C& c, uint64_t v) { c.strategy.staleness = v; }}},
      {"strategy.patience", "--patience", "SECONDS",
       "gossip: how long a round waits for a neighbor that delivered before going on without "
       "it (one never heard from: until the round timeout)",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.patience_s; },
                  [](C& c, double v) { c.strategy.patience_s = v; }}},
      {"strategy.patience_factor", "--patience-factor", "F",
       "gossip: a round that has waited F times the 90th percentile of the last 64 rounds' "
       "waits for their last neighbor (at least --patience-floor) asks the neighbors it waits "
       "for whether they are up, and goes on without one that does not answer within the "
       "floor (or that percentile, if longer); 0: --patience and --dead-after alone",
       NumberSpec{{0, true, 1000},
                  [](const C& c) { return c.strategy.patience_factor; },
                  [](C& c, double v) { c.strategy.patience_factor = v; }}},
      {"strategy.patience_floor", "--patience-floor", "SECONDS",
       "gossip: the shortest wait before --patience-factor's ask, and the shortest for its answer",
       NumberSpec{{0, false, 3600},
                  [](const C& c) { return c.strategy.patience_floor_s; },
                  [](C& c, double v) { c.strategy.patience_floor_s = v; }}},
      {"strategy.trim", "--trim", "B",
       "gossip and local SGD (transport allgather): robust mixing for untrusted peers, the "
       "coordinate-wise mean of the node's and its neighbors' (local SGD: every node's) models "
       "without the B largest and B smallest values; 0: off",
       IntegerSpec{{0, 64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.trim; },
                   [](C& c, uint64_t v) { c.strategy.trim = v; }}},
      {"strategy.clip", "--clip", "off|on",
       "robust averaging for untrusted peers. push-sum: a neighbor's model further from the "
       "node's than 4 times the median distance of recent ones is pulled back to that radius "
       "(CenteredClip; exact mass conservation is given up). allreduce and local-sgd over the "
       "ring: each node's change (gradients; local SGD's change since the last sync) is clipped, "
       "chunk by chunk, to twice the median of the nodes' norms, which they exchange first, and "
       "every partial sum is held to its contributors' norms (uncompressed only)",
       TextSpec{kOnOff, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.clip; },
                [](C& c, std::string v) { c.strategy.clip = std::move(v); }}},
      {"strategy.heartbeat", "--heartbeat", "SECONDS",
       "gossip and parameter servers: send a heartbeat to the peers this often while waiting",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.heartbeat_s; },
                  [](C& c, double v) { c.strategy.heartbeat_s = v; }}},
      {"strategy.dead_after", "--dead-after", "SECONDS",
       "a peer silent this long (no heartbeat) is taken for dead: dropped from a gossip round, "
       "left out of a parameter server's clock (for both, at least two --heartbeat periods); an "
       "elastic ring's wait for its members' answers",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.dead_after_s; },
                  [](C& c, double v) { c.strategy.dead_after_s = v; }}},
      {"strategy.dead_after_factor", "--dead-after-factor", "F",
       "gossip and parameter servers: > 0 makes each peer's --dead-after its longest silence "
       "over the last one to two minutes times F, at least --dead-after-floor and two "
       "--heartbeat periods and at most --round-timeout (--dead-after until 8 silences were "
       "measured); 0: always --dead-after; "
       "auto: 3 for the gossip family, 0 for parameter servers",
       NumberSpec{{0, true, std::nullopt, /*or_auto=*/true},
                  [](const C& c) { return c.strategy.dead_after_factor; },
                  [](C& c, double v) { c.strategy.dead_after_factor = v; }}},
      {"strategy.dead_after_floor", "--dead-after-floor", "SECONDS",
       "with --dead-after-factor: the shortest silence that makes a peer presumed dead",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.dead_after_floor_s; },
                  [](C& c, double v) { c.strategy.dead_after_floor_s = v; }}},
      {"strategy.join_wait", "--join-wait", "SECONDS",
       "gossip, and local SGD with elastic = on: at the first attach, how long to wait for "
       "peers to offer their state (a restarted node resumes from the freshest); 0: never ask",
       NumberSpec{{0, true, std::nullopt},
                  [](const C& c) { return c.strategy.join_wait_s; },
                  [](C& c, double v) { c.strategy.join_wait_s = v; }}},
      {"strategy.join_donors", "--join-donors", "N",
       "a joining node fetches its state from up to N donors that hold the same one (an "
       "elastic ring's members), a share of the chunks from each; a donor lost mid-way leaves "
       "its share to the others, 1..64",
       IntegerSpec{{1, 64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.join_donors; },
                   [](C& c, uint64_t v) { c.strategy.join_donors = v; }}},
      {"strategy.elastic", "--elastic", "off|on",
       "ring all-reduce (local-sgd, allreduce over tcp or rdma): when a peer dies mid-round, "
       "fail the round (off) or re-form the ring over the nodes that answer within "
       "--dead-after and run the round there (on)",
       TextSpec{kOnOff, "", nullptr,
                [](const C& c) -> const std::string& { return c.strategy.elastic; },
                [](C& c, std::string v) { c.strategy.elastic = std::move(v); }}},
      {"node.checkpoint", "--checkpoint", "FILE",
       "write the node's model and strategy state here (atomically) and resume from it at start; "
       "its directory must be writable by this user only",
       TextSpec{{},
                "a string (a file path)",
                nullptr,
                [](const C& c) -> const std::string& { return c.checkpoint; },
                [](C& c, std::string v) { c.checkpoint = std::move(v); }}},
      {"node.checkpoint_every", "--checkpoint-every", "K",
       "write the checkpoint every K rounds (and at SIGTERM/SIGINT); 0: only then",
       IntegerSpec{{},
                   [](const C& c) -> uint64_t { return c.checkpoint_every; },
                   [](C& c, uint64_t v) { c.checkpoint_every = v; }}},
  }};
  return kFields;
}

const Field* find_field(std::string_view key) {
  for (const Field& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

// Tables besides the root and [[peers]].

bool is_table(std::string_view key) {
  return std::find(std::begin(kTables), std::end(kTables), key) != std::end(kTables);
}

std::string_view parent_of(std::string_view key) {
  const size_t dot = key.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : key.substr(0, dot);
}
std::string_view leaf_of(std::string_view key) {
  const size_t dot = key.rfind('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

// The keys allowed directly in the table `prefix` ("" for the root), in declaration order.
std::vector<std::string_view> keys_of(std::string_view prefix) {
  std::vector<std::string_view> keys;
  for (const Field& f : fields())
    if (parent_of(f.key) == prefix) keys.push_back(leaf_of(f.key));
  for (std::string_view t : kTables)
    if (parent_of(t) == prefix) keys.push_back(leaf_of(t));
  if (prefix.empty()) keys.push_back("peers");
  return keys;
}

std::string join(std::span<const std::string_view> items) {
  std::string out;
  for (std::string_view s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "unknown key; did you mean 'listen'? valid keys in [node]: id, listen, ..."
std::string unknown_problem(std::string_view leaf, bool is_table_value, std::string_view where,
                            std::span<const std::string_view> valid) {
  std::string out = is_table_value ? "unknown table" : "unknown key";
  std::string_view best;
  size_t best_distance = 3;  // suggest only close misspellings
  for (std::string_view v : valid) {
    const size_t d = edit_distance(leaf, v);
    if (d < best_distance) best_distance = d, best = v;
  }
  if (!best.empty()) out += fmt::format("; did you mean '{}'?", best);
  out += fmt::format(" (valid keys {}: {})", where, join(valid));
  return out;
}

std::string describe(const TextSpec& s) {
  if (!s.choices.empty()) return fmt::format("one of ({})", join(s.choices));
  return std::string(s.what);
}

Problem text_problem(const TextSpec& s, std::string_view v) {
  if (!s.choices.empty() && std::find(s.choices.begin(), s.choices.end(), v) == s.choices.end())
    return must_be(describe(s), quote(v));
  if (s.check) return s.check(v);
  return std::nullopt;
}

// The problem with the value stored in `c` for `f`, if any.
Problem stored_problem(const Field& f, const DaemonConfig& c) {
  return std::visit(
      [&](const auto& s) -> Problem {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, TextSpec>) {
          return text_problem(s, s.get(c));
        } else {
          const auto v = s.get(c);
          if constexpr (std::is_same_v<S, NumberSpec>)
            if (s.range.is_auto(v)) return std::nullopt;
          if (!s.range.fits(v)) return must_be(s.range.describe(), fmt::format("{}", v));
          return std::nullopt;
        }
      },
      f.spec);
}

// ---------------------------------------------------------------------------------------
// Reading values from TOML nodes and from flag text.

// "string 'x'", "integer 3", "a table": what a value of the wrong type was.
std::string describe_node(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return fmt::format("string '{}'", n.as_string()->get());
    case toml::node_type::integer:
      return fmt::format("integer {}", n.as_integer()->get());
    case toml::node_type::floating_point:
      return fmt::format("floating-point {}", n.as_floating_point()->get());
    case toml::node_type::boolean:
      return fmt::format("boolean {}", n.as_boolean()->get());
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::variant<uint64_t, std::string> integer_from_toml(const IntegerRange& range,
                                                      const toml::node& n) {
  const auto* v = n.as_integer();
  if (!v) return must_be(range.describe(), describe_node(n));
  const int64_t x = v->get();
  if (!range.fits(x)) return must_be(range.describe(), fmt::format("{}", x));
  return static_cast<uint64_t>(x);
}

std::variant<uint64_t, std::string> integer_from_text(const IntegerRange& range,
                                                      std::string_view text) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return must_be(range.describe(), quote(text));
  if (!range.fits(x)) return must_be(range.describe(), fmt::format("{}", x));
  return static_cast<uint64_t>(x);
}

// Reads a TOML value into `c`; returns the problem, if any.
Problem read_toml_value(const Field& f, const toml::node& n, DaemonConfig& c) {
  return std::visit(
      [&](const auto& s) -> Problem {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, IntegerSpec>) {
          auto v = integer_from_toml(s.range, n);
          if (auto* problem = std::get_if<std::string>(&v)) return std::move(*problem);
          s.set(c, std::get<uint64_t>(v));
        } else if constexpr (std::is_same_v<S, NumberSpec>) {
          double x = 0;  // an integer is accepted where a number is expected: lr = 1
          if (const auto* i = n.as_integer()) {
            x = static_cast<double>(i->get());
          } else if (const auto* d = n.as_floating_point()) {
            x = d->get();
          } else if (const auto* t = n.as_string(); t && s.range.or_auto && t->get() == "auto") {
            s.set(c, kAuto);
            return std::nullopt;
          } else {
            return must_be(s.range.describe(), describe_node(n));
          }
          if (!s.range.fits(x)) return must_be(s.range.describe(), fmt::format("{}", x));
          s.set(c, x);
        } else {
          const auto* str = n.as_string();
          if (!str) return must_be(describe(s), describe_node(n));
          if (auto problem = text_problem(s, str->get())) return problem;
          s.set(c, str->get());
        }
        return std::nullopt;
      },
      f.spec);
}

// Reads a flag's text into `c`; returns the problem, if any.
Problem read_flag_value(const Field& f, const std::string& text, DaemonConfig& c) {
  return std::visit(
      [&](const auto& s) -> Problem {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, IntegerSpec>) {
          auto v = integer_from_text(s.range, text);
          if (auto* problem = std::get_if<std::string>(&v)) return std::move(*problem);
          s.set(c, std::get<uint64_t>(v));
        } else if constexpr (std::is_same_v<S, NumberSpec>) {
          if (s.range.or_auto && text == "auto") {
            s.set(c, kAuto);
            return std::nullopt;
          }
          double x = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
          if (ec != std::errc() || end != text.data() + text.size() || text.empty())
            return must_be(s.range.describe(), quote(text));
          if (!s.range.fits(x)) return must_be(s.range.describe(), quote(text));
          s.set(c, x);
        } else {
          if (auto problem = text_problem(s, text)) return problem;
          s.set(c, text);
        }
        return std::nullopt;
      },
      f.spec);
}
}  // namespace config_internal
}  // namespace gossip::daemon
