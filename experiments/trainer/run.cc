#include "experiments/trainer/run.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "experiments/trainer/dataset.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/model_file.h"
#include "experiments/trainer/report.h"
#include "experiments/trainer/trainer.h"
#include "gossip/client.h"

namespace gossip::trainer {
namespace {

int fail(const Status& status) {
  fmt::print(stderr, "gossip-train: {}\n", status.message());
  return 1;
}

TrafficCounts counts(const gossip::Traffic& t) {
  return {t.payload_sent, t.payload_recv, t.wire_sent, t.wire_recv};
}

std::string bytes(uint64_t n) {
  if (n < 10'000) return fmt::format("{} B", n);
  if (n < 10'000'000) return fmt::format("{:.1f} kB", static_cast<double>(n) / 1e3);
  if (n < 10'000'000'000) return fmt::format("{:.1f} MB", static_cast<double>(n) / 1e6);
  return fmt::format("{:.1f} GB", static_cast<double>(n) / 1e9);
}

// Sums training losses between two CSV rows.
struct LossWindow {
  double sum = 0;
  uint64_t steps = 0;
  double mean() const { return steps ? sum / static_cast<double>(steps) : 0.0; }
};

// --evaluate: the test accuracy of a saved model (gossipctl's average of the nodes).
int evaluate_saved(const RunOptions& o, const Dataset& test) {
  auto values = load_model(o.evaluate_model_path, model_parameters(o.model));
  if (!values) return fail(values.status());
  auto model = make_model(o.model, tensor_views(model_layout(o.model), values->data()));
  if (!model) return fail(model.status());
  const Evaluation eval = evaluate(**model, test);
  RunResult result;
  result.node = o.node;
  result.accuracy_local = eval.accuracy;
  result.accuracy_average = eval.accuracy;
  result.test_loss = eval.loss;
  if (!o.result_path.empty()) {
    if (Status s = write_file_atomically(o.result_path, to_json(result) + "\n"); !s) return fail(s);
  }
  fmt::print("gossip-train: {} has test accuracy {:.2f}% (loss {:.4f})\n", o.evaluate_model_path,
             100 * eval.accuracy, eval.loss);
  return 0;
}

}  // namespace

int run(const RunOptions& o) {
  // Fail before training rather than after it when the result has nowhere to go.
  if (!o.result_path.empty()) {
    std::error_code ec;
    const auto parent = std::filesystem::absolute(o.result_path, ec).parent_path();
    if (ec || !std::filesystem::is_directory(parent, ec)) {
      return fail(Status::not_found(
          fmt::format("--result {}: directory {} does not exist", o.result_path, parent.string())));
    }
  }
  // Data first: a trainer that cannot train should not join the node.
  if (!o.evaluate_model_path.empty()) {
    auto test = load_fashion_mnist(o.data_dir, Split::kTest);
    return test ? evaluate_saved(o, *test) : fail(test.status());
  }
  auto train = load_fashion_mnist(o.data_dir, Split::kTrain);
  if (!train) return fail(train.status());
  auto test = load_fashion_mnist(o.data_dir, Split::kTest);
  if (!test) return fail(test.status());
  auto shards = make_shards(train->labels, kNumClasses, o.partition, o.nodes, o.seed);
  if (!shards) return fail(shards.status().with_context("--partition " + o.partition.to_string()));
  std::vector<uint32_t> shard = std::move((*shards)[o.node]);
  const size_t shard_size = shard.size();

  std::optional<CsvLog> csv;
  if (!o.csv_path.empty()) {
    auto opened = CsvLog::open(o.csv_path);
    if (!opened) return fail(opened.status());
    csv.emplace(std::move(*opened));
  }

  std::vector<float> own_parameters;  // standalone only; attached, they live in the arena
  std::vector<std::span<float>> parameters;
  std::vector<std::span<float>> exchange;  // synchronous SGD: the gradients, in the arena
  std::unique_ptr<Client> client;
  bool initialized = false;
  uint64_t start_step = 0;
  bool ends_apart = false;  // streamed or overlapped syncs: a step's sync leaves nodes apart
  // The parameters in this process's memory, one span per tensor of the layout.
  const auto use_own_parameters = [&] {
    own_parameters.resize(model_parameters(o.model));
    parameters = tensor_views(model_layout(o.model), own_parameters.data());
  };
  if (o.standalone) {
    use_own_parameters();
  } else {
    ClientOptions client_options;
    client_options.endpoint = o.endpoint;
    client_options.trainer = o.name;
    client_options.local_rank = o.local_rank;
    client_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000.0));
    client_options.startup_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(o.startup_timeout_s * 1000.0));
    auto connected = Client::connect(client_options);
    if (!connected) return fail(connected.status().with_context("connecting to " + o.endpoint));
    client = std::move(*connected);
    std::vector<TensorDesc> layout;
    for (const auto& shape : model_layout(o.model))
      layout.push_back({std::string(shape.name), shape.numel()});
    auto model = client->attach(layout);
    if (!model) return fail(model.status().with_context("attaching to " + o.endpoint));
    if (model->gradients) {
      // Synchronous SGD: the arena carries gradients; the parameters are our own copy,
      // initialized from the seed like every other node's, and stay equal to theirs
      // because every node applies the same averaged gradients.
      exchange = model->tensors;
      use_own_parameters();
    } else {
      parameters = model->tensors;
      initialized = model->initialized;
    }
    start_step = model->start_step;
    ends_apart = model->ends_apart();
    if (model->nodes != 0 && model->nodes != o.nodes) {
      spdlog::warn("--nodes {} but the daemon's cluster has {} nodes: shards follow --nodes",
                   o.nodes, model->nodes);
    }
    if (start_step >= o.steps) {
      return fail(Status::invalid(
          fmt::format("the node is already at step {}, not below --steps {}: nothing to train",
                      start_step, o.steps)));
    }
  }

