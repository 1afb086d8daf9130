#pragma once
// Local SGD: trainers take T local steps, then the nodes average their models.
// Optionally an outer optimizer treats the averaged change since the previous
// synchronization as a pseudo-gradient (DiLoCo, Douillard et al. 2023: outer
// Nesterov momentum; "none" with lr 1 is plain model averaging).

#include <span>
#include <string>
#include <vector>

#include "proto/status.h"
#include "sgd/all_reduce.h"

namespace gossip::sgd {

struct OuterOptimizer {
  enum class Kind { kNone, kNesterov };
  Kind kind = Kind::kNone;
  double lr = 1.0;
  double momentum = 0.9;
};
Result<OuterOptimizer::Kind> parse_outer_kind(const std::string& name);

class LocalSgd {
 public:
  LocalSgd(AllReduce& all_reduce, OuterOptimizer outer);

  // In place: model <- the synchronized model of round `round`. The first round is
  // plain averaging (it defines the common starting point x_prev).
  Status synchronize(std::span<float> model, uint64_t round, const CollectiveOptions& options);

 private:
  bool plain() const { return outer_.kind == OuterOptimizer::Kind::kNone && outer_.lr == 1.0; }

  AllReduce& all_reduce_;
  OuterOptimizer outer_;
  std::vector<float> previous_;  // x_prev: the model after the last synchronization
  std::vector<float> momentum_;  // outer Nesterov buffer
};

}  // namespace gossip::sgd
