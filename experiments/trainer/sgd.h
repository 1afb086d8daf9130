#pragma once
// Minibatch SGD with momentum and L2 weight decay, PyTorch's torch.optim.SGD update:
//   g <- g + weight_decay * x;  v <- momentum * v + g;  x <- x - lr * v
// The momentum buffers are this trainer's own: after a synchronization round replaces
// x with a (partial) average, each node keeps its own v.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::trainer {

struct SgdOptions {
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
};

// Learning-rate schedules over a run of `total` steps. Cosine (Loshchilov & Hutter 2017,
// without restarts) decays lr to 0 at the last step: the late, small steps average out
// the minibatch noise that a constant rate leaves in the model.
enum class LrSchedule { kConstant, kCosine };

// Parses "constant" or "cosine"; the error names --lr-schedule and the valid values.
Result<LrSchedule> parse_lr_schedule(std::string_view text);
const char* lr_schedule_name(LrSchedule schedule);

// The rate of step `step` (0-based) of `total`.
float scheduled_lr(float base, LrSchedule schedule, uint64_t step, uint64_t total);

class MomentumSgd {
 public:
  // One momentum buffer (zeroed) per tensor of these sizes.
  MomentumSgd(const std::vector<size_t>& sizes, SgdOptions options);

  // Updates `parameters` in place from `gradients` (same sizes as at construction);
  // lr overrides options.lr for this step (schedules).
  void step(const std::vector<std::span<float>>& parameters,
            const std::vector<std::span<float>>& gradients, float lr);
  void step(const std::vector<std::span<float>>& parameters,
            const std::vector<std::span<float>>& gradients) {
    step(parameters, gradients, options_.lr);
  }

  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<std::vector<float>> velocity_;
};

}  // namespace gossip::trainer
