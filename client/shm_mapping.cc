#include "client/shm_mapping.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace gossip::client {

Result<ShmMapping> ShmMapping::map(const std::string& name, uint64_t offset, uint64_t bytes) {
  if (offset % static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) != 0)
    return Status::protocol(fmt::format("arena slot offset {} is not page-aligned", offset));
  int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    return Status::io_error(fmt::format("cannot open arena {}: {}", name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < offset + bytes) {
    ::close(fd);
    return Status::protocol(fmt::format("arena {} is {} bytes, smaller than slot end {}", name,
                                        static_cast<uint64_t>(st.st_size), offset + bytes));
  }
  void* p =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    return Status::io_error(fmt::format("cannot map arena {}: {}", name, std::strerror(err)));
  ShmMapping m;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  return m;
}

ShmMapping::ShmMapping(ShmMapping&& o) noexcept { *this = std::move(o); }

ShmMapping& ShmMapping::operator=(ShmMapping&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

ShmMapping::~ShmMapping() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace gossip::client
