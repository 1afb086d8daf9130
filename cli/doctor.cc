#include "cli/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/progress.h"
#include "cli/status.h"

namespace gossip::cli {
namespace {

using proto::inspect::Connect;
using proto::inspect::Handshake;
using proto::inspect::kNone;
using proto::inspect::Link;
using proto::inspect::LinkRow;

// Retransmitted segments past which a link is called lossy, once it sent this many.
constexpr double kLossy = 0.01;
constexpr uint64_t kLossyAfterSegments = 200;
// Clocks further apart than this (beyond the estimate's error) are worth a word.
constexpr double kSkewMs = 1000;
// A node heard from this recently is up, whatever its port says.
constexpr double kHeardRecentlyMs = 10000;

std::string port_of(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  return colon == std::string::npos ? endpoint : endpoint.substr(colon + 1);
}

std::string host_of(const std::string& endpoint) {
  std::string rest = endpoint.starts_with("tcp://") ? endpoint.substr(6) : endpoint;
  const size_t colon = rest.rfind(':');
  return colon == std::string::npos ? rest : rest.substr(0, colon);
}

std::string ids_text(const std::vector<uint32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ids.size() ? " and " : ", ") + std::to_string(ids[i]);
  return s;
}

std::string seconds_text(double ms) {
  return ms < 1000 ? fmt::format("{:.0f} ms", ms) : fmt::format("{:.1f} s", ms / 1000);
}

bool unreachable(Connect c) {
  return c == Connect::kRefused || c == Connect::kTimedOut || c == Connect::kUnreachable;
}

std::string connect_problem(uint32_t from, uint32_t to, const Link& l) {
  const std::string where = fmt::format("node {} cannot reach node {} on port {} ({})", from, to,
                                        port_of(l.endpoint), l.endpoint);
  switch (l.connect) {
    case Connect::kRefused:
      return where +
             ": connection refused; is gossipd running there and listening on that port, and "
             "does the firewall let it through?";
    case Connect::kTimedOut:
      return where + ": " + l.connect_error +
             "; is a firewall dropping the port, or is the host down?";
    case Connect::kUnreachable:
      return where + ": " + l.connect_error + "; check the address and the routes between them";
    case Connect::kUnresolved:
      return fmt::format(
          "node {} cannot resolve node {}'s host '{}': {}; check the peer list or DNS", from, to,
          host_of(l.endpoint), l.connect_error);
    default:
      return where + ": " + l.connect_error;
  }
}

}  // namespace

