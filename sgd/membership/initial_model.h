#pragma once
// Start-up: every replica of the cluster starts from one model, node 0's, as DDP
// broadcasts rank 0's parameters at construction. Independent random inits would
// average to a model whose weights are about sqrt(n) times too small, and the
// gradient strategies (whose arena carries gradients) would never bring them
// together at all.
//
//   node 0                                   node k != 0
//   publish: initial-model chunks ──────────► kept until its trainer starts
//                                  ◄────────── initial-model request (nothing came
//   chunks again (at most once per 30 s) ────► for 2 s: node 0 had not started)
//
// Node 0 pushes a digest of the model (BLAKE2b, 64 bits) to every peer when it
// publishes. A peer whose replica hashes alike (trainers seeded alike, the usual
// case) holds node 0's model already: it confirms with its own digest and fetches
// nothing. Any other asks, with its digest, and node 0 sends the chunks. Node 0 reads
// no requests inside a round (a ring round does not read the control channel), so
// before its first round it waits a few seconds for every peer to confirm or ask, and
// pushes the chunks to those that did not (ZeroMQ queues them for a peer not up yet). Only node 0's
// chunks and digests are taken; chunks in order, checked against the layout and the size and for
// NaN and Inf. Owned by the sync worker's thread, like the router it subscribes to.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "peers/router.h"
#include "sgd/overlay/outgoing_model.h"

namespace gossip::sgd {

class InitialModel {
 public:
  static constexpr uint32_t kSource = 0;

  InitialModel(peers::Router& router, uint64_t chunk_elems);

  // The source: `model` is the cluster's initial model from now on; requests that
  // came before are answered now, later ones at once.
  void publish(std::span<const float> model, uint64_t layout);
  bool published() const { return published_; }

  // The source, before its first round: waits up to `wait` (running `tick` between
  // polls) for every peer to confirm the digest or ask, then pushes the chunks to
  // those that did neither. Once; nothing before publish().
  void before_rounds(std::chrono::milliseconds wait, const std::function<void()>& tick = {});

  // Any other node: writes the source's model into `model` (of layout `layout`).
  // `tick` runs between polls (the caller's heartbeats).
  Status fetch(std::span<float> model, uint64_t layout,
               std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* cancel,
               const std::function<void()>& tick = {});
  // After the node's first round: a model node 0 pushed that no trainer took
  // (initial="own") is memory for nothing.
  void discard();

  // A model's digest, as node 0 sends it (never 0, which a request uses for none).
  static uint64_t digest(std::span<const float> model);

 private:
  void on_message(peers::Incoming& in);
  void serve(uint32_t peer);
  void on_chunk(const peers::Incoming& in);
  // Node 0: the digest where the asker's matches, else the chunks.
  void answer(uint32_t peer, uint64_t asker_digest, uint64_t total, uint64_t layout);
  // What node 0 sent, against this node's model: the reason it is not taken.
  Status check(std::span<const float> model, uint64_t layout) const;

  peers::Router& router_;
  peers::PeerChannel& transport_;
  uint64_t chunk_elems_;
  // The source's side.
  bool published_ = false;
  uint64_t layout_ = 0;
  uint64_t total_ = 0;
  uint64_t digest_ = 0;
  OutgoingModel snapshot_;
  std::map<uint32_t, std::chrono::steady_clock::time_point> served_;  // last time, by peer
  std::set<uint32_t> settled_;  // confirmed the digest, or sent the chunks
  bool pushed_ = false;         // before_rounds() ran
  struct Ask {
    uint64_t digest = 0, total = 0, layout = 0;
  };
  std::map<uint32_t, Ask> waiting_;  // asked before node 0 published
  // Any other node: what node 0 sent, as it arrives (before fetch() too).
  struct Received {
    std::vector<float> model;  // grows with the chunks, up to total
    uint64_t total = 0;
    uint64_t layout = 0;
    uint64_t next_seq = 0;
    Status failure;
    bool complete() const { return total > 0 && model.size() == total; }
  };
  Received received_;
  Ask source_digest_;                         // node 0's kDigest, when one came (digest 0: none)
  bool asked_after_digest_ = false;           // a differing digest was answered with an ask
  bool taken_ = false;                        // fetch() succeeded: later copies are ignored
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::sgd
