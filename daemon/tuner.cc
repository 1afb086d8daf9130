#include "daemon/tuner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/finite.h"
#include "base/split_mix64.h"
#include "compression/codec_spec.h"

namespace gossip::daemon {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string ratio_text(double r) { return r > 0 ? fmt::format("{:g}", r) : "the codec's"; }

}  // namespace

TuneMeasured combine(std::span<const TuneReportIn> reports) {
  TuneMeasured m;
  bool first = true;
  for (const auto& in : reports) {
    const auto& r = in.report;
    m.step_s = std::max(m.step_s, r.step_s);
    // A node with no compressed round (a lone epoch of the probe) says nothing of them.
    if (r.round_s > 0) m.round_s = first ? r.round_s : std::min(m.round_s, r.round_s);
    if (r.round_s > 0) first = false;
    m.round_bytes += r.round_bytes;
    if (r.probe_s > 0) m.probe_s = m.probe_s > 0 ? std::min(m.probe_s, r.probe_s) : r.probe_s;
    m.probe_bytes += r.probe_bytes;
  }
  if (reports.empty()) return m;
  const double n = static_cast<double>(reports.size());
  m.round_bytes /= n;
  m.probe_bytes /= n;
  std::vector<std::span<const float>> samples;
  for (const auto& in : reports) samples.emplace_back(in.samples);
  m.consensus = relative_spread(samples).value_or(0);
  return m;
}

void sample_model(std::span<const float> model, std::span<float> out) {
  if (model.empty()) return;
  for (uint64_t j = 0; j < out.size(); ++j) out[j] = model[mix64(j * kWeyl + 1) % model.size()];
}

std::optional<std::vector<double>> distances_from_mean(
    std::span<const std::span<const float>> samples) {
  if (samples.empty()) return std::nullopt;
  const size_t k = samples.front().size();
  for (const auto& s : samples)
    if (s.size() != k || k == 0) return std::nullopt;
  const double n = static_cast<double>(samples.size());
  std::vector<double> mean(k, 0.0);
  for (const auto& s : samples)
    for (size_t j = 0; j < k; ++j) mean[j] += s[j] / n;
  double norm = 0;
  for (size_t j = 0; j < k; ++j) norm += mean[j] * mean[j];
  if (norm <= 0) return std::nullopt;
  std::vector<double> out;
  for (const auto& s : samples) {
    double d = 0;
    for (size_t j = 0; j < k; ++j) d += (s[j] - mean[j]) * (s[j] - mean[j]);
    out.push_back(std::sqrt(d / norm));
  }
  return out;
}

std::optional<double> relative_spread(std::span<const std::span<const float>> samples) {
  const auto d = distances_from_mean(samples);
  if (!d) return std::nullopt;
  double squares = 0;
  for (double x : *d) squares += x * x;
  return std::sqrt(squares / static_cast<double>(d->size()));
}

