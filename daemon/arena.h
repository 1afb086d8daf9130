#pragma once
// The POSIX shared-memory arena that holds a node's model replicas: one slot per
// trainer, each a flat padded replica (see proto::tensor_offsets). Trainers map
// only their own slot, so slots start on page boundaries.
//
//   [ header page | slot 0 | slot 1 | ... | slot S-1 ]

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace gossip::daemon {

struct ArenaHeader {
  static constexpr uint64_t kMagic = 0x414e455241505347ull;  // "GSPARENA"
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint64_t slot_bytes;
  uint64_t numel;  // padded elements per replica
};

class Arena {
 public:
  // "/gossipd-<uid>-<node>-<pid>": unique per daemon process, and tells which
  // process an object left in /dev/shm belonged to.
  static std::string name_for(uint32_t node);
  // Unlinks the arenas of `node` (this uid) whose daemon process no longer exists:
  // what a SIGKILLed daemon leaves behind. Returns their names. Called before this
  // process makes its arena: one named with this process's pid is a predecessor's.
  static std::vector<std::string> remove_stale(uint32_t node);

  // Creates /dev/shm<name> with mode 0600 (fails if it exists) and maps it.
  static Result<Arena> create(const std::string& name, uint32_t slots, uint64_t numel);
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
  uint64_t slot_offset(uint32_t slot) const;
  std::span<float> slot(uint32_t slot);

  static constexpr uint64_t kPageBytes = 4096;

 private:
  Arena() = default;
  void release();
  std::string name_;
  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t numel_ = 0;
  uint32_t slots_ = 0;
};

}  // namespace gossip::daemon
