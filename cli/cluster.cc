#include "cli/cluster.h"

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

#include "cli/consensus.h"
#include "cli/evaluations.h"
#include "cli/json.h"
#include "cli/keygen.h"
#include "cli/process.h"
#include "cli/progress.h"
#include "cli/run_files.h"
#include "compression/codec_spec.h"
#include "daemon/private_files.h"
#include "peers/loopback_ports.h"
#include "peers/mixing_matrix.h"
#include "peers/topology.h"
#include "sgd/registry.h"

namespace gossip::cli {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kSupervisePoll{50};
constexpr std::chrono::milliseconds kProgressRefresh{250};
constexpr size_t kLogTailLines = 5;
constexpr size_t kMaxSocketPath = 107;  // sockaddr_un::sun_path, less the NUL
constexpr double kAccuracyAgreement = 1e-3;

// The strategies that average over all nodes (an all-reduce) rather than gossip.
bool averages_all(const daemon::DaemonConfig& d) {
  const sgd::StrategyDescriptor* s = sgd::find_strategy(d.strategy.name);
  return s && s->fabric == sgd::Fabric::kAllReduce;
}

std::string join(const std::vector<std::string>& list, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += sep;
    out += list[i];
  }
  return out;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Clock::duration from_seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// --- run directory -----------------------------------------------------------------

// Where the nodes' sockets, CSVs, results and logs go: --out DIR (kept), or a fresh
// temporary directory removed when this object goes away.
class RunDirectory {
 public:
  static Result<RunDirectory> create(const std::string& out) {
    RunDirectory dir;
    std::error_code ec;
    if (out.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern =
          fmt::format("{}/gossipctl-XXXXXX", tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
      if (::mkdtemp(pattern.data()) == nullptr) {
        return Status::io_error(fmt::format("cannot create a temporary directory {}: {}", pattern,
                                            std::strerror(errno)));
      }
      dir.path_ = pattern;
      dir.temporary_ = true;
    } else {
      fs::create_directories(out, ec);
      if (ec) {
        return Status::io_error(fmt::format("--out: cannot create {}: {}", out, ec.message()));
      }
      fs::path abs = fs::absolute(out, ec);
      if (ec) return Status::io_error(fmt::format("--out: {}: {}", out, ec.message()));
      dir.path_ = abs.lexically_normal().string();
      while (dir.path_.size() > 1 && dir.path_.back() == '/') dir.path_.pop_back();
      // The nodes' secret keys (--curve), sockets and logs go here: a directory another
      // user owns or may write could hold a link planted where one of them is written.
      GOSSIP_RETURN_IF_ERROR(daemon::check_private_dir(dir.path_, "--out: the run directory"));
    }
    return dir;
  }

  RunDirectory(RunDirectory&& other) noexcept
      : path_(std::move(other.path_)), temporary_(std::exchange(other.temporary_, false)) {}
  RunDirectory& operator=(RunDirectory&&) = delete;
  ~RunDirectory() {
    if (!temporary_) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (ec) spdlog::warn("could not remove the run directory {}: {}", path_, ec.message());
  }

  const std::string& path() const { return path_; }
  bool temporary() const { return temporary_; }
  std::string file(std::string_view name) const { return fmt::format("{}/{}", path_, name); }

 private:
  RunDirectory() = default;
  std::string path_;
  bool temporary_ = false;
};

std::string socket_name(int node) { return fmt::format("gossipd-{}.sock", node); }
std::string csv_name(int node) { return fmt::format("node-{}.csv", node); }
std::string result_name(int node) { return fmt::format("node-{}.json", node); }
std::string model_name(int node) { return fmt::format("node-{}.model", node); }
std::string daemon_log_name(int node) { return fmt::format("gossipd-{}.log", node); }
std::string trainer_log_name(int node) { return fmt::format("trainer-{}.log", node); }

// --- the programs ------------------------------------------------------------------

struct Programs {
  std::string gossipd;
  std::string trainer;
  std::string ip;  // iproute2's, for --netns
};

// Builds an argv of "--flag value" pairs; numbers are written as fmt's shortest form
// (0.05, 1, 1e-05), which every strtod-style parser reads back exactly.
class CommandLine {
 public:
  explicit CommandLine(std::string program) { argv_.push_back(std::move(program)); }
  template <typename T>
  CommandLine& add(std::string_view flag, const T& value) {
    argv_.emplace_back(flag);
    argv_.push_back(fmt::format("{}", value));
    return *this;
  }
  CommandLine& arg(std::string_view word) {
    argv_.emplace_back(word);
    return *this;
  }
  std::vector<std::string> take() { return std::move(argv_); }