  TrainerOptions trainer_options;
  trainer_options.model = o.model;
  trainer_options.batch = o.batch;
  trainer_options.sgd = o.sgd;
  trainer_options.seed = o.seed;
  trainer_options.node = o.node;
  trainer_options.local_rank = o.local_rank;
  auto trainer = Trainer::create(*train, std::move(shard), parameters, trainer_options);
  if (!trainer) return fail(trainer.status());
  // The init depends on the seed only, so every node starts from the same model; a
  // model already in the arena (another trainer of the node was first) is kept.
  if (!initialized) {
    trainer->model().init(o.seed);
    // The seed gives every node the same init already; start() makes it node 0's, so
    // that trainers of other frameworks (or seeds) in the cluster start from it too.
    // Synchronous SGD's arena carries gradients: the parameters pass through it once.
    if (client) {
      for (size_t t = 0; t < exchange.size(); ++t)
        std::copy(parameters[t].begin(), parameters[t].end(), exchange[t].begin());
      auto started = client->start();
      if (!started) return fail(started.status().with_context("start-up"));
      for (size_t t = 0; t < exchange.size(); ++t)
        std::copy(exchange[t].begin(), exchange[t].end(), parameters[t].begin());
    }
  }
  spdlog::info("{} node {}/{}: {} training samples ({}), {} test samples, steps {}..{}, lr {} ({})",
               o.standalone ? "standalone" : o.endpoint, o.node, o.nodes, shard_size,
               o.partition.to_string(), test->size(), start_step, o.steps, o.sgd.lr,
               lr_schedule_name(o.lr_schedule));

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  LossWindow window;
  TrafficCounts traffic;
  // Where the time goes, from the first evaluation on: start-up and the first rounds,
  // where every node waits for the slowest to load its data, are not the steady state.
  double eval_seconds = 0;
  std::optional<NodeStatus> warm;
  uint64_t step = start_step;
  bool ended_with_members = false;  // taken back at the members' last step: nothing left to sync
  while (step < o.steps) {
    const auto step_start = std::chrono::steady_clock::now();
    const float lr = scheduled_lr(o.sgd.lr, o.lr_schedule, step, o.steps);
    if (!exchange.empty()) {
      const float loss = trainer->compute_gradients();
      window.sum += loss;
      client->report_loss(loss);
      const auto gradients = trainer->model().gradients();
      for (size_t t = 0; t < gradients.size(); ++t)
        std::copy(gradients[t].begin(), gradients[t].end(), exchange[t].begin());
      auto stepped = client->step();  // every step: returns with the mean gradients in place
      if (!stepped) return fail(stepped.status().with_context(fmt::format("step {}", step + 1)));
      traffic = counts(stepped->traffic);
      trainer->apply(exchange, lr);
    } else {
      const float loss = trainer->step(lr);
      window.sum += loss;
      if (client) client->report_loss(loss);  // the daemon's divergence watch reads it
    }
    if (o.slowdown > 1)
      std::this_thread::sleep_for((std::chrono::steady_clock::now() - step_start) *
                                  (o.slowdown - 1));
    ++window.steps;
    ++step;
    // The last step's client->step() belongs to the end-of-run protocol below.
    if (step == o.steps) break;
    if (client && exchange.empty()) {
      auto stepped = client->step();
      if (!stepped) return fail(stepped.status().with_context(fmt::format("step {}", step)));
      traffic = counts(stepped->traffic);
      if (stepped->step != step) {
        // An elastic ring took the node back with a member's model, at its step.
        spdlog::info("step {}: the node goes on at step {}, the ring's", step, stepped->step);
        step = stepped->step;
        if (step >= o.steps) {
          ended_with_members = true;
          break;
        }
      }
    }
    if (o.eval_every != 0 && step % o.eval_every == 0) {
      const auto eval_start = std::chrono::steady_clock::now();
      const Evaluation eval = trainer->evaluate(*test);
      const double wall = elapsed();
      spdlog::info("step {} loss {:.4f} test accuracy {:.2f}% loss {:.4f} sent {} ({:.1f} s)", step,
                   window.mean(), 100 * eval.accuracy, eval.loss, bytes(traffic.payload_sent),
                   wall);
      if (csv) {
        if (Status s = csv->write({step, wall, window.mean(), eval.accuracy, traffic}); !s) {
          return fail(s);
        }
      }
      if (!o.snapshot_prefix.empty()) {
        // Saved after the CSV row, so a row's step always has its snapshot.
        const std::string path = fmt::format("{}{}.model", o.snapshot_prefix, step);
        if (Status s = save_model(path, parameters); !s) return fail(s);
      }
      eval_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
      if (client && !warm) {
        if (auto status = client->status(); status) warm = *status;
        eval_seconds = 0;
      }
      window = {};
    }
  }

