#include "peers/curve_auth.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <array>
#include <vector>

namespace gossip::peers {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::optional<std::string> decode_key(std::string_view z85) {
  if (z85.size() != kCurveKeyText) return std::nullopt;
  std::string text(z85);
  std::array<uint8_t, 32> bin{};
  if (zmq_z85_decode(bin.data(), text.c_str()) == nullptr) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(bin.data()), bin.size());
}

std::string key_text(std::string_view bin) {
  char out[kCurveKeyText + 1] = {};
  zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(bin.data()), bin.size());
  return out;
}

}  // namespace

bool curve_available() { return zmq_has("curve") != 0; }

Status check_curve_key(std::string_view z85, std::string_view what) {
  if (z85.size() != kCurveKeyText)
    return Status::invalid(fmt::format("{}: a CURVE key is {} Z85 characters, got {}", what,
                                       kCurveKeyText, z85.size()));
  if (!decode_key(z85))
    return Status::invalid(fmt::format("{}: not a Z85 key (gossipctl keygen makes one)", what));
  return Status::ok();
}

Result<std::string> curve_public_of(const std::string& secret_z85) {
  GOSSIP_RETURN_IF_ERROR(check_curve_key(secret_z85, "secret key"));
  char pub[kCurveKeyText + 1] = {};
  if (zmq_curve_public(pub, secret_z85.c_str()) != 0)
    return Status::invalid(
        fmt::format("cannot derive the public key: {}", zmq_strerror(zmq_errno())));
  return std::string(pub);
}

namespace {

// BLAKE2b of the X25519 secret two nodes share (one's secret key with the other's
// public key) and `label`, `bytes` long.
template <size_t kBytes>
Result<std::array<uint8_t, kBytes>> shared_hash(const std::string& own_secret_z85,
                                                const std::string& other_public_z85,
                                                const std::string& label) {
  const auto secret = decode_key(own_secret_z85);
  const auto other = decode_key(other_public_z85);
  if (!secret || !other) return Status::invalid("a CURVE key is not a Z85 key");
  if (sodium_init() < 0) return Status::io_error("libsodium failed to initialize");
  std::array<uint8_t, crypto_scalarmult_BYTES> shared{};
  if (crypto_scalarmult(shared.data(), reinterpret_cast<const uint8_t*>(secret->data()),
                        reinterpret_cast<const uint8_t*>(other->data())) != 0)
    return Status::invalid("a peer's public key is a low-order point");
  std::string input(reinterpret_cast<const char*>(shared.data()), shared.size());
  input += label;
  std::array<uint8_t, kBytes> out{};
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const uint8_t*>(input.data()),
                     input.size(), nullptr, 0);
  sodium_memzero(shared.data(), shared.size());
  sodium_memzero(input.data(), input.size());
  return out;
}

}  // namespace

Result<std::string> curve_routing_id(uint32_t from, const std::string& own_secret_z85,
                                     const std::string& other_public_z85) {
  auto token = shared_hash<12>(own_secret_z85, other_public_z85,
                               fmt::format("gossipd routing id of node {}", from));
  if (!token) return token.status();
  std::string hex(token->size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), token->data(), token->size());
  hex.pop_back();
  return fmt::format("node-{}-{}", from, hex);
}

Result<std::array<uint8_t, 32>> curve_link_key(uint32_t from, uint32_t to,
                                               const std::string& own_secret_z85,
                                               const std::string& other_public_z85) {
  return shared_hash<32>(own_secret_z85, other_public_z85,
                         fmt::format("gossipd ring link from node {} to node {}", from, to));
}

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(
    zmq::context_t& context, const std::map<std::string, uint32_t>& allowed,
    const std::vector<std::string>& admit) {
  std::unique_ptr<ZapHandler> h(new ZapHandler());
  for (const auto& [z85, id] : allowed) {
    auto bin = decode_key(z85);
    if (!bin) return Status::invalid(fmt::format("peer {}'s public key is not a Z85 key", id));
    h->allowed_[*bin] = id;
  }
  for (const auto& z85 : admit) {
    auto bin = decode_key(z85);
    if (!bin) return Status::invalid(fmt::format("admitted key '{}' is not a Z85 key", z85));
    h->admit_.insert(*bin);
  }
  try {
    h->socket_ = zmq::socket_t(context, zmq::socket_type::rep);
    h->socket_.set(zmq::sockopt::linger, 0);
    h->socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("cannot start the CURVE authenticator: {}", e.what()));
  }
  ZapHandler* raw = h.get();
  h->thread_ = std::thread([raw] {
    pthread_setname_np(pthread_self(), "zap");
    raw->serve();
  });
  return h;
}

