#pragma once
// The daemon's metrics in Prometheus' text exposition format (version 0.0.4), from a
// snapshot, so the format is tested without a server. Names follow Prometheus'
// conventions: a gossipd_ prefix, base units, _total on counters.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/time_accounts.h"
#include "daemon/transfer_histogram.h"
#include "proto/ipc.h"

namespace gossip::daemon {

struct PeerMetrics {
  std::string peer;  // the peer's id, or "unknown" for messages from strangers
  proto::ipc::Traffic traffic;
  std::optional<double> silent_seconds;  // since its last message; none: never heard
  std::optional<bool> connected;         // its outgoing link is up; none: not a configured peer
};

struct MetricsSnapshot {
  uint32_t node = 0;
  std::string strategy, codec, transport, topology;
  uint64_t rounds = 0;
  uint64_t step = 0;
  uint32_t trainers = 0;
  uint64_t ipc_dropped = 0;        // malformed or unexpected messages from trainers
  uint64_t nonfinite_updates = 0;  // contributions with NaN/Inf, repaired (daemon/nonfinite.h)
  uint64_t nonfinite_values = 0;
  double model_norm = 0;    // after the last round (daemon/divergence.h); 0 before the first
  double trainer_loss = 0;  // the last a trainer reported (Client::report_loss); 0 before
  std::vector<PeerMetrics> peers;
  // Valid peer messages of a kind nothing on the node handles, by kind name (peers/router.h).
  std::vector<std::pair<std::string, uint64_t>> unhandled;
  // All-reduce rounds by algorithm (ring, tree, ...); empty without a ring transport.
  std::vector<std::pair<std::string, uint64_t>> allreduce_rounds;
  // What was refused from outside, by kind (base/refusals.h).
  std::vector<std::pair<std::string, uint64_t>> refused;
  struct Gauge {
    std::string name, help;
    double value = 0;
    std::string type = "gauge";
    std::string alias = {};  // the old name, exported too for one release
  };
  std::vector<Gauge> strategy_gauges;  // sgd::Strategy::gauges, the tuner's, the ring's
  // Failures by cause (base/failures.h).
  std::vector<std::pair<std::string, uint64_t>> failures;
  uint32_t configured_peers = 0;          // not banned
  TimeAccounts::Snapshot time;            // where the trainers' and the rounds' time goes
  TransferHistogram::Snapshot transfers;  // the node's state transfers as a joiner
};

std::string render_metrics(const MetricsSnapshot& s);

}  // namespace gossip::daemon