 private:
  std::vector<std::string> argv_;
};

// --- the cluster -------------------------------------------------------------------

struct Member {
  std::string name;  // "gossipd 2", "trainer 2"
  std::string log_path;
  Process process;
};

// Why the run failed: the message names the process and what happened to it.
struct Failure {
  std::string message;
  std::string process;   // the failed process's name; empty when none is to blame
  std::string log_path;  // whose log tail explains it; empty: none
};

struct Outcome {
  std::optional<Failure> failure;
  std::vector<TrainerResult> results;  // one per node, or empty if they could not all be read
  double wall_seconds = 0;
  // The nodes' final models averaged: its test accuracy and the consensus distance.
  std::optional<double> accuracy_average_model;
  std::optional<double> consensus_distance;
};

Failure process_failure(const Member& m, std::string message) {
  return Failure{std::move(message), m.name, m.log_path};
}

// Tries of a cluster whose picked ports were taken before its daemons bound them.
constexpr int kPortTries = 3;

// The run failed before any trainer finished because a daemon could not bind its port.
bool port_was_taken(const Outcome& outcome) {
  if (!outcome.failure || !outcome.results.empty() || outcome.failure->log_path.empty())
    return false;
  for (const std::string& line : read_last_lines(outcome.failure->log_path, kLogTailLines))
    if (line.find("Address already in use") != std::string::npos) return true;
  return false;
}

class ClusterRun {
 public:
  ClusterRun(const ClusterOptions& options, const RunDirectory& dir, Programs programs,
             std::vector<int> ports, const StopSignals& signals)
      : options_(options),
        dir_(dir),
        programs_(std::move(programs)),
        ports_(std::move(ports)),
        signals_(signals),
        progress_(ProgressLine::stderr_is_tty()) {}

  Outcome run() {
    Outcome outcome;
    start_ = Clock::now();
    deadline_ = start_ + from_seconds(options_.timeout_s);
    std::optional<Failure> failure = start_daemons();
    if (!failure) failure = wait_for_sockets();
    if (!failure) failure = start_trainers();
    if (!failure) failure = supervise();
    outcome.wall_seconds = seconds_between(start_, Clock::now());
    show_final_progress();
    if (!failure) {
      failure = read_results(outcome.results);
      std::optional<Failure> stop = stop_daemons();
      if (!failure) failure = std::move(stop);
    }
    if (!failure) failure = evaluate_average(outcome);
    if (!failure) failure = learned_something(outcome);
    if (!failure && options_.evaluations) failure = write_evaluations(outcome);
    if (failure) stop_all();
    outcome.failure = std::move(failure);
    return outcome;
  }

 private:
  // Failure checks shared by every wait: a signal, and daemons that ended.
  std::optional<Failure> check_signal() const {
    if (const int sig = signals_.received(); sig != 0) {
      return Failure{
          fmt::format("interrupted by {} at step {}/{}", sig == SIGINT ? "SIGINT" : "SIGTERM",
                      snapshot_.min_step, options_.steps),
          "", ""};
    }
    return std::nullopt;
  }

  std::optional<Failure> check_daemons() {
    for (Member& d : daemons_) {
      if (auto e = d.process.poll()) {
        return process_failure(
            d, fmt::format("{} {} before the trainers finished", d.name, e->describe()));
      }
    }
    return std::nullopt;
  }

  std::optional<Failure> spawn(std::vector<Member>& into, std::string name, std::string log_name,
                               std::vector<std::string> argv) {
    Member m{std::move(name), dir_.file(log_name), Process()};
    spdlog::debug("starting {}: {}", m.name, join(argv, " "));
    auto p = Process::spawn(SpawnOptions{std::move(argv), m.log_path, ""});
    if (!p) {
      return Failure{fmt::format("could not start {}: {}", m.name, p.status().message()), m.name,
                     ""};
    }
    m.process = std::move(*p);
    into.push_back(std::move(m));
    return std::nullopt;
  }

  // --curve: a key pair per node; node i's secret goes to node-<i>.toml, readable by
  // this user only, so that it shows in no process list.
  std::optional<Failure> make_keys() {
    for (int i = 0; i < options_.nodes; ++i) {
      auto k = curve_keypair();
      if (!k) return Failure{"--curve: " + k.status().message(), "", ""};
      const std::string path = dir_.file(fmt::format("node-{}.toml", i));
      const int fd =
          ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
      const std::string text = fmt::format("[node]\nsecret_key = \"{}\"\n", k->secret_key);
      const bool written =
          fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      if (fd >= 0) ::close(fd);
      if (!written)
        return Failure{fmt::format("cannot write {}: {}", path, std::strerror(errno)), "", ""};
      keys_.push_back(std::move(*k));
    }
    return std::nullopt;
  }