TunePlan decide(const TuneSettings& s, const TuneMeasured& m, const TunePlan& current) {
  if (m.step_s <= 0 || m.round_s <= 0 || s.periods.empty() || s.ratios.empty()) {
    TunePlan keep = current;
    keep.reason = "nothing measured yet: the plan stays";
    return keep;
  }
  // The cost model. The probe sent many more bytes than a compressed round: the
  // difference of their times is the bytes' cost; what a compressed round costs
  // besides is fixed. Without a probe the bytes are taken to cost nothing.
  double per_byte = 0;
  if (m.probe_s > 0 && m.probe_bytes > 2 * m.round_bytes)
    per_byte = std::max(0.0, (m.probe_s - m.round_s) / (m.probe_bytes - m.round_bytes));
  const double fixed = std::max(0.0, m.round_s - m.round_bytes * per_byte);
  const auto cost = [&](double ratio) {
    const double scale = current.ratio > 0 && ratio > 0 ? ratio / current.ratio : 1.0;
    return fixed + m.round_bytes * scale * per_byte;
  };
  const auto wait = [&](uint64_t period, double ratio) {
    const double c = cost(ratio);
    return c / (static_cast<double>(period) * m.step_s + c);
  };

  TunePlan p;
  p.fixed_s = fixed;
  p.bandwidth = per_byte > 0 ? 1.0 / per_byte : 0.0;
  bool found = false;
  for (uint64_t period : s.periods) {
    for (double ratio : s.ratios) {
      // A shorter period than the one in use must hide with a margin, so that noise
      // in the measurements does not flip the plan back and forth.
      const double target = period < current.period ? 0.8 * s.wait : s.wait;
      if (wait(period, ratio) <= target) {
        p.period = period, p.ratio = ratio, found = true;
        break;
      }
    }
    if (found) break;
  }
  std::string why;
  if (!found) {
    p.period = s.periods.back(), p.ratio = s.ratios.back();
    why = fmt::format("no period hides the rounds under {:.0f}% of the time: the longest",
                      100 * s.wait);
  } else {
    why = fmt::format(
        "the shortest period, with the largest ratio, that hides the rounds under "
        "{:.0f}% of the time",
        100 * s.wait);
  }
  if (s.consensus > 0 && m.consensus > 0 && current.period > 0) {
    // Measured at the period in use; taken to grow in proportion to the period.
    const auto predicted = [&](uint64_t period) {
      return m.consensus * static_cast<double>(period) / static_cast<double>(current.period);
    };
    if (predicted(p.period) > s.consensus) {
      uint64_t bounded = s.periods.front();
      for (uint64_t period : s.periods)
        if (predicted(period) <= s.consensus) bounded = period;
      if (bounded < p.period) {
        // The rounds may not hide at the bounded period: the largest ratio whose bytes
        // cost at most tune_wait of its compute more than the fewest bytes do.
        p.period = bounded, p.ratio = s.ratios.back();
        const double budget = s.wait * static_cast<double>(bounded) * m.step_s;
        for (double ratio : s.ratios)
          if (cost(ratio) - cost(s.ratios.back()) <= budget) {
            p.ratio = ratio;
            break;
          }
        why = fmt::format(
            "the replicas' distance from their mean bounds the period under {:.3g}: the longest "
            "under it, with the largest ratio whose bytes cost under {:.0f}% of its compute more "
            "than the fewest",
            s.consensus, 100 * s.wait);
      }
    }
  }
  p.predicted_wait = wait(p.period, p.ratio);
  const double kb =
      m.round_bytes / 1e3 * (p.ratio > 0 && current.ratio > 0 ? p.ratio / current.ratio : 1.0);
  p.reason = fmt::format(
      "{} (a step {:.2f} ms, a round {:.2f} ms fixed + {:.0f} kB at {}: trainers wait {:.1f}%; "
      "replicas {:.3g} from their mean at period {})",
      why, 1e3 * m.step_s, 1e3 * fixed, kb,
      per_byte > 0 ? fmt::format("{:.2f} MB/s", 1e-6 / per_byte) : "no measurable cost a byte",
      100 * p.predicted_wait, m.consensus, current.period);
  return p;
}

// ------------------------------------------------------------------ the codec

double TunedCodec::ratio_of(const std::string& spec) {
  if (spec.rfind("topk:", 0) != 0) return 0;
  const size_t end = spec.find_first_of(":+", 5);
  try {
    return std::stod(spec.substr(5, end == std::string::npos ? std::string::npos : end - 5));
  } catch (const std::exception&) {
    return 0;
  }
}

Result<std::unique_ptr<TunedCodec>> TunedCodec::make(const compression::Codec& configured,
                                                     std::vector<double> ratios) {
  const std::string spec = configured.spec();
  const double own = ratio_of(spec);
  if (!configured.keeps_largest() || own <= 0)
    return Status::invalid(fmt::format("codec {} has no top-k ratio to tune", spec));
  ratios.push_back(own);
  std::sort(ratios.begin(), ratios.end(), std::greater<>());
  ratios.erase(std::unique(ratios.begin(), ratios.end()), ratios.end());
  std::unique_ptr<TunedCodec> t(new TunedCodec());
  const size_t end = spec.find_first_of(":+", 5);
  const std::string rest = end == std::string::npos ? "" : spec.substr(end);
  for (double r : ratios) {
    auto c = compression::make_codec(fmt::format("topk:{:g}{}", r, rest));
    if (!c) return c.status().with_context("tune auto's codec at ratio " + ratio_text(r));
    t->codecs_.push_back(std::move(c->codec));
  }
  t->ratios_ = std::move(ratios);
  t->set_ratio(own);
  return t;
}

void TunedCodec::set_ratio(double ratio) {
  for (size_t i = 0; i < ratios_.size(); ++i)
    if (ratios_[i] == ratio) current_ = codecs_[i].get(), ratio_ = ratio;
}

