#include "daemon/trainer_sessions.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gossip::daemon {

namespace {
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
}  // namespace

TrainerSessions::~TrainerSessions() {
  for (auto& s : sessions_)
    if (s->pidfd >= 0) ::close(s->pidfd);
}

Result<TrainerSession*> TrainerSessions::add(const std::string& route, const std::string& name,
                                             uint32_t local_rank, pid_t pid, int connection_fd) {
  if (find(route)) return Status::invalid("this connection is already attached");
  if (sessions_.size() >= max_)
    return Status::invalid(fmt::format("node is full: {} trainers attached (max_trainers)", max_));
  if (pid < 0) return Status::invalid(fmt::format("invalid trainer pid {}", pid));
  if (pid == 0 && connection_fd < 0)
    return Status::invalid("the trainer can be watched neither by its pid nor by its connection");
  int fd = -1;
  if (pid > 0 && (fd = open_pidfd(pid)) < 0)
    return Status::invalid(
        fmt::format("cannot watch trainer process {}: {}", pid, std::strerror(errno)));
  uint32_t slot = 0;
  while (std::any_of(sessions_.begin(), sessions_.end(), [&](auto& s) { return s->slot == slot; }))
    ++slot;
  auto s = std::make_unique<TrainerSession>();
  s->route = route;
  s->name = name;
  s->local_rank = local_rank;
  s->pid = pid;
  s->pidfd = fd;
  s->connection_fd = connection_fd;
  s->slot = slot;
  sessions_.push_back(std::move(s));
  return sessions_.back().get();
}

void TrainerSessions::remove(const std::string& route) {
  auto it =
      std::find_if(sessions_.begin(), sessions_.end(), [&](auto& s) { return s->route == route; });
  if (it == sessions_.end()) return;
  if ((*it)->pidfd >= 0) ::close((*it)->pidfd);
  sessions_.erase(it);
}

TrainerSession* TrainerSessions::find(const std::string& route) {
  for (auto& s : sessions_)
    if (s->route == route) return s.get();
  return nullptr;
}

TrainerSession* TrainerSessions::find_unwatched_by_connection(int fd) {
  TrainerSession* found = nullptr;
  for (auto& s : sessions_) {
    if (s->connection_fd != fd || s->pidfd >= 0) continue;
    if (found) return nullptr;  // a reused descriptor: not sure which one ended
    found = s.get();
  }
  return found;
}

TrainerSession* TrainerSessions::find_by_pidfd(int fd) {
  for (auto& s : sessions_)
    if (s->pidfd == fd) return s.get();
  return nullptr;
}

bool TrainerSessions::all_waiting() const {
  return !sessions_.empty() &&
         std::all_of(sessions_.begin(), sessions_.end(), [](auto& s) { return s->waiting; });
}

std::vector<TrainerSession*> TrainerSessions::all() {
  std::vector<TrainerSession*> v;
  for (auto& s : sessions_) v.push_back(s.get());
  return v;
}

}  // namespace gossip::daemon