Status ZapHandler::allow(const std::string& z85, uint32_t id) {
  auto bin = decode_key(z85);
  if (!bin) return Status::invalid(fmt::format("node {}'s public key is not a Z85 key", id));
  std::lock_guard lock(allowed_mu_);
  if (auto it = allowed_.find(*bin); it != allowed_.end() && it->second != id)
    return Status::invalid(fmt::format("node {}'s public key is node {}'s", id, it->second));
  allowed_[*bin] = id;
  return Status::ok();
}

void ZapHandler::disallow(const std::string& z85) {
  if (auto bin = decode_key(z85)) {
    std::lock_guard lock(allowed_mu_);
    allowed_.erase(*bin);
  }
}

bool ZapHandler::admits(const std::string& z85) const {
  auto bin = decode_key(z85);
  std::lock_guard lock(allowed_mu_);
  return bin && admit_.count(*bin) > 0;
}

Status ZapHandler::set_admitted(const std::vector<std::string>& admit) {
  std::set<std::string> keys;
  for (const auto& z85 : admit) {
    auto bin = decode_key(z85);
    if (!bin) return Status::invalid(fmt::format("admitted key '{}' is not a Z85 key", z85));
    keys.insert(*bin);
  }
  std::lock_guard lock(allowed_mu_);
  for (const auto& key : banned_) keys.erase(key);
  admit_ = std::move(keys);
  return Status::ok();
}

void ZapHandler::ban(const std::string& z85) {
  auto bin = decode_key(z85);
  if (!bin) return;
  std::lock_guard lock(allowed_mu_);
  banned_.insert(*bin);
  allowed_.erase(*bin);
  admit_.erase(*bin);
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::remember_refusal(const std::string& what) {
  std::lock_guard lock(refused_mu_);
  if (auto it = refused_.find(what); it != refused_.end())
    ++it->second;
  else if (refused_.size() < kMaxRemembered)
    refused_.emplace(what, 1);
}

std::vector<std::string> ZapHandler::refused() const {
  std::lock_guard lock(refused_mu_);
  std::vector<std::string> out;
  for (const auto& [what, n] : refused_)
    out.push_back(fmt::format("{}, {} time{}", what, n, n == 1 ? "" : "s"));
  return out;
}

void ZapHandler::serve() {
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> req;
      zmq::message_t frame;
      while (socket_.recv(frame, zmq::recv_flags::dontwait)) {
        const bool more = frame.more();
        if (req.size() < 8) req.push_back(std::move(frame));
        if (!more) break;
      }
      // version, request id, domain, address, identity, mechanism, credentials...
      std::string status = "400", text = "malformed ZAP request", user;
      std::string request_id = req.size() > 1 ? req[1].to_string() : "";
      if (req.size() >= 7 && req[0].to_string() == "1.0" && req[5].to_string() == "CURVE" &&
          req[6].size() == 32) {
        const std::string key = req[6].to_string();
        std::optional<uint32_t> member;
        bool admitted = false;
        {
          std::lock_guard lock(allowed_mu_);
          if (auto it = allowed_.find(key); it != allowed_.end()) member = it->second;
          admitted = admit_.count(key) > 0;
        }
        if (member) {
          status = "200";
          text = "OK";
          user = std::to_string(*member);
        } else if (admitted) {
          status = "200";
          text = "OK";
          user = std::string(kJoinerPrefix) + key_text(key);
        } else {
          text = "unknown public key";
          remember_refusal(fmt::format("public key {} from {}", key_text(key), req[3].to_string()));
          spdlog::warn("refused a CURVE handshake from {}: public key {} is not a peer's",
                       req[3].to_string(), key_text(key));
        }
      } else if (req.size() >= 6) {
        text = fmt::format("mechanism {} is not CURVE", req[5].to_string());
        remember_refusal(fmt::format("a {} handshake (not CURVE) from {}", req[5].to_string(),
                                     req[3].to_string()));
        spdlog::warn("refused a {} handshake from {}: peers must use CURVE", req[5].to_string(),
                     req[3].to_string());
      }
      for (const std::string& f : {std::string("1.0"), request_id, status, text, user})
        socket_.send(zmq::buffer(f), zmq::send_flags::sndmore);
      socket_.send(zmq::message_t(), zmq::send_flags::none);  // metadata: none
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      spdlog::warn("CURVE authenticator: {}", e.what());
    }
  }
  socket_.close();
}

}  // namespace gossip::peers