// ------------------------------------------------------------------ the tuner

Tuner::Tuner(peers::Router& router, TuneSettings settings, uint64_t period, TunedCodec* codec)
    : router_(router), settings_(std::move(settings)), codec_(codec) {
  plan_.period = period;
  plan_.ratio = codec ? codec->ratio() : 0.0;
  if (!codec) settings_.ratios = {0.0};
  g_period_.store(static_cast<double>(plan_.period), kRelaxed);
  g_ratio_.store(plan_.ratio, kRelaxed);
  subscription_ =
      router_.subscribe({proto::Kind::kTuneReport}, [this](peers::Incoming& in) { on_report(in); });
}

void Tuner::on_report(peers::Incoming& in) {
  const auto* r = std::get_if<proto::TuneReport>(&in.body);
  if (!r) return;
  // Only the epochs a plan may still need; anything else is stale or made up.
  if (r->epoch + 2 < due_epoch_ || r->epoch > due_epoch_ + 2) return;
  TuneReportIn kept{*r, std::vector<float>(r->samples)};  // the length is checked (message.cc)
  if (r->samples > 0) std::memcpy(kept.samples.data(), in.payload.data(), in.payload.size());
  // A sample with NaN or Inf says nothing of the distance: the report counts without it.
  if (any_nonfinite(kept.samples)) kept.samples.clear();
  reports_[r->epoch][in.peer] = std::move(kept);
}

bool Tuner::before_round(uint64_t round, std::span<const float> model) {
  // The plan's ratio, or the ladder's largest for the probe (also after a failed one).
  if (codec_) codec_->set_ratio(probes(round) ? codec_->ratios().front() : plan_.ratio);
  if (probes(round) && codec_) return false;
  if ((round + 1) % settings_.every != 0 || model.empty()) return probes(round);
  // The same indices on every node: a function of the model's size alone.
  auto payload = std::make_shared<std::vector<std::byte>>(kSamples * sizeof(float));
  sample_model(model, std::span(reinterpret_cast<float*>(payload->data()), kSamples));
  sample_ = std::move(payload);
  return probes(round);
}

void Tuner::round_ran(const RoundSample& s) {
  if (s.round == 0) return;  // connects the ring, waits for every node's first steps
  if (s.probe) {
    probe_s_ = s.seconds, probe_bytes_ = static_cast<double>(s.bytes);
  } else {
    round_s_.push_back(s.seconds);
    bytes_ += static_cast<double>(s.bytes);
  }
  // Per round: a trainer's evaluation or checkpoint between two steps lengthens one
  // interval, which the median leaves out.
  if (s.steps > 0) step_s_.push_back(s.compute_s / static_cast<double>(s.steps));
  if ((s.round + 1) % settings_.every != 0) return;
  due_after_ = s.round + 1;
  send_report(s.round / settings_.every);
}

void Tuner::send_report(uint64_t epoch) {
  // The envelope's round: the sender's next, as for every kind but the chunks.
  const uint64_t next_round = due_after_;
  proto::TuneReport r;
  r.epoch = epoch;
  r.step_s = median(step_s_);
  r.round_s = median(round_s_);
  r.round_bytes = round_s_.empty() ? 0 : bytes_ / static_cast<double>(round_s_.size());
  r.probe_s = probe_s_;
  r.probe_bytes = probe_bytes_;
  TuneReportIn own{r, {}};
  if (sample_) {
    r.samples = own.report.samples = sample_->size() / sizeof(float);
    const auto* v = reinterpret_cast<const float*>(sample_->data());
    own.samples.assign(v, v + r.samples);
    if (any_nonfinite(own.samples)) own.samples.clear();
  }
  reports_[epoch][router_.self()] = std::move(own);
  for (const auto& p : router_.peers()) {
    if (sample_)
      (void)router_.transport().send_shared(p.id, next_round, r, sample_);
    else
      (void)router_.transport().send(p.id, next_round, r);
  }
  due_epoch_ = epoch;
  sample_.reset();
  round_s_.clear();
  step_s_.clear();
  bytes_ = probe_s_ = probe_bytes_ = 0;
}

