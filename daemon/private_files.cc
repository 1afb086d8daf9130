#include "daemon/private_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace gossip::daemon {
namespace {

std::string error_text() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// A file descriptor closed on every path out.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool owned_by_us_or_root(const struct stat& st) {
  return st.st_uid == ::geteuid() || st.st_uid == 0;
}

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::io_error(fmt::format("writing {}: {}", path, error_text()));
    }
    off += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

Status check_private_dir(const std::string& dir, std::string_view what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return Status::invalid(fmt::format("{} {}: {}", what, dir, error_text()));
  if (!S_ISDIR(st.st_mode))
    return Status::invalid(fmt::format("{} {} is not a directory", what, dir));
  if (!owned_by_us_or_root(st))
    return Status::invalid(fmt::format(
        "{} {} belongs to uid {}, not to this user (uid {}) or root: its owner could plant "
        "files there for gossipd to read or follow; use a directory of this user's",
        what, dir, st.st_uid, ::geteuid()));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Status::invalid(fmt::format(
        "{} {} is writable by other users (mode {:04o}): one of them could plant a file or a "
        "link at a name gossipd reads or writes; use a directory only this user can write "
        "(chmod go-w {})",
        what, dir, st.st_mode & 07777, dir));
  return Status::ok();
}

Status write_file_atomically(const std::string& path, std::string_view bytes, int mode) {
  const std::string dir = directory_of(path);
  const std::string name = std::filesystem::path(path).filename().string();
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.fd < 0)
    return Status::io_error(fmt::format("opening directory {}: {}", dir, error_text()));
  // A random name, created exclusively and never through a link: what another process
  // planted at any name is left alone (EEXIST, and another name is drawn).
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    uint64_t r = 0;
    if (::getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r))
      return Status::io_error(fmt::format("getrandom: {}", error_text()));
    tmp = fmt::format(".{}.tmp.{:016x}", name, r);
    fd = ::openat(dfd.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST)
      return Status::io_error(fmt::format("creating {}/{}: {}", dir, tmp, error_text()));
  }
  if (fd < 0)
    return Status::io_error(fmt::format("creating a temporary file in {}: 16 names taken", dir));
  Status st = write_all(fd, bytes, dir + "/" + tmp);
  if (st && ::fsync(fd) != 0)
    st = Status::io_error(fmt::format("fsync {}/{}: {}", dir, tmp, error_text()));
  ::close(fd);
  // renameat replaces a link at `name` itself; it never writes through it.
  if (st && ::renameat(dfd.fd, tmp.c_str(), dfd.fd, name.c_str()) != 0)
    st = Status::io_error(fmt::format("renaming {}/{} to {}: {}", dir, tmp, path, error_text()));
  if (!st) {
    ::unlinkat(dfd.fd, tmp.c_str(), 0);
    return st;
  }
  // The rename itself must reach the disk for the new file to survive a power cut.
  (void)::fsync(dfd.fd);
  return Status::ok();
}

Result<std::string> read_private_file(const std::string& path, std::string_view what) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (fd.fd < 0) {
    if (errno == ENOENT) return Status::not_found(fmt::format("no {} at {}", what, path));
    if (errno == ELOOP)
      return Status::invalid(
          fmt::format("{} {} is a symbolic link: gossipd opens only the file "
                      "itself (a link may have been planted)",
                      what, path));
    return Status::io_error(fmt::format("cannot read {} {}: {}", what, path, error_text()));
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    return Status::io_error(fmt::format("fstat {}: {}", path, error_text()));
  if (!S_ISREG(st.st_mode))
    return Status::invalid(fmt::format("{} {} is not a regular file", what, path));
  if (!owned_by_us_or_root(st))
    return Status::invalid(fmt::format(
        "{} {} belongs to uid {}, not to this user (uid {}) or root: refusing to resume from a "
        "file another user may have written",
        what, path, st.st_uid, ::geteuid()));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(fmt::format("reading {}: {}", path, error_text()));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace gossip::daemon
