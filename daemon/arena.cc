#include "daemon/arena.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "compression/half_arrays.h"

namespace gossip::daemon {

std::string Arena::name_for(uint32_t node) {
  // 64 random bits: another local user cannot guess the name and create it first
  // (shm_open with O_EXCL would then fail, and the trainers could not attach).
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != sizeof nonce)
    nonce = static_cast<uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull ^
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format("/gossipd-{}-{}-{}-{:016x}", ::getuid(), node, ::getpid(), nonce);
}

std::vector<std::string> Arena::remove_stale(uint32_t node) {
  std::vector<std::string> removed;
  const std::string prefix = fmt::format("gossipd-{}-{}-", ::getuid(), node);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string file = e.path().filename().string();
    if (!file.starts_with(prefix)) continue;
    pid_t pid = 0;
    auto digits = std::string_view(file).substr(prefix.size());
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    // "<pid>" (older daemons) or "<pid>-<nonce>".
    const bool whole = end == digits.data() + digits.size() || *end == '-';
    if (err != std::errc() || !whole || pid <= 0) continue;
    // A live daemon holds a lock on its arena (create() below): its pid says nothing
    // where it runs in another PID namespace (a container sharing /dev/shm, unshare),
    // in which a live daemon's pid may not exist here or be this process's own. Only an
    // arena nobody holds is stale. Opened without following a link, and only this uid's:
    // anyone can make a file of this name in /dev/shm.
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    const bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::getuid();
    const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    ::close(fd);
    if (!ours || held) continue;
    // Unlocked: its daemon is gone, or it is an older daemon's, which took no lock and
    // is judged by its pid. Our own pid is a predecessor's: this daemon has made no
    // arena yet, and in a container every daemon is pid 1, so one killed there left an
    // arena with our pid.
    if (pid != ::getpid() && (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
    if (::shm_unlink(("/" + file).c_str()) == 0) removed.push_back("/" + file);
  }
  return removed;
}

Result<Arena> Arena::create(const std::string& name, uint32_t slots, uint64_t numel,
                            proto::DType dtype) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos)
    return Status::invalid(
        fmt::format("arena name '{}' must be '/' followed by a file name", name));
  if (slots == 0 || numel == 0) return Status::invalid("arena needs at least one slot and element");
  const uint64_t element = proto::dtype_size(dtype);
  uint64_t slot_bytes = (numel * element + kPageBytes - 1) / kPageBytes * kPageBytes;
  uint64_t size = kPageBytes + slot_bytes * slots;

  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return Status::io_error(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)));
  // The umask may have narrowed the mode further, never widened it; set it exactly.
  ::fchmod(fd, 0600);
  // Held for the arena's life, and released by the kernel when this process dies however
  // it dies: how remove_stale tells a live daemon's arena from a dead one's. (A fresh
  // file, O_EXCL: nobody else can hold it.)
  ::flock(fd, LOCK_EX | LOCK_NB);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Status::io_error(
        fmt::format("cannot size arena {} to {} bytes: {}", name, size, std::strerror(err)));
  }
  // Reserve the pages now: on a full /dev/shm the first touch of an unreserved page
  // would kill the daemon with SIGBUS; this fails here, with a reason.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Status::io_error(fmt::format(
        "cannot reserve {} MiB of shared memory for the arena {}: {} (is /dev/shm full or too "
        "small? see df /dev/shm; in a container, raise --shm-size)",
        (size + (1 << 20) - 1) >> 20, name, std::strerror(err)));
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  if (p == MAP_FAILED) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Status::io_error(fmt::format("cannot map arena {}: {}", name, std::strerror(err)));
  }
  Arena a;
  a.lock_fd_ = fd;  // keeps the lock
  a.name_ = name;
  a.base_ = static_cast<std::byte*>(p);
  a.size_ = size;
  a.slot_bytes_ = slot_bytes;
  a.numel_ = numel;
  a.slots_ = slots;
  a.dtype_ = dtype;
  if (dtype != proto::DType::kF32) a.views_.resize(slots);  // each made at its first use
  auto* h = reinterpret_cast<ArenaHeader*>(a.base_);
  *h = ArenaHeader{ArenaHeader::kMagic,          2, slots, slot_bytes, numel,
                   static_cast<uint32_t>(dtype), 0};
  return a;
}

Arena::Arena(Arena&& o) noexcept { *this = std::move(o); }

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::exchange(o.name_, {});
    base_ = std::exchange(o.base_, nullptr);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
    size_ = std::exchange(o.size_, 0);
    slot_bytes_ = o.slot_bytes_;
    numel_ = o.numel_;
    slots_ = o.slots_;
    dtype_ = o.dtype_;
    views_ = std::move(o.views_);
  }
  return *this;
}

Arena::~Arena() { release(); }

void Arena::release() {
  if (!base_) return;
  ::munmap(base_, size_);
  ::shm_unlink(name_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  base_ = nullptr;
}

uint64_t Arena::slot_offset(uint32_t slot) const { return kPageBytes + slot * slot_bytes_; }

std::span<float> Arena::slot(uint32_t slot) {
  if (dtype_ == proto::DType::kF32) return {reinterpret_cast<float*>(replica(slot)), numel_};
  if (views_[slot].empty()) views_[slot].assign(numel_, 0.0f);
  return views_[slot];
}

void Arena::pull(uint32_t slot, uint64_t offset, uint64_t numel) {
  if (dtype_ == proto::DType::kF32) return;
  const auto dst = this->slot(slot).subspan(offset, numel);
  const std::byte* src = replica(slot) + 2 * offset;
  if (dtype_ == proto::DType::kBF16)
    compression::bf16_to_fp32(src, dst);
  else
    compression::fp16_to_fp32(src, dst);
}

void Arena::push(uint32_t slot, uint64_t offset, uint64_t numel) {
  if (dtype_ == proto::DType::kF32) return;
  const auto src = std::span<const float>(this->slot(slot)).subspan(offset, numel);
  std::byte* dst = replica(slot) + 2 * offset;
  if (dtype_ == proto::DType::kBF16)
    compression::fp32_to_bf16(src, dst);
  else
    compression::fp32_to_fp16(src, dst);
}

}  // namespace gossip::daemon