std::vector<Finding> diagnose(const ClusterLinks& c) {
  std::vector<Finding> out;
  const std::set<uint32_t> silent(c.summary.silent.begin(), c.summary.silent.end());
  std::map<uint32_t, const LinkRow*> rows;
  for (const auto& r : c.rows) rows[r.node] = &r;

  // A member that answered nobody and that no node can connect to: down, or behind a
  // port nobody can reach. Whether its links ever connected, and whether it was heard
  // from lately, tell which.
  std::set<uint32_t> down;
  for (uint32_t j : c.summary.silent) {
    std::vector<uint32_t> tried;
    bool all_fail = true, ever_connected = false;
    double heard = -1;
    const Link* sample = nullptr;
    for (const auto& r : c.rows)
      for (const auto& l : r.links) {
        if (l.to != j || l.connect == Connect::kNotTried) continue;
        tried.push_back(r.node);
        all_fail = all_fail && unreachable(l.connect);
        ever_connected = ever_connected || l.connects > 0;
        if (l.silent_ms != kNone && (heard < 0 || l.silent_ms < heard)) heard = l.silent_ms;
        sample = &l;
      }
    if (tried.empty() || !all_fail) continue;
    down.insert(j);
    const std::string who = fmt::format("node{} {}", tried.size() == 1 ? "" : "s", ids_text(tried));
    const std::string why =
        sample->connect == Connect::kRefused
            ? std::string("refused")
            : fmt::format("{}: {}", proto::inspect::connect_name(sample->connect),
                          sample->connect_error);
    const std::string last =
        heard < 0 ? "it was never heard from" : "it was last heard " + seconds_text(heard) + " ago";
    if (ever_connected)
      out.push_back({true, fmt::format("node {} is down, or its gossipd is not running: {} cannot "
                                       "connect to it at {} ({}) although they did before; {}",
                                       j, who, sample->endpoint, why, last)});
    else if (heard >= 0 && heard < kHeardRecentlyMs)
      out.push_back({true, fmt::format("node {} is up (it sent a message {} ago) but {} cannot "
                                       "connect to its port {} ({}: {}): is a firewall blocking "
                                       "port {} on node {}'s host, or does the peer list give the "
                                       "wrong address?",
                                       j, seconds_text(heard), who, port_of(sample->endpoint),
                                       sample->endpoint, why, port_of(sample->endpoint), j)});
    else if (sample->connect == Connect::kRefused)
      out.push_back(
          {true, fmt::format("nothing listens at {}, node {}'s address ({} get connection "
                             "refused): node {} is not running, or the peer list gives "
                             "the wrong port; {}",
                             sample->endpoint, j, who, j, last)});
    else
      out.push_back(
          {true, fmt::format("node {} cannot be reached at {} ({} from {}): its host is "
                             "down, or a firewall drops port {}; {}",
                             j, sample->endpoint, why, who, port_of(sample->endpoint), last)});
  }

  // Unordered pairs already compared (versions and strategies; clocks).
  std::set<std::pair<uint32_t, uint32_t>> said, clocks_said;
  for (const auto& r : c.rows) {
    const uint32_t i = r.node;
    for (const auto& what : r.refused_keys)
      out.push_back({true, fmt::format("node {} refused a CURVE handshake: {}; that process's key "
                                       "is not in node {}'s peer list (if it is a member, its "
                                       "secret key does not match the public key the others list "
                                       "for it: gossipctl keygen, docs/security.md)",
                                       i, what, i)});
    for (const auto& l : r.links) {
      const uint32_t j = l.to;
      if (down.contains(j)) continue;
      if (l.connect != Connect::kOk && l.connect != Connect::kNotTried) {
        out.push_back({true, connect_problem(i, j, l)});
        continue;
      }
      const bool answered = l.pongs > 0;
      if (l.handshake == Handshake::kRefused) {
        out.push_back({true, fmt::format("node {} refuses node {}'s key: node {}'s public key is "
                                         "not in node {}'s peer list, or node {} runs with another "
                                         "secret key (gossipctl keygen, docs/security.md)",
                                         j, i, i, j, i)});
      } else if (r.facts.curve && !answered &&
                 (l.handshake == Handshake::kFailed || l.handshake_failures > 0)) {
        out.push_back(
            {true, fmt::format("node {} connects to node {} on port {} but the CURVE handshake "
                               "fails ({} connections, {} lost): the public key node {} lists for "
                               "node {} is not that of node {}'s secret key; is node {} running "
                               "with the right key?",
                               i, j, port_of(l.endpoint), l.connects, l.disconnects, i, j, j, j)});
      } else if (l.pings > 0 && !answered && !silent.contains(j)) {
        out.push_back(
            {true, fmt::format("node {}'s pings to node {} went unanswered although node {} "
                               "answered this doctor: node {} refuses node {}'s messages (its "
                               "log says why) or they are lost on the way",
                               i, j, j, j, i)});
      } else if (l.pings > 0 && !answered) {
        out.push_back({true, fmt::format("node {}'s pings to node {} went unanswered although the "
                                         "port is open: node {}'s gossipd may be stuck; see its "
                                         "log, or gossipctl status on that host",
                                         i, j, j)});
      }
      if (l.refused > 0)
        out.push_back({l.refused >= 10,
                       fmt::format("node {} refused {} message{} from node {}; the last: {}", i,
                                   l.refused, l.refused == 1 ? "" : "s", j,
                                   l.last_refusal.empty() ? "(not known)" : l.last_refusal)});
      if (l.segments_sent >= kLossyAfterSegments &&
          static_cast<double>(l.segments_retransmitted) >
              kLossy * static_cast<double>(l.segments_sent))
        out.push_back({false, fmt::format("the link from node {} to node {} retransmitted {:.1f} % "
                                          "of its segments: packets are lost or delayed on it",
                                          i, j,
                                          100.0 * static_cast<double>(l.segments_retransmitted) /
                                              static_cast<double>(l.segments_sent))});
      const auto pair = std::minmax(i, j);
      if (answered && l.clock_offset_ms != kNone && !clocks_said.contains(pair) &&
          std::fabs(l.clock_offset_ms) - std::max(l.clock_error_ms, 0.0) > kSkewMs) {
        clocks_said.insert(pair);
        out.push_back({false, fmt::format("node {}'s clock is {} {} node {}'s (± {}): keep the "
                                          "clocks in sync (chrony, NTP), or logs and checkpoints "
                                          "disagree on when things happened",
                                          j, seconds_text(std::fabs(l.clock_offset_ms)),
                                          l.clock_offset_ms > 0 ? "ahead of" : "behind", i,
                                          seconds_text(l.clock_error_ms))});
      }
      if (!answered || said.contains(pair)) continue;
      said.insert(pair);
      if (!l.version.empty() && l.version != r.facts.version)
        out.push_back({true, fmt::format("node {} runs gossipd {} and node {} runs {}: run one "
                                         "version on every node",
                                         j, l.version, i, r.facts.version)});
      if (!l.strategy.empty() && l.strategy != r.facts.strategy)
        out.push_back({true, fmt::format("node {} runs strategy {} and node {} runs {}: every "
                                         "node needs the same --strategy",
                                         j, l.strategy, i, r.facts.strategy)});
    }
  }
  // A member that sent no row, for none of the reasons above.
  for (uint32_t j : c.summary.silent) {
    if (down.contains(j)) continue;
    bool explained = false;
    for (const auto& r : c.rows)
      for (const auto& l : r.links)
        explained = explained || (l.to == j && (l.connect != Connect::kOk || l.pongs == 0));
    if (!explained)
      out.push_back({true, fmt::format("node {} sent no answer within {:.1f} s: its daemon may be "
                                       "busy in a long round or stuck; try a longer --timeout, or "
                                       "gossipctl status on that host",
                                       j, c.summary.elapsed_s)});
  }
  for (const auto& why : c.unreadable)
    out.push_back({true, "a member's row could not be read (" + why +
                             "): a member running another gossipd version, or a hostile one"});
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding& a, const Finding& b) { return a.problem && !b.problem; });
  return out;
}

