#pragma once
// The trainers attached to this node: which arena slot each one trains in, which
// process it is (the IPC connection's SO_PEERCRED, watched through a pidfd so a crash
// is noticed at once; or, for a process in a PID namespace this daemon cannot see,
// through its connection), and whether it is waiting at a synchronization point.

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/ipc.h"

namespace gossip::daemon {

struct TrainerSession {
  std::string route;  // ZeroMQ routing id of the trainer's socket
  std::string name;
  uint32_t local_rank = 0;
  pid_t pid = 0;           // in this daemon's PID namespace; 0: not visible from it
  int pidfd = -1;          // readable once the process has exited; -1 when pid is 0
  int connection_fd = -1;  // the IPC connection (libzmq's), closed when the process ends
  uint32_t slot = 0;
  bool waiting = false;  // blocked in a Sync until the round completes
  uint64_t sync_step = 0;
  bool sync_whole = false;  // its Sync asks for the whole model (ipc::Sync::whole)
  // Gradient buckets handed in (SyncRange) and not answered yet, oldest first.
  std::deque<proto::ipc::SyncRange> buckets;
};

class TrainerSessions {
 public:
  explicit TrainerSessions(uint32_t max_trainers) : max_(max_trainers) {}
  ~TrainerSessions();
  TrainerSessions(const TrainerSessions&) = delete;
  TrainerSessions& operator=(const TrainerSessions&) = delete;

  // Takes the lowest free slot. Fails if the node is full, the route is already
  // attached, or the process cannot be watched (e.g. it no longer exists). pid 0: the
  // process is watched through its connection only.
  Result<TrainerSession*> add(const std::string& route, const std::string& name,
                              uint32_t local_rank, pid_t pid, int connection_fd);
  void remove(const std::string& route);
  TrainerSession* find(const std::string& route);
  TrainerSession* find_by_pidfd(int fd);
  // The session on connection `fd` that only its connection watches, if exactly one is.
  TrainerSession* find_unwatched_by_connection(int fd);

  bool empty() const { return sessions_.empty(); }
  size_t size() const { return sessions_.size(); }
  // True when at least one trainer is attached and every attached one is waiting.
  bool all_waiting() const;
  std::vector<TrainerSession*> all();

 private:
  uint32_t max_;
  std::vector<std::unique_ptr<TrainerSession>> sessions_;
};

}  // namespace gossip::daemon
