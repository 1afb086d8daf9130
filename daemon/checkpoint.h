#pragma once
// A node's checkpoint: its model and its strategy's state after a completed round,
// so that a node (or a whole cluster) stopped on purpose resumes where it was.
//
// File: "GSPCKPT1", a little-endian u64 header length, a msgpack header {node,
// strategy, layout, round, step, numel, tensors: [[name, numel]..], scalars: {name:
// f64}, and, where nodes joined by seeds, members: [[id, endpoint, first round]..],
// and where members were forgotten (gossipctl forget), forgotten: [id..]},
// the model and then each state tensor as raw fp32, and a CRC-32 (zlib) of
// everything before it. Written to a temporary file, synced and renamed over the old
// one, so a crash at any moment leaves the old checkpoint or the new one.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sgd/strategy.h"

namespace gossip::daemon {

struct Checkpoint {
  uint32_t node = 0;
  std::string strategy;
  uint64_t layout = 0;  // fingerprint of the model's layout
  uint64_t round = 0;   // the next round to run
  uint64_t step = 0;    // the trainers' step at that round
  std::vector<float> model;
  sgd::StrategyState state;
  // The nodes that joined by seeds as this node knew them (daemon/admission.h): it
  // knows them again after a restart, even one of every member that knew them.
  struct Member {
    uint32_t id = 0;
    std::string endpoint;
    uint64_t first_round = 0;     // the gossip family's schedule; 0: none
    std::string public_key = {};  // under CURVE (Z85)
  };
  std::vector<Member> members;
  // The members forgotten for good (gossipctl forget): they no longer count toward the
  // majority after a restart from this checkpoint either.
  std::vector<uint32_t> forgotten;
};
inline constexpr size_t kMaxCheckpointMembers = 4096;

Status write_checkpoint(const std::string& path, const Checkpoint& c);
// Errors name the file and what is wrong with it (truncated, bad CRC, sizes).
// A missing file is Status::not_found.
Result<Checkpoint> read_checkpoint(const std::string& path);
// The strategy state's tensors by name with the CRC-32 of their bytes, for the log
// lines of a checkpoint written and of a state restored, so that the two can be
// compared ("local_sgd.momentum 235152 crc 1a2b3c4d, ...").
std::string describe_state(const sgd::StrategyState& state);

}  // namespace gossip::daemon
