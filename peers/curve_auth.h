#pragma once
// ZeroMQ CURVE for the daemons' channel (peers/zmq_transport.h). With a secret key
// configured, every daemon's ROUTER is a CURVE server and its DEALERs are clients
// that know each peer's public key; a ZAP handler (RFC 27) on the same context
// admits a client only if its public key belongs to a peer in the list, and names
// it by that peer's id (the User-Id every message then carries), so that a peer
// cannot speak with another's routing id either. A key of the admission list
// (--admit-keys: nodes that may join by seeds) that is no peer's is admitted as
// "join:<key>": such a client may only ask to join (daemon/admission.h), and once it
// is a member its connections made before are still its own.

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "base/status.h"

namespace gossip::peers {

inline constexpr size_t kCurveKeyText = 40;  // Z85 of 32 bytes

// Checks a Z85 key text; the error says `what` ("node.secret_key", "peer 3's public key").
Status check_curve_key(std::string_view z85, std::string_view what);
// The public key (Z85) of a secret key (Z85).
Result<std::string> curve_public_of(const std::string& secret_z85);
// Whether this libzmq has CURVE (built with libsodium).
bool curve_available();
// The routing id node `from` presents to node `to`'s ROUTER under CURVE:
// "node-<from>-<token>", the token a hash of the X25519 secret the two nodes share
// (one's secret key with the other's public key; either side computes it). A node
// holding a valid key of its own cannot compute another node's routing id, so it
// cannot take over that node's connection by ROUTER_HANDOVER, which lets a restarted
// node take over its own.
Result<std::string> curve_routing_id(uint32_t from, const std::string& own_secret_z85,
                                     const std::string& other_public_z85);

// The key of the ring-link data that node `from` sends node `to`
// (peers/sealed_ring_channel.h): a hash of the X25519 secret the two nodes share and
// the direction. Either end computes it; no third node can.
Result<std::array<uint8_t, 32>> curve_link_key(uint32_t from, uint32_t to,
                                               const std::string& own_secret_z85,
                                               const std::string& other_public_z85);

class ZapHandler {
 public:
  // allowed: public key (Z85) -> peer id; admit: the keys of nodes that may join
  // (Z85). Serves until destroyed; must be destroyed before `context` is closed.
  static Result<std::unique_ptr<ZapHandler>> start(zmq::context_t& context,
                                                   const std::map<std::string, uint32_t>& allowed,
                                                   const std::vector<std::string>& admit = {});
  ~ZapHandler();

  // A node that joined: its key (Z85) is admitted as peer `id` from now on (any thread).
  Status allow(const std::string& z85, uint32_t id);
  void disallow(const std::string& z85);  // undoes allow()
  // Whether a key (Z85) is on the admission list.
  bool admits(const std::string& z85) const;
  // Replaces the admission list (any thread): a joiner's handshake from now on is judged
  // by it; the members already admitted stay, a banned key stays out. An invalid key
  // changes nothing.
  Status set_admitted(const std::vector<std::string>& admit);
  // Refuses a key (Z85) from now on, as a member's and as a joiner's (any thread).
  void ban(const std::string& z85);
  static constexpr std::string_view kJoinerPrefix = "join:";  // the User-Id of a joiner's key

  // The handshakes refused so far, "public key K (Z85) from ADDRESS, N times", the
  // first kMaxRemembered distinct ones (gossipctl doctor; any thread).
  std::vector<std::string> refused() const;
  static constexpr size_t kMaxRemembered = 16;

 private:
  ZapHandler() = default;
  void serve();
  void remember_refusal(const std::string& what);
  mutable std::mutex allowed_mu_;            // allow() adds while serve() reads
  std::map<std::string, uint32_t> allowed_;  // binary key (32 bytes) -> id; guarded
  std::set<std::string> admit_;              // binary keys; guarded by allowed_mu_ too
  std::set<std::string> banned_;             // binary keys; guarded by allowed_mu_ too
  mutable std::mutex refused_mu_;
  std::map<std::string, uint64_t> refused_;  // guarded by refused_mu_
  zmq::socket_t socket_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gossip::peers
