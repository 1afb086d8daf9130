#pragma once
// What the nodes tell each other, and gossipctl, when `gossipctl doctor` or
// `gossipctl status --cluster` asks (daemon/inspector.h): a node's facts (in a pong),
// its row of the link matrix, its status. They travel as an inspect message's payload
// (proto/message.h) and, gathered by the asked node, in the IPC inspect reply.
//
// Every field comes from a peer, so decode() is strict: msgpack within tight limits,
// the exact shape, finite numbers, and strings cut to printable ASCII of bounded
// length (they end up on an operator's terminal).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::proto::inspect {

// What a node says of itself when it answers a ping.
struct Facts {
  std::string version;   // gossipd's (base/version.h)
  std::string strategy;  // --strategy
  bool curve = false;    // its peer channel is CURVE
};

// How a TCP connect from the row's node to a peer's endpoint went.
enum class Connect : uint8_t {
  kOk = 0,
  kRefused = 1,      // nothing listens there, or a firewall rejects
  kTimedOut = 2,     // no answer: a firewall that drops, or the host is down
  kUnreachable = 3,  // no route to the host or network
  kUnresolved = 4,   // the name does not resolve
  kFailed = 5,       // anything else (the error says what)
  kNotTried = 6,     // a banned peer, or no TCP endpoint
};
inline constexpr uint8_t kMaxConnect = 6;
const char* connect_name(Connect c);

// The ZeroMQ link the row's node keeps to a peer (its sending socket), as the socket's
// monitor saw it since the daemon started.
enum class Handshake : uint8_t {
  kNone = 0,     // never connected
  kOk = 1,       // the last connection completed its handshake
  kRefused = 2,  // the peer's authenticator refused this node's key (ZAP)
  kFailed = 3,   // connected, but the handshake failed (wrong server key, protocol)
  kPending = 4,  // connected, the handshake has not finished (or failed silently)
  kLost = 5,     // the connection closed; the socket tries again
};
inline constexpr uint8_t kMaxHandshake = 5;
const char* handshake_name(Handshake h);

inline constexpr double kNone = -1;  // a measurement that has no value

struct Link {
  uint32_t to = 0;
  std::string endpoint;
  Connect connect = Connect::kNotTried;
  std::string connect_error;  // strerror's text, when not kOk
  double connect_ms = kNone;
  Handshake handshake = Handshake::kNone;
  uint64_t connects = 0;     // TCP connections the link made (the first and reconnects)
  uint64_t disconnects = 0;  // and lost
  uint64_t handshake_failures = 0;
  // Pings over the link and their answers (the round trip includes the time the
  // peer took to read the ping, up to a round's length when it was in one).
  uint64_t pings = 0;
  uint64_t pongs = 0;
  double rtt_ms = kNone;  // the least
  // The peer's wall clock minus this node's, from the least round trip, and its bound.
  double clock_offset_ms = kNone;
  double clock_error_ms = kNone;
  // The kernel's view of the connection (TCP_INFO): smoothed RTT, retransmitted
  // segments of those sent, and the bytes per second a probe was delivered at.
  double tcp_rtt_ms = kNone;
  uint64_t segments_sent = 0;
  uint64_t segments_retransmitted = 0;
  double bandwidth_bytes_per_s = kNone;
  // What the peer said of itself in its pong (empty: no pong).
  std::string version;
  std::string strategy;
  // What this node received from the peer: ms since the last valid message (kNone:
  // never), messages refused and why the last was.
  double silent_ms = kNone;
  uint64_t refused = 0;
  std::string last_refusal;
};

// One node's row of the link matrix.
struct LinkRow {
  uint32_t node = 0;
  Facts facts;
  std::vector<Link> links;
  // Handshakes this node's authenticator refused: "key K from ADDRESS (N times)".
  std::vector<std::string> refused_keys;
};

// One member as `gossipctl status --cluster` shows it.
struct MemberStatus {
  uint32_t node = 0;
  std::string state;  // daemon/inspector.h: starting, joining, training, idle, failing
  uint64_t round = 0;
  uint64_t step = 0;
  uint32_t trainers = 0;
  uint64_t sent_bytes = 0;      // payload, to every peer
  uint64_t received_bytes = 0;  // payload, from every peer
  double round_ms = kNone;      // its last completed round
  double since_round_s = kNone;
  std::string last_error;  // empty: none
  double last_error_age_s = kNone;
  std::string version;
  // Entries of its model after its last round, at indices every node derives alike
  // (daemon/tuner.h's sample), from which the asker computes the replicas' distance.
  std::vector<float> samples;
};

// What the asked node adds: who it asked, and who did not answer in time.
struct Summary {
  uint32_t asked = 0;  // the node that gathered the reports
  std::vector<uint32_t> members;
  std::vector<uint32_t> silent;
  double elapsed_s = 0;
};

inline constexpr size_t kMaxText = 240;  // characters kept of a string from a peer
inline constexpr size_t kMaxMembers = 4096;
inline constexpr size_t kMaxSamples = 128;

std::string encode(const Facts& f);
std::string encode(const LinkRow& r);
std::string encode(const MemberStatus& s);
std::string encode(const Summary& s);
// Strict (see the top of this file).
Result<Facts> decode_facts(const void* data, size_t size);
Result<LinkRow> decode_links(const void* data, size_t size);
Result<MemberStatus> decode_status(const void* data, size_t size);
Result<Summary> decode_summary(const void* data, size_t size);

// Printable ASCII of at most kMaxText characters; anything else becomes '?'.
std::string printable_text(std::string_view s);

}  // namespace gossip::proto::inspect
