#pragma once
// The POSIX shared-memory arena that holds a node's model replicas: one slot per
// trainer, each a flat padded replica (see proto::tensor_offsets) of the model's
// dtype. Trainers map only their own slot, so slots start on page boundaries.
//
//   [ header page | slot 0 | slot 1 | ... | slot S-1 ]
//
// The daemon works in fp32. For an fp32 model slot() is the trainer's replica
// itself; for a 16-bit one (bf16, fp16) it is an fp32 copy the daemon owns, which
// pull() fills from the replica when the trainer hands it over and push() rounds
// back into it (to nearest even, as the fp16 and bf16 codecs do) before the
// trainer is answered. A range of either leaves the rest of the replica alone: a
// trainer writes its next gradient bucket while the daemon averages the last.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/layout.h"

namespace gossip::daemon {

struct ArenaHeader {
  static constexpr uint64_t kMagic = 0x414e455241505347ull;  // "GSPARENA"
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint64_t slot_bytes;
  uint64_t numel;  // padded elements per replica
  uint32_t dtype;  // proto::DType of every element (version 2 on)
  uint32_t reserved;
};

class Arena {
 public:
  // "/gossipd-<uid>-<node>-<pid>": unique per daemon process, and tells which
  // process an object left in /dev/shm belonged to.
  static std::string name_for(uint32_t node);
  // Unlinks the arenas of `node` (this uid) whose daemon process no longer exists:
  // what a SIGKILLed daemon leaves behind. An arena whose daemon lives holds a lock (its
  // pid may belong to another PID namespace) and is kept. Returns their names. Called
  // before this process makes its arena: one named with this process's pid is a
  // predecessor's.
  static std::vector<std::string> remove_stale(uint32_t node);

  // Creates /dev/shm<name> with mode 0600 (fails if it exists) and maps it: `slots`
  // replicas of `numel` elements of `dtype`.
  static Result<Arena> create(const std::string& name, uint32_t slots, uint64_t numel,
                              proto::DType dtype = proto::DType::kF32);
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  // Unmaps and unlinks: trainers that still have it mapped keep their mapping.
  ~Arena();

  const std::string& name() const { return name_; }
  uint64_t size_bytes() const { return size_; }
  uint32_t slots() const { return slots_; }
  uint64_t numel() const { return numel_; }
  proto::DType dtype() const { return dtype_; }
  uint64_t slot_offset(uint32_t slot) const;
  // The daemon's fp32 view of the replica in `slot` (see the top of this file).
  std::span<float> slot(uint32_t slot);
  // Elements [offset, offset + numel) of the replica into slot()'s view, and back;
  // nothing to do for an fp32 model. Bounds are the caller's to check.
  void pull(uint32_t slot, uint64_t offset, uint64_t numel);
  void push(uint32_t slot, uint64_t offset, uint64_t numel);
  void pull(uint32_t slot) { pull(slot, 0, numel_); }
  void push(uint32_t slot) { push(slot, 0, numel_); }

  static constexpr uint64_t kPageBytes = 4096;

 private:
  Arena() = default;
  void release();
  std::byte* replica(uint32_t slot) const { return base_ + slot_offset(slot); }
  std::string name_;
  int lock_fd_ = -1;  // the arena's file, locked (flock) while this daemon lives
  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t numel_ = 0;
  uint32_t slots_ = 0;
  proto::DType dtype_ = proto::DType::kF32;
  std::vector<std::vector<float>> views_;  // a 16-bit model's fp32 view of each slot
};

}  // namespace gossip::daemon
