// gossipctl cluster's options: what they mean for the daemons (checked by gossipd's own
// parser), the command line that sets them, and the loopback ports the run takes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "cli/cluster.h"
#include "cli/consensus.h"
#include "cli/evaluations.h"
#include "cli/json.h"
#include "cli/keygen.h"
#include "cli/process.h"
#include "cli/progress.h"
#include "cli/run_files.h"
#include "compression/codec_spec.h"
#include "peers/mixing_matrix.h"
#include "peers/topology.h"
#include "sgd/registry.h"

namespace gossip::cli {

Result<Straggler> parse_straggler(const std::string& text, int nodes) {
  const auto colon = text.find(':');
  Straggler s;
  if (colon != std::string::npos) {
    const char* begin = text.data();
    auto [p1, e1] = std::from_chars(begin, begin + colon, s.node);
    auto [p2, e2] = std::from_chars(begin + colon + 1, begin + text.size(), s.factor);
    if (e1 == std::errc() && p1 == begin + colon && e2 == std::errc() &&
        p2 == begin + text.size() && s.node >= 0 && s.node < nodes && std::isfinite(s.factor) &&
        s.factor >= 1)
      return s;
  }
  return Status::invalid(fmt::format(
      "expected NODE:FACTOR with NODE in 0..{} and FACTOR >= 1, got '{}'", nodes - 1, text));
}
std::optional<Straggler> straggler_of(const ClusterOptions& o) {
  if (o.straggler.empty()) return std::nullopt;
  auto s = parse_straggler(o.straggler, o.nodes);
  return s ? std::optional<Straggler>(*s) : std::nullopt;
}

Result<std::pair<int, std::string>> parse_gossipd_on(const std::string& text, int nodes) {
  const auto eq = text.find('=');
  int node = -1;
  if (eq != std::string::npos) {
    auto [p, e] = std::from_chars(text.data(), text.data() + eq, node);
    if (e == std::errc() && p == text.data() + eq && node >= 0 && node < nodes &&
        eq + 1 < text.size())
      return std::pair<int, std::string>{node, text.substr(eq + 1)};
  }
  return Status::invalid(
      fmt::format("expected NODE=PATH with NODE in 0..{}, got '{}'", nodes - 1, text));
}

// --- options -----------------------------------------------------------------------

int64_t ClusterOptions::effective_eval_every() const {
  if (eval_every) return *eval_every;
  return std::max<int64_t>(1, steps / 10);
}

Status validate_partition(std::string_view partition) {
  if (partition == "iid") return Status::ok();
  constexpr std::string_view kDirichlet = "dirichlet:";
  if (partition.substr(0, kDirichlet.size()) == kDirichlet) {
    const std::string_view alpha = partition.substr(kDirichlet.size());
    double v = 0;
    const auto [ptr, ec] = std::from_chars(alpha.data(), alpha.data() + alpha.size(), v);
    if (!alpha.empty() && ec == std::errc() && ptr == alpha.data() + alpha.size() &&
        std::isfinite(v) && v > 0) {
      return Status::ok();
    }
    return Status::invalid(
        fmt::format("dirichlet ALPHA must be a positive number, got '{}'", alpha));
  }
  return Status::invalid(fmt::format("expected iid or dirichlet:ALPHA, got '{}'", partition));
}

namespace {

// Node 0's gossipd settings as gossipd reads them: its parser, its checks, its
// defaults, over the cluster's shape (the ids and loopback stand-ins for addresses).
// Errors come back as "--flag: problem".
Result<daemon::DaemonConfig> daemon_settings(const ClusterOptions& o) {
  std::vector<std::string> args = {"gossipd",           "--id",      "0", "--listen",
                                   "tcp://127.0.0.1:1", "--run-dir", "/"};
  for (int j = 1; j < std::max(o.nodes, 1); ++j) {
    args.emplace_back("--peer");
    args.push_back(fmt::format("{}=tcp://127.0.0.1:{}", j, j + 1));
  }
  for (const auto& [flag, value] : o.daemon_flags) {
    args.push_back(flag);
    args.push_back(value);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  auto d = daemon::config_from_args(static_cast<int>(argv.size()), argv.data());
  if (d) return d;
  // "command line: flag '--period': problem" -> "--period: problem"
  std::string message = d.status().message();
  constexpr std::string_view kPrefix = "command line: flag '";
  if (message.starts_with(kPrefix)) {
    const size_t end = message.find("': ", kPrefix.size());
    if (end != std::string::npos)
      message =
          message.substr(kPrefix.size(), end - kPrefix.size()) + ": " + message.substr(end + 3);
  }
  return Status::invalid(message);
}

// Every check; the gossipd settings they make go to *settings when it is not null.
Status check_cluster_options(const ClusterOptions& o, daemon::DaemonConfig* settings) {
  auto bad = [](std::string_view flag, std::string what) {
    return Status::invalid(fmt::format("{}: {}", flag, what));
  };
  if (o.nodes < 1 || o.nodes > kMaxClusterNodes) {
    return bad("--nodes",
               fmt::format("must be between 1 and {}, got {}", kMaxClusterNodes, o.nodes));
  }
  auto d = daemon_settings(o);
  if (!d) return d.status();
  if (settings) *settings = std::move(*d);
  if (o.steps < 1) return bad("--steps", fmt::format("must be at least 1, got {}", o.steps));
  if (Status st = validate_partition(o.partition); !st) return bad("--partition", st.message());
  if (!o.straggler.empty()) {
    if (auto s = parse_straggler(o.straggler, o.nodes); !s)
      return bad("--straggler", s.status().message());
  }
  for (int b : o.banned) {
    if (!o.curve) return bad("--ban-peer", "banning a node needs --curve (keys to ban)");
    if (b >= o.nodes) return bad("--ban-peer", fmt::format("no node {} in {}", b, o.nodes));
  }
  for (const auto& spec : o.gossipd_on) {
    auto on = parse_gossipd_on(spec, o.nodes);
    if (!on) return bad("--gossipd-on", on.status().message());
    if (::access(on->second.c_str(), X_OK) != 0)
      return bad("--gossipd-on", fmt::format("'{}' is not an executable", on->second));
  }
  if (o.batch < 1) return bad("--batch", fmt::format("must be at least 1, got {}", o.batch));
  if (!std::isfinite(o.lr) || o.lr <= 0) return bad("--lr", "must be a positive number");
  if (o.eval_every && *o.eval_every < 0) {
    return bad("--eval-every", fmt::format("must be at least 0, got {}", *o.eval_every));
  }
  if (o.base_port != 0 && (o.base_port < 1 || o.base_port + o.nodes - 1 > 65535)) {
    return bad("--base-port", fmt::format("ports {}..{} are not all valid TCP ports", o.base_port,
                                          o.base_port + o.nodes - 1));
  }
  if (!std::isfinite(o.timeout_s) || o.timeout_s <= 0) {
    return bad("--timeout", "must be a positive number of seconds");
  }
  if (!std::isfinite(o.stop_grace_s) || o.stop_grace_s < 0) {
    return bad("--stop-grace", "must not be negative");
  }
  if (!o.hosts.empty() && o.hosts.size() != static_cast<size_t>(o.nodes)) {
    return bad("--hosts", fmt::format("names {} hosts for {} nodes", o.hosts.size(), o.nodes));
  }
  for (const std::string& h : o.hosts) {
    if (h.empty() || h.find_first_of(" /:,") != std::string::npos)
      return bad("--hosts", fmt::format("'{}' is not a host name or IPv4 address", h));
  }
  if (!o.netns.empty() && o.hosts.empty()) {
    return bad("--netns", "needs --hosts: 127.0.0.1 in a namespace reaches no other node");
  }
  return Status::ok();
}

}  // namespace

// --- the command -------------------------------------------------------------------

Subcommand add_cluster_command(CLI::App& parent) {
  auto o = std::make_shared<ClusterOptions>();
  CLI::App* app = parent.add_subcommand("cluster",
                                        "Start N gossipd daemons and N trainers on loopback, show "
                                        "progress, stop them, print a summary");
  app->option_defaults()->always_capture_default();

  const CLI::Validator partition(
      [](std::string& value) {
        const Status st = validate_partition(value);
        return st ? std::string() : st.message();
      },
      "iid|dirichlet:ALPHA", "PARTITION");

  app->add_option("--nodes", o->nodes, "Number of nodes (daemon + trainer each)")
      ->check(CLI::Range(1, kMaxClusterNodes));
  app->add_option("--steps", o->steps, "Training steps per node")->check(CLI::PositiveNumber);
  app->add_option("--partition", o->partition, "Data split across nodes: iid or dirichlet:ALPHA")
      ->check(partition);
  app->add_option("--out", o->out,
                  "Keep the run directory (CSVs, results, logs) here; default: a temp dir, removed")
      ->default_str("");
  app->add_flag("--json", o->json, "Print one JSON object on stdout instead of the table")
      ->default_str("");
  app->add_option("--straggler", o->straggler,
                  "NODE:FACTOR: slow that node's trainer down FACTOR times (experiments)")
      ->default_str("");
  app->add_option("--model", o->model,
                  "The trainers' model: mlp (784-256-128-10, 235k parameters) or cnn (two 5x5 "
                  "convolutions and a 2048-wide layer, 3.2M parameters: 13 MB a model)")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app->add_option("--batch", o->batch, "Mini-batch size")->check(CLI::PositiveNumber);
  app->add_option("--lr", o->lr, "Learning rate")->check(CLI::PositiveNumber);
  app->add_option("--eval-every", o->eval_every,
                  "Evaluate (and write a CSV row) every E steps; 0: at the end only (each "
                  "evaluation of the 10,000 test images costs as much as ~50 training steps); "
                  "default: steps/10")
      ->check(CLI::NonNegativeNumber)
      ->default_str("");
  app->add_option("--base-port", o->base_port,
                  "Node i listens on port P+i; default: free ports picked at random")
      ->check(CLI::Range(1, 65535))
      ->default_str("");
  app->add_option("--timeout", o->timeout_s, "Overall deadline in seconds")
      ->check(CLI::PositiveNumber);
  app->add_option("--stop-grace", o->stop_grace_s,
                  "Seconds between SIGTERM and SIGKILL when stopping a process")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--gossipd", o->gossipd, "The gossipd executable; default: beside gossipctl")
      ->default_str("");
  app->add_option("--gossipd-on", o->gossipd_on,
                  "NODE=PATH: that node runs another gossipd executable (another version; the "
                  "hostile node of tests/security)")
      ->default_str("");
  app->add_option("--ban-peer", o->banned,
                  "NODE: every other node refuses its key and its messages (needs --curve), "
                  "repeatable")
      ->check(CLI::NonNegativeNumber)
      ->default_str("");
  app->add_flag("--curve", o->curve,
                "Encrypt and authenticate the peer channel with CURVE: a fresh key pair per node "
                "(its secret in node-<i>.toml in the run directory)")
      ->default_str("");
  app->add_option("--trainer", o->trainer,
                  "The trainer executable; default: gossip-train beside gossipctl")
      ->default_str("");
  app->add_flag("--evaluations", o->evaluations,
                "Also write evaluations.csv to the run directory: per evaluation step the bytes "
                "sent, training loss, the nodes' mean accuracy, the average model's accuracy and "
                "the consensus distance (use with --out)")
      ->default_str("");
  app->add_option("--hosts", o->hosts,
                  "Comma-separated: node i's daemon listens on the i-th host; default: 127.0.0.1")
      ->delimiter(',')
      ->default_str("");
  app->add_option("--netns", o->netns,
                  "Run daemon i in network namespace PREFIXi with `ip netns exec` (needs root and "
                  "--hosts; experiments/testbed.py makes them)")
      ->default_str("");

  // Every gossipd setting that is the same on all nodes, from gossipd's own schema:
  // its flag, its help and its default; the value goes to every daemon as given.
  for (const daemon::Setting& setting : daemon::settings()) {
    if (setting.per_node) continue;
    app->add_option_function<std::string>(
           setting.flag,
           [o, flag = setting.flag](const std::string& value) { o->daemon_flags[flag] = value; },
           fmt::format("gossipd: {}", setting.help))
        ->type_name(setting.arg)
        ->default_str(o->daemon_flags.count(setting.flag) ? o->daemon_flags.at(setting.flag)
                                                          : setting.fallback)
        ->group("gossipd settings (passed to every node; see docs/options.md)");
  }

  return Subcommand{app, [o] { return run_cluster(*o); }};
}

Status validate_cluster_options(const ClusterOptions& o) {
  return check_cluster_options(o, nullptr);
}

Status resolve_cluster_options(ClusterOptions& o) {
  daemon::DaemonConfig settings;
  GOSSIP_RETURN_IF_ERROR(check_cluster_options(o, &settings));
  o.daemon = std::move(settings);
  return Status::ok();
}

}  // namespace gossip::cli
