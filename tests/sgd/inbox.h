#pragma once
// A scripted peer for tests: everything its router receives, of every kind, queued
// in arrival order for the test to read.

#include <chrono>
#include <deque>
#include <optional>
#include <vector>

#include "peers/router.h"

namespace gossip::sgd {

class Inbox {
 public:
  explicit Inbox(peers::PeerChannel& transport) : router_(transport) {
    for (uint8_t k = 1; k <= proto::kMaxKind; ++k)
      subscriptions_.push_back(
          router_.subscribe({static_cast<proto::Kind>(k)},
                            [this](peers::Incoming& in) { queue_.push_back(std::move(in)); }));
  }

  // The next message, waiting at most `wait` for one.
  std::optional<peers::Incoming> next(std::chrono::milliseconds wait) {
    if (queue_.empty()) router_.poll(wait);
    if (queue_.empty()) return std::nullopt;
    peers::Incoming in = std::move(queue_.front());
    queue_.pop_front();
    return in;
  }

 private:
  peers::Router router_;
  std::deque<peers::Incoming> queue_;
  std::vector<peers::Router::Subscription> subscriptions_;  // after queue_: end first
};

}  // namespace gossip::sgd
