#include "cli/status.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "cli/json.h"
#include "cli/progress.h"

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

int run_status(const StatusOptions& o) {
  if (!std::isfinite(o.timeout_s) || o.timeout_s <= 0) {
    std::fprintf(stderr, "gossipctl status: --timeout: must be a positive number of seconds\n");
    return kExitUsage;
  }
  const std::string endpoint = ipc_endpoint_of(o.node);
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
  app->add_option("--timeout", o->timeout_s, "Seconds to wait for the daemon")
      ->capture_default_str();
  return Subcommand{app, [o] { return run_status(*o); }};
}

}  // namespace gossip::cli