  std::optional<Failure> start_daemons() {
    if (options_.curve)
      if (auto f = make_keys()) return f;
    const auto endpoint = [&](int node) {
      const auto i = static_cast<size_t>(node);
      return fmt::format("tcp://{}:{}", options_.hosts.empty() ? "127.0.0.1" : options_.hosts[i],
                         ports_[i]);
    };
    for (int i = 0; i < options_.nodes; ++i) {
      std::vector<std::string> prefix;
      if (!options_.netns.empty())
        prefix = {programs_.ip, "netns", "exec", fmt::format("{}{}", options_.netns, i)};
      std::string gossipd = programs_.gossipd;
      for (const auto& spec : options_.gossipd_on)
        if (auto on = parse_gossipd_on(spec, options_.nodes); on && on->first == i)
          gossipd = on->second;
      CommandLine cmd(prefix.empty() ? gossipd : prefix.front());
      for (size_t k = 1; k < prefix.size(); ++k) cmd.arg(prefix[k]);
      if (!prefix.empty()) cmd.arg(gossipd);
      cmd.add("--id", i).add("--listen", endpoint(i)).add("--run-dir", dir_.path());
      // A run id of this cluster's own: a daemon of another cluster on this machine
      // that still tries a port this one reuses is not taken for a member.
      if (options_.daemon_flags.count("--run-id") == 0) cmd.add("--run-id", run_id_);
      for (int j = 0; j < options_.nodes; ++j) {
        if (j != i) cmd.add("--peer", fmt::format("{}={}", j, endpoint(j)));
      }
      if (options_.curve) {
        cmd.add("--config", dir_.file(fmt::format("node-{}.toml", i)));
        for (int j = 0; j < options_.nodes; ++j)
          if (j != i)
            cmd.add("--peer-key",
                    fmt::format("{}={}", j, keys_[static_cast<size_t>(j)].public_key));
        for (int b : options_.banned)
          if (b != i) cmd.add("--ban-peer", b);
      }
      // gossipd's settings as given; the rest are gossipd's defaults.
      for (const auto& [flag, value] : options_.daemon_flags) cmd.add(flag, value);
      auto f = spawn(daemons_, fmt::format("gossipd {}", i), daemon_log_name(i), cmd.take());
      if (f) return f;
    }
    return std::nullopt;
  }

  // Trainers connect to the daemons' IPC sockets, so those must exist first.
  std::optional<Failure> wait_for_sockets() {
    const auto wait_end = std::min(deadline_, Clock::now() + from_seconds(options_.socket_wait_s));
    for (;;) {
      if (auto f = check_signal()) return f;
      if (auto f = check_daemons()) return f;
      const Member* missing = nullptr;
      std::string missing_path;
      for (int i = 0; i < options_.nodes && missing == nullptr; ++i) {
        std::string path = dir_.file(socket_name(i));
        std::error_code ec;
        if (!fs::exists(path, ec)) {
          missing = &daemons_[static_cast<size_t>(i)];
          missing_path = std::move(path);
        }
      }
      if (missing == nullptr) return std::nullopt;
      if (Clock::now() >= wait_end) {
        return process_failure(
            *missing, fmt::format("{} did not create its socket {} within {:.0f} s", missing->name,
                                  missing_path, seconds_between(start_, Clock::now())));
      }
      std::this_thread::sleep_for(kSupervisePoll);
    }
  }

  std::optional<Failure> start_trainers() {
    if (options_.evaluations) {
      std::error_code ec;
      fs::create_directories(dir_.file("snapshots"), ec);
      if (ec)
        return Failure{fmt::format("cannot create {}: {}", dir_.file("snapshots"), ec.message()),
                       "", ""};
    }
    const int64_t remaining_s = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(seconds_between(Clock::now(), deadline_))));
    // Strategy sma: N learners per node, each on a shard of its own (node i's learner j
    // takes shard i N + j of n N); learner 0 is the node's trainer for the progress,
    // the results and the average model.
    const int learners = learners_per_node();
    for (int j = 0; j < learners; ++j)
      for (int i = 0; i < options_.nodes; ++i) {
        CommandLine cmd(programs_.trainer);
        cmd.add("--endpoint", fmt::format("ipc://{}", dir_.file(socket_name(i))))
            .add("--node", i * learners + j)
            .add("--nodes", options_.nodes * learners)
            .add("--steps", options_.steps)
            .add("--seed", options_.daemon.seed)
            .add("--partition", options_.partition)
            .add("--batch", options_.batch)
            .add("--lr", options_.lr)
            .add("--eval-every", options_.effective_eval_every());
        // Only when asked: other trainers (--trainer) need not know the flag.
        if (options_.model != "mlp") cmd.add("--model", options_.model);
        if (j == 0) {
          cmd.add("--csv", dir_.file(csv_name(i)))
              .add("--result", dir_.file(result_name(i)))
              .add("--save-model", dir_.file(model_name(i)));
        } else {
          cmd.add("--local-rank", j).add("--name", fmt::format("gossip-train-{}-{}", i, j));
        }
        cmd.add("--timeout-s", remaining_s);
        if (auto slow = straggler_of(options_); slow && slow->node == i)
          cmd.add("--slowdown", slow->factor);
        if (options_.evaluations && j == 0) cmd.add("--snapshot", snapshot_prefix(i));
        const std::string name =
            j == 0 ? fmt::format("trainer {}", i) : fmt::format("trainer {}.{}", i, j);
        const std::string log =
            j == 0 ? trainer_log_name(i) : fmt::format("trainer-{}.{}.log", i, j);
        auto f = spawn(trainers_, name, log, cmd.take());
        if (f) return f;
        if (j == 0) csv_.emplace_back(dir_.file(csv_name(i)));
      }
    return std::nullopt;
  }

