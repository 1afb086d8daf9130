#include "daemon/join_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <zmq.hpp>

#include "daemon/admission.h"
#include "proto/message.h"

namespace gossip::daemon {
namespace {

constexpr auto kAnswerWait = std::chrono::seconds(3);
constexpr int kMaxRedirects = 4;

// One request to `seed`: the answer's member message and payload, or nullopt when it
// stayed silent until `until` (or sent something that is no answer).
std::optional<JoinReply> ask(zmq::context_t& context, const peers::Peer& seed,
                             const std::string& endpoint, const JoinKeys& keys,
                             std::chrono::steady_clock::time_point until) {
  std::random_device rd;
  const std::string route = fmt::format("join-{:08x}{:08x}", rd(), rd());
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, route);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(proto::kMaxMemberBytes + 4096));
  if (!seed.public_key.empty()) {  // CURVE: the seed's key, and this node's own
    s.set(zmq::sockopt::curve_serverkey, seed.public_key);
    s.set(zmq::sockopt::curve_publickey, keys.public_key);
    s.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  }
  s.connect(seed.endpoint);
  const std::string head = proto::encode_head(
      proto::kNoNode, 0, proto::Member{proto::Member::kJoinRequest, 0, 0}, endpoint.size());
  s.send(zmq::buffer(head), zmq::send_flags::sndmore);
  s.send(zmq::buffer(endpoint));
  while (std::chrono::steady_clock::now() < until) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    std::vector<zmq::message_t> frames;
    zmq::message_t frame;
    while (s.recv(frame, zmq::recv_flags::dontwait)) {
      const bool more = frame.more();
      if (frames.size() < 3) frames.push_back(std::move(frame));
      if (!more) break;
    }
    if (frames.size() != 2) continue;
    auto h = proto::decode_head(frames[0].data(), frames[0].size());
    if (!h || h->envelope.kind != proto::Kind::kMember ||
        !proto::validate_payload(h->envelope, 1, frames[1].size()))
      continue;
    return JoinReply{std::get<proto::Member>(h->body), h->envelope.round, frames[1].to_string()};
  }
  return std::nullopt;
}

}  // namespace

Result<Joined> join_by_seeds(const std::vector<peers::Peer>& seeds, const std::string& endpoint,
                             std::chrono::milliseconds timeout, const JoinKeys& keys) {
  zmq::context_t context(1);
  return join_by_seeds(seeds, endpoint, timeout, keys, gossip::Clock::real(),
                       [&](const peers::Peer& seed, const std::string& ep, TimePoint until) {
                         return ask(context, seed, ep, keys, until);
                       });
}

Result<Joined> join_by_seeds(const std::vector<peers::Peer>& seeds, const std::string& endpoint,
                             std::chrono::milliseconds timeout, const JoinKeys& keys,
                             gossip::Clock& clock, const JoinAsk& ask) {
  if (seeds.empty()) return Status::invalid("--join: no seed");
  const auto deadline = clock.now() + timeout;
  std::string silent, waiting;
  for (size_t next = 0; clock.now() < deadline; ++next) {
    peers::Peer seed = seeds[next % seeds.size()];
    for (int hop = 0; hop <= kMaxRedirects && clock.now() < deadline; ++hop) {
      auto answer = ask(seed, endpoint, std::min(deadline, clock.now() + kAnswerWait));
      if (!answer) {
        silent = seed.endpoint;
        break;
      }
      const auto& [m, round, text] = *answer;
      if (m.what == proto::Member::kRefused)
        return Status::invalid(fmt::format("join: {} refused: {}", seed.endpoint, text));
      if (m.what == proto::Member::kWait) {  // no majority there now: again in a second
        if (text != waiting) spdlog::warn("join: {} says wait: {}", seed.endpoint, text);
        waiting = text;
        clock.sleep_until(std::min(deadline, clock.now() + std::chrono::seconds(1)));
        break;
      }
      if (m.what == proto::Member::kRedirect) {
        auto coordinator = parse_endpoint_and_key(text);
        if (!coordinator || coordinator->public_key.empty() != seed.public_key.empty())
          break;  // no endpoint, or no key under CURVE: no answer
        spdlog::info("join: {} sends this node to the coordinator, node {} at {}", seed.endpoint,
                     m.id, coordinator->endpoint);
        seed = std::move(coordinator).value();
        continue;
      }
      if (m.what != proto::Member::kAnswer) break;
      auto members = parse_members(text);
      if (!members)
        return members.status().with_context(fmt::format("join: {}'s answer", seed.endpoint));
      const auto self = std::find_if(members->begin(), members->end(),
                                     [&](const peers::Peer& p) { return p.id == m.id; });
      if (self == members->end() || self->endpoint != endpoint ||
          self->public_key != keys.public_key)
        return Status::protocol(fmt::format(
            "join: {} answered id {}, but its member list does not give it {}{}", seed.endpoint,
            m.id, endpoint, keys.public_key.empty() ? "" : " with this node's key"));
      if (!seed.public_key.empty() &&
          std::none_of(members->begin(), members->end(),
                       [&](const peers::Peer& p) { return p.public_key == seed.public_key; }))
        return Status::protocol(
            fmt::format("join: {}'s member list does not hold the key this node spoke to it with",
                        seed.endpoint));
      for (const auto& p : *members)
        if (p.public_key.empty() != keys.public_key.empty())
          return Status::protocol(fmt::format(
              "join: {}'s member list gives node {} {}", seed.endpoint, p.id,
              keys.public_key.empty() ? "a key, and this node runs without CURVE" : "no key"));
      return Joined{m.id, m.epoch, round, std::move(members).value()};
    }
  }
  if (!waiting.empty())
    return Status::timeout(fmt::format("join: no id within {} s; the last answer: wait: {}",
                                       timeout.count() / 1000, waiting));
  return Status::timeout(fmt::format(
      "join: no seed answered within {} s (the last silent one: {}); are the seeds up and "
      "their ports open?",
      timeout.count() / 1000, silent.empty() ? "none" : silent));
}

}  // namespace gossip::daemon