  // End of the run: the node's own model, then the model after one more
  // synchronization, which every node holds (the average, for averaging strategies).
  const Evaluation local = trainer->evaluate(*test);
  Evaluation average = local;
  if (client && exchange.empty() &&
      !ended_with_members) {  // synchronous SGD: every node holds this model already
    const bool syncs = client->next_step_syncs();
    auto stepped = client->step();
    if (!stepped) return fail(stepped.status().with_context(fmt::format("step {}", step)));
    // Under streamed or overlapped syncs a step's leaves the nodes apart: sync() does not.
    if (!syncs || ends_apart) {
      stepped = client->sync();
      if (!stepped) return fail(stepped.status().with_context("final synchronization"));
    }
    traffic = counts(stepped->traffic);
    average = trainer->evaluate(*test);
  }
  const double wall = elapsed();
  if (csv) {
    if (Status s = csv->write({step, wall, window.mean(), average.accuracy, traffic}); !s) {
      return fail(s);
    }
  }

  if (!o.save_model_path.empty()) {
    if (Status s = save_model(o.save_model_path, parameters); !s) return fail(s);
  }

  RunResult result;
  result.node = o.node;
  result.steps = step;
  result.accuracy_local = local.accuracy;
  result.accuracy_average = average.accuracy;
  result.loss = window.mean();
  result.test_loss = average.loss;
  result.traffic = traffic;
  result.wall_seconds = wall;
  result.eval_seconds = eval_seconds;
  if (client && warm) {
    if (auto status = client->status(); status) {
      result.wait_seconds = status->trainer_wait_seconds - warm->trainer_wait_seconds;
      result.attached_seconds = status->trainer_attached_seconds - warm->trainer_attached_seconds;
    }
  }
  if (!o.result_path.empty()) {
    if (Status s = write_file_atomically(o.result_path, to_json(result) + "\n"); !s) {
      return fail(s);
    }
  }
  fmt::print(
      "gossip-train node {}/{}: {} steps in {:.1f} s, train loss {:.4f}, test accuracy {:.2f}% "
      "(local {:.2f}%), payload sent {} received {}\n",
      o.node, o.nodes, step, wall, result.loss, 100 * average.accuracy, 100 * local.accuracy,
      bytes(traffic.payload_sent), bytes(traffic.payload_recv));
  std::fflush(stdout);
  return 0;
}

}  // namespace gossip::trainer