  int learners_per_node() const {
    const sgd::StrategyDescriptor* s = sgd::find_strategy(options_.daemon.strategy.name);
    return s && s->central_model ? static_cast<int>(options_.daemon.strategy.learners_per_device)
                                 : 1;
  }

  void refresh_snapshot() {
    std::vector<std::optional<TrainerCsvRow>> rows;
    rows.reserve(csv_.size());
    for (TrainerCsvTail& tail : csv_) rows.push_back(tail.latest());
    if (rows.empty()) rows.resize(static_cast<size_t>(options_.nodes));
    snapshot_ = summarize_progress(rows);
  }

  std::string progress_text() const {
    return format_progress(snapshot_, options_.steps, seconds_between(start_, Clock::now()));
  }

  void show_final_progress() {
    refresh_snapshot();
    progress_.finish(progress_text());
  }

  // Until every trainer has exited 0, or something fails.
  std::optional<Failure> supervise() {
    auto last_refresh = Clock::now() - kProgressRefresh;
    for (;;) {
      if (auto f = check_signal()) return f;
      if (auto f = check_daemons()) return f;
      bool all_done = true;
      for (Member& t : trainers_) {
        auto e = t.process.poll();
        if (!e) {
          all_done = false;
        } else if (!e->success()) {
          return process_failure(t, fmt::format("{} {}", t.name, e->describe()));
        }
      }
      if (all_done) return std::nullopt;
      const auto now = Clock::now();
      if (now - last_refresh >= kProgressRefresh) {
        refresh_snapshot();
        progress_.update(progress_text());
        last_refresh = now;
      }
      if (now >= deadline_) return timeout_failure();
      std::this_thread::sleep_for(kSupervisePoll);
    }
  }

  Failure timeout_failure() {
    refresh_snapshot();
    std::vector<std::string> running;
    const Member* slowest = nullptr;
    int64_t slowest_step = 0;
    for (size_t i = 0; i < trainers_.size() && i < csv_.size(); ++i) {
      if (!trainers_[i].process.running()) continue;
      running.push_back(std::to_string(i));
      const auto row = csv_[i].latest();
      const int64_t step = row ? row->step : 0;
      if (slowest == nullptr || step < slowest_step) {
        slowest = &trainers_[i];
        slowest_step = step;
      }
    }
    std::string message =
        fmt::format("timed out after {} s at step {}/{} (trainers still running: {})",
                    options_.timeout_s, snapshot_.min_step, options_.steps, join(running, ", "));
    if (slowest == nullptr) return Failure{std::move(message), "", ""};
    return process_failure(
        *slowest, fmt::format("{}; slowest: {} at step {}", message, slowest->name, slowest_step));
  }

  std::optional<Failure> read_results(std::vector<TrainerResult>& results) {
    std::vector<TrainerResult> read;
    for (int i = 0; i < options_.nodes; ++i) {
      const Member& t = trainers_[static_cast<size_t>(i)];
      auto r = read_trainer_result(dir_.file(result_name(i)));
      if (!r) {
        return process_failure(t, fmt::format("{} exited 0 but its result is unusable: {}", t.name,
                                              r.status().message()));
      }
      if (r->node != i * learners_per_node())
        spdlog::warn("{}: the result file says node {}", t.name, r->node);
      read.push_back(*r);
    }
    results = std::move(read);
    return std::nullopt;
  }

