// gossipd's configuration: a TOML file (see daemon/gossipd.example.toml) and flags.
//
// Every scalar setting is described once, in kFields: its TOML key, its flag, its type
// and range, and how it is stored. The TOML reader, the flag reader and validate_config
// all work from that table, so a setting cannot be range-checked in one path and not in
// another, and every error can name the key (or flag) and the source it came from.

#include "daemon/config.h"

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
#include "daemon/peers_from.h"
#include "peers/curve_auth.h"
#include "peers/node_ids.h"
#include "peers/topology.h"
#include "sgd/collectives/ring_schedule.h"
#include "sgd/registry.h"

namespace gossip::daemon {
namespace {

constexpr std::string_view kCommandLine = "command line";
constexpr std::string_view kEnvironment = "environment";
constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMaxI64 = std::numeric_limits<int64_t>::max();  // TOML integers are int64
constexpr uint64_t kMaxChunkBytes = uint64_t{256} << 20;
constexpr size_t kMaxIpcPath = 107;  // sockaddr_un::sun_path (108) less its NUL

constexpr std::string_view kTransports[] = {"auto", "tcp", "rdma", "nccl", "allgather"};
constexpr std::string_view kOuterOptimizers[] = {"none", "nesterov"};
constexpr std::string_view kNonFinitePolicies[] = {"refuse", "clip"};
constexpr std::string_view kAllReduceAlgorithms[] = {"auto", "ring", "tree", "butterfly", "master"};
constexpr std::string_view kSparseAllReduce[] = {"auto", "reduce-scatter", "all-gather"};
constexpr std::string_view kOnOff[] = {"off", "on"};
constexpr std::string_view kJoinQuorums[] = {"majority", "any"};
constexpr std::string_view kTune[] = {"off", "auto"};
constexpr std::string_view kServerOptimizers[] = {"sgd", "momentum", "adam"};
constexpr std::string_view kLogLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

// ---------------------------------------------------------------------------------------
// Value checks, shared by the TOML reader, the flag reader and validate_config. Each
// returns the problem ("must be ..., got ...") or nothing.

using Problem = std::optional<std::string>;

std::string must_be(std::string_view what, std::string_view got) {
  return fmt::format("must be {}, got {}", what, got);
}

std::string quote(std::string_view s) { return fmt::format("'{}'", s); }

}  // namespace

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

namespace {

Problem codec_problem(std::string_view spec) {
  auto c = compression::make_codec(spec);
  if (c) return std::nullopt;
  return c.status().message();
}

}  // namespace

Result<sgd::AlgorithmTable> read_allreduce_table(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::invalid(fmt::format("cannot read the all-reduce table '{}'", path));
  std::stringstream text;
  text << f.rdbuf();
  return sgd::AlgorithmTable::parse(text.str(), path);
}

namespace {

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

Problem run_dir_problem(std::string_view dir) {
  if (dir.empty()) return "must not be empty";
  return std::nullopt;
}

struct IntegerRange {
  uint64_t min = 0;
  uint64_t max = kMaxI64;
  uint64_t multiple_of = 1;