std::string format_doctor_table(const ClusterLinks& c, const std::vector<Finding>& findings) {
  std::string out = fmt::format("{} member{}, asked node {}; {} answered in {:.1f} s",
                                c.summary.members.size(), c.summary.members.size() == 1 ? "" : "s",
                                c.summary.asked, c.rows.size(), c.summary.elapsed_s);
  if (!c.summary.silent.empty()) out += "; silent: " + ids_text(c.summary.silent);
  out += "\n";
  for (const auto& r : c.rows)
    out += fmt::format("node {}: gossipd {}, {}, {}\n", r.node, r.facts.version, r.facts.strategy,
                       r.facts.curve ? "CURVE" : "no CURVE (plain TCP)");
  out += fmt::format("{:<8} {:<10} {:<15} {:>9} {:>9} {:>7} {:>12} {:>11}  {}\n", "link", "connect",
                     "handshake", "rtt", "tcp rtt", "retx", "bandwidth", "clock", "last heard");
  const auto ms = [](double v) {
    return v == kNone ? std::string("-") : fmt::format("{:.2f}ms", v);
  };
  for (const auto& r : c.rows)
    for (const auto& l : r.links) {
      const std::string retx =
          l.segments_sent == 0
              ? "-"
              : fmt::format("{:.1f}%", 100.0 * static_cast<double>(l.segments_retransmitted) /
                                           static_cast<double>(l.segments_sent));
      const std::string bw =
          l.bandwidth_bytes_per_s == kNone
              ? "-"
              : format_bytes(static_cast<uint64_t>(l.bandwidth_bytes_per_s)) + "/s";
      const std::string clock =
          l.clock_offset_ms == kNone ? "-" : fmt::format("{:+.1f}ms", l.clock_offset_ms);
      const std::string heard = l.silent_ms == kNone ? "never" : seconds_text(l.silent_ms) + " ago";
      out +=
          fmt::format("{:<8} {:<10} {:<15} {:>9} {:>9} {:>7} {:>12} {:>11}  {}\n",
                      fmt::format("{}->{}", r.node, l.to), proto::inspect::connect_name(l.connect),
                      proto::inspect::handshake_name(l.handshake),
                      l.pongs > 0 ? ms(l.rtt_ms) : fmt::format("0/{}", l.pings), ms(l.tcp_rtt_ms),
                      retx, bw, clock, heard);
    }
  size_t problems = 0;
  for (const auto& f : findings) problems += f.problem ? 1 : 0;
  if (findings.empty()) return out + "no problems found\n";
  out += fmt::format("{} problem{}{}:\n", problems, problems == 1 ? "" : "s",
                     findings.size() > problems
                         ? fmt::format(", {} note{}", findings.size() - problems,
                                       findings.size() - problems == 1 ? "" : "s")
                         : "");
  for (const auto& f : findings) out += fmt::format("  {} {}\n", f.problem ? "!" : "-", f.text);
  return out;
}

