#include "daemon/inspector.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "base/split_mix64.h"

namespace gossip::daemon {

// ------------------------------------------------------------ TCP connect checks

struct ConnectResult {
  proto::inspect::Connect connect = proto::inspect::Connect::kNotTried;
  std::string error;
  double ms = proto::inspect::kNone;
};

// Filled by a helper thread: resolving a name can block for as long as the resolver
// likes, and the sync thread must not. The thread owns a reference, so the sync thread
// may stop caring at any time.
struct ConnectChecks {
  std::mutex mu;
  std::map<uint32_t, ConnectResult> results;  // guarded by mu
  bool done = false;                          // guarded by mu
};

namespace {

using proto::Inspect;
using proto::inspect::Connect;
using Clock = std::chrono::steady_clock;

uint64_t wall_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::shared_ptr<const std::vector<std::byte>> bytes_of(const std::string& s) {
  auto v = std::make_shared<std::vector<std::byte>>(s.size());
  std::memcpy(v->data(), s.data(), s.size());
  return v;
}

// "tcp://host:port" or "tcp://[v6]:port" -> host, port; nullopt for anything else.
std::optional<std::pair<std::string, std::string>> host_port(const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return std::nullopt;
  std::string rest = endpoint.substr(kTcp.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size()) return std::nullopt;
  std::string host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return std::make_pair(host, rest.substr(colon + 1));
}

Connect classify(int err) {
  switch (err) {
    case 0:
      return Connect::kOk;
    case ECONNREFUSED:
      return Connect::kRefused;
    case ETIMEDOUT:
      return Connect::kTimedOut;
    case EHOSTUNREACH:
    case ENETUNREACH:
      return Connect::kUnreachable;
    default:
      return Connect::kFailed;
  }
}

void check_connects(std::shared_ptr<ConnectChecks> out,
                    std::vector<std::pair<uint32_t, std::string>> endpoints,
                    std::chrono::milliseconds timeout) {
  struct Attempt {
    uint32_t peer;
    int fd;
    Clock::time_point began;
  };
  std::vector<Attempt> attempts;
  std::map<uint32_t, ConnectResult> results;
  for (const auto& [peer, endpoint] : endpoints) {
    ConnectResult& r = results[peer];
    // What is known so far is published, so that a name that takes long to resolve
    // costs only its own link's result.
    {
      std::lock_guard lock(out->mu);
      for (const auto& [id, known] : results)
        if (known.connect != Connect::kNotTried) out->results[id] = known;
    }
    const auto hp = host_port(endpoint);
    if (!hp) {
      r.error = "not a tcp:// endpoint";
      continue;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(hp->first.c_str(), hp->second.c_str(), &hints, &found);
        rc != 0 || !found) {
      r.connect = Connect::kUnresolved;
      r.error = rc != 0 ? ::gai_strerror(rc) : "no address";
      continue;
    }
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const auto began = Clock::now();
    if (fd < 0) {
      r.connect = Connect::kFailed;
      r.error = std::strerror(errno);
    } else if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      r.connect = Connect::kOk;
      r.ms = 0;
      ::close(fd);
    } else if (errno == EINPROGRESS) {
      attempts.push_back({peer, fd, began});
    } else {
      r.connect = classify(errno);
      r.error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(found);
  }
  const auto deadline = Clock::now() + timeout;
  while (!attempts.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> fds;
    for (const auto& a : attempts) fds.push_back({a.fd, POLLOUT, 0});
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = fds.size(); i-- > 0;) {
      if (!fds[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(attempts[i].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      ConnectResult& r = results[attempts[i].peer];
      r.connect = classify(err);
      r.ms = ms_between(attempts[i].began, Clock::now());
      if (err != 0) r.error = std::strerror(err);
      ::close(attempts[i].fd);
      attempts.erase(attempts.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (const auto& a : attempts) {  // no answer: a firewall that drops, or a host that is down
    ConnectResult& r = results[a.peer];
    r.connect = Connect::kTimedOut;
    r.error = fmt::format("no answer in {:.1f} s", timeout.count() / 1000.0);
    ::close(a.fd);
  }
  std::lock_guard lock(out->mu);
  for (auto& [id, r] : results) out->results[id] = std::move(r);
  out->done = true;
}

}  // namespace

// ------------------------------------------------------------ the probe of every link

struct Inspector::Probe {
  Clock::time_point started, deadline;
  std::shared_ptr<ConnectChecks> connects = std::make_shared<ConnectChecks>();
  struct Peer {
    proto::inspect::Link link;
    int pings_sent = 0;
    Clock::time_point next_ping;
    double best_rtt_ms = std::numeric_limits<double>::infinity();
  };
  std::map<uint32_t, Peer> peers;
  struct Outstanding {
    uint32_t peer;
    Clock::time_point sent;
    uint64_t sent_us;
    bool bandwidth;
  };
  std::map<uint64_t, Outstanding> outstanding;
  std::vector<uint32_t> bandwidth_order;  // the round-robin schedule's targets
  size_t bandwidth_next = 0;
  std::optional<uint64_t> bandwidth_nonce;
  Clock::time_point bandwidth_sent{};
};

struct Inspector::Gathering {
  uint32_t what = 0;
  uint64_t nonce = 0;
  Clock::time_point started, deadline;
  std::set<uint32_t> asked;
  std::map<uint32_t, std::string> parts;  // node -> its encoded row or status
};

Inspector::Inspector(peers::Router& router, peers::PeerChannel& channel, Options options,
                     StatusSource status)
    : router_(router),
      channel_(channel),
      options_(std::move(options)),
      status_(std::move(status)),
      nonce_state_(mix64(wall_us() ^ (uint64_t{channel.self()} << 32))) {
  facts_ = bytes_of(proto::inspect::encode(
      proto::inspect::Facts{options_.version, options_.strategy, options_.curve}));
  filler_ = std::make_shared<const std::vector<std::byte>>(
      std::min(options_.probe_bytes, proto::kMaxInspectProbeBytes));
  subscription_ = router_.subscribe({proto::Kind::kInspect},
                                    [this](const peers::Incoming& in) { on_message(in); });
}

Inspector::~Inspector() = default;

uint64_t Inspector::next_nonce() { return mix64(nonce_state_ += kWeyl); }

void Inspector::on_message(const peers::Incoming& in) {
  const auto& m = in.as<Inspect>();
  switch (m.what) {
    case Inspect::kPing:
      return answer_ping(in);
    case Inspect::kPong:
      return on_pong(in);
    case Inspect::kAskLinks:
      return on_ask_links(in);
    case Inspect::kAskStatus: {
      if (!may_answer(status_answered_, in.peer, kStatusEvery)) return;
      const std::string s = proto::inspect::encode(status_());
      (void)channel_.send_shared(in.peer, 0, Inspect{Inspect::kStatus, m.nonce, wall_us(), 0},
                                 bytes_of(s));
      return;
    }
    case Inspect::kLinks:
    case Inspect::kStatus:
      return on_report(in);
  }
}

void Inspector::answer_ping(const peers::Incoming& in) {
  const auto& m = in.as<Inspect>();
  (void)channel_.send_shared(in.peer, 0, Inspect{Inspect::kPong, m.nonce, wall_us(), m.sent_us},
                             facts_);
}

void Inspector::on_pong(const peers::Incoming& in) {
  const auto now = Clock::now();
  const uint64_t now_us = wall_us();
  const auto& m = in.as<Inspect>();
  if (!probe_) return;  // late: the probe ended without it
  const auto it = probe_->outstanding.find(m.nonce);
  if (it == probe_->outstanding.end() || it->second.peer != in.peer) return;
  const auto o = it->second;
  probe_->outstanding.erase(it);
  auto& p = probe_->peers[in.peer];
  const double rtt = ms_between(o.sent, now);
  if (o.bandwidth) {
    // The probe's time less a small message's round trip is the bytes' time on the
    // link; where that is too short to measure (a fast link), the kernel's delivery
    // rate of the same connection says it better.
    const double transfer_ms = rtt - (std::isfinite(p.best_rtt_ms) ? p.best_rtt_ms : 0);
    const auto kernel = channel_.link_state(in.peer).delivery_bytes_per_s;
    if (transfer_ms < 5 && kernel)
      p.link.bandwidth_bytes_per_s = *kernel;
    else
      p.link.bandwidth_bytes_per_s =
          static_cast<double>(filler_->size()) / (std::max(transfer_ms, 0.001) / 1e3);
    bandwidth_[in.peer] = {p.link.bandwidth_bytes_per_s, now};
    probe_->bandwidth_nonce.reset();
    ++probe_->bandwidth_next;
    return;
  }
  ++p.link.pongs;
  if (rtt < p.best_rtt_ms) {
    p.best_rtt_ms = rtt;
    p.link.rtt_ms = rtt;
    // NTP's estimate: the peer read its clock half way through the round trip.
    const double mid_us = (static_cast<double>(o.sent_us) + static_cast<double>(now_us)) / 2;
    p.link.clock_offset_ms = (static_cast<double>(m.sent_us) - mid_us) / 1e3;
    p.link.clock_error_ms = rtt / 2;
  }
  if (p.link.version.empty() && in.payload.size() > 0) {
    if (auto f = proto::inspect::decode_facts(in.payload.data(), in.payload.size())) {
      p.link.version = f->version;
      p.link.strategy = f->strategy;
    } else {
      channel_.note_dropped(in.peer, f.status().message());
    }
  }
}

bool Inspector::may_answer(std::map<uint32_t, Clock::time_point>& table, uint32_t peer,
                           Clock::duration every) {
  const auto now = Clock::now();
  auto [it, fresh] = table.try_emplace(peer, now);
  if (!fresh && now - it->second < every) return false;
  it->second = now;
  return true;
}

void Inspector::on_ask_links(const peers::Incoming& in) {
  const auto& m = in.as<Inspect>();
  if (!may_answer(rows_answered_, in.peer, kRowsEvery)) return;
  if (last_row_ && Clock::now() - last_row_at_ < kReuseRows) return send_row(in.peer, m.nonce);
  auto same = [&](const auto& w) { return w.first == in.peer; };
  std::erase_if(row_wanted_, same);
  row_wanted_.emplace_back(in.peer, m.nonce);
  // The asker's budget for the row, within reason.
  start_probe(std::chrono::milliseconds(std::clamp<uint64_t>(m.echo_us, 1000, 60000)));
}

void Inspector::on_report(const peers::Incoming& in) {
  const auto& m = in.as<Inspect>();
  const bool links = m.what == Inspect::kLinks;
  if (!gathering_ || gathering_->nonce != m.nonce || !gathering_->asked.contains(in.peer) ||
      gathering_->parts.contains(in.peer) ||
      (gathering_->what == proto::ipc::InspectRequest::kLinks) != links)
    return;  // an answer to an earlier question, or to none
  std::string kept;
  Status st;
  uint32_t node = 0;
  if (links) {
    auto r = proto::inspect::decode_links(in.payload.data(), in.payload.size());
    if (r) kept = proto::inspect::encode(*r), node = r->node;
    st = r.status();
  } else {
    auto r = proto::inspect::decode_status(in.payload.data(), in.payload.size());
    if (r) kept = proto::inspect::encode(*r), node = r->node;
    st = r.status();
  }
  if (st && node != in.peer)
    st = Status::protocol(fmt::format("a report of node {} from node {}", node, in.peer));
  // Re-encoded, a report can grow (a double sent as a small integer takes 9 bytes).
  if (st && kept.size() > proto::kMaxInspectReportBytes)
    st = Status::protocol(fmt::format("a report of {} bytes once re-encoded (at most {})",
                                      kept.size(), proto::kMaxInspectReportBytes));
  if (!st) return channel_.note_dropped(in.peer, st.message());
  gathering_->parts[in.peer] = std::move(kept);
}

void Inspector::start_probe(std::chrono::milliseconds budget) {
  if (probe_) return;  // the one running answers everyone waiting
  const auto now = Clock::now();
  probe_ = std::make_unique<Probe>();
  probe_->started = now;
  probe_->deadline = now + budget;
  std::vector<std::pair<uint32_t, std::string>> endpoints;
  std::vector<uint32_t> members = {channel_.self()};
  for (const auto& peer : channel_.peers()) {
    if (peer.banned) continue;  // nothing is sent to it, so nothing is measured
    auto& p = probe_->peers[peer.id];
    p.link.to = peer.id;
    p.link.endpoint = peer.endpoint;
    p.next_ping = now;
    endpoints.emplace_back(peer.id, peer.endpoint);
    members.push_back(peer.id);
  }
  // Round robin: in step j this node (k in the sorted list) probes k + j.
  std::sort(members.begin(), members.end());
  const size_t k = static_cast<size_t>(std::find(members.begin(), members.end(), channel_.self()) -
                                       members.begin());
  for (size_t j = 1; j < members.size(); ++j) {
    const uint32_t target = members[(k + j) % members.size()];
    const auto last = bandwidth_.find(target);
    if (last != bandwidth_.end() && now - last->second.at < kBandwidthEvery)
      probe_->peers[target].link.bandwidth_bytes_per_s = last->second.bytes_per_s;
    else
      probe_->bandwidth_order.push_back(target);
  }
  // One checker at a time: a resolver that hangs must not collect threads. While the
  // last one runs, this probe has no connect results.
  bool busy = false;
  if (checker_) {
    std::lock_guard lock(checker_->mu);
    busy = !checker_->done;
  }
  if (busy) {
    std::lock_guard lock(probe_->connects->mu);
    probe_->connects->done = true;
    return;
  }
  checker_ = probe_->connects;
  std::thread(check_connects, probe_->connects, std::move(endpoints),
              std::min(options_.connect_timeout, budget))
      .detach();
}

void Inspector::advance_probe(Clock::time_point now) {
  Probe& pr = *probe_;
  for (auto& [id, p] : pr.peers) {
    if (p.pings_sent >= kPings || now < p.next_ping) continue;
    const uint64_t nonce = next_nonce();
    ++p.pings_sent;
    ++p.link.pings;
    p.next_ping = now + kPingEvery;
    const uint64_t sent_us = wall_us();
    pr.outstanding[nonce] = {id, Clock::now(), sent_us, false};
    (void)channel_.send(id, 0, Inspect{Inspect::kPing, nonce, sent_us, 0});
  }
  // The bandwidth probes, one at a time, to peers that answered a ping.
  const auto pings_over = pr.started + kPings * kPingEvery + std::chrono::milliseconds(500);
  if (pr.bandwidth_nonce && now - pr.bandwidth_sent > std::chrono::seconds(3)) {
    pr.outstanding.erase(*pr.bandwidth_nonce);
    pr.bandwidth_nonce.reset();
    ++pr.bandwidth_next;
  }
  while (!pr.bandwidth_nonce && pr.bandwidth_next < pr.bandwidth_order.size()) {
    const uint32_t target = pr.bandwidth_order[pr.bandwidth_next];
    if (pr.peers[target].link.pongs == 0) {
      if (now < pings_over) break;  // it may answer yet
      ++pr.bandwidth_next;          // it did not: no bandwidth to measure
      continue;
    }
    const uint64_t nonce = next_nonce();
    const uint64_t sent_us = wall_us();
    pr.bandwidth_nonce = nonce;
    pr.bandwidth_sent = Clock::now();
    pr.outstanding[nonce] = {target, pr.bandwidth_sent, sent_us, true};
    if (!channel_.send_shared(target, 0, Inspect{Inspect::kPing, nonce, sent_us, 0}, filler_)) {
      pr.outstanding.erase(nonce);
      pr.bandwidth_nonce.reset();
      ++pr.bandwidth_next;
    }
  }
}

void Inspector::finish_probe() {
  std::unique_ptr<Probe> pr = std::move(probe_);
  proto::inspect::LinkRow row;
  row.node = channel_.self();
  row.facts = {options_.version, options_.strategy, options_.curve};
  std::map<uint32_t, ConnectResult> connects;
  {
    std::lock_guard lock(pr->connects->mu);
    connects = pr->connects->results;
  }
  const auto& traffic = channel_.traffic();
  for (auto& [id, p] : pr->peers) {
    proto::inspect::Link& l = p.link;
    if (auto it = connects.find(id); it != connects.end()) {
      l.connect = it->second.connect;
      l.connect_error = it->second.error;
      l.connect_ms = it->second.ms;
    }
    const peers::LinkState s = channel_.link_state(id);
    l.handshake = s.handshake;
    l.connects = s.connects;
    l.disconnects = s.disconnects;
    l.handshake_failures = s.handshake_failures;
    l.tcp_rtt_ms = s.tcp_rtt_ms.value_or(proto::inspect::kNone);
    l.segments_sent = s.segments_sent;
    l.segments_retransmitted = s.segments_retransmitted;
    if (l.bandwidth_bytes_per_s == proto::inspect::kNone && s.delivery_bytes_per_s)
      l.bandwidth_bytes_per_s = *s.delivery_bytes_per_s;
    if (l.pongs == 0) l.bandwidth_bytes_per_s = proto::inspect::kNone;  // no figure of a dead link
    const uint64_t silent = traffic.silent_ms(id);
    l.silent_ms =
        silent == proto::ipc::kNeverHeard ? proto::inspect::kNone : static_cast<double>(silent);
    l.refused = traffic.peer_totals(id).dropped;
    l.last_refusal = s.last_refusal;
    row.links.push_back(l);
  }
  row.refused_keys = channel_.refused_keys();
  std::string encoded = proto::inspect::encode(row);
  while (encoded.size() > proto::kMaxInspectReportBytes && !row.links.empty()) {
    row.links.pop_back();  // hundreds of peers: the row keeps what fits
    encoded = proto::inspect::encode(row);
  }
  last_row_ = std::move(encoded);
  last_row_at_ = Clock::now();
  for (const auto& [to, nonce] : row_wanted_) send_row(to, nonce);
  row_wanted_.clear();
  if (gathering_ && gathering_->what == proto::ipc::InspectRequest::kLinks)
    gathering_->parts[channel_.self()] = *last_row_;
}

void Inspector::send_row(uint32_t to, uint64_t nonce) {
  (void)channel_.send_shared(to, 0, Inspect{Inspect::kLinks, nonce, wall_us(), 0},
                             bytes_of(*last_row_));
}

bool Inspector::begin(const proto::ipc::InspectRequest& request) {
  if (gathering_ || answer_) return false;
  const auto now = Clock::now();
  const auto timeout =
      std::chrono::milliseconds(std::clamp<uint64_t>(request.timeout_ms, 500, 120000));
  gathering_ = std::make_unique<Gathering>();
  Gathering& g = *gathering_;
  g.what = request.what;
  g.nonce = next_nonce();
  g.started = now;
  g.deadline = now + timeout;
  const bool links = request.what == proto::ipc::InspectRequest::kLinks;
  // The peers' probes must end before this node stops waiting for their rows.
  const auto budget = std::chrono::milliseconds(timeout.count() * 4 / 5);
  for (const auto& peer : channel_.peers()) {
    if (peer.banned) continue;  // nothing is sent to it: not a member to ask
    g.asked.insert(peer.id);
    const Inspect ask{links ? Inspect::kAskLinks : Inspect::kAskStatus, g.nonce, wall_us(),
                      links ? static_cast<uint64_t>(budget.count()) : 0};
    (void)channel_.send(peer.id, 0, ask);
  }
  if (links) {
    // This node's own row is always fresh; the peers' may be up to kReuseRows old. A
    // probe that runs already (a peer asked) must end in time for this gathering.
    if (probe_)
      probe_->deadline = std::min(probe_->deadline, now + budget);
    else
      start_probe(budget);
  } else {
    g.parts[channel_.self()] = proto::inspect::encode(status_());
  }
  return true;
}

void Inspector::tick() {
  if (!probe_ && !gathering_) return;
  const auto now = Clock::now();
  if (probe_) {
    advance_probe(now);
    bool done = now >= probe_->deadline;
    if (!done) {
      std::lock_guard lock(probe_->connects->mu);
      done = probe_->connects->done;
    }
    if (done && now < probe_->deadline) {
      const auto last_ping = probe_->started + (kPings - 1) * kPingEvery;
      bool pings_done = true;
      for (const auto& [id, p] : probe_->peers) pings_done = pings_done && p.pings_sent == kPings;
      bool answered = true;
      for (const auto& [nonce, o] : probe_->outstanding) answered = answered && o.bandwidth;
      done = pings_done && (answered || now > last_ping + std::chrono::seconds(1)) &&
             probe_->bandwidth_next >= probe_->bandwidth_order.size();
    }
    if (done) finish_probe();
  }
  if (gathering_) {
    const bool own = gathering_->parts.contains(channel_.self());
    bool all = own;
    for (uint32_t id : gathering_->asked) all = all && gathering_->parts.contains(id);
    if (all || now >= gathering_->deadline) finish_gathering();
  }
}

void Inspector::finish_gathering() {
  std::unique_ptr<Gathering> g = std::move(gathering_);
  proto::inspect::Summary s;
  s.asked = channel_.self();
  s.members.push_back(channel_.self());
  for (const auto& peer : channel_.peers())
    if (!peer.banned) s.members.push_back(peer.id);
  std::sort(s.members.begin(), s.members.end());
  // The reply is one IPC message (at most 16 MiB): the parts that do not fit are left
  // out, their nodes listed as silent (hundreds of nodes' full rows).
  constexpr uint64_t kMaxReplyBytes = uint64_t{15} << 20;
  uint64_t bytes = 0;
  for (auto it = g->parts.begin(); it != g->parts.end();) {
    bytes += it->second.size() + 8;
    it = bytes > kMaxReplyBytes ? g->parts.erase(it) : std::next(it);
  }
  for (uint32_t id : s.members)
    if (!g->parts.contains(id)) s.silent.push_back(id);
  s.elapsed_s = std::chrono::duration<double>(Clock::now() - g->started).count();
  proto::ipc::InspectReply reply;
  reply.parts.push_back(proto::inspect::encode(s));
  for (auto& [id, part] : g->parts) reply.parts.push_back(std::move(part));
  answer_ = std::move(reply);
}

std::optional<proto::ipc::InspectReply> Inspector::take() {
  auto a = std::move(answer_);
  answer_.reset();
  return a;
}

}  // namespace gossip::daemon
