#include "cli/simulate.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "peers/mixing_matrix.h"
#include "peers/topology.h"
#include "sgd/strategies/ps/parameter_server.h"
#include "sim/world.h"

namespace gossip::cli {

namespace {

// A number with a unit suffix from `units` (longest first), scaled by it.
Result<double> with_unit(const std::string& key, const std::string& text,
                         const std::vector<std::pair<std::string, double>>& units) {
  for (const auto& [suffix, scale] : units) {
    if (text.size() < suffix.size() ||
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string number = text.substr(0, text.size() - suffix.size());
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(number, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != number.size() || !(v >= 0) || !std::isfinite(v)) break;
    return v * scale;
  }
  std::string names;
  for (const auto& u : units)
    names += (names.empty() ? "" : ", ") + (u.first.empty() ? "none" : u.first);
  return Status::invalid(
      fmt::format("{}={}: a number that is not negative, with a unit ({})", key, text, names));
}

Result<Duration> duration_of(const std::string& key, const std::string& text) {
  auto s = with_unit(key, text, {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}});
  if (!s) return s.status();
  if (*s > 1e6) return Status::invalid(fmt::format("{}={}: at most 1e6 s", key, text));
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*s));
}

}  // namespace

Result<peers::Link> parse_link(const std::string& spec) {
  peers::Link link;
  size_t start = 0;
  while (start < spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    start = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return Status::invalid(fmt::format("--links: '{}' is not key=value", item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "latency" || key == "jitter") {
      auto d = duration_of(key, value);
      if (!d) return d.status().with_context("--links");
      (key == "latency" ? link.latency : link.jitter) = *d;
    } else if (key == "bandwidth") {
      auto bits = with_unit(key, value,
                            {{"Gbit", 1e9}, {"Mbit", 1e6}, {"kbit", 1e3}, {"bit", 1.0}, {"", 1.0}});
      if (!bits) return bits.status().with_context("--links");
      link.bytes_per_s = *bits / 8.0;
    } else {
      return Status::invalid(
          fmt::format("--links: unknown key '{}' (latency, jitter, bandwidth)", key));
    }
  }
  return link;
}

namespace {

// A number of seconds (or a factor) from lo to hi, finite: a NaN passes CLI11's range
// checks, and a huge one overflows the nanoseconds it becomes.
CLI::Validator bounded(double lo, double hi, bool above_lo) {
  return CLI::Validator(
      [lo, hi, above_lo](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < lo ||
            (above_lo && v == lo) || v > hi)
          return fmt::format("{}: a number {} {} and at most {}", text, above_lo ? ">" : ">=", lo,
                             hi);
        return "";
      },
      "NUMBER");
}

// The node and round numbers of --kill, --pause, --slow and --partition: sscanf's %u
// takes "-1" as 4294967295.
bool has_negative(const std::string& text) {
  return text.starts_with('-') || text.find("--") != std::string::npos ||
         text.find("@-") != std::string::npos || text.find(":-") != std::string::npos;
}

}  // namespace