  // The average of the nodes' final models, evaluated by the trainer program.
  std::optional<Failure> evaluate_average(Outcome& outcome) {
    std::vector<std::string> paths;
    for (int i = 0; i < options_.nodes; ++i) {
      paths.push_back(dir_.file(model_name(i)));
      std::error_code ec;
      if (!fs::exists(paths.back(), ec)) {
        // A trainer other than gossip-train need not save its model.
        spdlog::warn(
            "{} did not save its final model ({}): no consensus distance, and the "
            "average model's accuracy is what the trainers report",
            trainers_[static_cast<size_t>(i)].name, paths.back());
        return std::nullopt;
      }
    }
    double distance = 0, accuracy = 0;
    if (auto f = evaluate_models(paths, "average", distance, accuracy)) return f;
    outcome.consensus_distance = distance;
    outcome.accuracy_average_model = accuracy;
    return std::nullopt;
  }

  // The reference trainer's Fashion-MNIST has 10 classes: an average model at 1/10 learned
  // nothing, however the run went. (The servers' momentum on top of the trainers' at
  // --ps-lr 0.1 ends there, a constant prediction, without the model's norm growing
  // enough for the daemons' divergence watch: the loss rose to 5.9 and fell to ln 10.)
  std::optional<Failure> learned_something(const Outcome& outcome) const {
    constexpr double kChance = 0.1;
    if (!outcome.accuracy_average_model || *outcome.accuracy_average_model > kChance + 0.01)
      return std::nullopt;
    return Failure{fmt::format("the average model's test accuracy is {:.4f}, chance for the 10 "
                               "classes: the run learned nothing (steps too large: see the "
                               "trainers' loss in their CSV, and docs/strategies.md)",
                               *outcome.accuracy_average_model),
                   "", ""};
  }

  // Averages the models at `paths` into NAME.model and evaluates it with the trainer
  // program (NAME.json, NAME.log).
  std::optional<Failure> evaluate_models(const std::vector<std::string>& paths,
                                         const std::string& name, double& distance,
                                         double& accuracy) {
    auto consensus = consensus_of(paths);
    if (!consensus)
      return Failure{
          fmt::format("cannot average the models for {}: {}", name, consensus.status().message()),
          "", ""};
    const std::string average = dir_.file(name + ".model");
    if (Status st = write_model(average, consensus->average); !st)
      return Failure{st.message(), "", ""};
    CommandLine cmd(programs_.trainer);
    cmd.add("--evaluate", average).add("--result", dir_.file(name + ".json"));
    if (options_.model != "mlp") cmd.add("--model", options_.model);
    std::vector<Member> eval;
    if (auto f = spawn(eval, "evaluation of the " + name + " model", name + ".log", cmd.take()))
      return f;
    Member& m = eval.front();
    const auto e = m.process.wait_until(Clock::now() + std::chrono::seconds(60));
    if (!e || !e->success())
      return process_failure(m, fmt::format("{} {}", m.name, e ? e->describe() : "timed out"));
    auto r = read_trainer_result(dir_.file(name + ".json"));
    if (!r) return process_failure(m, r.status().message());
    distance = consensus->distance;
    accuracy = r->accuracy_average;
    return std::nullopt;
  }

  // --evaluations: evaluations.csv from the nodes' CSVs and the snapshots they saved
  // at each evaluation (deleted afterwards: they are n models per evaluation).
  std::optional<Failure> write_evaluations(const Outcome& outcome) {
    std::vector<std::vector<TrainerCsvRow>> nodes;
    for (int i = 0; i < options_.nodes; ++i) {
      auto rows = read_trainer_csv(dir_.file(csv_name(i)));
      if (!rows) return Failure{rows.status().message(), "", ""};
      nodes.push_back(std::move(*rows));
    }
    std::vector<EvaluationRow> rows = join_evaluations(nodes);
    for (EvaluationRow& r : rows) {
      if (r.step == options_.steps) {  // the end of the run: the final models
        r.consensus_distance = outcome.consensus_distance.value_or(EvaluationRow::kNaN);
        r.accuracy_average = outcome.accuracy_average_model.value_or(EvaluationRow::kNaN);
        continue;
      }
      std::vector<std::string> paths;
      for (int i = 0; i < options_.nodes; ++i)
        paths.push_back(snapshot_prefix(i) + std::to_string(r.step) + ".model");
      if (auto f = evaluate_models(paths, fmt::format("snapshots/average-step-{}", r.step),
                                   r.consensus_distance, r.accuracy_average))
        return f;
    }
    std::error_code ec;
    fs::remove_all(dir_.file("snapshots"), ec);
    const std::string path = dir_.file("evaluations.csv");
    std::ofstream out(path, std::ios::trunc);
    out << evaluations_csv(rows, options_.nodes);
    if (!out.flush()) return Failure{fmt::format("cannot write {}", path), "", ""};
    return std::nullopt;
  }

