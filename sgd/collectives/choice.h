#pragma once
// What --allreduce-algorithm auto runs, by rank count and buffer size, as MPI
// libraries and NCCL pick: a table of rows "up to R ranks and B bytes: algorithm",
// the first row that bounds both wins, and the ring where none does. The built-in
// table was measured on the reference machine with bench/allreduce.sh (see
// bench/allreduce/README.md); `bench/allreduce.sh --write-table FILE` measures one
// for another machine, which --allreduce-table reads. Every node must hold the same
// table: a node that picks another algorithm fails the round on its first message,
// whose tag names the algorithm (sgd/collectives/mesh_wire.h).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "sgd/collectives/algorithm.h"

namespace gossip::sgd {

struct ChoiceRow {
  uint32_t max_ranks = 0;
  uint64_t max_bytes = 0;
  Algorithm algorithm = Algorithm::kRing;
};

class AlgorithmTable {
 public:
  AlgorithmTable() = default;
  explicit AlgorithmTable(std::vector<ChoiceRow> rows) : rows_(std::move(rows)) {}
  // The built-in table.
  static AlgorithmTable measured();
  // One row per line, "RANKS BYTES ALGORITHM" (BYTES may end in K, M or G); '#'
  // starts a comment. `source` names the text in errors.
  static Result<AlgorithmTable> parse(std::string_view text, std::string_view source);

  Algorithm choose(uint32_t ranks, uint64_t bytes) const;
  const std::vector<ChoiceRow>& rows() const { return rows_; }
  std::string text() const;  // what parse() reads back to an equal table

 private:
  std::vector<ChoiceRow> rows_;
};

}  // namespace gossip::sgd
