#include "peers/router.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>

namespace gossip::peers {

Router::Subscription& Router::Subscription::operator=(Subscription&& o) noexcept {
  if (this != &o) {
    if (router_) router_->unsubscribe(id_);
    router_ = o.router_;
    id_ = o.id_;
    o.router_ = nullptr;
  }
  return *this;
}

Router::Subscription::~Subscription() {
  if (router_) router_->unsubscribe(id_);
}

Router::Subscription Router::subscribe(std::initializer_list<proto::Kind> kinds, Handler handler) {
  const uint64_t id = next_id_++;
  auto shared = std::make_shared<Handler>(std::move(handler));
  for (proto::Kind k : kinds) handlers_[static_cast<size_t>(k)].push_back({id, shared});
  return Subscription(this, id);
}

void Router::unsubscribe(uint64_t id) {
  for (auto& list : handlers_)
    list.erase(std::remove_if(list.begin(), list.end(), [&](const Entry& e) { return e.id == id; }),
               list.end());
}

uint64_t Router::unhandled(proto::Kind kind) const { return transport_.traffic().unhandled(kind); }

void Router::dispatch(Incoming& in) {
  const uint32_t peer = in.peer;
  const uint64_t epoch = in.envelope.epoch;
  const bool member = in.joiner_route.empty();
  hand_out(in);
  // A member ahead of this node's member list (it heard of joins this one missed).
  // Asked after the handlers: an add carries the epoch it brings this node to, and
  // once taken it is no news (before, every add made every member ask its sender for
  // all of its adds: simulated, 1,035 syncs and 5,730 adds more for 10 joins to 100
  // nodes, growing with each join).
  if (on_epoch_ahead_ && member && epoch > transport_.epoch()) on_epoch_ahead_(peer, epoch);
}

void Router::hand_out(Incoming& in) {
  const auto k = static_cast<size_t>(in.kind());
  if (handlers_[k].empty()) {
    transport_.traffic_counters().count_unhandled(in.kind());
    if (!std::exchange(logged_unhandled_[k], true))
      spdlog::warn(
          "peer {} sent a {} message, which nothing on this node handles (logged once per kind, "
          "counted in gossipd_messages_unhandled_total): do all nodes run the same strategy and "
          "transport?",
          in.peer, proto::kind_name(in.kind()));
    return;
  }
  // Each handler is held while it runs: it may end a subscription (its own too).
  if (handlers_[k].size() == 1) {
    const std::shared_ptr<Handler> only = handlers_[k].front().handler;
    (*only)(in);
    return;
  }
  std::vector<std::shared_ptr<Handler>> targets;
  targets.reserve(handlers_[k].size());
  for (const Entry& e : handlers_[k]) targets.push_back(e.handler);
  for (size_t i = 0; i + 1 < targets.size(); ++i) {
    Incoming copy{in.peer, in.envelope, in.body, {}, in.joiner_route, in.joiner_key};
    copy.payload.copy(in.payload);  // shares the buffer: ZeroMQ counts references
    (*targets[i])(copy);
  }
  (*targets.back())(in);
}

size_t Router::poll(std::chrono::milliseconds wait, size_t max) {
  assert(!polling_ && "Router::poll from inside a handler");
  polling_ = true;
  size_t n = 0;
  while (!held_.empty() && n < max) {
    Incoming in = std::move(held_.front());
    held_.pop_front();
    held_bytes_ -= std::min<uint64_t>(held_bytes_, in.payload.size() + proto::kMaxHeaderBytes);
    ++n;
    dispatch(in);
  }
  if (n > 0) wait = std::chrono::milliseconds(0);  // something was handed out already
  while (n < max) {
    auto in = transport_.recv(n == 0 ? wait : std::chrono::milliseconds(0));
    if (!in) break;
    ++n;
    dispatch(*in);
  }
  if (after_poll_) after_poll_();
  polling_ = false;
  return n;
}

bool Router::poll_only(std::initializer_list<proto::Kind> kinds, std::chrono::milliseconds wait) {
  assert(!polling_ && "Router::poll_only from inside a handler");
  polling_ = true;
  const auto full = [&] { return held_.size() >= kMaxHeld || held_bytes_ >= kMaxHeldBytes; };
  const bool room = !full();
  for (size_t n = 0; n < 64 && !full(); ++n) {
    auto in = transport_.recv(n == 0 ? wait : std::chrono::milliseconds(0));
    if (!in) break;
    if (std::find(kinds.begin(), kinds.end(), in->kind()) != kinds.end()) {
      dispatch(*in);
      continue;
    }
    held_bytes_ += in->payload.size() + proto::kMaxHeaderBytes;
    held_.push_back(std::move(*in));
  }
  if (after_poll_) after_poll_();
  polling_ = false;
  return room;
}

}  // namespace gossip::peers
