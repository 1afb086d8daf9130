#pragma once
// Local SGD: trainers take T local steps, then the nodes average their models.
// Optionally an outer optimizer treats the averaged change since the previous
// synchronization as a pseudo-gradient (DiLoCo, Douillard et al. 2023: outer
// Nesterov momentum; "none" with lr 1 is plain model averaging).
//
// With a codec, what travels is the change since the last synchronization,
// compressed (with error feedback when asked), and every node applies the mean of
// the decoded changes to the common previous model, so the replicas stay equal.
//
// A round may cover one fragment of the model (RoundOptions::offset, --fragments:
// Streaming DiLoCo, Douillard et al. 2025, syncs fragment f every T steps at an
// offset of f T / F): the same steps on the fragment's part of the previous model
// and of the momentum, with an error-feedback residual per fragment; a fragment's
// first round is its exact average.

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "sgd/collectives/all_reduce.h"
#include "sgd/strategy.h"

namespace gossip::sgd {

struct OuterOptimizer {
  enum class Kind { kNone, kNesterov };
  Kind kind = Kind::kNone;
  double lr = 1.0;
  double momentum = 0.9;
};
Result<OuterOptimizer::Kind> parse_outer_kind(const std::string& name);

class LocalSgd final : public Strategy {
 public:
  // codec may be null (raw fp32); it must outlive this object.
  // `clip`: the ring's robust mode (--clip on) bounds each node's change since the
  // last synchronized model, so rounds send changes, as compressed ones do.
  LocalSgd(AllReduce& all_reduce, OuterOptimizer outer, const compression::Codec* codec = nullptr,
           bool error_feedback = false, compression::ThreadPool* pool = nullptr, bool clip = false);

  // In place: model <- the synchronized model of round `round`. The first round is
  // an exact, uncompressed average: it defines the common starting point x_prev.
  Status synchronize(std::span<float> model, uint64_t round, const RoundOptions& options) override;
  uint64_t round_to_run(uint64_t proposed) const override {
    return all_reduce_.round_to_run(proposed);
  }
  void progress(uint64_t next_round, size_t numel, std::chrono::milliseconds wait) override {
    all_reduce_.progress(next_round, numel, wait);
  }
  void set_layout_fingerprint(uint64_t fingerprint) override {
    all_reduce_.set_layout_fingerprint(fingerprint);
  }
  // The members' x_prev is the model they published: rounds after this one average
  // the change since it, as theirs do; and their outer momentum is `shared`, so the
  // next outer step is theirs too (empty: it restarts at zero, and the replica stays
  // apart from the members' by what the momentum would have added).
  void took_model(std::span<const float> model, std::span<const float> shared) override;
  // Compressed (or clipped): the first round (round 0) averages the change since this model instead
  // of the models themselves, which would travel exact and whole.
  void started_from(std::span<const float> model) override;
  // The outer Nesterov momentum, which every member applies alike.
  std::span<const float> shared_state() const override;
  size_t shared_state_numel(size_t numel) const override { return nesterov() ? numel : 0; }
  // The error-feedback residual (mass this node has not delivered yet); the peer's
  // model stays the synchronization point.
  Result<StrategyState> keep_own_state(const StrategyState& saved) override;
  StrategyState save_state() const override;
  Status load_state(const StrategyState& state) override;

 private:
  bool compressed() const { return codec_ && codec_->id() != proto::CodecId::kNone; }
  // Rounds after the first average the change since x_prev, not the models.
  bool sends_changes() const { return compressed() || clip_; }
  bool nesterov() const { return outer_.kind == OuterOptimizer::Kind::kNesterov; }
  bool plain() const { return outer_.kind == OuterOptimizer::Kind::kNone && outer_.lr == 1.0; }
  // model <- x_prev + outer step for the averaged change `delta` (= x_avg - x_prev);
  // previous and momentum are the model's span's parts of x_prev and the momentum.
  void apply(std::span<float> model, std::span<const float> delta, std::span<float> previous,
             std::span<float> momentum);
  Status synchronize_round(std::span<float> model, uint64_t round, const RoundOptions& options);
  // After a merge with nodes that trained apart: the next round is a first round.
  void forget_sync_point();
  // At the cluster's first round, x_prev <- the start-up model when this node has it.
  bool take_start_point(uint64_t round, size_t numel);
  Status synchronize_fragment(std::span<float> model, uint64_t round, uint64_t offset,
                              uint64_t model_numel, const CollectiveOptions& options);

  AllReduce& all_reduce_;
  OuterOptimizer outer_;
  const compression::Codec* codec_;
  bool error_feedback_;
  compression::ThreadPool* pool_;
  bool clip_;
  std::unique_ptr<compression::ErrorFeedback> residual_;
  std::vector<float> previous_;  // x_prev: the model after the last synchronization
  std::vector<float> momentum_;  // outer Nesterov buffer
  std::vector<float> delta_;
  std::vector<float> start_point_;  // started_from()'s model until the first round
  // --fragments: the offsets of the fragments that had their first round, and their
  // residuals (the whole model's is residual_).
  std::set<uint64_t> started_;
  uint64_t started_elems_ = 0;  // their sizes' sum: all of x_prev is set when it is the model's
  bool whole_synced_ = false;   // a whole-model round gave every fragment its x_prev
  std::map<uint64_t, std::unique_ptr<compression::ErrorFeedback>> fragment_residuals_;
};

}  // namespace gossip::sgd
