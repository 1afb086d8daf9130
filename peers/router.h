#pragma once
// The one reader of the peer socket. Every component that takes messages from peers
// (the neighbor exchange, state transfer, the ring's rendezvous and membership, the
// NCCL id exchange, the all-gather) subscribes to the kinds it handles; the router
// receives each message once (the transport has validated it) and hands it to every
// subscriber of its kind, in subscription order. A kind nobody subscribed to is
// counted (gossipd_messages_unhandled_total) and logged once per kind, never dropped
// in silence.
//
// Nothing reads the socket except poll(): a component that waits for a message
// polls the router in a loop and checks the state its own handlers set. Whoever
// polls, every subscriber sees what arrived, so a message is never lost to the loop
// of another component.
//
// Owned and used by one thread (the daemon's sync worker), like the transport.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "peers/channel.h"
#include "proto/message.h"

namespace gossip::peers {

class Router {
 public:
  // Each handler gets a message of its own: several subscribers of one kind see the
  // same payload (ZeroMQ shares the buffer), and any of them may keep it.
  using Handler = std::function<void(Incoming&)>;

  explicit Router(PeerChannel& transport) : transport_(transport) {}
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Sending goes to the transport directly; only receiving goes through the router.
  PeerChannel& transport() { return transport_; }
  const PeerChannel& transport() const { return transport_; }
  uint32_t self() const { return transport_.self(); }
  const std::vector<Peer>& peers() const { return transport_.peers(); }
  Clock& clock() { return transport_.clock(); }

  // Ends its subscription when destroyed; must not outlive the router.
  class [[nodiscard]] Subscription {
   public:
    Subscription() = default;
    Subscription(Subscription&& o) noexcept : router_(o.router_), id_(o.id_) {
      o.router_ = nullptr;
    }
    Subscription& operator=(Subscription&& o) noexcept;
    ~Subscription();

   private:
    friend class Router;
    Subscription(Router* router, uint64_t id) : router_(router), id_(id) {}
    Router* router_ = nullptr;
    uint64_t id_ = 0;
  };
  Subscription subscribe(std::initializer_list<proto::Kind> kinds, Handler handler);

  // Waits at most `wait` for a message, then dispatches it and whatever else has
  // arrived, up to `max` messages (so that a flood cannot keep the caller from its
  // deadline). Returns how many it dispatched. Not from inside a handler.
  size_t poll(std::chrono::milliseconds wait, size_t max = 64);

  // Dispatches only messages of `kinds`, waiting at most `wait` for the first: for a
  // thread with nothing to receive yet but those (a sync thread before the node has a
  // model answers gossipctl's pings and joiners). Messages of other kinds are held, in
  // order, for the next poll(), up to kMaxHeld of them or kMaxHeldBytes; past that
  // nothing more is read, and it returns false without waiting.
  bool poll_only(std::initializer_list<proto::Kind> kinds, std::chrono::milliseconds wait);
  static constexpr size_t kMaxHeld = 1024;
  static constexpr uint64_t kMaxHeldBytes = uint64_t{64} << 20;

  // Messages of `kind` that arrived while nobody was subscribed to it.
  uint64_t unhandled(proto::Kind kind) const;

  // Called at the end of every poll, whoever polls: what must move on while any
  // component waits (gossipctl's questions, daemon/inspector.h). It must not poll.
  void set_after_poll(std::function<void()> f) { after_poll_ = std::move(f); }
  // Called for a message whose envelope's epoch is above the transport's (a peer knows
  // of joins this node missed: daemon/admission.h). It must not poll.
  void set_on_epoch_ahead(std::function<void(uint32_t peer, uint64_t epoch)> f) {
    on_epoch_ahead_ = std::move(f);
  }

 private:
  void hand_out(Incoming& in);  // to the handlers of its kind
  struct Entry {
    uint64_t id = 0;
    std::shared_ptr<Handler> handler;
  };
  void dispatch(Incoming& in);
  void unsubscribe(uint64_t id);

  PeerChannel& transport_;
  std::array<std::vector<Entry>, proto::kMaxKind + 1> handlers_;
  std::array<bool, proto::kMaxKind + 1> logged_unhandled_{};
  uint64_t next_id_ = 1;
  bool polling_ = false;
  std::function<void()> after_poll_;
  std::function<void(uint32_t, uint64_t)> on_epoch_ahead_;
  std::deque<Incoming> held_;  // read by poll_only, not of its kind
  uint64_t held_bytes_ = 0;
};

}  // namespace gossip::peers
