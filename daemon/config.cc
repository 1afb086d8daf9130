// gossipd's configuration: a TOML file (see daemon/gossipd.example.toml) and flags.
//
// Every scalar setting is described once, in the table of config_fields.cc: its TOML
// key, its flag, its type and range, and how it is stored. The TOML reader, the flag
// reader and validate_config all work from that table, so a setting cannot be
// range-checked in one path and not in another, and every error can name the key (or
// flag) and the source it came from. This file: the public entry points and the flags;
// config_check.cc checks a whole config; config_sources.cc reads the TOML document,
// the environment and the peer lists.

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
#include "daemon/config_internal.h"
#include "daemon/peers_from.h"
#include "peers/curve_auth.h"
#include "peers/node_ids.h"
#include "peers/topology.h"
#include "sgd/collectives/ring_schedule.h"
#include "sgd/registry.h"

namespace gossip::daemon {

using namespace config_internal;  // NOLINT(google-build-using-namespace): this file's own pieces
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

Result<sgd::StrategyParams> strategy_params(const StrategyConfig& sc) {
  sgd::StrategyParams p;
  p.gamma = sc.gamma;
  p.delay = sc.delay;
  p.staleness = sc.staleness;
  p.trim = sc.trim;
  p.clip = sc.clip == "on";
  auto outer_kind = sgd::parse_outer_kind(sc.outer.kind);
  if (!outer_kind) return outer_kind.status();
  p.outer = {*outer_kind, sc.outer.lr, sc.outer.momentum};
  auto mode = sgd::parse_ps_mode(sc.ps_mode, &p.ps.staleness);
  if (!mode) return mode.status();
  auto server_optimizer = sgd::parse_server_optimizer(sc.ps_optimizer);
  if (!server_optimizer) return server_optimizer.status();
  p.ps.servers = sc.servers;
  p.ps.replicas = sc.ps_replicas;
  p.ps.mode = *mode;
  p.ps.fetch = sc.ps_fetch;
  p.ps.optimizer.kind = *server_optimizer;
  p.ps.optimizer.lr = sc.ps_lr;
  p.ps.optimizer.momentum = sc.ps_momentum;
  p.sma_alpha = sc.sma_alpha;
  p.learners_per_device = sc.learners_per_device;
  return p;
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
            r.fallback = s.range.is_auto(s.get(defaults)) ? std::string("auto")
                                                          : fmt::format("{}", s.get(defaults));
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
  bool check_only = false;
  app.add_flag("--check", check_only,
               "check the configuration (file, variables and flags) and exit: 0 and what this "
               "node would be, or 2 and the problem; nothing is bound, joined or written");
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
  if (check_only) {
    const DaemonConfig& c = d.config;
    return Status::closed(
        c.join.empty()
            ? fmt::format("gossipd: the configuration is valid: node {} of {}, listening on {}, "
                          "strategy {}\n",
                          c.node_id, c.nodes(), c.listen, c.strategy.name)
            : fmt::format("gossipd: the configuration is valid: joining through {}, listening "
                          "on {}, strategy {}\n",
                          c.join, c.listen, c.strategy.name));
  }
  return std::move(d.config);
}

double StrategyConfig::round_timeout_factor_in_force() const {
  if (!std::isnan(round_timeout_factor)) return round_timeout_factor;
  return gossip_family() ? kAutoRoundTimeoutFactor : 0.0;
}

bool StrategyConfig::gossip_family() const {
  const sgd::StrategyDescriptor* d = sgd::find_strategy(name);
  return d && d->fabric == sgd::Fabric::kOverlay;
}

peers::DeadAfter StrategyConfig::dead_after() const {
  const auto ms = [](double s) {
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
  };
  peers::DeadAfter d(ms(dead_after_s));
  d.factor = !std::isnan(dead_after_factor) ? dead_after_factor
             : gossip_family()              ? kAutoDeadAfterFactor
                                            : 0.0;
  d.floor = ms(dead_after_floor_s);
  d.ceiling = ms(round_timeout_s);
  return d;
}

}  // namespace gossip::daemon
