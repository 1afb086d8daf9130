#pragma once
// --tune auto: local SGD's period T and its top-k codec's ratio, picked from what the
// rounds measure, so that communication hides under the trainers' compute.
//
// Every tune_every rounds (an epoch) each node sends every peer what it measured
// (proto::TuneReport): its trainers' compute time per step, its rounds' duration and
// bytes, a sample of its model before the epoch's last round (the same 128 indices
// on every node, from which every node computes the replicas' distance from their
// mean exactly, whatever the codec did to the round), and, in the first epoch, its second
// round: the probe, which runs at the ladder's largest ratio (uncompressed where the
// codec has no ratio), a round of many bytes beside the compressed rounds' few (the
// first round is not measured: it connects the ring and waits for every node's first
// steps). After the next round every node holds every report and
// derives the same plan from them (decide() is a pure function of the reports), which
// takes effect from the round after that: the trainers' period up to it, the codec's
// ratio in it.
//
// The cost of a round is c(r) = fixed + bytes(r) * per_byte, fixed (latency, the
// codec's CPU) and per_byte (1 / bandwidth) from the probe and the compressed rounds
// (the fastest node's round: the others' include their wait for the last to arrive);
// bytes scale with the ratio. The slowest node's compute per step s paces the cluster. At period T
// the trainers wait c / (T s + c) of their time. The plan is the shortest period
// with the largest ratio that keeps that under tune_wait: the most accurate schedule
// whose communication hides. The replicas' consensus distance, measured at the period
// in use and taken to grow in proportion to T, bounds T from above (tune_consensus).
//
// A peer's report is believed within the ladders: a lying peer can move the plan
// between the shortest and the longest period, the largest and the smallest ratio,
// never out of them. A node missing a report when the plan is due (after a bounded
// wait, skipped while the last plan missed one too) keeps its plan and says so (the
// peers that had every report may move on: a mismatch of periods costs accuracy, not
// progress; one of ratios fails the round, naming the count).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "compression/codec.h"
#include "peers/router.h"
#include "proto/message.h"
#include "sgd/strategy.h"

namespace gossip::daemon {

struct TuneSettings {
  double wait = 0.05;      // the wait fraction to stay under
  double consensus = 0.0;  // the bound of the relative consensus distance; 0: none
  uint64_t every = 4;      // rounds per epoch
  std::vector<uint64_t> periods = {1, 2, 4, 8, 16, 32, 64};  // ascending
  // Descending; the codec's own alone where it has no ratio to tune (0: none).
  std::vector<double> ratios = {0.0};
};

struct TunePlan {
  uint64_t period = 1;
  double ratio = 0.0;
  double predicted_wait = 0.0;
  // The cost model it was made with: a round's fixed cost and the bandwidth (bytes/s,
  // 0: not measured, the bytes taken to cost nothing).
  double fixed_s = 0.0, bandwidth = 0.0;
  std::string reason;
};

// What the cluster measured over an epoch, from every node's report and sample.
struct TuneMeasured {
  double step_s = 0;       // the slowest node's compute per step
  double round_s = 0;      // the fastest node's median compressed round
  double round_bytes = 0;  // bytes a node sent per compressed round, mean over nodes
  double probe_s = 0;      // the probe round's (0: none yet)
  double probe_bytes = 0;
  // The replicas' distance from their mean, relative to its norm, on the samples:
  // sqrt(mean_i |x_i - x|^2 / |x|^2); 0: not measured.
  double consensus = 0;
};
struct TuneReportIn {
  proto::TuneReport report;
  std::vector<float> samples;
};
TuneMeasured combine(std::span<const TuneReportIn> reports);

// out.size() entries of `model` at indices that depend on the model's size alone, so
// that every node samples alike (tune-reports, gossipctl status --cluster).
void sample_model(std::span<const float> model, std::span<float> out);
// The replicas' distance from their mean relative to the mean's norm,
// sqrt(Σ_i ‖x_i − x̄‖² / n / ‖x̄‖²), on samples of one size; nullopt without any or
// when the mean is 0.
std::optional<double> relative_spread(std::span<const std::span<const float>> samples);
// Each replica's distance from that mean, relative to the mean's norm,
// sqrt(‖x_i − x̄‖² / ‖x̄‖²), under the same conditions.
std::optional<std::vector<double>> distances_from_mean(
    std::span<const std::span<const float>> samples);

// The plan for what was measured under `current`; the same on every node.
TunePlan decide(const TuneSettings& settings, const TuneMeasured& m, const TunePlan& current);

// The configured top-k codec at the plan's ratio: local SGD and its error feedback
// hold this one, whose ratio the tuner sets between rounds (the residual carries over).
class TunedCodec final : public compression::Codec {
 public:
  // `configured` keeps the largest entries (top-k or a chain of it); its ratio joins `ratios`.
  static Result<std::unique_ptr<TunedCodec>> make(const compression::Codec& configured,
                                                  std::vector<double> ratios);
  // The ratio of `spec` (a top-k or top-k chain spec), or 0 where it has none.
  static double ratio_of(const std::string& spec);
  const std::vector<double>& ratios() const { return ratios_; }  // descending
  double ratio() const { return ratio_; }
  void set_ratio(double ratio);  // one of ratios(); between rounds only

