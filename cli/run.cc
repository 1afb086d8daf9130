// gossipctl run: a node's daemon and trainers, supervised as one job step.
#include "cli/run.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "cli/process.h"
#include "daemon/config.h"

namespace gossip::cli {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A run directory of the launcher's own, for a node whose settings name none.
class OwnRunDir {
 public:
  Status make() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = fmt::format("{}/gossipd-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (::mkdtemp(pattern.data()) == nullptr)
      return Status::io_error(
          fmt::format("cannot make a run directory from {}: {}", pattern, std::strerror(errno)));
    path_ = pattern;
    return Status::ok();
  }
  ~OwnRunDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> daemon_args(const RunOptions& o, const std::string& gossipd,
                                     const std::string& run_dir) {
  std::vector<std::string> argv{gossipd};
  if (!o.config.empty()) argv.insert(argv.end(), {"--config", o.config});
  for (const auto& [flag, value] : o.daemon_flags) argv.insert(argv.end(), {flag, value});
  for (const auto& p : o.peers) argv.insert(argv.end(), {"--peer", p});
  if (!run_dir.empty()) argv.insert(argv.end(), {"--run-dir", run_dir});
  return argv;
}

Result<daemon::DaemonConfig> resolve(const std::vector<std::string>& argv) {
  std::vector<const char*> raw;
  for (const auto& a : argv) raw.push_back(a.c_str());
  raw.push_back(nullptr);
  return daemon::config_from_args(static_cast<int>(argv.size()), raw.data());
}

// One supervised part: the daemon or a trainer.
struct Part {
  std::string name;
  Process process;
};

int exit_code(const ExitStatus& s) { return s.signal != 0 ? 128 + s.signal : s.code; }

int run(RunOptions& o) {
  if (o.command.empty()) {
    spdlog::error("no trainer command: gossipctl run [OPTIONS] -- COMMAND [ARGS...]");
    return kExitUsage;
  }
  auto gossipd = resolve_program(o.gossipd, "gossipd", "--gossipd");
  if (!gossipd) {
    spdlog::error("{}", gossipd.status().message());
    return kExitUsage;
  }
  // The daemon's settings are read here as gossipd will read them (same flags, same
  // environment), so the trainers can be told its node id and socket before it is up.
  OwnRunDir own_dir;
  auto config = resolve(daemon_args(o, *gossipd, ""));
  if (!config && config.status().message().find("'node.run_dir'") != std::string::npos &&
      o.daemon_flags.count("--run-dir") == 0) {
    if (Status st = own_dir.make(); !st) {
      spdlog::error("{}", st.message());
      return kExitFailure;
    }
    config = resolve(daemon_args(o, *gossipd, own_dir.path()));
  }
  if (!config) {
    spdlog::error("gossipd's settings: {}", config.status().message());
    return kExitUsage;
  }
  const int gpus = visible_gpus();
  const int per_node = o.nproc_per_node > 0 ? o.nproc_per_node : std::max(gpus, 1);
  if (static_cast<uint32_t>(per_node) > config->max_trainers) {
    spdlog::error("--nproc-per-node {} is more than node.max_trainers {} (raise --max-trainers)",
                  per_node, config->max_trainers);
    return kExitUsage;
  }
  const std::string endpoint = config->ipc_endpoint();
  spdlog::info("node {}{} of {}: gossipd and {} trainer(s) on {}", config->node_id,
               config->node_name.empty() ? "" : " (" + config->node_name + ")", config->nodes(),
               per_node, gpus > 0 ? "GPUs" : "CPU");

  // A bare name is looked up in PATH, then beside gossipctl (where gossip-train installs).
  auto program = resolve_program(o.command[0], o.command[0], "the trainer command");
  if (!program && o.command[0].find('/') == std::string::npos)
    program = resolve_program("", o.command[0], "the trainer command");
  if (!program) {
    spdlog::error("{}", program.status().message());
    return kExitUsage;
  }

  StopSignals signals;
  std::vector<std::unique_ptr<Part>> parts;
  auto start = [&](std::string name, std::vector<std::string> argv,
                   std::vector<std::string> env) -> Status {
    auto p = Process::spawn(SpawnOptions{std::move(argv), "", "", std::move(env)});
    if (!p) return p.status();
    parts.push_back(std::make_unique<Part>(Part{std::move(name), std::move(*p)}));
    return Status::ok();
  };
  auto stop_all = [&] {
    std::vector<Process*> running;
    for (auto& part : parts) running.push_back(&part->process);
    terminate_all(running, std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::duration<double>(o.grace_s)));
  };

  auto daemon_argv = daemon_args(o, *gossipd, own_dir.path());
  // The node's first round waits for all of its trainers, unless the settings say otherwise.
  if (o.daemon_flags.count("--expect-trainers") == 0 &&
      std::getenv("GOSSIPD_EXPECT_TRAINERS") == nullptr && config->expect_trainers == 0)
    daemon_argv.insert(daemon_argv.end(), {"--expect-trainers", std::to_string(per_node)});
  if (Status st = start("gossipd", daemon_argv, {}); !st) {
    spdlog::error("{}", st.message());
    return kExitFailure;
  }
  for (int local = 0; local < per_node; ++local) {
    auto env =
        trainer_environment(endpoint, config->node_id, config->nodes(), local, per_node, gpus > 0);
    if (std::getenv("GOSSIP_STARTUP_TIMEOUT") == nullptr)
      env.push_back(fmt::format("GOSSIP_STARTUP_TIMEOUT={}", o.startup_timeout_s));
    std::vector<std::string> argv = o.command;
    argv[0] = *program;
    if (Status st = start(fmt::format("trainer {}", local), argv, env); !st) {
      spdlog::error("{}", st.message());
      stop_all();
      return kExitFailure;
    }
  }

