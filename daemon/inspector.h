#pragma once
// What `gossipctl doctor` and `gossipctl status --cluster` ask of a node, served in the
// sync thread over the peer channel (inspect messages, proto/message.h).
//
// Every node answers a ping with a pong (its wall clock and its facts: version,
// strategy, CURVE), and an ask with its row of the link matrix or its status. A row
// comes from a probe of every peer: a TCP connect to its endpoint (in a helper thread:
// refused, timed out, unreachable...), five pings (the least round trip, the clocks'
// offset), one bandwidth probe per peer, and what the channel knows of the link (its
// handshake, the kernel's RTT and retransmissions, refused messages). The bandwidth
// probes follow a round-robin schedule, in step j node k probing node k + j of the
// sorted member list, so that when every node probes at once each still sends one
// probe and receives one at a time.
//
// The node gossipctl asks gathers: its own row or status and every peer's, until all
// are in or its timeout; the answer (ipc::InspectReply) names who stayed silent.
//
// An ask costs the asked node a probe of every link, so it probes at most once every
// kReuseRows (asks in between get the last row) and measures a link's bandwidth at most
// once every kBandwidthEvery (rows in between carry the last figure), and it answers
// one peer's asks for rows at most once every kRowsEvery and for its status at most
// once every kStatusEvery, dropping the rest: a peer that asks again and again gets
// pings and a few small answers, not megabytes.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "peers/router.h"
#include "proto/inspect.h"
#include "proto/ipc.h"

namespace gossip::daemon {

struct ConnectChecks;  // what a helper thread found of TCP connects (inspector.cc)

class Inspector {
 public:
  struct Options {
    std::string version;
    std::string strategy;
    bool curve = false;
    uint64_t probe_bytes = uint64_t{1} << 20;  // the bandwidth probe
    std::chrono::milliseconds connect_timeout{2000};
  };
  // This node's status now (the sync worker's, in its thread).
  using StatusSource = std::function<proto::inspect::MemberStatus()>;
  Inspector(peers::Router& router, peers::PeerChannel& channel, Options options,
            StatusSource status);
  ~Inspector();

  // Starts gathering what gossipctl asked; false when a gathering runs already.
  bool begin(const proto::ipc::InspectRequest& request);
  // Advances probes and the gathering; after every poll of the router.
  void tick();
  // The answer, once, when it is complete or its time is up.
  std::optional<proto::ipc::InspectReply> take();

  static constexpr int kPings = 5;
  static constexpr auto kPingEvery = std::chrono::milliseconds(100);
  static constexpr auto kReuseRows = std::chrono::seconds(1);
  static constexpr auto kBandwidthEvery = std::chrono::seconds(30);
  static constexpr auto kRowsEvery = std::chrono::milliseconds(250);
  static constexpr auto kStatusEvery = std::chrono::milliseconds(100);

 private:
  struct Probe;
  struct Gathering;
  void on_message(const peers::Incoming& in);
  void answer_ping(const peers::Incoming& in);
  void on_pong(const peers::Incoming& in);
  void on_ask_links(const peers::Incoming& in);
  void on_report(const peers::Incoming& in);
  // Starts a probe of every link unless one runs; `budget`: when it must end.
  void start_probe(std::chrono::milliseconds budget);
  void advance_probe(std::chrono::steady_clock::time_point now);
  void finish_probe();
  void send_row(uint32_t to, uint64_t nonce);
  void finish_gathering();
  uint64_t next_nonce();

  peers::Router& router_;
  peers::PeerChannel& channel_;
  Options options_;
  StatusSource status_;
  peers::Router::Subscription subscription_;
  std::shared_ptr<const std::vector<std::byte>> facts_;   // a pong's payload
  std::shared_ptr<const std::vector<std::byte>> filler_;  // a bandwidth probe's
  uint64_t nonce_state_;

  std::unique_ptr<Probe> probe_;
  std::shared_ptr<ConnectChecks> checker_;  // the last connect checker (one at a time)
  std::optional<std::string> last_row_;     // encoded
  std::chrono::steady_clock::time_point last_row_at_{};
  std::vector<std::pair<uint32_t, uint64_t>> row_wanted_;  // (asker, nonce) until the probe ends
  struct Bandwidth {
    double bytes_per_s;
    std::chrono::steady_clock::time_point at;
  };
  std::map<uint32_t, Bandwidth> bandwidth_;  // the last measurement of each link
  // When each peer's last ask for rows, and for status, was answered (the rate limit).
  std::map<uint32_t, std::chrono::steady_clock::time_point> rows_answered_, status_answered_;
  // Whether `peer`'s ask may be answered now, per `table` and `every`; stamps it.
  static bool may_answer(std::map<uint32_t, std::chrono::steady_clock::time_point>& table,
                         uint32_t peer, std::chrono::steady_clock::duration every);

  std::unique_ptr<Gathering> gathering_;
  std::optional<proto::ipc::InspectReply> answer_;
};

}  // namespace gossip::daemon