uint64_t Tuner::next_period(uint64_t round, std::chrono::milliseconds wait,
                            const std::function<void()>& tick) {
  if (round != due_after_) return plan_.period;
  due_after_ = UINT64_MAX;
  const size_t nodes = router_.peers().size() + 1;
  // A peer that withheld its report once is not waited for again until every node
  // reports: it cannot hold every round up by the wait.
  if (missed_) wait = std::chrono::milliseconds(0);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (reports_[due_epoch_].size() < nodes && std::chrono::steady_clock::now() < deadline) tick();
  auto& in = reports_[due_epoch_];
  missed_ = in.size() < nodes;
  if (missed_) {
    spdlog::warn("tune: {} of {} nodes reported epoch {}: the plan stays (period {}, ratio {})",
                 in.size(), nodes, due_epoch_, plan_.period, ratio_text(plan_.ratio));
  } else {
    std::vector<TuneReportIn> all;
    for (const auto& [node, r] : in) all.push_back(r);
    TuneMeasured m = combine(all);
    // The probe was in the first epoch's reports; later plans keep it.
    if (m.probe_s > 0) cluster_probe_s_ = m.probe_s, cluster_probe_bytes_ = m.probe_bytes;
    m.probe_s = cluster_probe_s_, m.probe_bytes = cluster_probe_bytes_;
    TunePlan next = decide(settings_, m, plan_);
    if (next.period != plan_.period || next.ratio != plan_.ratio) {
      std::string change;
      if (next.period != plan_.period)
        change = fmt::format("period {} -> {}", plan_.period, next.period);
      if (next.ratio != plan_.ratio)
        change += fmt::format("{}ratio {} -> {}", change.empty() ? "" : ", ",
                              ratio_text(plan_.ratio), ratio_text(next.ratio));
      spdlog::info("tune: {} from round {}: {}", change, round + 1, next.reason);
      g_plans_.store(g_plans_.load(kRelaxed) + 1, kRelaxed);
    } else {
      spdlog::debug("tune: the plan stays (period {}, ratio {}): {}", next.period,
                    ratio_text(next.ratio), next.reason);
    }
    plan_ = std::move(next);
    if (codec_) codec_->set_ratio(plan_.ratio);
    g_step_.store(m.step_s, kRelaxed);
    g_round_.store(m.round_s, kRelaxed);
    g_consensus_.store(m.consensus, kRelaxed);
  }
  reports_.erase(reports_.begin(), reports_.upper_bound(due_epoch_));
  g_period_.store(static_cast<double>(plan_.period), kRelaxed);
  g_ratio_.store(plan_.ratio, kRelaxed);
  g_wait_.store(plan_.predicted_wait, kRelaxed);
  g_bandwidth_.store(plan_.bandwidth, kRelaxed);
  return plan_.period;
}

std::vector<sgd::Strategy::Gauge> Tuner::gauges() const {
  // Renamed to Prometheus' form (a unit, _total on the counter); the old names go on for
  // one release as aliases.
  return {
      {"gossipd_tune_period_steps", "tune auto: the period it picked (steps between rounds)",
       g_period_.load(kRelaxed), "gauge", "gossipd_tune_period"},
      {"gossipd_tune_topk_ratio",
       "tune auto: the top-k ratio it picked (0: the codec's, not tuned)", g_ratio_.load(kRelaxed),
       "gauge", "gossipd_tune_ratio"},
      {"gossipd_tune_predicted_wait_ratio",
       "tune auto: the fraction of their time the trainers wait for rounds, as it predicts it",
       g_wait_.load(kRelaxed), "gauge", "gossipd_tune_predicted_wait"},
      {"gossipd_tune_step_seconds",
       "tune auto: the slowest node's compute per step, over the last epoch",
       g_step_.load(kRelaxed)},
      {"gossipd_tune_round_seconds",
       "tune auto: the fastest node's median round, over the last epoch", g_round_.load(kRelaxed)},
      {"gossipd_tune_bandwidth_bytes_per_second",
       "tune auto: the bandwidth its cost model took (0: not measured)",
       g_bandwidth_.load(kRelaxed)},
      {"gossipd_tune_changes_total", "tune auto: plans that changed the period or the ratio",
       g_plans_.load(kRelaxed), "counter", "gossipd_tune_changes"},
      {"gossipd_tune_consensus_distance_ratio",
       "tune auto: the replicas' distance from their mean before the last epoch's last round, "
       "relative to its norm, on the sampled parameters",
       g_consensus_.load(kRelaxed), "gauge", "gossipd_tune_consensus_distance"},
  };
}

}  // namespace gossip::daemon