  // Until every trainer has finished, one part fails, or a signal comes.
  std::optional<int> failed;
  while (!failed) {
    if (int sig = signals.received()) {
      spdlog::warn("signal {}: stopping gossipd and the trainers", sig);
      failed = 128 + sig;
      break;
    }
    bool trainers_running = false;
    for (size_t i = 0; i < parts.size(); ++i) {
      auto& part = *parts[i];
      auto st = part.process.poll();
      if (!st) {
        if (i > 0) trainers_running = true;
        continue;
      }
      if (i == 0) {
        spdlog::error("gossipd {} before the trainers finished", st->describe());
        failed = st->success() ? kExitFailure : exit_code(*st);
        break;
      }
      if (!st->success()) {
        spdlog::error("{} {}: stopping the others", part.name, st->describe());
        failed = exit_code(*st);
        break;
      }
    }
    if (failed || !trainers_running) break;
    std::this_thread::sleep_for(50ms);
  }
  stop_all();
  if (failed) return *failed;
  // Every trainer succeeded; gossipd was stopped by SIGTERM, which it takes as a request.
  const auto& daemon_exit = parts[0]->process.exit_status();
  if (daemon_exit && daemon_exit->signal == 0 && daemon_exit->code != 0) {
    spdlog::error("gossipd {} on SIGTERM", daemon_exit->describe());
    return daemon_exit->code;
  }
  return kExitOk;
}

}  // namespace

int visible_gpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    std::string_view v(visible);
    if (v.empty() || v == "-1" || v == "NoDevFiles") return 0;
    return static_cast<int>(std::count(v.begin(), v.end(), ',')) + 1;
  }
  int n = 0;
  while (::access(fmt::format("/dev/nvidia{}", n).c_str(), F_OK) == 0) ++n;
  return n;
}

std::vector<std::string> trainer_environment(const std::string& endpoint, uint32_t node,
                                             uint32_t nodes, int local, int per_node, bool gpus) {
  const uint64_t rank = uint64_t{node} * per_node + local;
  const uint64_t world = uint64_t{nodes} * per_node;
  return {fmt::format("GOSSIP_ENDPOINT={}", endpoint),
          fmt::format("GOSSIP_NODE={}", node),
          fmt::format("GOSSIP_NODES={}", nodes),
          fmt::format("GOSSIP_LOCAL_RANK={}", local),
          fmt::format("GOSSIP_LOCAL_WORLD_SIZE={}", per_node),
          fmt::format("GOSSIP_RANK={}", rank),
          fmt::format("GOSSIP_WORLD_SIZE={}", world),
          fmt::format("GOSSIP_DEVICE={}", gpus ? fmt::format("cuda:{}", local) : "cpu"),
          fmt::format("LOCAL_RANK={}", local),
          fmt::format("RANK={}", rank),
          fmt::format("WORLD_SIZE={}", world),
          fmt::format("LOCAL_WORLD_SIZE={}", per_node)};
}

Subcommand add_run_command(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand(
      "run",
      "On this node: start gossipd and one trainer per GPU (or --nproc-per-node), supervised "
      "together; the counterpart of torchrun. Under Slurm: srun gossipctl run --peers-from "
      "slurm -- COMMAND");
  app->add_option("--nproc-per-node", o->nproc_per_node,
                  "trainers on this node; default: one per visible GPU, else 1")
      ->check(CLI::Range(1, 64));
  app->add_option("--gossipd", o->gossipd, "the gossipd executable; default: beside gossipctl");
  app->add_option("--config", o->config, "gossipd's TOML config file");
  app->add_option("--peer", o->peers, "another node for gossipd, repeatable: ID=tcp://HOST:PORT")
      ->take_all()
      ->expected(1);
  app->add_option("--grace", o->grace_s, "seconds between SIGTERM and SIGKILL when stopping")
      ->check(CLI::Range(0.1, 3600.0));
  app->add_option("--startup-timeout", o->startup_timeout_s,
                  "GOSSIP_STARTUP_TIMEOUT for the trainers (how long they wait for gossipd), "
                  "unless it is set already")
      ->check(CLI::Range(0.0, 3600.0));
  app->add_option("command", o->command, "the trainer and its arguments, after --")->take_all();
  // Every gossipd setting, per-node ones included: this is one node's launcher.
  for (const daemon::Setting& setting : daemon::settings()) {
    app->add_option_function<std::string>(
           setting.flag,
           [o, flag = setting.flag](const std::string& value) { o->daemon_flags[flag] = value; },
           fmt::format("gossipd: {}", setting.help))
        ->type_name(setting.arg)
        ->group("gossipd settings (passed to gossipd; also GOSSIPD_<FLAG>, docs/options.md)");
  }
  return Subcommand{app, [o] { return run(*o); }};
}

}  // namespace gossip::cli
