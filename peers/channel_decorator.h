#pragma once
// A PeerChannel that passes everything to another one: the base of channels that
// change what a node sends (the hostile node of the attack tests) without touching
// the transport underneath.

#include <memory>
#include <utility>

#include "peers/channel.h"

namespace gossip::peers {

class ChannelDecorator : public PeerChannel {
 public:
  explicit ChannelDecorator(std::unique_ptr<PeerChannel> inner) : inner_(std::move(inner)) {}

  uint32_t self() const override { return inner_->self(); }
  const std::vector<Peer>& peers() const override { return inner_->peers(); }
  const TrafficCounters& traffic() const override { return inner_->traffic(); }
  TrafficCounters& traffic_counters() override { return inner_->traffic_counters(); }
  Clock& clock() const override { return inner_->clock(); }
  Status send(uint32_t peer, uint64_t round, const proto::Body& body) override {
    return inner_->send(peer, round, body);
  }
  Status send_zero_copy(uint32_t peer, uint64_t round, const proto::Body& body,
                        std::span<const std::byte> payload) override {
    return inner_->send_zero_copy(peer, round, body, payload);
  }
  uint64_t pending_sends(uint32_t peer) const override { return inner_->pending_sends(peer); }
  Status send_shared(uint32_t peer, uint64_t round, const proto::Body& body,
                     std::shared_ptr<const std::vector<std::byte>> buffer) override {
    return inner_->send_shared(peer, round, body, std::move(buffer));
  }
  void note_dropped(uint32_t peer, const std::string& why) override {
    inner_->note_dropped(peer, why);
  }
  LinkState link_state(uint32_t peer) override { return inner_->link_state(peer); }
  std::vector<std::string> refused_keys() const override { return inner_->refused_keys(); }
  void wake() override { inner_->wake(); }
  Status add_peer(const Peer& peer) override { return inner_->add_peer(peer); }
  void remove_peer(uint32_t peer) override { inner_->remove_peer(peer); }
  void set_epoch(uint64_t epoch) override { inner_->set_epoch(epoch); }
  uint64_t epoch() const override { return inner_->epoch(); }
  Status reply_to_joiner(const std::string& route, uint64_t round, const proto::Body& body,
                         std::string_view payload) override {
    return inner_->reply_to_joiner(route, round, body, payload);
  }

 protected:
  PeerChannel& inner() { return *inner_; }
  std::optional<Incoming> recv(std::chrono::milliseconds timeout) override {
    return inner_->recv(timeout);
  }

 private:
  std::unique_ptr<PeerChannel> inner_;
};

}  // namespace gossip::peers
