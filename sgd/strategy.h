#pragma once
// A synchronization strategy: what a node does with its model at a sync point.
// Local SGD averages through an all-reduce; the gossip family mixes with the
// neighbors of the round's overlay. The daemon's sync worker owns one and calls it
// from its thread only.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::sgd {

// What a strategy carries from round to round besides the model, by name, for
// checkpoints: CHOCO's public copies, push-sum's weight, error-feedback residuals,
// the outer optimizer's momentum.
struct StrategyState {
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, double> scalars;
  bool empty() const { return tensors.empty() && scalars.empty(); }
  // The tensor `name` of `numel` elements, or an error that names what is wrong.
  Result<const std::vector<float>*> tensor(const std::string& name, size_t numel) const;
  Result<double> scalar(const std::string& name) const;
};

struct RoundOptions {
  std::chrono::steady_clock::time_point deadline;  // the round fails after it
  const std::atomic<bool>* cancel = nullptr;       // set by the owner to abandon the round
  // A round may cover a part of the model only: a bucket of a gradient strategy's
  // (the trainers hand in their gradients as backward produces them), a fragment of
  // local SGD's (--fragments: the syncs stream). Where it starts in the model, and the
  // whole model's size (0: the span is the whole model), for what a strategy keeps
  // per element (error-feedback residuals, local SGD's previous model).
  uint64_t offset = 0;
  uint64_t model_numel = 0;
  // --tune auto's probe where the codec has no ratio to raise (daemon/tuner.h): what
  // the round sends travels raw fp32, so that its time says what the bytes cost.
  bool uncompressed = false;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // In place: model <- this node's model after round `round`. Every node calls it
  // with the same rounds in order, on models of the same layout.
  virtual Status synchronize(std::span<float> model, uint64_t round,
                             const RoundOptions& options) = 0;
  // The round to run next when the owner has completed rounds up to `proposed`: a
  // node whose neighbors have moved on (it restarted, or fell behind) skips to theirs.
  virtual uint64_t round_to_run(uint64_t proposed) const { return proposed; }
  // Between rounds: receives and buffers what peers already sent for `next_round`
  // (of `numel` elements), waiting at most `wait`.
  virtual void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) = 0;
  // Before the node has a model (no trainer attached yet) the daemon reads only
  // gossipctl's and joiners' messages and leaves the rest queued; a strategy whose
  // peers presume a silent node dead says here that this one lives (sends no more than
  // its heartbeats, reads nothing).
  virtual void keep_alive() {}
  // Between rounds only. load_state() takes what save_state() gave (of this strategy
  // and model size) and refuses anything else with the reason.
  virtual StrategyState save_state() const { return {}; }
  virtual Status load_state(const StrategyState& state) {
    return state.empty() ? Status::ok()
                         : Status::invalid("this strategy keeps no state between rounds");
  }
  // After took_model(): restores from `saved` (this node's checkpoint) what is still
  // this node's own although its model came from a peer, and returns that part; the
  // rest of `saved` is stale. Default: nothing.
  virtual Result<StrategyState> keep_own_state(const StrategyState& saved) {
    (void)saved;
    return StrategyState{};
  }
  // The layout fingerprint carried in every message; peers with another are refused.
  virtual void set_layout_fingerprint(uint64_t fingerprint) = 0;
  // Between rounds: the node took `model` from a peer (it joined mid-run, or was
  // left out and came back), and with it the peer's shared_state(), so that its
  // next round starts where the peer's does. `shared` is empty or of
  // shared_state_numel() elements.
  virtual void took_model(std::span<const float> model, std::span<const float> shared) {
    (void)model, (void)shared;
  }
  // Start-up ran on this node before its first round: `model` is the cluster's
  // initial model (node 0's), bit for bit the same on every node that started.
  virtual void started_from(std::span<const float> model) { (void)model; }
  // What every member holds alike after a round besides the model, which a node
  // taking a member's model must take too (local SGD's outer momentum), and its size
  // for a model of `numel` elements. Between rounds only.
  virtual std::span<const float> shared_state() const { return {}; }
  virtual size_t shared_state_numel(size_t numel) const {
    (void)numel;
    return 0;
  }
  // Gauges for /metrics, by full metric name, with their help text. Called from any
  // thread: implementations read atomics only.
  struct Gauge {
    std::string name, help;
    double value = 0;
    std::string type = "gauge";  // or "counter" (its name ends in _total)
    // The name it had before, exported beside it for one release (docs/monitoring.md).
    std::string alias = {};
  };
  virtual std::vector<Gauge> gauges() const { return {}; }
};

}  // namespace gossip::sgd