  std::string snapshot_prefix(int node) const {
    return dir_.file(fmt::format("snapshots/node-{}-step-", node));
  }

  // After training: SIGTERM, which every daemon must answer by exiting 0 within the grace.
  std::optional<Failure> stop_daemons() {
    std::vector<Process*> ps;
    for (Member& d : daemons_) ps.push_back(&d.process);
    terminate_all(ps, std::chrono::duration_cast<std::chrono::milliseconds>(
                          from_seconds(options_.stop_grace_s)));
    for (Member& d : daemons_) {
      const auto& e = d.process.exit_status();
      if (!e) {
        return process_failure(
            d, fmt::format("{} could not be stopped (still not reaped after SIGKILL)", d.name));
      }
      if (e->forced) {
        return process_failure(
            d, fmt::format("{} did not exit within {} s of SIGTERM and was SIGKILLed", d.name,
                           options_.stop_grace_s));
      }
      if (!e->success()) {
        return process_failure(d, fmt::format("{} {} on SIGTERM", d.name, e->describe()));
      }
    }
    return std::nullopt;
  }

  void stop_all() {
    std::vector<Process*> ps;
    for (Member& t : trainers_) ps.push_back(&t.process);
    for (Member& d : daemons_) ps.push_back(&d.process);
    terminate_all(ps, std::chrono::duration_cast<std::chrono::milliseconds>(
                          from_seconds(options_.stop_grace_s)));
  }

  const ClusterOptions& options_;
  const RunDirectory& dir_;
  const Programs programs_;
  const std::vector<int> ports_;
  const StopSignals& signals_;
  const std::string run_id_ = fmt::format(
      "cluster-{:016x}", std::random_device{}() * 0x100000000ULL + std::random_device{}());
  std::vector<KeyPair> keys_;  // --curve: node i's
  ProgressLine progress_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  ProgressSnapshot snapshot_;
  // Declared last so they are destroyed (killed and reaped, if still running) first.
  std::vector<TrainerCsvTail> csv_;
  std::vector<Member> daemons_;
  std::vector<Member> trainers_;
};

// --- reports -----------------------------------------------------------------------

struct Totals {
  uint64_t wire_sent = 0;
  uint64_t payload_sent = 0;
  double accuracy_average_model = std::nan("");
  std::vector<double> accuracy_nodes;
  // The trainers' time blocked on their daemons, over their time attached less their
  // evaluations (gossipd_trainer_wait_seconds_total, issue 23); NaN where unknown.
  double wait_fraction = std::nan("");
};

Totals totals_of(const Outcome& outcome) {
  const std::vector<TrainerResult>& results = outcome.results;
  Totals t;
  if (results.empty()) return t;
  double sum = 0, wait = 0, busy = 0;
  for (const TrainerResult& r : results) {
    wait += r.wait_seconds;
    busy += r.attached_seconds - r.eval_seconds;
    t.wire_sent += r.wire_sent;
    t.payload_sent += r.payload_sent;
    sum += r.accuracy_average;
    t.accuracy_nodes.push_back(r.accuracy_local);
  }
  // Without the evaluated average (a failed run), the nodes' accuracy after the
  // final synchronization, which is the average model's for local SGD.
  t.accuracy_average_model =
      outcome.accuracy_average_model.value_or(sum / static_cast<double>(results.size()));
  if (busy > 0) t.wait_fraction = wait / busy;
  return t;
}

