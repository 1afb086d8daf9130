#pragma once
// Start-up: every replica of the cluster starts from one model, node 0's, as DDP
// broadcasts rank 0's parameters at construction. Independent random inits would
// average to a model whose weights are about sqrt(n) times too small, and the
// gradient strategies (whose arena carries gradients) would never bring them
// together at all.
//
//   node k != 0                     node 0
//   initial-model request ──────►   (remembered until node 0's trainer has started)
//                         ◄──────   initial-model chunks, raw fp32, in order
//
// A node asks again every second until the model comes or its deadline passes, so
// a node 0 that starts late, or restarts, is waited for. Only node 0's chunks are
// taken, checked against the layout and the size and for NaN and Inf. Owned by the
// sync worker's thread, like the router it subscribes to.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "base/status.h"
#include "peers/router.h"
#include "sgd/outgoing_model.h"

namespace gossip::sgd {

class InitialModel {
 public:
  static constexpr uint32_t kSource = 0;

  InitialModel(peers::Router& router, uint64_t chunk_elems);

  // The source: `model` is the cluster's initial model from now on; requests that
  // came before are answered now, later ones at once.
  void publish(std::span<const float> model, uint64_t layout);
  bool published() const { return published_; }

  // Any other node: writes the source's model into `model` (of layout `layout`).
  // `tick` runs between polls (the caller's heartbeats).
  Status fetch(std::span<float> model, uint64_t layout,
               std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* cancel,
               const std::function<void()>& tick = {});

 private:
  void on_message(peers::Incoming& in);
  void serve(uint32_t peer);
  void on_chunk(const peers::Incoming& in);

  peers::Router& router_;
  peers::PeerChannel& transport_;
  uint64_t chunk_elems_;
  // The source's side.
  bool published_ = false;
  uint64_t layout_ = 0;
  uint64_t total_ = 0;
  OutgoingModel snapshot_;
  std::map<uint32_t, std::chrono::steady_clock::time_point> asked_;  // waiting, or last served
  std::map<uint32_t, bool> waiting_;
  // The fetcher's side, while fetch() runs.
  struct Download {
    std::span<float> model;
    uint64_t layout = 0;
    uint64_t received = 0;
    uint64_t next_seq = 0;
    Status failure;
  };
  Download* download_ = nullptr;
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
