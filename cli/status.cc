#include "cli/status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>

#include "cli/json.h"
#include "cli/progress.h"
#include "daemon/tuner.h"

namespace gossip::cli {
namespace {

// Refused messages from one peer past which status names it.
constexpr uint64_t kSuspectDrops = 10;

std::string silent_text(const std::optional<uint64_t>& ms) {
  if (!ms) return "never";
  if (*ms < 1000) return fmt::format("{} ms ago", *ms);
  return fmt::format("{:.1f} s ago", static_cast<double>(*ms) / 1000.0);
}

std::string traffic_json(const Traffic& t) {
  return JsonObjectWriter()
      .add_uint("payload_sent", t.payload_sent)
      .add_uint("payload_recv", t.payload_recv)
      .add_uint("wire_sent", t.wire_sent)
      .add_uint("wire_recv", t.wire_recv)
      .add_uint("msgs_sent", t.msgs_sent)
      .add_uint("msgs_recv", t.msgs_recv)
      .add_uint("dropped", t.dropped)
      .str();
}

}  // namespace

std::string ipc_endpoint_of(const std::string& node) {
  return node.starts_with("ipc://") ? node : "ipc://" + node;
}

std::string format_status_table(const NodeStatus& s) {
  std::string out = fmt::format("node {}  strategy {}  round {}  step {}  trainers {}\n", s.node,
                                s.strategy, s.round, s.step, s.trainers);
  out += fmt::format(
      "traffic: sent {} ({} on the wire, {} messages), received {} ({}, {} messages), dropped {}\n",
      format_bytes(s.traffic.payload_sent), format_bytes(s.traffic.wire_sent), s.traffic.msgs_sent,
      format_bytes(s.traffic.payload_recv), format_bytes(s.traffic.wire_recv), s.traffic.msgs_recv,
      s.traffic.dropped);
  if (s.trainer_attached_seconds > 0)
    out +=
        fmt::format("trainers waited {:.1f} % of their time for the daemon ({:.1f} of {:.1f} s)\n",
                    100 * s.trainer_wait_seconds / s.trainer_attached_seconds,
                    s.trainer_wait_seconds, s.trainer_attached_seconds);
  if (s.rounds_timed > 0)
    out += fmt::format(
        "rounds: {} timed, mean {:.1f} ms; the last {:.1f} ms, {} sent, {:.0f} % overlapped with "
        "training\n",
        s.rounds_timed, 1e3 * s.round_seconds / static_cast<double>(s.rounds_timed),
        1e3 * s.last_round_seconds, format_bytes(s.last_round_payload_bytes),
        100 * s.last_round_overlap);
  if (s.peers.empty()) return out + "no peers\n";
  out += fmt::format("{:<6} {:<28} {:>12} {:>12} {:>16} {:>8}  {}\n", "peer", "endpoint", "sent",
                     "received", "messages out/in", "dropped", "last heard");
  for (const PeerStatus& p : s.peers) {
    out += fmt::format("{:<6} {:<28} {:>12} {:>12} {:>16} {:>8}  {}\n", p.id, p.endpoint,
                       format_bytes(p.traffic.payload_sent), format_bytes(p.traffic.payload_recv),
                       fmt::format("{}/{}", p.traffic.msgs_sent, p.traffic.msgs_recv),
                       p.traffic.dropped, silent_text(p.silent_ms));
  }
  // A peer whose messages are refused again and again is either broken or hostile.
  for (const PeerStatus& p : s.peers)
    if (p.traffic.dropped >= kSuspectDrops)
      out += fmt::format(
          "peer {}: {} messages refused; if it is hostile, ban its key ([[peers]] banned = true, "
          "or gossipd --ban-peer {}; docs/security.md)\n",
          p.id, p.traffic.dropped, p.id);
  return out;
}

std::string format_status_json(const NodeStatus& s, const std::string& endpoint) {
  std::string peers = "[";
  for (const PeerStatus& p : s.peers) {
    JsonObjectWriter w;
    w.add_uint("id", p.id)
        .add_string("endpoint", p.endpoint)
        .add_raw("traffic", traffic_json(p.traffic));
    if (p.silent_ms)
      w.add_uint("silent_ms", *p.silent_ms);
    else
      w.add_null("silent_ms");
    peers += (peers.size() > 1 ? ", " : "") + w.str();
  }
  peers += "]";
  return JsonObjectWriter()
      .add_string("endpoint", endpoint)
      .add_uint("node", s.node)
      .add_string("strategy", s.strategy)
      .add_uint("round", s.round)
      .add_uint("step", s.step)
      .add_uint("trainers", s.trainers)
      .add_raw("traffic", traffic_json(s.traffic))
      .add_raw("peers", peers)
      .add_raw("time", JsonObjectWriter()
                           .add_number("trainer_wait_seconds", s.trainer_wait_seconds)
                           .add_number("trainer_attached_seconds", s.trainer_attached_seconds)
                           .add_uint("rounds_timed", s.rounds_timed)
                           .add_number("round_seconds", s.round_seconds)
                           .add_number("last_round_seconds", s.last_round_seconds)
                           .add_uint("last_round_payload_bytes", s.last_round_payload_bytes)
                           .add_number("last_round_overlap", s.last_round_overlap)
                           .str())
      .str();
}

std::vector<MemberView> member_views(const ClusterStatus& c) {
  std::vector<MemberView> out;
  uint64_t furthest = 0;
  for (const auto& m : c.members) furthest = std::max(furthest, m.step);
  std::vector<std::span<const float>> samples;
  for (const auto& m : c.members) {
    out.push_back({m, furthest - m.step, std::nullopt});
    samples.emplace_back(m.samples);
  }
  // Each member's distance from the mean, on the samples, where all sent as many.
  if (const auto d = daemon::distances_from_mean(samples))
    for (size_t i = 0; i < out.size(); ++i) out[i].distance = (*d)[i];
  return out;
}

std::string format_cluster_table(const ClusterStatus& c) {
  std::string out = fmt::format("{} member{}, asked node {}; {} answered in {:.1f} s",
                                c.summary.members.size(), c.summary.members.size() == 1 ? "" : "s",
                                c.summary.asked, c.members.size(), c.summary.elapsed_s);
  if (!c.summary.silent.empty()) {
    out += "; silent:";
    for (uint32_t id : c.summary.silent) out += fmt::format(" {}", id);
  }
  out += "\n";
  std::vector<std::span<const float>> samples;
  for (const auto& m : c.members) samples.emplace_back(m.samples);
  if (auto d = daemon::relative_spread(samples))
    out += fmt::format("replicas' distance from their mean: {:.4f} of its norm\n", *d);
  out += fmt::format("{:<5} {:<12} {:>7} {:>8} {:>6} {:>8} {:>10} {:>10} {:>9} {:>9}  {}\n", "node",
                     "state", "round", "step", "lag", "trainers", "sent", "received", "round",
                     "distance", "last error");
  for (const auto& v : member_views(c)) {
    const auto& m = v.status;
    const std::string error = m.last_error.empty() ? "-"
                                                   : fmt::format("{} ({:.0f} s ago)", m.last_error,
                                                                 std::max(m.last_error_age_s, 0.0));
    out += fmt::format("{:<5} {:<12} {:>7} {:>8} {:>6} {:>8} {:>10} {:>10} {:>9} {:>9}  {}\n",
                       m.node, m.state, m.round, m.step, v.lag, m.trainers,
                       format_bytes(m.sent_bytes), format_bytes(m.received_bytes),
                       m.round_ms < 0 ? std::string("-") : fmt::format("{:.1f}ms", m.round_ms),
                       v.distance ? fmt::format("{:.4f}", *v.distance) : std::string("-"), error);
  }
  for (uint32_t id : c.summary.silent)
    out += fmt::format(
        "{:<5} {:<12} (no answer: down, unreachable, or busy; gossipctl doctor "
        "says which)\n",
        id, "silent");
  for (const auto& why : c.unreadable) out += "a member's status could not be read: " + why + "\n";
  return out;
}

std::string format_cluster_json(const ClusterStatus& c) {
  std::string members = "[";
  for (const auto& v : member_views(c)) {
    const auto& m = v.status;
    JsonObjectWriter w;
    w.add_uint("node", m.node)
        .add_string("state", m.state)
        .add_uint("round", m.round)
        .add_uint("step", m.step)
        .add_uint("lag", v.lag)
        .add_uint("trainers", m.trainers)
        .add_uint("sent_bytes", m.sent_bytes)
        .add_uint("received_bytes", m.received_bytes);
    if (m.round_ms >= 0)
      w.add_number("round_ms", m.round_ms);
    else
      w.add_null("round_ms");
    if (v.distance)
      w.add_number("distance", *v.distance);
    else
      w.add_null("distance");
    w.add_string("last_error", m.last_error).add_string("version", m.version);
    members += (members.size() > 1 ? ", " : "") + w.str();
  }
  members += "]";
  std::string silent = "[";
  for (uint32_t id : c.summary.silent)
    silent += (silent.size() > 1 ? ", " : "") + std::to_string(id);
  silent += "]";
  return JsonObjectWriter()
      .add_uint("asked", c.summary.asked)
      .add_uint("member_count", c.summary.members.size())
      .add_number("elapsed_s", c.summary.elapsed_s)
      .add_raw("silent", silent)
      .add_raw("members", members)
      .str();
}

int run_status(const StatusOptions& o) {
  if (!std::isfinite(o.timeout_s) || o.timeout_s <= 0 || o.timeout_s > 120) {
    std::fprintf(stderr, "gossipctl status: --timeout: must be a number of seconds in (0, 120]\n");
    return kExitUsage;
  }
  const std::string endpoint = ipc_endpoint_of(o.node);
  if (o.cluster) {
    auto c =
        ask_status(endpoint, std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
    if (!c) {
      std::fprintf(stderr, "gossipctl status: %s\n", c.status().message().c_str());
      return kExitFailure;
    }
    const std::string text = o.json ? format_cluster_json(*c) + "\n" : format_cluster_table(*c);
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }
  ClientOptions co;
  co.endpoint = endpoint;
  co.trainer = "gossipctl-status";
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  auto client = Client::connect(co);
  if (!client) {
    std::fprintf(stderr, "gossipctl status: cannot reach %s: %s\n", endpoint.c_str(),
                 client.status().message().c_str());
    return kExitFailure;
  }
  auto s = (*client)->status();
  if (!s) {
    std::fprintf(stderr, "gossipctl status: %s: %s\n", endpoint.c_str(),
                 s.status().message().c_str());
    return kExitFailure;
  }
  const std::string text =
      o.json ? format_status_json(*s, endpoint) + "\n" : format_status_table(*s);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

Subcommand add_status_command(CLI::App& parent) {
  auto o = std::make_shared<StatusOptions>();
  CLI::App* app = parent.add_subcommand(
      "status", "What one node's gossipd is doing: round, trainers, traffic per peer");
  app->add_option("--node", o->node,
                  "The daemon's IPC endpoint (ipc://RUN_DIR/gossipd-ID.sock) or socket path")
      ->capture_default_str();
  app->add_flag("--json", o->json, "Print one JSON object instead of the table");
  app->add_flag("--cluster", o->cluster,
                "Every member through this node: state, step, lag, distance, traffic, last error");
  app->add_option("--timeout", o->timeout_s,
                  "Seconds to wait for the daemon (with --cluster: for the members' answers)")
      ->capture_default_str();
  return Subcommand{app, [o] { return run_status(*o); }};
}

}  // namespace gossip::cli