Subcommand add_simulate_command(CLI::App& parent) {
  auto o = std::make_shared<sim::WorldOptions>();
  auto links = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto step_ms = std::make_shared<double>(0.0);
  auto kills = std::make_shared<std::vector<std::string>>();
  auto pauses = std::make_shared<std::vector<std::string>>();
  auto slow = std::make_shared<std::vector<std::string>>();
  auto partitions = std::make_shared<std::vector<std::string>>();
  auto joins = std::make_shared<sim::JoinOptions>();
  joins->joins = 0;
  auto join_every = std::make_shared<double>(2.0);
  auto join_quorum = std::make_shared<std::string>("majority");
  // gossipd's waits, in its units (seconds) and with its defaults for the gossip family.
  struct Waits {
    double patience = 5, patience_floor = 0.5, dead_after = 3, dead_after_floor = 0.5,
           heartbeat = 1, round_timeout = 30;
    double round_timeout_floor = 5;
    std::string round_timeout_factor = "auto";
  };
  auto waits = std::make_shared<Waits>();
  CLI::App* app = parent.add_subcommand(
      "simulate",
      "Run N nodes in this process on virtual time: the real strategies, router and codecs "
      "over simulated links, on a synthetic objective with a known optimum");
  app->add_option("--nodes", o->nodes, "How many nodes")->capture_default_str();
  app->add_option("--strategy", o->strategy,
                  "gossip, choco, push-sum, async-gossip, local-sgd, allreduce, sma or ps")
      ->capture_default_str();
  app->add_option("--transport", o->transport,
                  "local-sgd and allreduce: tcp (gossipd's ring, tree, butterfly and master "
                  "all-reduces, over the simulated links) or allgather")
      ->capture_default_str();
  app->add_option("--allreduce-algorithm", o->allreduce_algorithm,
                  "As gossipd's: ring, tree, butterfly, master or auto (by size and nodes)")
      ->capture_default_str();
  app->add_option_function<std::string>(
         "--elastic", [o](const std::string& v) { o->elastic = v == "on"; },
         "As gossipd's --elastic: on re-forms the ring over the nodes that answer")
      ->check(CLI::IsMember({"on", "off"}));
  app->add_option("--topology", o->topology, "As gossipd's --topology (default: the strategy's)");
  app->add_option("--codec", o->codec, "As gossipd's --codec")->capture_default_str();
  app->add_option("--chunk-elems", o->chunk_elems, "Elements per model chunk")
      ->capture_default_str();
  app->add_option("--gamma", o->params.gamma, "CHOCO-SGD's consensus step (0: the codec's)");
  app->add_option("--delay", o->params.delay, "push-sum: rounds a message may be in flight");
  app->add_option("--staleness", o->params.staleness, "async gossip: rounds ahead of a neighbor");
  app->add_option("--trim", o->params.trim, "gossip: values cut from each end of the mean");
  app->add_option("--learners-per-device", o->params.learners_per_device,
                  "sma: the learners of each node, each a replica with its own gradient noise")
      ->capture_default_str();
  app->add_option("--sma-alpha", o->params.sma_alpha,
                  "sma: each learner's pull towards the central model (0: 1 / the learners)");
  app->add_option("--sma-momentum", o->sma_momentum, "sma: the central model's momentum");
  // The parameter servers' options, spelled and checked as gossipd's.
  sgd::ParameterServerOptions& ps = o->params.ps;
  app->add_option("--servers", ps.servers, "ps: the servers (the nodes of the lowest ids)")
      ->capture_default_str();
  app->add_option("--ps-replicas", ps.replicas, "ps: holders of each shard besides its server")
      ->capture_default_str();
  app->add_option_function<std::string>(
         "--ps-mode",
         [o](const std::string& v) {  // checked below, before this runs
           if (auto mode = sgd::parse_ps_mode(v, &o->params.ps.staleness))
             o->params.ps.mode = *mode;
         },
         "ps: bsp, async or ssp:S")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            uint64_t staleness = 0;
            auto mode = sgd::parse_ps_mode(v, &staleness);
            return mode ? std::string() : mode.status().message();
          },
          "MODE"));
  app->add_option("--ps-fetch", ps.fetch, "ps: async and ssp pull every N pushes")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1'000'000}));
  app->add_option_function<std::string>(
         "--ps-optimizer",
         [o](const std::string& v) {
           if (auto kind = sgd::parse_server_optimizer(v)) o->params.ps.optimizer.kind = *kind;
         },
         "ps: the servers' optimizer, sgd, momentum or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}));
  app->add_option("--ps-lr", ps.optimizer.lr, "ps: the servers' learning rate")
      ->capture_default_str()
      ->check(bounded(0, 1e6, true));
  app->add_option("--ps-momentum", ps.optimizer.momentum, "ps: the servers' momentum, in [0, 1)")
      ->check(bounded(0, 0.999999, false));
  app->add_option("--model", o->model,
                  "quadratic (a local step on |x - b_i|^2/2 each round), mixing (x <- W x) or "
                  "mlp (the reference MLP on each node's shard of Fashion-MNIST)")
      ->capture_default_str();
  CLI::Option* numel =
      app->add_option("--numel", o->numel, "Parameters of the model (not mlp: it has its own)")
          ->capture_default_str();
  app->add_option("--data-dir", o->mlp.data_dir, "mlp: where Fashion-MNIST is")
      ->capture_default_str();
  app->add_option("--data-partition", o->mlp.partition,
                  "mlp: how the training set is split, iid or dirichlet:ALPHA (label skew)")
      ->capture_default_str();
  app->add_option("--batch", o->mlp.batch, "mlp: the minibatch of a local step")
      ->capture_default_str();
  app->add_option("--local-steps", o->mlp.local_steps, "mlp: local steps a round")
      ->capture_default_str();
  app->add_option("--rounds", o->rounds, "Rounds each node runs")->capture_default_str();
  app->add_option("--seed", o->seed, "Seed of the topology, the data and the links' jitter")
      ->capture_default_str();
  app->add_option("--lr", o->lr, "The local step's size (0: quadratic 0.1, mlp 0.05)")
      ->capture_default_str();
  app->add_option("--start-mode", o->start_mode,
                  "mixing: node i starts in the K-th Fourier mode of the ids, cos(2 pi (K i / n "
                  "+ e / numel)), an eigenvector of the ring and the exponential graph (K = 1: "
                  "the ring's slowest); 0: at random")
      ->capture_default_str();
  app->add_option("--noise", o->noise, "The gradient's noise per element (standard deviation)")
      ->capture_default_str();
  app->add_option("--heterogeneity", o->heterogeneity, "Spread of the nodes' optima (non-IID data)")
      ->capture_default_str();
  app->add_option("--links", *links,
                  "Every link: latency=1ms,jitter=100us,bandwidth=1Gbit (the sender's uplink)");
  app->add_option("--step-time-ms", *step_ms, "Virtual compute time of each round's local step")
      ->check(bounded(0, 1e9, false));
  app->add_option("--kill", *kills, "NODE@ROUND: the node dies before that round (repeatable)");
  app->add_option("--peer-lists", o->peer_lists,
                  "all (each node lists every node, as gossipd's members do) or graph (the "
                  "gossip family without deaths: only the nodes it exchanges with, and nodes 0 "
                  "and 1, the coordinators: a row a peer less, for 10,000 nodes)")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "graph"}));
  app->add_option("--churn", o->churn_per_minute,
                  "PERCENT of the nodes die per minute of virtual time (each at an exponential "
                  "time of that rate); none comes back, unless --rejoin-after")
      ->check(bounded(0, 100, false));
  app->add_option("--dies-as", o->dies_as,
                  "How a node dies (--kill, --churn): process (its sockets close, and its peers' "
                  "connections to it drop at once) or machine (they stay up: its peers find out "
                  "by asking)")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "machine"}));
  auto rejoin_s = std::make_shared<double>(-1);
  app->add_option("--rejoin-after", *rejoin_s,
                  "SECONDS: a node that died restarts that long after (virtual time) and takes "
                  "a live peer's model, as a restarted gossipd does (the gossip family, and "
                  "local SGD and SMA on an elastic ring)")
      ->check(bounded(0, 1e6, false));
  app->add_option("--pause", *pauses,
                  "NODE@ROUND:SECONDS: the node's trainer stops that long before the round's "
                  "step, while its node answers its peers (repeatable)");
  app->add_option("--slow", *slow,
                  "NODE:FACTOR: the node's steps take FACTOR times --step-time-ms (a "
                  "straggler; repeatable)");
  app->add_option("--partition", *partitions,
                  "FIRST-LAST@FROM-UNTIL: nodes FIRST..LAST are cut off from the others from "
                  "FROM until UNTIL seconds of virtual time; what was sent across arrives when "
                  "it heals (repeatable)");
  // gossipd's waits, in seconds: above 0 (the floor too, as gossipd has it).
  const auto wait = [&](const char* flag, double& seconds) {
    app->add_option(flag, seconds, fmt::format("As gossipd's {} (seconds)", flag))
        ->capture_default_str()
        ->check(bounded(0, 1e6, true));
  };
  wait("--patience", waits->patience);
  // Within gossipd's bounds for these two (daemon/config_fields.cc).
  app->add_option("--patience-floor", waits->patience_floor,
                  "As gossipd's --patience-floor (seconds)")
      ->capture_default_str()
      ->check(bounded(0, 3600, true));
  app->add_option("--patience-factor", o->patience_factor,
                  "As gossipd's --patience-factor (0: no asks, --patience and --dead-after alone)")
      ->capture_default_str()
      ->check(bounded(0, 1000, false));
  wait("--dead-after", waits->dead_after);
  wait("--dead-after-floor", waits->dead_after_floor);
  wait("--heartbeat", waits->heartbeat);
  wait("--round-timeout", waits->round_timeout);
  wait("--round-timeout-floor", waits->round_timeout_floor);
  app->add_option("--round-timeout-factor", waits->round_timeout_factor,
                  "As gossipd's --round-timeout-factor: F, or auto (3 for the gossip family, 0 "
                  "otherwise)")
      ->capture_default_str();
  app->add_option("--dead-after-factor", o->dead_after_factor,
                  "As gossipd's --dead-after-factor (0: always --dead-after)")
      ->capture_default_str()
      ->check(bounded(0, 1e6, false));
  app->add_option("--joins", joins->joins,
                  "Instead of training: K nodes join by seeds, one every --join-every seconds; "
                  "the members run gossipd's admission alone (no strategy)")
      ->check(CLI::Range(0u, static_cast<unsigned>(peers::TrafficCounters::kMaxJoined)));
  app->add_option("--join-every", *join_every, "--joins: seconds between two joiners' arrivals")
      ->capture_default_str()
      ->check(bounded(0, 1e4, true));
  app->add_option("--join-seeds", joins->seeds, "--joins: the members each joiner asks, in turn")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app->add_option("--join-quorum", *join_quorum, "--joins: as gossipd's --join-quorum")
      ->capture_default_str()
      ->check(CLI::IsMember({"majority", "any"}));
  app->add_option("--out", *out, "Write rounds.csv (joins.csv with --joins) into this directory");
  return Subcommand{
      app, [o, links, out, step_ms, kills, pauses, slow, partitions, waits, numel, joins,
            join_every, join_quorum, rejoin_s]() {
        if (o->model == "mlp" && numel->count() > 0) {
          std::fprintf(stderr,
                       "gossipctl simulate: --numel with --model mlp: the MLP has its own (%zu)\n",
                       sim::MlpCluster::numel());
          return kExitUsage;
        }
        const auto ms = [](double s) {
          return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
        };
        o->patience = ms(waits->patience);
        o->patience_floor = ms(waits->patience_floor);
        o->dead_after = ms(waits->dead_after);
        o->dead_after_floor = ms(waits->dead_after_floor);
        o->heartbeat = ms(waits->heartbeat);
        o->round_timeout = ms(waits->round_timeout);
        o->round_timeout_floor = ms(waits->round_timeout_floor);
        if (waits->round_timeout_factor != "auto") {
          double f = -1;
          char end = 0;
          if (std::sscanf(waits->round_timeout_factor.c_str(), "%lf%c", &f, &end) != 1 ||
              !(f >= 0 && f <= 1e6)) {
            std::fprintf(stderr,
                         "gossipctl simulate: --round-timeout-factor %s: expected auto or a "
                         "number in 0..1e6\n",
                         waits->round_timeout_factor.c_str());
            return kExitUsage;
          }
          o->round_timeout_factor = f;
        }
        std::vector<peers::Outage> outages;
        for (const std::string& p : *partitions) {
          unsigned first = 0, last = 0;
          double from = 0, until = 0;
          char end = 0;
          if (has_negative(p) ||
              std::sscanf(p.c_str(), "%u-%u@%lf-%lf%c", &first, &last, &from, &until, &end) != 4 ||
              last < first || !(from >= 0 && from < until && until <= 1e6)) {
            std::fprintf(stderr,
                         "gossipctl simulate: --partition %s: expected FIRST-LAST@FROM-UNTIL "
                         "(nodes, then seconds, FROM before UNTIL, at most 1e6)\n",
                         p.c_str());
            return kExitUsage;
          }
          if (last >= o->nodes) {
            std::fprintf(stderr, "gossipctl simulate: --partition %s: there is no node %u\n",
                         p.c_str(), last);
            return kExitUsage;
          }
          peers::Outage outage;
          outage.from = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(from));
          outage.until = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(until));
          for (unsigned n = first; n <= last; ++n) outage.side.insert(n);
          outages.push_back(std::move(outage));
        }
        for (const std::string& w : *slow) {
          unsigned node = 0;
          double factor = 0;
          char end = 0;
          if (has_negative(w) || std::sscanf(w.c_str(), "%u:%lf%c", &node, &factor, &end) != 2) {
            std::fprintf(stderr, "gossipctl simulate: --slow %s: expected NODE:FACTOR\n",
                         w.c_str());
            return kExitUsage;
          }
          o->slow[node] = factor;
        }
        for (const std::string& p : *pauses) {
          unsigned node = 0;
          unsigned long long round = 0;
          double seconds = 0;
          char end = 0;
          if (has_negative(p) ||
              std::sscanf(p.c_str(), "%u@%llu:%lf%c", &node, &round, &seconds, &end) != 3 ||
              !(seconds >= 0 && seconds < 1e6)) {
            std::fprintf(stderr,
                         "gossipctl simulate: --pause %s: expected NODE@ROUND:SECONDS (at most "
                         "1e6 seconds)\n",
                         p.c_str());
            return kExitUsage;
          }
          o->pauses.push_back(
              {node, round,
               std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds))});
        }
        for (const std::string& k : *kills) {
          unsigned node = 0;
          unsigned long long round = 0;
          char end = 0;
          if (has_negative(k) || std::sscanf(k.c_str(), "%u@%llu%c", &node, &round, &end) != 2) {
            std::fprintf(stderr, "gossipctl simulate: --kill %s: expected NODE@ROUND\n", k.c_str());
            return kExitUsage;
          }
          o->deaths[node] = round;
        }
        if (*rejoin_s >= 0)
          o->rejoin_after =
              std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*rejoin_s));
        if (!links->empty()) {
          auto link = parse_link(*links);
          if (!link) {
            std::fprintf(stderr, "gossipctl simulate: %s\n", link.status().message().c_str());
            return kExitUsage;
          }
          o->links.all = *link;
          o->links.seed = o->seed;
        }
        o->links.outages = std::move(outages);
        if (joins->joins > 0) {
          if (!kills->empty() || !pauses->empty() || !slow->empty() || o->churn_per_minute > 0 ||
              o->rejoin_after) {
            std::fprintf(stderr,
                         "gossipctl simulate: --joins runs no training: --kill, --churn, "
                         "--rejoin-after, --pause and --slow are of training runs\n");
            return kExitUsage;
          }
          joins->members = o->nodes;
          joins->every =
              std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*join_every));
          joins->majority = *join_quorum == "majority";
          joins->dead_after = o->dead_after;
          joins->links = o->links;
          joins->seed = o->seed;
          return run_join_simulation(*joins, *out);
        }
        o->step_time =
            std::chrono::duration_cast<Duration>(std::chrono::duration<double>(*step_ms / 1e3));
        std::unique_ptr<std::ofstream> csv;
        if (!out->empty()) {
          std::error_code ec;
          std::filesystem::create_directories(*out, ec);
          csv = std::make_unique<std::ofstream>(std::filesystem::path(*out) / "rounds.csv");
          if (ec || !*csv) {
            std::fprintf(stderr, "gossipctl simulate: cannot write %s/rounds.csv\n", out->c_str());
            return kExitFailure;
          }
          *csv << "round,nodes,time_s,consensus,suboptimality,wire_bytes_per_node,train_loss\n";
        }
        // Each node logs as its gossipd would (a ring's peers coming up, each round's
        // algorithm): at a thousand nodes, only what went wrong is worth reading.
        spdlog::set_level(spdlog::level::warn);
        auto report = sim::simulate(*o, [&](const sim::RoundRow& r) {
          if (csv)
            *csv << fmt::format("{},{},{:.9g},{:.9g},{:.9g},{:.0f},{:.6g}\n", r.round, r.nodes,
                                r.time_s, r.consensus, r.suboptimality, r.wire_bytes_per_node,
                                r.train_loss);
        });
        if (!report) {
          std::fprintf(stderr, "gossipctl simulate: %s\n", report.status().message().c_str());
          return kExitUsage;
        }
        const auto& rows = report->rounds;
        // A graph only where the strategy has one (the gossip family's).
        const sgd::StrategyDescriptor* descriptor = sgd::find_strategy(o->strategy);
        const std::string over = descriptor && descriptor->fabric != sgd::Fabric::kOverlay ? ""
                                 : o->topology.empty() ? " on its default topology"
                                                       : " on " + o->topology;
        std::printf("simulated %u nodes, %s%s, %llu rounds of %zu parameters\n", o->nodes,
                    o->strategy.c_str(), over.c_str(), static_cast<unsigned long long>(o->rounds),
                    o->model == "mlp" ? sim::MlpCluster::numel() : o->numel);
        std::printf("virtual time %.3f s in %.1f s of real time (%llu events)\n", report->virtual_s,
                    report->real_s, static_cast<unsigned long long>(report->events));
        std::printf(
            "sent %.0f bytes per node (%.0f per round), %llu messages in all\n",
            static_cast<double>(report->wire_bytes) / o->nodes,
            static_cast<double>(report->wire_bytes) / o->nodes / std::max<uint64_t>(1, o->rounds),
            static_cast<unsigned long long>(report->messages));
        if (report->died > 0) std::printf("%u deaths\n", report->died);
        if (report->restarts_too_late > 0)
          std::printf("%u restarts came too late: the others had run the last round\n",
                      report->restarts_too_late);
        if (report->rejoined > 0) {
          const auto& w = report->rejoin_s;
          double sum = 0, most = 0;
          for (double v : w) sum += v, most = std::max(most, v);
          std::printf(
              "%u restarts took a peer's model (%.0f bytes in all); each back in its first "
              "round after %.3f s on average, at most %.3f s\n",
              report->rejoined, static_cast<double>(report->state_bytes),
              w.empty() ? 0.0 : sum / static_cast<double>(w.size()), most);
        }
        if (report->came_back > 0)
          std::printf(
              "%u times a node the elastic ring had left out took a member's model and "
              "asked back in\n",
              report->came_back);
        if (!rows.empty() && o->model != "mlp")
          std::printf("consensus distance %.6g (round 0: %.6g), distance to the optimum %.6g\n",
                      rows.back().consensus, rows.front().consensus, rows.back().suboptimality);
        if (!rows.empty() && report->test_accuracy >= 0)
          std::printf(
              "consensus distance %.6g (round 0: %.6g); training loss %.4f (round 0: %.4f); the "
              "replicas' mean: test accuracy %.2f %%, loss %.4f\n",
              rows.back().consensus, rows.front().consensus, rows.back().train_loss,
              rows.front().train_loss, 100 * report->test_accuracy, report->test_loss);
        // What the graph predicts, beside what was measured: the squared distance
        // shrinks by (1 - gap)^2 a round.
        if (const sgd::StrategyDescriptor* d = sgd::find_strategy(o->strategy);
            d && d->fabric == sgd::Fabric::kOverlay) {
          const std::string spec =
              o->topology.empty() ? std::string(d->default_topology) : o->topology;
          if (auto t = peers::make_topology(spec, o->nodes, o->seed); t)
            if (auto gap = peers::spectral_gap(**t); gap)
              std::printf("spectral gap %.12g: consensus shrinks by about %.12g a round\n",
                          gap->gap, (1 - gap->gap) * (1 - gap->gap));
        }
        for (const auto& f : report->failures)
          std::fprintf(stderr, "gossipctl simulate: %s\n", f.c_str());
        return report->failures.empty() ? kExitOk : kExitFailure;
      }};
}

}  // namespace gossip::cli
