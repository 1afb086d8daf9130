// gossip-train: the reference Fashion-MNIST trainer. It attaches to its node's gossipd
// (or runs alone with --standalone) and trains an MLP in the daemon's shared memory.
// The flag names, the CSV columns and the --result JSON are a contract with the
// launch and plotting scripts.
//
// Exit codes: 0 success, 1 runtime error, 2 bad flags.

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <string>

#include "base/version.h"
#include "experiments/trainer/dataset.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/partition.h"
#include "experiments/trainer/run.h"

namespace {

constexpr int kBadFlags = 2;

int bad_flags(const std::string& message) {
  fmt::print(stderr, "gossip-train: {}\nRun with --help for more information.\n", message);
  return kBadFlags;
}

}  // namespace

int main(int argc, char** argv) {
  using gossip::trainer::RunOptions;
  RunOptions o;
  o.data_dir = gossip::trainer::kDefaultDataDir;
  std::string partition = "iid";
  std::string lr_schedule = "constant";
  std::string model = "mlp";

  CLI::App app{
      "gossip-train: reference Fashion-MNIST trainer (an MLP 784-256-128-10 or a 3.2M-parameter "
      "CNN) for gossipd"};
  app.set_version_flag("--version", std::string("gossip-train ") + gossip::kVersion);
  auto* endpoint = app.add_option("--endpoint", o.endpoint,
                                  "the daemon's IPC endpoint, ipc://DIR/gossipd-N.sock "
                                  "(required unless --standalone)")
                       ->envname("GOSSIP_ENDPOINT");  // gossipctl run's variables
  app.add_flag("--standalone", o.standalone,
               "no daemon: a single-node baseline on the whole training set "
               "(or on shard --node of --nodes)")
      ->excludes(endpoint);
  app.add_option("--node", o.node, "this trainer's shard index")
      ->envname("GOSSIP_RANK")
      ->capture_default_str();
  app.add_option("--nodes", o.nodes, "number of shards (trainers in the cluster)")
      ->envname("GOSSIP_WORLD_SIZE")
      ->capture_default_str();
  app.add_option("--model", model,
                 "mlp (784-256-128-10, 235k parameters) or cnn (two 5x5 convolutions and a "
                 "2048-wide layer, 3.2M parameters); every trainer of a cluster the same")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "SGD steps")->capture_default_str();
  app.add_option("--batch", o.batch, "minibatch size")->capture_default_str();
  app.add_option("--lr", o.sgd.lr, "learning rate")->capture_default_str();
  app.add_option("--lr-schedule", lr_schedule, "constant, or cosine: decays --lr to 0 over --steps")
      ->capture_default_str();
  app.add_option("--momentum", o.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o.sgd.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_option("--seed", o.seed,
                 "seed of the model init (the same on every node) and, with the node, of the "
                 "data split and sampling")
      ->capture_default_str();
  app.add_option("--partition", partition, "data split: iid or dirichlet:ALPHA")
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "evaluate every E steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--csv", o.csv_path,
                 "write step,wall_seconds,loss,test_accuracy,payload_sent,payload_recv,"
                 "wire_sent,wire_recv rows to FILE");
  app.add_option("--result", o.result_path, "write the final result as one JSON line to FILE");
  app.add_option("--slowdown", o.slowdown,
                 "a straggler: each step takes FACTOR times as long (sleeps the difference)")
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--save-model", o.save_model_path,
                 "after the final synchronization, write the parameters (flat fp32) to FILE");
  app.add_option("--snapshot", o.snapshot_prefix,
                 "at every evaluation, also write the parameters to PREFIX<step>.model");
  app.add_option("--evaluate", o.evaluate_model_path,
                 "no training: report the test accuracy of the parameters saved in FILE");
  app.add_option("--data-dir", o.data_dir, "directory of the Fashion-MNIST .gz files")
      ->capture_default_str();
  app.add_option("--name", o.name, "trainer name sent to the daemon (default gossip-train-N)");
  app.add_option("--local-rank", o.local_rank, "this trainer's rank within its node")
      ->envname("GOSSIP_LOCAL_RANK")
      ->capture_default_str();
  app.add_option("--timeout-s", o.timeout_s, "bound on every wait for the daemon, in seconds")
      ->capture_default_str();
  app.add_option("--startup-timeout-s", o.startup_timeout_s,
                 "how long to wait for a daemon that is not up yet, in seconds (0: "
                 "GOSSIP_STARTUP_TIMEOUT, else fail at once)")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every real parse error exits 2.
    return app.exit(e) == 0 ? 0 : kBadFlags;
  }

  if (!o.standalone && o.endpoint.empty() && o.evaluate_model_path.empty()) {
    return bad_flags("--endpoint is required unless --standalone or --evaluate");
  }
  if (o.nodes == 0) return bad_flags("--nodes must be at least 1");
  if (o.node >= o.nodes) {
    return bad_flags(fmt::format("--node {} must be below --nodes {}", o.node, o.nodes));
  }
  if (o.steps == 0) return bad_flags("--steps must be at least 1");
  if (o.batch == 0) return bad_flags("--batch must be at least 1");
  if (!std::isfinite(o.sgd.lr) || o.sgd.lr <= 0) return bad_flags("--lr must be positive");
  if (!(o.sgd.momentum >= 0 && o.sgd.momentum < 1)) {
    return bad_flags("--momentum must be in [0, 1)");
  }
  if (!std::isfinite(o.sgd.weight_decay) || o.sgd.weight_decay < 0) {
    return bad_flags("--weight-decay must be non-negative");
  }
  if (!std::isfinite(o.startup_timeout_s) || o.startup_timeout_s < 0 || o.startup_timeout_s > 86400)
    return bad_flags("--startup-timeout-s must be between 0 and 86400");
  if (!std::isfinite(o.timeout_s) || o.timeout_s <= 0) {
    return bad_flags("--timeout-s must be positive");
  }
  auto parsed = gossip::trainer::parse_partition(partition);
  if (!parsed) return bad_flags(parsed.status().message());
  o.partition = *parsed;
  auto kind = gossip::trainer::parse_model_kind(model);
  if (!kind) return bad_flags(fmt::format("--model {}: not mlp or cnn", model));
  o.model = *kind;
  auto schedule = gossip::trainer::parse_lr_schedule(lr_schedule);
  if (!schedule) return bad_flags(schedule.status().message());
  o.lr_schedule = *schedule;
  if (o.name.empty()) {
    o.name = o.local_rank == 0 ? fmt::format("gossip-train-{}", o.node)
                               : fmt::format("gossip-train-{}.{}", o.node, o.local_rank);
  }

  // Progress goes to stderr; stdout carries only the final summary line.
  auto logger = spdlog::stderr_color_mt("gossip-train");
  logger->set_pattern("[%H:%M:%S.%e] [%n %l] %v");
  spdlog::set_default_logger(logger);

  return gossip::trainer::run(o);
}