std::string format_doctor_json(const ClusterLinks& c, const std::vector<Finding>& findings) {
  using nlohmann::json;
  const auto num = [](double v) { return v == kNone ? json(nullptr) : json(v); };
  json rows = json::array();
  for (const auto& r : c.rows) {
    json links = json::array();
    for (const auto& l : r.links)
      links.push_back({{"to", l.to},
                       {"endpoint", l.endpoint},
                       {"connect", proto::inspect::connect_name(l.connect)},
                       {"connect_error", l.connect_error},
                       {"connect_ms", num(l.connect_ms)},
                       {"handshake", proto::inspect::handshake_name(l.handshake)},
                       {"connects", l.connects},
                       {"disconnects", l.disconnects},
                       {"handshake_failures", l.handshake_failures},
                       {"pings", l.pings},
                       {"pongs", l.pongs},
                       {"rtt_ms", num(l.rtt_ms)},
                       {"clock_offset_ms", num(l.clock_offset_ms)},
                       {"clock_error_ms", num(l.clock_error_ms)},
                       {"tcp_rtt_ms", num(l.tcp_rtt_ms)},
                       {"segments_sent", l.segments_sent},
                       {"segments_retransmitted", l.segments_retransmitted},
                       {"bandwidth_bytes_per_s", num(l.bandwidth_bytes_per_s)},
                       {"version", l.version},
                       {"strategy", l.strategy},
                       {"silent_ms", num(l.silent_ms)},
                       {"refused", l.refused},
                       {"last_refusal", l.last_refusal}});
    rows.push_back({{"node", r.node},
                    {"version", r.facts.version},
                    {"strategy", r.facts.strategy},
                    {"curve", r.facts.curve},
                    {"links", links},
                    {"refused_keys", r.refused_keys}});
  }
  json problems = json::array(), notes = json::array();
  for (const auto& f : findings) (f.problem ? problems : notes).push_back(f.text);
  return json{{"asked", c.summary.asked},
              {"members", c.summary.members},
              {"silent", c.summary.silent},
              {"elapsed_s", c.summary.elapsed_s},
              {"rows", rows},
              {"problems", problems},
              {"notes", notes}}
      .dump();
}

int run_doctor(const DoctorOptions& o) {
  if (!std::isfinite(o.timeout_s) || o.timeout_s < 1 || o.timeout_s > 120) {
    std::fprintf(stderr, "gossipctl doctor: --timeout: must be between 1 and 120 seconds\n");
    return kExitUsage;
  }
  const std::string endpoint = ipc_endpoint_of(o.node);
  auto c = ask_links(endpoint, std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
  if (!c) {
    std::fprintf(stderr, "gossipctl doctor: %s\n", c.status().message().c_str());
    return kExitFailure;
  }
  const auto findings = diagnose(*c);
  const std::string text =
      o.json ? format_doctor_json(*c, findings) + "\n" : format_doctor_table(*c, findings);
  std::fputs(text.c_str(), stdout);
  for (const auto& f : findings)
    if (f.problem) return kExitFailure;
  return kExitOk;
}

Subcommand add_doctor_command(CLI::App& parent) {
  auto o = std::make_shared<DoctorOptions>();
  CLI::App* app = parent.add_subcommand(
      "doctor",
      "Check every link of the cluster from any node: reachability, handshakes, round trips, "
      "bandwidth, clocks, versions; says what to do about each problem and exits 1 if any");
  app->add_option("--node", o->node,
                  "The daemon's IPC endpoint (ipc://RUN_DIR/gossipd-ID.sock) or socket path")
      ->capture_default_str();
  app->add_flag("--json", o->json, "Print one JSON object instead of the table");
  app->add_option("--timeout", o->timeout_s,
                  "Seconds the node waits for every member's row (1 to 120)")
      ->capture_default_str();
  return Subcommand{app, [o] { return run_doctor(*o); }};
}

}  // namespace gossip::cli
