#pragma once
// Notices a run that diverged, by two signs. The model: each round's synchronized
// model is measured (its L2 norm, one pass over it), and a norm past kDivergenceFactor
// times the norm after the node's first round is divergence. A model that trains moves
// its norm by a small factor (the reference MLP: 28 at the start, 27 after 600 steps);
// one whose steps are too large grows it without bound (the same MLP under the
// servers' momentum on top of the trainers': 136 at step 30, 339 at step 60, at chance
// accuracy). The loss, where the trainers report it (Client::report_loss): a NaN or an
// Inf at once, and kLossHighReports reports in a row past kDivergenceFactor times the
// first one. The first loss is the untrained model's, the highest a run that learns
// sees; in a row, so that one bad batch of a model resumed near its optimum is not
// taken for divergence. It also covers the strategies that average gradients, whose
// model the daemon does not hold.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace gossip::daemon {

inline constexpr double kDivergenceFactor = 10.0;
inline constexpr int kLossHighReports = 3;
// Models up to this many parameters are measured after every round, larger ones after
// every 16th (a pass over 4 GB of fp32 is not free).
inline constexpr size_t kDivergenceEveryRoundNumel = size_t{64} << 20;

class DivergenceWatch {
 public:
  // Measures the model after `round`; the reason, once, when it has diverged.
  std::optional<std::string> observe(std::span<const float> model, uint64_t round);
  // A trainer's mean training loss since its last sync, at `step`; the reason, once.
  std::optional<std::string> observe_loss(double loss, uint64_t step);
  double norm() const { return norm_; }  // of the last model observed; 0 before
  double loss() const { return loss_; }  // the last loss reported; 0 before
  bool diverged() const { return !reason_.empty(); }
  const std::string& reason() const { return reason_; }
  // What the daemon knows of the likely cause, after the reason.
  void add_cause(const std::string& cause) { reason_ += cause; }

 private:
  double first_ = 0;  // the norm after the first round observed (0: none yet)
  double norm_ = 0;
  double first_loss_ = 0;  // the first finite, positive loss reported (0: none yet)
  double loss_ = 0;
  int high_ = 0;  // reports in a row past kDivergenceFactor * first_loss_
  std::string reason_;
};

}  // namespace gossip::daemon