void print_table(const Outcome& outcome, const Totals& totals) {
  const std::vector<TrainerResult>& results = outcome.results;
  std::string out = fmt::format("{:>5}  {:>14}  {:>16}  {:>12}  {:>12}\n", "node", "accuracy_local",
                                "accuracy_average", "wire_sent", "payload_sent");
  for (size_t i = 0; i < results.size(); ++i) {
    const TrainerResult& r = results[i];
    out += fmt::format("{:>5}  {:>14.4f}  {:>16.4f}  {:>12}  {:>12}\n", i, r.accuracy_local,
                       r.accuracy_average, format_bytes(r.wire_sent), format_bytes(r.payload_sent));
  }
  out += fmt::format("{:>5}  {:>14}  {:>16}  {:>12}  {:>12}\n\n", "total", "", "",
                     format_bytes(totals.wire_sent), format_bytes(totals.payload_sent));
  out += fmt::format("accuracy of the averaged model  {:.4f}\n", totals.accuracy_average_model);
  out += fmt::format("bytes on the wire (sent)        {} ({} B)\n", format_bytes(totals.wire_sent),
                     totals.wire_sent);
  if (outcome.consensus_distance)
    out += fmt::format("consensus distance              {:.4g}\n", *outcome.consensus_distance);
  if (!std::isnan(totals.wait_fraction))
    out += fmt::format("trainers waiting for a sync     {:.1f} % of their training time\n",
                       100 * totals.wait_fraction);
  out += fmt::format("wall time                       {:.1f} s\n", outcome.wall_seconds);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

// Local SGD averages over all nodes: its "topology" is the complete graph; parameter
// servers have none (and no spectral gap).
std::string topology_label(const ClusterOptions& o) {
  const sgd::StrategyDescriptor* s = sgd::find_strategy(o.daemon.strategy.name);
  if (s && s->fabric == sgd::Fabric::kServers) return "servers";
  return averages_all(o.daemon) ? "complete" : o.daemon.topology_spec();
}

double spectral_gap_of(const ClusterOptions& o) {
  auto t = peers::make_topology(topology_label(o), static_cast<uint32_t>(o.nodes), o.daemon.seed);
  if (!t) return std::nan("");
  auto gap = peers::spectral_gap(**t);
  return gap ? gap->gap : std::nan("");
}

std::string json_report(const ClusterOptions& o, const std::string& out_dir, const Outcome& outcome,
                        const std::vector<std::string>& log_tail) {
  const Totals totals = totals_of(outcome);
  const bool have = !outcome.results.empty();
  JsonObjectWriter w;
  w.add_bool("ok", !outcome.failure);
  if (outcome.failure) {
    w.add_string("error", outcome.failure->message);
    if (outcome.failure->process.empty()) {
      w.add_null("failed_process");
    } else {
      w.add_string("failed_process", outcome.failure->process);
    }
    std::string tail = "[";
    for (size_t i = 0; i < log_tail.size(); ++i)
      tail += (i > 0 ? ", " : "") + json_quote(log_tail[i]);
    w.add_raw("log_tail", tail + "]");
  }
  w.add_int("nodes", o.nodes)
      .add_string("strategy", o.daemon.strategy.name)
      .add_uint("period", o.daemon.strategy.period)
      .add_int("steps", o.steps)
      .add_uint("seed", o.daemon.seed)
      .add_string("partition", o.partition)
      .add_string("model", o.model)
      .add_string("codec", o.daemon.strategy.codec)
      .add_string("transport", o.daemon.strategy.transport)
      .add_string("topology", topology_label(o))
      .add_number("spectral_gap", spectral_gap_of(o))
      .add_number("wall_seconds", std::round(outcome.wall_seconds * 1000) / 1000);
  if (have) {
    w.add_uint("bytes_sent_total", totals.wire_sent)
        .add_uint("payload_bytes_sent_total", totals.payload_sent)
        .add_number("accuracy_average_model", totals.accuracy_average_model)
        .add_raw("accuracy_nodes", json_number_array(totals.accuracy_nodes));
    if (std::isnan(totals.wait_fraction)) {
      w.add_null("trainer_wait_fraction");
    } else {
      w.add_number("trainer_wait_fraction", std::round(totals.wait_fraction * 1e4) / 1e4);
    }
    if (outcome.consensus_distance) {
      w.add_number("consensus_distance", *outcome.consensus_distance);
    } else {
      w.add_null("consensus_distance");
    }
  } else {
    w.add_null("bytes_sent_total")
        .add_null("payload_bytes_sent_total")
        .add_null("accuracy_average_model")
        .add_null("accuracy_nodes")
        .add_null("trainer_wait_fraction")
        .add_null("consensus_distance");
  }
  if (out_dir.empty()) {
    w.add_null("out");
  } else {
    w.add_string("out", out_dir);
  }
  return w.str();
}

// Prints a failure that happened before any process ran (no run directory, no ports).
int report_setup_failure(const ClusterOptions& o, const Status& status) {
  spdlog::error("{}", status.message());
  if (o.json) {
    Outcome outcome;
    outcome.failure = Failure{status.message(), "", ""};
    std::fprintf(stdout, "%s\n", json_report(o, o.out, outcome, {}).c_str());
    std::fflush(stdout);
  }
  return kExitFailure;
}

}  // namespace

