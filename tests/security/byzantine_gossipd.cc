// gossipd-byzantine: gossipd whose peer channel lies (the malicious authenticated
// peer of the attack tests). It trains and syncs as any node does, with its trainer
// attached, but every model chunk it sends is altered as GOSSIP_ATTACK says, a
// comma-separated list taken in turn, one per round:
//   nan         every value NaN
//   scale       every value times 1e4 (a "scaled model")
//   huge-weight push-sum's weight 1e300
//   tiny-weight push-sum's weight 1e-310 (a denormal)
//   far-round   the chunk claims a round 10^6 ahead
//   malformed   the chunk names a tensor no node takes
//   garble      the chunk's framing is corrupted, a different way each round in
//               turn: the payload cut short or grown by a few bytes, the slice
//               moved past the model's end, its element count off by one, or a
//               codec that does not match the payload (what the soak's
//               "corrupted messages" are: each must be refused, nothing taken)
//   honest      nothing altered (to attack one round in several)
// and, whenever a joining node asks for the state:
//   far-state     the offer claims a round and a step 10^6 ahead
//   scaled-state  the state's values times 1e4
//   die-mid-state the process dies (as by SIGKILL) when it sends a joiner the
//                 GOSSIP_DIE_AFTER-th chunk of its state (default 10): a donor lost
//                 half way
// and, in every all-reduce over a ring transport (TCP, RDMA; not sealed):
//   ring-scale    every fp32 value of every ring message it sends (its contribution,
//                 the partial sums and the means it passes on) times 1e4
// and, not a lie but a lost message:
//   deaf-to-adds  every member add that arrives before this node asked for adds
//                 (member sync) is dropped, as if a partition had eaten it
// Run it with `gossipctl cluster --gossipd-on NODE=PATH`; it takes gossipd's flags.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "peers/channel_decorator.h"
#include "peers/ring_channel.h"

namespace {

using namespace gossip;

class ByzantineChannel final : public peers::ChannelDecorator {
 public:
  ByzantineChannel(std::unique_ptr<peers::PeerChannel> inner, std::vector<std::string> attacks)
      : ChannelDecorator(std::move(inner)) {
    for (auto& a : attacks) {
      if (a == "far-state")
        far_state_ = true;
      else if (a == "scaled-state")
        scaled_state_ = true;
      else if (a == "deaf-to-adds")
        deaf_to_adds_ = true;
      else if (a == "ring-scale")
        continue;  // the ring transport's lie (ScalingRingTransport)
      else if (a == "die-mid-state")
        die_after_ =
            std::getenv("GOSSIP_DIE_AFTER") ? std::atoi(std::getenv("GOSSIP_DIE_AFTER")) : 10;
      else
        attacks_.push_back(std::move(a));
    }
    if (attacks_.empty()) attacks_.push_back("honest");
  }

  Status send(uint32_t peer, uint64_t round, const proto::Body& body) override {
    if (const auto* m = std::get_if<proto::Member>(&body); m && m->what == proto::Member::kSync)
      asked_for_adds_ = true;
    if (far_state_ && std::holds_alternative<proto::StateOffer>(body)) {
      auto offer = std::get<proto::StateOffer>(body);
      if (offer.has_state) {
        spdlog::warn("byzantine: offering peer {} a state of round {}", peer, round + 1000000);
        offer.step += 1000000;
        return ChannelDecorator::send(peer, round + 1000000, offer);
      }
    }
    return ChannelDecorator::send(peer, round, body);
  }