  std::string describe() const {
    std::string d = max == kMaxI64 ? fmt::format("an integer >= {}", min)
                                   : fmt::format("an integer in {}..{}", min, max);
    if (multiple_of > 1) d += fmt::format(" and a multiple of {}", multiple_of);
    return d;
  }
  bool fits(uint64_t v) const { return v >= min && v <= max && v % multiple_of == 0; }
  bool fits(int64_t v) const { return v >= 0 && fits(static_cast<uint64_t>(v)); }
};

struct NumberRange {
  double min = 0;
  bool min_inclusive = false;
  std::optional<double> max;  // exclusive
  std::string describe() const {
    if (max) return fmt::format("a number in {}{}, {})", min_inclusive ? '[' : '(', min, *max);
    return fmt::format("a number {} {}", min_inclusive ? ">=" : ">", min);
  }
  bool fits(double v) const {
    return std::isfinite(v) && (min_inclusive ? v >= min : v > min) && (!max || v < *max);
  }
};

constexpr IntegerRange kNodeIdRange{0, kMaxU32, 1};

// ---------------------------------------------------------------------------------------
// The settings.

struct IntegerSpec {
  IntegerRange range;
  uint64_t (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, uint64_t);
};
struct NumberSpec {
  NumberRange range;
  double (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, double);
};
struct TextSpec {
  std::span<const std::string_view> choices;  // empty: any text that `check` accepts
  std::string_view what;                      // for a value of the wrong type: "must be <what>"
  Problem (*check)(std::string_view);         // null: none beyond `choices`
  const std::string& (*get)(const DaemonConfig&);
  void (*set)(DaemonConfig&, std::string);
};

struct Field {
  std::string_view key;   // full TOML key: "strategy.period"
  std::string_view flag;  // "--period"
  std::string_view flag_arg;
  std::string_view help;
  std::variant<IntegerSpec, NumberSpec, TextSpec> spec;
};

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

const std::array<Field, 63>& fields() {
  using C = DaemonConfig;
  static const std::array<Field, 63> kFields = {{
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
       "--round-timeout-floor and --round-timeout; 0: always --round-timeout",
       NumberSpec{{0, true, std::nullopt},
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
      {"strategy.trim", "--trim", "B",
       "gossip and local SGD (transport allgather): robust mixing for untrusted peers, the "
       "coordinate-wise mean of the node's and its neighbors' (local SGD: every node's) models "
       "without the B largest and B smallest values; 0: off",
       IntegerSpec{{0, 64, 1},
                   [](const C& c) -> uint64_t { return c.strategy.trim; },
                   [](C& c, uint64_t v) { c.strategy.trim = v; }}},
      {"strategy.clip", "--clip", "off|on",
       "push-sum: robust mixing for untrusted peers; a neighbor's model further from the node's "
       "than 4 times the median distance of recent ones is pulled back to that radius "
       "(CenteredClip; exact mass conservation is given up)",
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
       "left out of a parameter server's clock; an elastic ring's wait for its members' answers",
       NumberSpec{{0, false, std::nullopt},
                  [](const C& c) { return c.strategy.dead_after_s; },
                  [](C& c, double v) { c.strategy.dead_after_s = v; }}},
      {"strategy.dead_after_factor", "--dead-after-factor", "F",
       "gossip and parameter servers: > 0 makes each peer's --dead-after its longest silence "
       "over the last one to two minutes times F, at least --dead-after-floor and at most "
       "--round-timeout (--dead-after until 8 silences were measured); 0: always --dead-after",
       NumberSpec{{0, true, std::nullopt},
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
       "write the node's model and strategy state here (atomically) and resume from it at start",
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
constexpr std::string_view kTables[] = {"node", "strategy", "strategy.outer"};
constexpr std::string_view kPeerKeys[] = {"id", "endpoint", "public_key", "banned"};

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

// ---------------------------------------------------------------------------------------
// Where the values came from, so that an error names the file and line or the flag.

struct Origins {
  std::string source;                          // the file, or "command line"
  std::map<std::string, int64_t> lines;        // key -> line in the file
  std::map<std::string, std::string> flags;    // key -> the flag that set it
  std::map<std::string, std::string> env;      // key -> the variable that set it
  std::map<std::string, std::string> derived;  // key -> what made it ("--peers-from ...")
};

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
  if (over_ring && c.nodes() > sgd::RingSchedule::kMaxRanks)
    return key_error(
        o, "strategy.transport",
        fmt::format("the ring all-reduce takes at most {} nodes, this cluster has {} (use "
                    "transport allgather, or a gossip strategy)",
                    sgd::RingSchedule::kMaxRanks, c.nodes()));
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
    if (strategy->takes("sma") && sc.sma_alpha * sc.learners_per_device > 1.0 + 1e-9)
      return key_error(o, "strategy.sma_alpha",
                       fmt::format("{} x {} learners is over 1: the central model would overshoot "
                                   "the learners' mean (0 picks 1 / learners)",
                                   sc.sma_alpha, sc.learners_per_device));
    // A node that joins by seeds learns the members' list later (the strategy checks).
    if (strategy->takes("servers") && sc.servers > c.nodes() && c.join.empty())
      return key_error(
          o, "strategy.servers",
          fmt::format("{} servers, but the cluster has {} nodes", sc.servers, c.nodes()));
    if (strategy->takes("servers") && sc.ps_replicas >= c.nodes() && c.join.empty())
      return key_error(o, "strategy.ps_replicas",
                       fmt::format("{} replicas of each shard need {} nodes, the cluster has {}",
                                   sc.ps_replicas, sc.ps_replicas + 1, c.nodes()));
    if (strategy->takes("servers") && sc.ps_fetch > 1 && sc.ps_mode == "bsp")
      return key_error(o, "strategy.ps_fetch",
                       "bsp pulls after every push (ps_fetch is for async and ssp)");
  }
  const bool mesh_algorithm =
      c.strategy.allreduce_algorithm != "auto" && c.strategy.allreduce_algorithm != "ring";
  if (mesh_algorithm && (!over_ring || c.strategy.transport == "rdma"))
    return key_error(
        o, "strategy.allreduce_algorithm",
        fmt::format("the {} all-reduce runs over the tcp transport (strategy local-sgd or "
                    "allreduce, transport tcp or auto), not strategy {} with transport {}",
                    c.strategy.allreduce_algorithm, c.strategy.name, c.strategy.transport));
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
    if (c.strategy.clip == "on" && !strategy->takes("clip"))
      return key_error(o, "strategy.clip",
                       fmt::format("clipped mixing is not for strategy {} (only for: {})",
                                   c.strategy.name, strategies_taking("clip")));
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

// ---------------------------------------------------------------------------------------
// The TOML document.

struct Document {
  DaemonConfig config;
  Origins origins;
  bool has_id = false;
  bool has_listen = false;
  bool has_run_dir = false;
};

Status read_peers(const toml::node& n, Document& d) {
  Origins& o = d.origins;
  const toml::array* entries = n.as_array();
  if (!entries)
    return key_error(o, "peers", must_be("an array of tables ([[peers]])", describe_node(n)));
  for (size_t i = 0; i < entries->size(); ++i) {
    const std::string entry_key = fmt::format("peers[{}]", i);
    const toml::node& entry = *entries->get(i);
    o.lines[entry_key] = entry.source().begin.line;
    const toml::table* t = entry.as_table();
    if (!t)
      return key_error(o, entry_key, must_be("a table with id and endpoint", describe_node(entry)));
    PeerConfig peer;
    bool has_id = false;
    bool has_endpoint = false;
    for (auto&& [k, v] : *t) {
      const std::string key = fmt::format("{}.{}", entry_key, k.str());
      o.lines[key] = v.source().begin.line;
      if (k.str() == "id") {
        auto id = integer_from_toml(kNodeIdRange, v);
        if (auto* problem = std::get_if<std::string>(&id)) return key_error(o, key, *problem);
        peer.id = static_cast<uint32_t>(std::get<uint64_t>(id));
        has_id = true;
      } else if (k.str() == "endpoint") {
        const auto* s = v.as_string();
        if (!s) return key_error(o, key, must_be("a string tcp://HOST:PORT", describe_node(v)));
        if (auto problem = endpoint_problem(s->get())) return key_error(o, key, *problem);
        peer.endpoint = s->get();
        has_endpoint = true;
      } else if (k.str() == "public_key") {
        const auto* s = v.as_string();
        if (!s) return key_error(o, key, must_be("a string (a Z85 key)", describe_node(v)));
        peer.public_key = s->get();
      } else if (k.str() == "banned") {
        const auto* b = v.as_boolean();
        if (!b) return key_error(o, key, must_be("true or false", describe_node(v)));
        peer.banned = b->get();
      } else {
        return key_error(o, key, unknown_problem(k.str(), v.is_table(), "in [[peers]]", kPeerKeys));
      }
    }
    if (!has_id)
      return Status::invalid(fmt::format("{}: missing key '{}.id'", o.source, entry_key));
    if (!has_endpoint)
      return Status::invalid(fmt::format("{}: missing key '{}.endpoint'", o.source, entry_key));
    d.config.peers.push_back(std::move(peer));
  }
  return Status::ok();
}

Status read_table(const toml::table& table, std::string_view prefix, Document& d) {
  Origins& o = d.origins;
  for (auto&& [k, v] : table) {
    const std::string key =
        prefix.empty() ? std::string(k.str()) : fmt::format("{}.{}", prefix, k.str());
    o.lines[key] = v.source().begin.line;
    if (const Field* f = find_field(key)) {
      if (auto problem = read_toml_value(*f, v, d.config)) return key_error(o, key, *problem);
      if (key == "node.id") d.has_id = true;
      if (key == "node.listen") d.has_listen = true;
      if (key == "node.run_dir") d.has_run_dir = true;
    } else if (is_table(key)) {
      const toml::table* sub = v.as_table();
      if (!sub) return key_error(o, key, must_be("a table", describe_node(v)));
      GOSSIP_RETURN_IF_ERROR(read_table(*sub, key, d));
    } else if (key == "peers") {
      GOSSIP_RETURN_IF_ERROR(read_peers(v, d));
    } else {
      const auto valid = keys_of(prefix);
      const std::string where =
          prefix.empty() ? "at the top level" : fmt::format("in [{}]", prefix);
      return key_error(o, key, unknown_problem(k.str(), v.is_table(), where, valid));
    }
  }
  return Status::ok();
}

template <typename E>
Status parse_error_status(const E& e, std::string_view source) {
  const auto& begin = e.source().begin;
  return Status::invalid(fmt::format("{}:{}:{}: TOML parse error: {}", source, begin.line,
                                     begin.column, e.description()));
}

Result<Document> parse_document(const std::string& text, const std::string& source) {
  toml::table root;
#if TOML_EXCEPTIONS
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return parse_error_status(e, source);
  }
#else
  toml::parse_result parsed = toml::parse(text, source);
  if (!parsed) return parse_error_status(parsed.error(), source);
  root = std::move(parsed).table();
#endif
  Document d;
  d.config.source = source;
  d.origins.source = source;
  GOSSIP_RETURN_IF_ERROR(read_table(root, "", d));
  return d;
}

Result<Document> load_document(const std::string& path) {
  auto cannot_read = [&path](int error) {
    return Status::io_error(
        fmt::format("cannot read config file '{}': {}", path, std::strerror(error)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cannot_read(errno);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return cannot_read(error);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return parse_document(text, path);
}

// node.id, node.listen and node.run_dir have no defaults. With `from_flags_too` the message
// also says which flag sets the missing key.
Status check_required(const Document& d, bool from_flags_too) {
  struct Required {
    bool present;
    std::string_view key;
    std::string_view flag;
  };
  const bool joins = !d.config.join.empty();
  if (joins && d.has_id)
    return Status::invalid(fmt::format(
        "{}: node.id and node.join: a node that joins by seeds is given its id", d.origins.source));
  if (joins && (!d.config.peers.empty() || !d.config.peers_from.empty()))
    return Status::invalid(fmt::format(
        "{}: node.join and a peer list: a node that joins by seeds takes the members' list",
        d.origins.source));
  for (const auto& seed : join_seeds(d.config)) {
    if (!d.config.secret_key.empty() && seed.public_key.empty())
      return Status::invalid(
          fmt::format("{}: node.join under CURVE: seed {} needs its public key: write KEY@{}",
                      d.origins.source, seed.endpoint, seed.endpoint));
    if (!d.config.secret_key.empty() && d.config.admit_keys.empty())
      return Status::invalid(fmt::format(
          "{}: node.join under CURVE needs node.admit_keys (the members' list): a node that "
          "joined takes in the nodes that join after it only by their keys there",
          d.origins.source));
    if (d.config.secret_key.empty() && !seed.public_key.empty())
      return Status::invalid(fmt::format(
          "{}: node.join: seed {} has a public key, which needs node.secret_key (this node's "
          "own) too",
          d.origins.source, seed.endpoint));
  }
  const Required required[] = {{d.has_id || joins, "node.id", "--id"},
                               {d.has_listen, "node.listen", "--listen"},
                               {d.has_run_dir, "node.run_dir", "--run-dir"}};
  for (const Required& r : required) {
    if (r.present) continue;
    if (!from_flags_too)
      return Status::invalid(fmt::format("{}: missing key '{}'", d.origins.source, r.key));
    return Status::invalid(fmt::format(
        "{}: missing key '{}' (pass {}{})", d.origins.source, r.key, r.flag,
        d.origins.source == kCommandLine ? " or --config FILE" : " or set it in the file"));
  }
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------

uint32_t DaemonConfig::nodes() const { return static_cast<uint32_t>(remote_peers().size()) + 1; }

std::vector<PeerConfig> DaemonConfig::remote_peers() const {
  std::vector<PeerConfig> remote;
  for (const PeerConfig& p : peers)
    if (p.id != node_id) remote.push_back(p);
  std::sort(remote.begin(), remote.end(),
            [](const PeerConfig& a, const PeerConfig& b) { return a.id < b.id; });
  return remote;
}

std::string DaemonConfig::topology_spec() const {
  if (!strategy.topology.empty()) return strategy.topology;
  const sgd::StrategyDescriptor* d = sgd::find_strategy(strategy.name);
  return std::string(d ? d->default_topology : "ring");
}

std::string DaemonConfig::ipc_endpoint() const {
  return "ipc://" +
         (std::filesystem::path(run_dir) / fmt::format("gossipd-{}.sock", node_id)).string();
}

namespace {

// The strategies that read a strategy option (sgd/registry.h), or every strategy.
std::vector<std::string> readers_of(std::string_view key) {
  std::string_view option;
  if (key == "strategy.gamma" || key == "strategy.delay" || key == "strategy.staleness" ||
      key == "strategy.trim" || key == "strategy.clip" || key == "strategy.fragments")
    option = key.substr(key.find('.') + 1);
  else if (key == "strategy.overlap_steps")
    option = "fragments";
  else if (key.starts_with("strategy.tune"))
    option = "tune";
  else if (key.starts_with("strategy.outer."))
    option = "outer";
  else if (key == "strategy.servers")
    option = "servers";
  else if (key == "strategy.ps_mode")
    option = "ps_mode";
  else if (key == "strategy.ps_fetch")
    option = "ps_fetch";
  else if (key.starts_with("strategy.ps_"))
    option = "ps_optimizer";
  else if (key == "strategy.learners_per_device" || key.starts_with("strategy.sma_"))
    option = "sma";
  std::vector<std::string> out;
  for (const auto& d : sgd::strategies())
    if (option.empty() || d.takes(option)) out.emplace_back(d.name);
  return out;
}

bool per_node(std::string_view key) {
  return key == "node.id" || key == "node.listen" || key == "node.run_dir" ||
         key == "node.peers_from" || key == "node.join" || key == "node.name" ||
         key == "node.metrics_port" || key == "node.secret_key" || key == "node.checkpoint";
}

}  // namespace

std::vector<Setting> settings() {
  const DaemonConfig defaults;
  std::vector<Setting> rows;
  for (const Field& f : fields()) {
    Setting r{std::string(f.key),
              std::string(f.flag),
              std::string(f.flag_arg),
              "",
              "",
              "",
              std::string(f.help),
              readers_of(f.key),
              per_node(f.key),
              env_name(f.flag)};
    std::visit(
        [&](const auto& s) {
          using S = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<S, IntegerSpec>) {
            r.type = "integer";
            r.valid = s.range.describe();
            r.fallback = fmt::format("{}", s.get(defaults));
          } else if constexpr (std::is_same_v<S, NumberSpec>) {
            r.type = "number";
            r.valid = s.range.describe();
            r.fallback = fmt::format("{}", s.get(defaults));
          } else {
            r.type = "string";
            r.valid = s.choices.empty() ? std::string(s.what) : join(s.choices);
            r.fallback = s.get(defaults);
          }
        },
        f.spec);
    rows.push_back(std::move(r));
  }
  return rows;
}

namespace {

// A markdown table cell: pipes escaped, never empty.
std::string cell(std::string_view v) {
  std::string out;
  for (char c : v) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out.empty() ? "—" : out;
}

}  // namespace

std::string describe_options(bool json) {
  const auto rows = settings();
  if (json) {
    nlohmann::json all = nlohmann::json::array();
    for (const Setting& r : rows)
      all.push_back({{"key", r.key},
                     {"flag", r.flag},
                     {"env", r.env},
                     {"arg", r.arg},
                     {"type", r.type},
                     {"valid", r.valid},
                     {"default", r.fallback},
                     {"strategies", r.strategies},
                     {"per_node", r.per_node},
                     {"help", r.help}});
    return all.dump(2) + "\n";
  }
  const size_t every = sgd::strategies().size();
  std::string out =
      "| key (TOML) | flag, variable | valid values | default | strategies | what |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  for (const Setting& r : rows) {
    std::string readers;
    if (r.strategies.size() == every)
      readers = "all";
    else
      for (const std::string& name : r.strategies)
        readers += fmt::format("{}{}", readers.empty() ? "" : ", ", name);
    out +=
        fmt::format("| `{}` | `{} {}`, `{}` | {} | {} | {} | {} |\n", r.key, r.flag, r.arg, r.env,
                    cell(r.valid), r.fallback.empty() ? "—" : fmt::format("`{}`", r.fallback),
                    readers, cell(r.help));
  }
  return out;
}

Result<DaemonConfig> parse_config(const std::string& toml_text, const std::string& source) {
  auto d = parse_document(toml_text, source);
  if (!d) return d.status();
  GOSSIP_RETURN_IF_ERROR(check_required(*d, false));
  GOSSIP_RETURN_IF_ERROR(check_config(d->config, d->origins));
  return std::move(d->config);
}

Result<DaemonConfig> load_config_file(const std::string& path) {
  auto d = load_document(path);
  if (!d) return d.status();
  GOSSIP_RETURN_IF_ERROR(check_required(*d, false));
  GOSSIP_RETURN_IF_ERROR(check_config(d->config, d->origins));
  return std::move(d->config);
}

Status validate_config(const DaemonConfig& config) {
  Origins origins;
  origins.source = config.source.empty() ? "config" : config.source;
  return check_config(config, origins);
}

namespace {

// The variables that are not one flag's setting.
constexpr std::string_view kConfigVariable = "GOSSIPD_CONFIG";
constexpr std::string_view kPeerVariable = "GOSSIPD_PEER";
constexpr std::string_view kPeerKeyVariable = "GOSSIPD_PEER_KEY";
constexpr std::string_view kBanVariable = "GOSSIPD_BAN_PEER";

// A list variable's entries: separated by commas or white space.
std::vector<std::string> list_entries(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t begin = text.find_first_not_of(", \t\n", i);
    if (begin == std::string_view::npos) break;
    const size_t end = std::min(text.find_first_of(", \t\n", begin), text.size());
    out.emplace_back(text.substr(begin, end - begin));
    i = end;
  }
  return out;
}

// One source of a peer-list setting: a flag or a variable, for messages and origins.
struct PeerListSource {
  bool from_env;
  std::string_view name;  // "--peer" or "GOSSIPD_PEER"
  std::string where(std::string_view entry) const {
    if (from_env) return fmt::format("{}: variable '{}' (entry '{}')", kEnvironment, name, entry);
    return fmt::format("{}: flag '{} {}'", kCommandLine, name, entry);
  }
  void record(Origins& o, const std::string& key, std::string_view entry) const {
    (from_env ? o.env : o.flags)[key] =
        from_env ? std::string(name) : fmt::format("{} {}", name, entry);
  }
};

std::optional<uint32_t> id_of(std::string_view text, std::string* problem) {
  auto id = integer_from_text(kNodeIdRange, text);
  if (auto* p = std::get_if<std::string>(&id)) {
    *problem = fmt::format("ID {}", *p);
    return std::nullopt;
  }
  return static_cast<uint32_t>(std::get<uint64_t>(id));
}

// "ID=tcp://HOST:PORT" entries: they replace the peer list.
Status read_peer_entries(const std::vector<std::string>& texts, const PeerListSource& src,
                         Document& d) {
  d.config.peers.clear();
  for (const std::string& text : texts) {
    auto malformed = [&](std::string_view why) {
      return Status::invalid(
          fmt::format("{}: {} (the form is ID=tcp://HOST:PORT, e.g. --peer 1=tcp://10.0.0.2:7000)",
                      src.where(text), why));
    };
    const size_t eq = text.find('=');
    if (eq == std::string::npos) return malformed("no '=' between ID and endpoint");
    std::string problem;
    auto id = id_of(std::string_view(text).substr(0, eq), &problem);
    if (!id) return malformed(problem);
    PeerConfig peer{*id, text.substr(eq + 1), {}};
    if (auto p = endpoint_problem(peer.endpoint))
      return Status::invalid(fmt::format("{}: {}", src.where(text), *p));
    const size_t index = d.config.peers.size();
    src.record(d.origins, fmt::format("peers[{}].id", index), text);
    src.record(d.origins, fmt::format("peers[{}].endpoint", index), text);
    d.config.peers.push_back(std::move(peer));
  }
  return Status::ok();
}

// The peer whose id is `id_text`; an error names `where`.
// The peer whose id (or, from --peers-from, name) is `id_text`; an error names `where`.
// This node itself gives nullptr: one list of keys can then serve every node.
Result<PeerConfig*> listed_peer(Document& d, std::string_view id_text, const std::string& where) {
  auto& peers = d.config.peers;
  if (!id_text.empty() && !std::isdigit(static_cast<unsigned char>(id_text[0]))) {
    std::vector<ListedNode> named;
    for (const PeerConfig& p : peers) named.push_back({p.name, p.name, 0});
    if (auto found = find_node(named, id_text); found && !peers[*found].name.empty())
      return &peers[*found];
    const std::string& self = d.config.node_name;
    if (!self.empty() && find_node({{self, self, 0}}, id_text)) return nullptr;
    return Status::invalid(fmt::format(
        "{}: no peer named '{}' (names come from --peers-from; or give the id)", where, id_text));
  }
  std::string problem;
  auto id = id_of(id_text, &problem);
  if (!id) return Status::invalid(fmt::format("{}: {}", where, problem));
  if (d.has_id && *id == d.config.node_id) return nullptr;
  auto it =
      std::find_if(peers.begin(), peers.end(), [&](const PeerConfig& p) { return p.id == *id; });
  if (it == peers.end())
    return Status::invalid(
        fmt::format("{}: no peer {} (give it with --peer, [[peers]] or --peers-from)", where, *id));
  return &*it;
}

// "ID=KEY" entries: the peers' CURVE public keys.
Status read_peer_keys(const std::vector<std::string>& texts, const PeerListSource& src,
                      Document& d) {
  for (const std::string& text : texts) {
    const std::string shown = text.substr(0, text.find('=') + 1) + "...";  // keys stay out of logs
    const size_t eq = text.find('=');
    if (eq == std::string::npos)
      return Status::invalid(
          fmt::format("{}: no '=' between ID and key (the form is ID=KEY)", src.where(shown)));
    auto peer = listed_peer(d, std::string_view(text).substr(0, eq), src.where(shown));
    if (!peer) return peer.status();
    if (*peer == nullptr) continue;  // this node's own key, in a list shared by all
    (*peer)->public_key = text.substr(eq + 1);
    src.record(d.origins, fmt::format("peers[{}].public_key", *peer - d.config.peers.data()),
               shown);
  }
  return Status::ok();
}

Status read_bans(const std::vector<std::string>& texts, const PeerListSource& src, Document& d) {
  for (const std::string& text : texts) {
    auto peer = listed_peer(d, text, src.where(text));
    if (!peer) return peer.status();
    if (*peer == nullptr)
      return Status::invalid(fmt::format("{}: that is this node", src.where(text)));
    (*peer)->banned = true;
    src.record(d.origins, fmt::format("peers[{}].banned", *peer - d.config.peers.data()), text);
  }
  return Status::ok();
}

// Where node.peers_from was set, for messages.
std::string peers_from_origin(const Origins& o) {
  if (auto it = o.flags.find("node.peers_from"); it != o.flags.end())
    return fmt::format("{}: flag '--peers-from'", kCommandLine);
  if (auto it = o.env.find("node.peers_from"); it != o.env.end())
    return fmt::format("{}: variable '{}'", kEnvironment, it->second);
  return fmt::format("{}: key 'node.peers_from'", o.source);
}

// node.peers_from -> node.id, node.name, node.listen and the peer list.
Status apply_peers_from(Document& d, const Environment& env) {
  DaemonConfig& c = d.config;
  const std::string origin = peers_from_origin(d.origins);
  if (!c.peers.empty())
    return Status::invalid(fmt::format(
        "{}: a peer list is given too ([[peers]], --peer or GOSSIPD_PEER); use one or the other",
        origin));
  PeerSourceEnvironment source_env{
      [&env](const std::string& name) -> std::optional<std::string> {
        auto it = env.variables.find(name);
        if (it == env.variables.end()) return std::nullopt;
        return it->second;
      },
      [](const std::string& path) -> Result<std::string> {
        std::ifstream in(path, std::ios::binary);
        if (!in)
          return Status::io_error(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
        constexpr size_t kMaxHostfile = 4u << 20;
        std::string text(kMaxHostfile + 1, '\0');
        in.read(text.data(), static_cast<std::streamsize>(text.size()));
        text.resize(static_cast<size_t>(in.gcount()));
        if (text.size() > kMaxHostfile)
          return Status::invalid(fmt::format("'{}' is larger than {} bytes", path, kMaxHostfile));
        return text;
      }};
  auto listing = list_peers(c.peers_from, source_env);
  if (!listing) return Status::invalid(fmt::format("{}: {}", origin, listing.status().message()));
  const auto& nodes = listing->nodes;

  std::optional<uint32_t> self;
  std::string rule;
  if (d.has_id) {
    if (c.node_id >= nodes.size())
      return key_error(d.origins, "node.id",
                       fmt::format("{} lists {} nodes (ids 0..{}); id {} is not one of them",
                                   c.peers_from, nodes.size(), nodes.size() - 1, c.node_id));
    self = c.node_id;
    rule = "node.id";
  }
  if (!c.node_name.empty()) {
    auto found = find_node(nodes, c.node_name);
    if (!found)
      return key_error(d.origins, "node.name",
                       fmt::format("'{}' is none (or more than one) of the {} nodes {} lists",
                                   c.node_name, nodes.size(), c.peers_from));
    if (self && *self != *found)
      return key_error(d.origins, "node.name",
                       fmt::format("'{}' is node {} of {}, but node.id is {}", c.node_name, *found,
                                   c.peers_from, *self));
    self = found;
    rule = "node.name";
  }
  if (!self && listing->self) self = listing->self, rule = listing->self_rule;
  if (!self) {
    self = find_node(nodes, env.hostname);
    rule = "the host name";
    if (!self)
      return Status::invalid(fmt::format(
          "{}: this host's name '{}' is none (or more than one) of the {} nodes {} lists; pass "
          "--name (a listed host, host:port or pod name) or --id (its position)",
          origin, env.hostname, nodes.size(), c.peers_from));
  }
  c.node_id = *self;
  c.node_name = nodes[*self].name;
  d.has_id = true;
  if (!d.has_listen) {
    // Any address: the name others reach this node by may resolve, here, to an address
    // that is not theirs to reach (Debian's hosts file maps the host name to 127.0.1.1).
    c.listen = fmt::format("tcp://0.0.0.0:{}", nodes[*self].port);
    d.has_listen = true;
    d.origins.derived["node.listen"] = fmt::format("{} (node {}, {})", origin, *self, rule);
  }
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (i == *self) continue;
    const size_t index = c.peers.size();
    d.origins.derived[fmt::format("peers[{}].id", index)] =
        fmt::format("--peers-from {} (node {})", c.peers_from, i);
    d.origins.derived[fmt::format("peers[{}].endpoint", index)] =
        fmt::format("--peers-from {} (node {})", c.peers_from, i);
    PeerConfig peer{i, nodes[i].endpoint(), {}};
    peer.name = nodes[i].name;
    c.peers.push_back(std::move(peer));
  }
  return Status::ok();
}

// GOSSIPD_<FLAG> variables over the file's values.
Status apply_environment(const Environment& env, Document& d) {
  for (const auto& [name, value] : env.variables) {
    if (!name.starts_with("GOSSIPD_") || name == kConfigVariable) continue;
    const Field* field = nullptr;
    for (const Field& f : fields())
      if (env_name(f.flag) == name) field = &f;
    if (field) {
      if (auto problem = read_flag_value(*field, value, d.config))
        return Status::invalid(fmt::format("{}: variable '{}': {}", kEnvironment, name, *problem));
      d.origins.env[std::string(field->key)] = name;
      d.origins.flags.erase(std::string(field->key));
      if (field->key == "node.id") d.has_id = true;
      if (field->key == "node.listen") d.has_listen = true;
      if (field->key == "node.run_dir") d.has_run_dir = true;
      continue;
    }
    if (name == kPeerVariable || name == kPeerKeyVariable || name == kBanVariable) continue;
    // A misspelt variable would silently leave its setting at the file's value.
    std::vector<std::string> known{std::string(kConfigVariable), std::string(kPeerVariable),
                                   std::string(kPeerKeyVariable), std::string(kBanVariable)};
    for (const Field& f : fields()) known.push_back(env_name(f.flag));
    std::string best;
    size_t best_distance = 4;
    for (const std::string& k : known)
      if (size_t dist = edit_distance(name, k); dist < best_distance)
        best_distance = dist, best = k;
    return Status::invalid(fmt::format(
        "{}: unknown variable '{}'{} (gossipd --print-options lists "
        "every setting and its variable)",
        kEnvironment, name, best.empty() ? "" : fmt::format("; did you mean '{}'?", best)));
  }
  const auto get = [&env](std::string_view name) -> const std::string* {
    auto it = env.variables.find(std::string(name));
    return it == env.variables.end() ? nullptr : &it->second;
  };
  if (const std::string* peers = get(kPeerVariable))
    GOSSIP_RETURN_IF_ERROR(read_peer_entries(list_entries(*peers), {true, kPeerVariable}, d));
  return Status::ok();
}

Status apply_environment_keys(const Environment& env, Document& d) {
  if (auto it = env.variables.find(std::string(kPeerKeyVariable)); it != env.variables.end())
    GOSSIP_RETURN_IF_ERROR(read_peer_keys(list_entries(it->second), {true, kPeerKeyVariable}, d));
  if (auto it = env.variables.find(std::string(kBanVariable)); it != env.variables.end())
    GOSSIP_RETURN_IF_ERROR(read_bans(list_entries(it->second), {true, kBanVariable}, d));
  return Status::ok();
}

}  // namespace

std::vector<peers::Peer> join_seeds(const DaemonConfig& config) {
  std::vector<peers::Peer> out;
  for (const auto& text : split_seeds(config.join)) out.push_back(split_seed(text));
  return out;
}

std::string env_name(std::string_view flag) {
  std::string out = "GOSSIPD_";
  for (char ch : flag.substr(flag.find_first_not_of('-')))
    out += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

Environment Environment::of_process() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.variables.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) env.hostname = name;
  return env;
}

Result<DaemonConfig> config_from_args(int argc, const char* const* argv) {
  return config_from_args(argc, argv, Environment::of_process());
}

Result<DaemonConfig> config_from_args(int argc, const char* const* argv, const Environment& env) {
  CLI::App app{
      "gossipd: the per-node daemon of decentralized data-parallel training.\n"
      "Settings come from --config FILE (TOML; see daemon/gossipd.example.toml), then from\n"
      "GOSSIPD_<FLAG> variables (--round-timeout: GOSSIPD_ROUND_TIMEOUT; GOSSIPD_CONFIG,\n"
      "GOSSIPD_PEER, GOSSIPD_PEER_KEY and GOSSIPD_BAN_PEER take what the flags take, entries\n"
      "separated by commas), then from flags, each overriding the one before (a repeated\n"
      "flag: the last one wins). --peer, when given, replaces the file's peer list.",
      "gossipd"};
  app.set_version_flag("--version", fmt::format("gossipd {} ({})", kVersion, kBuildType));
  std::string config_path;
  CLI::Option* config_option =
      app.add_option("--config", config_path, "TOML config file (GOSSIPD_CONFIG)")
          ->type_name("FILE");
  bool print_options = false, as_json = false;
  app.add_flag("--print-options", print_options,
               "print every setting (key, flag, variable, valid values, default, strategies) and "
               "exit");
  app.add_flag("--json", as_json, "with --print-options: as JSON, for programs");
  // Every value is taken as text and checked here, so that an error names the flag.
  std::array<std::string, std::tuple_size_v<std::decay_t<decltype(fields())>>> texts;
  std::array<CLI::Option*, texts.size()> options{};
  for (size_t i = 0; i < fields().size(); ++i) {
    const Field& f = fields()[i];
    options[i] =
        app.add_option(std::string(f.flag), texts[i], fmt::format("{} ({})", f.help, f.key))
            ->type_name(std::string(f.flag_arg))
            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags win
  }
  std::vector<std::string> peer_texts;
  CLI::Option* peer_option =
      app.add_option("--peer", peer_texts,
                     "another node, repeatable: ID=tcp://HOST:PORT (replaces the file's [[peers]])")
          ->type_name("ID=EP")
          ->take_all()
          ->expected(1);

  std::vector<std::string> banned_texts;
  CLI::Option* ban_option =
      app.add_option(
             "--ban-peer", banned_texts,
             "refuse a peer's CURVE key and every message from it, repeatable: ID, or NAME with "
             "--peers-from (sets peers[].banned)")
          ->type_name("ID")
          ->take_all()
          ->expected(1);

  std::vector<std::string> peer_key_texts;
  CLI::Option* peer_key_option =
      app.add_option(
             "--peer-key", peer_key_texts,
             "a peer's CURVE public key, repeatable: ID=Z85, or NAME=Z85 with --peers-from (sets "
             "peers[].public_key)")
          ->type_name("ID=KEY")
          ->take_all()
          ->expected(1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return Status::closed(app.help());
  } catch (const CLI::CallForVersion& e) {
    return Status::closed(std::string(e.what()) + "\n");
  } catch (const CLI::CallForAllHelp&) {
    return Status::closed(app.help("", CLI::AppFormatMode::All));
  } catch (const CLI::ParseError& e) {
    return Status::invalid(fmt::format("{}: {}", kCommandLine, e.what()));
  }
  if (print_options) return Status::closed(describe_options(as_json));

  if (config_option->count() == 0)
    if (auto it = env.variables.find(std::string(kConfigVariable)); it != env.variables.end())
      config_path = it->second;
  Document d;
  if (!config_path.empty()) {
    auto loaded = load_document(config_path);
    if (!loaded) return loaded.status();
    d = std::move(*loaded);
  } else {
    d.config.source = std::string(kCommandLine);
    d.origins.source = std::string(kCommandLine);
  }
  GOSSIP_RETURN_IF_ERROR(apply_environment(env, d));

  for (size_t i = 0; i < fields().size(); ++i) {
    if (options[i]->count() == 0) continue;
    const Field& f = fields()[i];
    if (auto problem = read_flag_value(f, texts[i], d.config))
      return Status::invalid(fmt::format("{}: flag '{}': {}", kCommandLine, f.flag, *problem));
    d.origins.flags[std::string(f.key)] = std::string(f.flag);
    d.origins.env.erase(std::string(f.key));
    if (f.key == "node.id") d.has_id = true;
    if (f.key == "node.listen") d.has_listen = true;
    if (f.key == "node.run_dir") d.has_run_dir = true;
  }
  if (peer_option->count() > 0)
    GOSSIP_RETURN_IF_ERROR(read_peer_entries(peer_texts, {false, "--peer"}, d));
  if (!d.config.peers_from.empty()) GOSSIP_RETURN_IF_ERROR(apply_peers_from(d, env));

  GOSSIP_RETURN_IF_ERROR(apply_environment_keys(env, d));
  if (peer_key_option->count() > 0)
    GOSSIP_RETURN_IF_ERROR(read_peer_keys(peer_key_texts, {false, "--peer-key"}, d));
  if (ban_option->count() > 0)
    GOSSIP_RETURN_IF_ERROR(read_bans(banned_texts, {false, "--ban-peer"}, d));

  GOSSIP_RETURN_IF_ERROR(check_required(d, true));
  GOSSIP_RETURN_IF_ERROR(check_config(d.config, d.origins));
  return std::move(d.config);
}

peers::DeadAfter StrategyConfig::dead_after() const {
  const auto ms = [](double s) {
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
  };
  peers::DeadAfter d(ms(dead_after_s));
  d.factor = dead_after_factor;
  d.floor = ms(dead_after_floor_s);
  d.ceiling = ms(round_timeout_s);
  return d;
}

}  // namespace gossip::daemon
