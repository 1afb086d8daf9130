#include "daemon/metrics_text.h"

#include <fmt/format.h>

#include <cmath>
#include <span>
#include <string_view>

#include "base/version.h"

namespace gossip::daemon {
namespace {

// Label values escape backslash, double quote and newline (the exposition format's rule).
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <class Get>
void per_peer(std::string& out, const MetricsSnapshot& s, std::string_view name,
              std::string_view help, Get get) {
  header(out, name, "counter", help);
  for (const PeerMetrics& p : s.peers)
    out += fmt::format("{}{{peer=\"{}\"}} {}\n", name, label(p.peer), get(p.traffic));
}

// A histogram family and its three sample names, each written out in full so that
// every name the daemon exports can be found in this file (the Prometheus test does).
struct HistogramNames {
  std::string_view family, bucket, sum, count;
};

// A histogram's samples from per-bucket (not cumulative) counts.
void histogram(std::string& out, const HistogramNames& n, std::string_view help,
               std::span<const double> bounds, std::span<const uint64_t> counts, double sum,
               uint64_t count) {
  header(out, n.family, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t b = 0; b < bounds.size(); ++b) {
    cumulative += counts[b];
    out += fmt::format("{}{{le=\"{}\"}} {}\n", n.bucket, bounds[b], cumulative);
  }
  out += fmt::format("{}{{le=\"+Inf\"}} {}\n", n.bucket, count);
  out += fmt::format("{} {:.6f}\n", n.sum, sum);
  out += fmt::format("{} {}\n", n.count, count);
}

// Where the time goes: the trainers' wait against their time attached (the fraction
// a trainer waits is the ratio of the two counters' rates), and the rounds.
void render_time(std::string& out, const TimeAccounts::Snapshot& t) {
  header(out, "gossipd_trainer_wait_seconds_total", "counter",
         "Time the node's trainers spent blocked on the daemon (a sync, a start, a step's last "
         "gradient bucket), summed over trainers.");
  out += fmt::format("gossipd_trainer_wait_seconds_total {:.6f}\n", t.trainer_wait_seconds);
  header(out, "gossipd_trainer_attached_seconds_total", "counter",
         "Time the node's trainers were attached, summed over trainers.");
  out += fmt::format("gossipd_trainer_attached_seconds_total {:.6f}\n", t.trainer_attached_seconds);
  histogram(out,
            {"gossipd_round_duration_seconds", "gossipd_round_duration_seconds_bucket",
             "gossipd_round_duration_seconds_sum", "gossipd_round_duration_seconds_count"},
            "Synchronization rounds, from their start on this node to their end.",
            TimeAccounts::kRoundBuckets, t.round_buckets, t.round_seconds, t.rounds);
  header(out, "gossipd_last_round_payload_bytes", "gauge",
         "Bytes of model data this node sent in its last round.");
  out += fmt::format("gossipd_last_round_payload_bytes {}\n", t.last_round_payload_bytes);
  header(out, "gossipd_last_round_overlap_ratio", "gauge",
         "Of the last round's time, the fraction its trainers spent training instead of waiting "
         "for it (0: the round blocked them; 1: it ran under their compute).");
  out += fmt::format("gossipd_last_round_overlap_ratio {:.3f}\n", t.last_round_overlap);
}

}  // namespace

std::string render_metrics(const MetricsSnapshot& s) {
  std::string out;
  header(out, "gossipd_build_info", "gauge", "The gossipd build, as labels.");
  out += fmt::format("gossipd_build_info{{version=\"{}\",build_type=\"{}\"}} 1\n", kVersion,
                     label(kBuildType));
  header(out, "gossipd_info", "gauge", "The node's id and configuration, as labels.");
  out += fmt::format(
      "gossipd_info{{node=\"{}\",strategy=\"{}\",codec=\"{}\",transport=\"{}\",topology=\"{}\"}} "
      "1\n",
      s.node, label(s.strategy), label(s.codec), label(s.transport), label(s.topology));
  header(out, "gossipd_rounds_total", "counter", "Synchronization rounds completed.");
  out += fmt::format("gossipd_rounds_total {}\n", s.rounds);
  header(out, "gossipd_step", "gauge", "The node's training step at its last synchronization.");
  out += fmt::format("gossipd_step {}\n", s.step);
  header(out, "gossipd_trainers", "gauge", "Trainers attached now.");
  out += fmt::format("gossipd_trainers {}\n", s.trainers);
  header(out, "gossipd_ipc_messages_dropped_total", "counter",
         "Malformed or unexpected messages from trainers.");
  out += fmt::format("gossipd_ipc_messages_dropped_total {}\n", s.ipc_dropped);
  header(out, "gossipd_nonfinite_updates_total", "counter",
         "Rounds in which the node's update held NaN or Inf and was repaired before sending.");
  out += fmt::format("gossipd_nonfinite_updates_total {}\n", s.nonfinite_updates);
  header(out, "gossipd_nonfinite_values_total", "counter",
         "NaN or Inf values found in the node's updates.");
  out += fmt::format("gossipd_nonfinite_values_total {}\n", s.nonfinite_values);
  header(out, "gossipd_model_norm", "gauge",
         "L2 norm of the node's model after its last round (0 before the first, and for "
         "strategies that average gradients); past 10 times its first value the model diverged.");
  out += fmt::format("gossipd_model_norm {}\n", s.model_norm);
  header(out, "gossipd_trainer_loss", "gauge",
         "The training loss a trainer of the node reported last (the mean since its last "
         "sync; 0 before the first, and from trainers that report none); a NaN, or 10 times "
         "the first three reports in a row, is divergence.");
  // Prometheus spells the non-finite values its own way.
  const double loss = s.trainer_loss;
  out += fmt::format("gossipd_trainer_loss {}\n", std::isnan(loss)   ? std::string("NaN")
                                                  : std::isinf(loss) ? (loss > 0 ? "+Inf" : "-Inf")
                                                                     : fmt::format("{}", loss));
  using T = proto::ipc::Traffic;
  per_peer(out, s, "gossipd_bytes_sent_total",
           "Bytes sent to the peer on the wire, framing included.",
           [](const T& t) { return t.wire_sent; });
  per_peer(out, s, "gossipd_bytes_received_total",
           "Bytes received from the peer on the wire, framing included.",
           [](const T& t) { return t.wire_recv; });
  per_peer(out, s, "gossipd_payload_bytes_sent_total", "Bytes of model data sent to the peer.",
           [](const T& t) { return t.payload_sent; });
  per_peer(out, s, "gossipd_payload_bytes_received_total",
           "Bytes of model data received from the peer.",
           [](const T& t) { return t.payload_recv; });
  per_peer(out, s, "gossipd_messages_sent_total", "Messages sent to the peer.",
           [](const T& t) { return t.msgs_sent; });
  per_peer(out, s, "gossipd_messages_received_total", "Messages received from the peer.",
           [](const T& t) { return t.msgs_recv; });
  per_peer(out, s, "gossipd_messages_dropped_total", "Invalid messages from the peer, dropped.",
           [](const T& t) { return t.dropped; });
  header(out, "gossipd_messages_unhandled_total", "counter",
         "Valid messages from peers of a kind that nothing on this node handles (another strategy "
         "or transport).");
  for (const auto& [kind, n] : s.unhandled)
    out += fmt::format("gossipd_messages_unhandled_total{{kind=\"{}\"}} {}\n", label(kind), n);
  header(out, "gossipd_refused_total", "counter",
         "What this node refused from outside (connections, messages, values), by kind: see "
         "docs/security.md.");
  for (const auto& [kind, n] : s.refused)
    out += fmt::format("gossipd_refused_total{{kind=\"{}\"}} {}\n", label(kind), n);
  header(out, "gossipd_peer_silent_seconds", "gauge",
         "Seconds since the peer's last message (absent: never heard).");
  for (const PeerMetrics& p : s.peers)
    if (p.silent_seconds)
      out += fmt::format("gossipd_peer_silent_seconds{{peer=\"{}\"}} {:.3f}\n", label(p.peer),
                         *p.silent_seconds);
  for (const auto& g : s.strategy_gauges) {
    header(out, g.name, g.type.c_str(), g.help);
    out += fmt::format("{} {}\n", g.name, g.value);
    if (g.alias.empty()) continue;
    // Renamed: the old name for one release more, so that dashboards can move.
    header(out, g.alias, "gauge",
           fmt::format("Deprecated: the old name of {}, removed in the next release.", g.name));
    out += fmt::format("{} {}\n", g.alias, g.value);
  }
  header(out, "gossipd_failures_total", "counter",
         "What went wrong, by cause: rounds that timed out or failed, neighbors absent from a "
         "round, members an elastic ring left out, NaN or Inf in an update or a result, messages "
         "refused from peers.");
  for (const auto& [cause, n] : s.failures)
    out += fmt::format("gossipd_failures_total{{cause=\"{}\"}} {}\n", label(cause), n);
  uint64_t refused = 0;
  for (const PeerMetrics& p : s.peers) refused += p.traffic.dropped;
  out += fmt::format("gossipd_failures_total{{cause=\"refused-message\"}} {}\n", refused);
  header(out, "gossipd_peers", "gauge", "Peers in the node's list, banned ones not counted.");
  out += fmt::format("gossipd_peers {}\n", s.configured_peers);
  header(out, "gossipd_peer_connected", "gauge",
         "1 while this node's link to the peer is connected and its handshake done, else 0.");
  uint64_t connected = 0;
  for (const PeerMetrics& p : s.peers)
    if (p.connected) {
      out += fmt::format("gossipd_peer_connected{{peer=\"{}\"}} {}\n", label(p.peer),
                         *p.connected ? 1 : 0);
      connected += *p.connected ? 1 : 0;
    }
  header(out, "gossipd_peers_connected", "gauge",
         "Peers whose link from this node is connected, its handshake done.");
  out += fmt::format("gossipd_peers_connected {}\n", connected);
  if (!s.allreduce_rounds.empty()) {
    header(out, "gossipd_allreduce_rounds_total", "counter",
           "All-reduce rounds completed, by the algorithm that ran them (--allreduce-algorithm).");
    for (const auto& [algorithm, n] : s.allreduce_rounds)
      out += fmt::format("gossipd_allreduce_rounds_total{{algorithm=\"{}\"}} {}\n",
                         label(algorithm), n);
  }
  render_time(out, s.time);
  histogram(
      out,
      {"gossipd_state_transfer_duration_seconds", "gossipd_state_transfer_duration_seconds_bucket",
       "gossipd_state_transfer_duration_seconds_sum",
       "gossipd_state_transfer_duration_seconds_count"},
      "State transfers this node made as a joiner (a restart, a node left out), from its "
      "first ask to the last chunk.",
      TransferHistogram::kBuckets, s.transfers.counts, s.transfers.sum_seconds, s.transfers.count);
  return out;
}

}  // namespace gossip::daemon