int run_cluster(const ClusterOptions& given) {
  ClusterOptions options = given;
  if (Status st = resolve_cluster_options(options); !st) {
    std::fprintf(stderr, "gossipctl cluster: %s\n", st.message().c_str());
    return kExitUsage;
  }
  // "off" and the rest are spdlog's names too.
  spdlog::set_level(spdlog::level::from_str(options.daemon.log_level));

  auto gossipd = resolve_program(options.gossipd, "gossipd", "--gossipd");
  if (!gossipd) return report_setup_failure(options, gossipd.status());
  auto trainer = resolve_program(options.trainer, "gossip-train", "--trainer");
  if (!trainer) return report_setup_failure(options, trainer.status());
  std::string ip;
  if (!options.netns.empty()) {
    auto found = resolve_program("ip", "ip", "--netns (needs iproute2's ip)");
    if (!found) return report_setup_failure(options, found.status());
    ip = *found;
  }

  StopSignals signals;
  auto dir = RunDirectory::create(options.out);
  if (!dir) return report_setup_failure(options, dir.status());
  const std::string longest_socket = dir->file(socket_name(options.nodes - 1));
  if (longest_socket.size() > kMaxSocketPath) {
    return report_setup_failure(
        options, Status::invalid(fmt::format(
                     "run directory {} is too long for the IPC socket {} ({} > {} characters)",
                     dir->path(), longest_socket, longest_socket.size(), kMaxSocketPath)));
  }
  spdlog::info("{} nodes, {} (period {}), {} steps, partition {}; run directory {}{}",
               options.nodes, options.daemon.strategy.name, options.daemon.strategy.period,
               options.steps, options.partition, dir->path(),
               dir->temporary() ? " (temporary)" : "");

  Outcome outcome;
  for (int attempt = 1;; ++attempt) {
    // Leftovers of an earlier run (or try) would look like a ready socket or a finished node.
    for (int i = 0; i < options.nodes; ++i) {
      std::error_code ec;
      for (const std::string& name : {socket_name(i), csv_name(i), result_name(i)})
        fs::remove(dir->file(name), ec);
    }
    std::vector<int> ports;
    if (options.base_port != 0) {
      for (int i = 0; i < options.nodes; ++i) ports.push_back(options.base_port + i);
    } else {
      auto picked = peers::pick_loopback_ports(options.nodes);
      if (!picked) return report_setup_failure(options, picked.status());
      ports = std::move(*picked);
    }
    {
      ClusterRun run(options, *dir, Programs{*gossipd, *trainer, ip}, ports, signals);
      outcome = run.run();
    }  // every process is reaped here
    // A port picked free can be taken before its daemon binds it (another process, or
    // an earlier daemon's ring listener on an ephemeral port): that daemon exits with
    // "Address already in use", and the cluster starts again on new ports.
    if (options.base_port != 0 || attempt == kPortTries || !port_was_taken(outcome)) break;
    spdlog::warn(
        "a port picked for the cluster was taken before its daemon bound it ({}); "
        "starting again on new ports ({}/{})",
        outcome.failure->message, attempt + 1, kPortTries);
  }

  std::vector<std::string> log_tail;
  if (outcome.failure) {
    const Failure& f = *outcome.failure;
    spdlog::error("{}", f.message);
    if (!f.log_path.empty()) {
      log_tail = read_last_lines(f.log_path, kLogTailLines);
      const std::string shown =
          dir->temporary() ? fs::path(f.log_path).filename().string() : f.log_path;
      if (log_tail.empty()) {
        std::fprintf(stderr, "gossipctl: %s is empty\n", shown.c_str());
      } else {
        std::fprintf(stderr, "gossipctl: last lines of %s:\n", shown.c_str());
        for (const std::string& line : log_tail) std::fprintf(stderr, "    %s\n", line.c_str());
      }
    }
    if (!dir->temporary()) std::fprintf(stderr, "gossipctl: logs are in %s\n", dir->path().c_str());
  }
  // Only the all-reduce strategies leave every node with the same model at the end
  // (not SMA, whose learners keep replicas of their own).
  const sgd::StrategyDescriptor* strategy = sgd::find_strategy(options.daemon.strategy.name);
  if (!outcome.results.empty() && averages_all(options.daemon) && strategy &&
      !strategy->central_model) {
    double lo = INFINITY, hi = -INFINITY;
    for (const TrainerResult& r : outcome.results) {
      lo = std::min(lo, r.accuracy_average);
      hi = std::max(hi, r.accuracy_average);
    }
    if (hi - lo > kAccuracyAgreement) {
      spdlog::warn("the nodes disagree on the averaged model's accuracy ({:.4f} to {:.4f})", lo,
                   hi);
    }
  }

  const std::string out_dir = dir->temporary() ? std::string() : dir->path();
  if (options.json) {
    std::fprintf(stdout, "%s\n", json_report(options, out_dir, outcome, log_tail).c_str());
    std::fflush(stdout);
  } else if (!outcome.results.empty()) {
    print_table(outcome, totals_of(outcome));
  }
  return outcome.failure ? kExitFailure : kExitOk;
}

}  // namespace gossip::cli