  Status send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                        std::span<const std::byte> payload) override {
    if (std::holds_alternative<proto::StateChunk>(body))
      return state(peer, round, body, std::vector<std::byte>(payload.begin(), payload.end()));
    if (!std::holds_alternative<proto::ModelChunk>(body))
      return ChannelDecorator::send_zero_copy(peer, round, body, payload);
    return lie(peer, round, std::get<proto::ModelChunk>(body),
               std::vector<std::byte>(payload.begin(), payload.end()));
  }
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer) override {
    if (far_state_ && std::holds_alternative<proto::StateOffer>(body)) {
      auto offer = std::get<proto::StateOffer>(body);
      if (offer.has_state) {
        spdlog::warn("byzantine: offering peer {} a state of round {}", peer, round + 1000000);
        offer.step += 1000000;
        return ChannelDecorator::send_shared(peer, round + 1000000, offer, std::move(buffer));
      }
    }
    if (const auto* o = std::get_if<proto::StateOffer>(&body); o && o->has_state)
      joiners_.insert(peer);
    if (std::holds_alternative<proto::StateChunk>(body)) {
      if (die_after_ > 0 && joiners_.count(peer) && ++state_chunks_ >= die_after_) {
        spdlog::warn("byzantine: dying after sending {} chunks of the state to peer {}",
                     state_chunks_ - 1, peer);
        spdlog::default_logger()->flush();
        std::_Exit(9);
      }
      return state(peer, round, body, *buffer);
    }
    if (!std::holds_alternative<proto::ModelChunk>(body))
      return ChannelDecorator::send_shared(peer, round, body, std::move(buffer));
    return lie(peer, round, std::get<proto::ModelChunk>(body), *buffer);
  }

 private:
  std::optional<peers::Incoming> recv(std::chrono::milliseconds timeout) override {
    auto in = ChannelDecorator::recv(timeout);
    if (deaf_to_adds_ && !asked_for_adds_ && in && in->kind() == proto::Kind::kMember &&
        in->joiner_route.empty() && in->as<proto::Member>().what == proto::Member::kAdd) {
      spdlog::warn("byzantine: deaf to peer {}'s add of node {}", in->peer,
                   in->as<proto::Member>().id);
      return std::nullopt;  // the router takes it for a wait with nothing
    }
    return in;
  }

  Status state(uint32_t peer, uint64_t round, const proto::Body& body,
               std::vector<std::byte> payload) {
    if (far_state_) round += 1000000;  // the chunks follow the offer's round
    if (scaled_state_)
      for (size_t i = 0; i + 4 <= payload.size(); i += 4) {
        float x;
        std::memcpy(&x, payload.data() + i, 4);
        x *= 1e4f;
        std::memcpy(payload.data() + i, &x, 4);
      }
    return ChannelDecorator::send_shared(
        peer, round, body, std::make_shared<const std::vector<std::byte>>(std::move(payload)));
  }

  Status lie(uint32_t peer, uint64_t round, proto::ModelChunk chunk,
             std::vector<std::byte> payload) {
    const std::string& attack = attacks_[round % attacks_.size()];
    if (attack != last_) {
      spdlog::warn("byzantine: round {}: {}", round, attack);
      last_ = attack;
    }
    const bool raw = chunk.codec == proto::CodecId::kNone;
    const auto values = [&](auto&& f) {
      if (!raw) return;
      for (size_t i = 0; i + 4 <= payload.size(); i += 4) {
        float x;
        std::memcpy(&x, payload.data() + i, 4);
        x = f(x);
        std::memcpy(payload.data() + i, &x, 4);
      }
    };
    if (attack == "nan")
      values([](float) { return std::nanf(""); });
    else if (attack == "scale")
      values([](float x) { return x * 1e4f; });
    else if (attack == "huge-weight")
      chunk.weight = 1e300;
    else if (attack == "tiny-weight")
      chunk.weight = 1e-310;
    else if (attack == "far-round")
      round += 1000000;
    else if (attack == "malformed")
      chunk.tensor = 7;
    else if (attack == "garble")
      garble(round, chunk, payload);
    return ChannelDecorator::send_shared(
        peer, round, chunk, std::make_shared<const std::vector<std::byte>>(std::move(payload)));
  }

  static void garble(uint64_t round, proto::ModelChunk& chunk, std::vector<std::byte>& payload) {
    switch (round % 5) {
      case 0:  // cut short
        payload.resize(payload.size() - std::min<size_t>(payload.size(), 1 + round % 7));
        break;
      case 1:  // grown
        payload.resize(payload.size() + 1 + round % 7, std::byte{0x5a});
        break;
      case 2:  // past the model's end
        chunk.offset += uint64_t{1} << 40;
        break;
      case 3:  // one element more than the payload holds
        chunk.numel += 1;
        break;
      default:  // a codec the payload is not
        chunk.codec =
            chunk.codec == proto::CodecId::kNone ? proto::CodecId::kInt8 : proto::CodecId::kNone;
        break;
    }
  }

  std::vector<std::string> attacks_;
  bool far_state_ = false, scaled_state_ = false;
  bool deaf_to_adds_ = false, asked_for_adds_ = false;
  int die_after_ = 0, state_chunks_ = 0;
  std::set<uint32_t> joiners_;  // peers offered a state: its chunks to them count
  std::string last_;
};

