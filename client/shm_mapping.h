#pragma once
// A trainer's view of its slot in the daemon's arena (RAII over mmap).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace gossip::client {

class ShmMapping {
 public:
  ShmMapping() = default;
  // Maps [offset, offset + bytes) of the shared-memory object `name`. The offset
  // must be page-aligned; the object must be at least offset + bytes long.
  static Result<ShmMapping> map(const std::string& name, uint64_t offset, uint64_t bytes);
  ShmMapping(ShmMapping&& o) noexcept;
  ShmMapping& operator=(ShmMapping&& o) noexcept;
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  ~ShmMapping();

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace gossip::client