  proto::CodecId id() const override { return current_->id(); }
  std::string spec() const override { return current_->spec(); }
  bool biased() const override { return current_->biased(); }
  bool keeps_largest() const override { return current_->keeps_largest(); }
  uint64_t max_encoded_bytes(uint64_t n) const override { return current_->max_encoded_bytes(n); }
  Status encode(std::span<const float> x, const compression::CodecContext& ctx,
                std::vector<std::byte>& out) const override {
    return current_->encode(x, ctx, out);
  }
  Status decode(std::span<const std::byte> in, const compression::CodecContext& ctx,
                std::span<float> y) const override {
    return current_->decode(in, ctx, y);
  }

 private:
  TunedCodec() = default;
  std::vector<double> ratios_;
  std::vector<std::unique_ptr<compression::Codec>> codecs_;  // by ratios_
  const compression::Codec* current_ = nullptr;
  double ratio_ = 0;
};

// The sync worker's side: measures, reports, collects and decides. Worker thread only
// (gauges() from any).
class Tuner {
 public:
  // `codec`: null where the ratio is not tuned.
  Tuner(peers::Router& router, TuneSettings settings, uint64_t period, TunedCodec* codec);

  struct RoundSample {
    uint64_t round = 0;
    double seconds = 0;    // the round's duration
    uint64_t bytes = 0;    // payload this node sent in it
    double compute_s = 0;  // since the last round ended, the trainers' steps
    uint64_t steps = 0;    // ... how many
    bool probe = false;    // the uncompressed probe
  };
  static constexpr uint64_t kSamples = 128;
  // Before round `round`, with the node's model: keeps the sample an epoch's last
  // round reports, sets the probe's ratio. True where the round must travel
  // uncompressed (the probe, the codec having no ratio).
  bool before_round(uint64_t round, std::span<const float> model);
  // Whether round `round` is the probe.
  static bool probes(uint64_t round) { return round == 1; }
  // After a completed round; sends the epoch's report after its last round.
  void round_ran(const RoundSample& sample);
  // The period leading to round `round` + 1 (the trainers' next), and sets the codec's
  // ratio for that round; decides when a plan is due, waiting at most `wait` for the
  // peers' reports while running `tick` (which polls the router).
  uint64_t next_period(uint64_t round, std::chrono::milliseconds wait,
                       const std::function<void()>& tick);
  const TunePlan& plan() const { return plan_; }
  std::vector<sgd::Strategy::Gauge> gauges() const;

 private:
  void on_report(peers::Incoming& in);
  void send_report(uint64_t epoch);

  peers::Router& router_;
  TuneSettings settings_;
  TunedCodec* codec_;
  TunePlan plan_;
  // This epoch's samples.
  std::vector<double> round_s_, step_s_;
  double bytes_ = 0;
  std::shared_ptr<std::vector<std::byte>> sample_;  // the payload of the next report
  double probe_s_ = 0, probe_bytes_ = 0;
  // The epoch whose plan is due after round due_after_, and the reports in by epoch.
  uint64_t due_after_ = UINT64_MAX, due_epoch_ = 0;
  std::map<uint64_t, std::map<uint32_t, TuneReportIn>> reports_;
  double cluster_probe_s_ = 0, cluster_probe_bytes_ = 0;  // the probe, kept once measured
  bool missed_ = false;  // the last plan lacked a report: the next does not wait for it
  std::atomic<double> g_period_{0}, g_ratio_{0}, g_wait_{0}, g_step_{0}, g_round_{0},
      g_bandwidth_{0}, g_plans_{0}, g_consensus_{0};
  peers::Router::Subscription subscription_;  // last: ends before the state it writes
};

}  // namespace gossip::daemon