// A ring link whose every fp32 message leaves scaled by 1e4.
class ScalingRingChannel final : public peers::RingChannel {
 public:
  explicit ScalingRingChannel(std::unique_ptr<peers::RingChannel> inner)
      : RingChannel(inner->left(), inner->right()), inner_(std::move(inner)) {
    set_nonces(inner_->nonce_given_left(), inner_->nonce_from_right());
  }
  Status post_send(uint64_t tag, std::span<const std::byte> data) override {
    if (!warned_) {
      spdlog::warn("byzantine: sending peer {} ring messages scaled by 1e4", right());
      warned_ = true;
    }
    auto& copy = sent_.emplace_back(data.begin(), data.end());
    for (size_t i = 0; i + 4 <= copy.size(); i += 4) {
      float x;
      std::memcpy(&x, copy.data() + i, 4);
      x *= 1e4f;
      std::memcpy(copy.data() + i, &x, 4);
    }
    return inner_->post_send(tag, copy);
  }
  Status post_recv(uint64_t tag, std::span<std::byte> buffer) override {
    return inner_->post_recv(tag, buffer);
  }
  Result<size_t> wait_recv(const peers::WaitOptions& wait) override {
    return inner_->wait_recv(wait);
  }
  Status wait_sends(const peers::WaitOptions& wait) override {
    Status st = inner_->wait_sends(wait);
    if (st.is_ok()) sent_.clear();
    return st;
  }
  Status poke() override { return inner_->poke(); }
  peers::ChannelTimes times() const override { return inner_->times(); }

 private:
  std::unique_ptr<peers::RingChannel> inner_;
  std::deque<std::vector<std::byte>> sent_;  // alive until wait_sends, as post_send asks
  bool warned_ = false;
};

class ScalingRingTransport final : public peers::RingTransport {
 public:
  explicit ScalingRingTransport(std::unique_ptr<peers::RingTransport> inner)
      : inner_(std::move(inner)) {}
  const char* name() const override { return inner_->name(); }
  uint16_t port() const override { return inner_->port(); }
  Result<std::unique_ptr<peers::RingChannel>> connect(const peers::RingEnds& ends,
                                                      const peers::WaitOptions& wait) override {
    auto ch = inner_->connect(ends, wait);
    if (!ch) return ch.status();
    return std::unique_ptr<peers::RingChannel>(
        std::make_unique<ScalingRingChannel>(std::move(ch).value()));
  }
  Result<std::vector<std::unique_ptr<peers::RingChannel>>> connect_mesh(
      uint32_t self, const std::vector<peers::MeshEnd>& ends,
      const peers::WaitOptions& wait) override {
    auto links = inner_->connect_mesh(self, ends, wait);
    if (!links) return links.status();
    for (auto& l : *links) l = std::make_unique<ScalingRingChannel>(std::move(l));
    return links;
  }

 private:
  std::unique_ptr<peers::RingTransport> inner_;
};

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("GOSSIP_ATTACK");
  std::vector<std::string> attacks;
  std::stringstream list(env ? env : "");
  for (std::string a; std::getline(list, a, ',');)
    if (!a.empty()) attacks.push_back(a);
  for (const auto& a : attacks)
    if (a != "nan" && a != "scale" && a != "huge-weight" && a != "tiny-weight" &&
        a != "far-round" && a != "malformed" && a != "garble" && a != "honest" &&
        a != "far-state" && a != "scaled-state" && a != "die-mid-state" && a != "deaf-to-adds" &&
        a != "ring-scale") {
      std::fprintf(stderr, "gossipd-byzantine: unknown attack '%s'\n", a.c_str());
      return 2;
    }
  if (attacks.empty()) {
    std::fprintf(stderr, "gossipd-byzantine: set GOSSIP_ATTACK (nan,scale,huge-weight,...)\n");
    return 2;
  }
  auto config = daemon::config_from_args(argc, argv);
  if (!config) {
    std::fprintf(stderr, "gossipd-byzantine: %s\n", config.status().message().c_str());
    return 2;
  }
  spdlog::set_pattern(
      fmt::format("%Y-%m-%d %H:%M:%S.%e [node {} byzantine] [%l] %v", config->node_id));
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  daemon::block_signals();
  daemon::DaemonHooks hooks;
  hooks.wrap_channel = [&](std::unique_ptr<peers::PeerChannel> inner) {
    return std::unique_ptr<peers::PeerChannel>(
        std::make_unique<ByzantineChannel>(std::move(inner), attacks));
  };
  if (std::find(attacks.begin(), attacks.end(), "ring-scale") != attacks.end())
    hooks.wrap_ring_transport = [](std::unique_ptr<peers::RingTransport> inner) {
      return std::unique_ptr<peers::RingTransport>(
          std::make_unique<ScalingRingTransport>(std::move(inner)));
    };
  auto d = daemon::Daemon::create(*config, hooks);
  if (!d) {
    spdlog::error("{}", d.status().message());
    return 1;
  }
  return (*d)->run();
}
