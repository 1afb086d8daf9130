#pragma once
// A child process owned by gossipctl: spawned with fork/exec, polled without
// blocking, stopped with SIGTERM then SIGKILL, and always reaped. Nothing it
// starts outlives it: the destructor kills and reaps a child that is still running.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gossip::cli {

using Clock = std::chrono::steady_clock;

// How a child ended.
struct ExitStatus {
  int code = 0;         // the exit status; meaningful when signal == 0
  int signal = 0;       // the signal that ended it, 0 when it exited by itself
  bool forced = false;  // gossipctl SIGKILLed it after the SIGTERM grace period ran out

  bool success() const { return signal == 0 && code == 0; }
  // "exited with status 3", "killed by signal 11 (Segmentation fault)", ...
  std::string describe() const;
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path, run as given (no PATH search)
  std::string output_path;        // stdout and stderr go here (truncated); empty: inherited
  std::string stderr_path;        // when set, stderr goes here instead (truncated)
  std::vector<std::string> env = {};  // NAME=VALUE, set over (or added to) gossipctl's own
};

class Process {
 public:
  // Starts the child in a process group of its own (so a terminal's Ctrl-C reaches only
  // gossipctl, which stops the children in order, and signals reach a script's own
  // children too), with stdin from /dev/null, a clean signal mask, and
  // PR_SET_PDEATHSIG(SIGKILL) so it dies even if gossipctl is SIGKILLed.
  // Returns an error naming the program if the log files cannot be opened or exec fails.
  static Result<Process> spawn(const SpawnOptions& options);

  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // a child still running is SIGKILLed (its whole group) and reaped

  pid_t pid() const { return pid_; }
  // True from spawn until the child has been reaped.
  bool running() const { return pid_ > 0 && !exit_.has_value(); }
  const std::optional<ExitStatus>& exit_status() const { return exit_; }

  // Reaps the child if it has exited (waitpid WNOHANG); never blocks. What the child
  // left running in its process group is SIGKILLed just before it is reaped.
  std::optional<ExitStatus> poll();
  // Polls until the child exits or the deadline passes.
  std::optional<ExitStatus> wait_until(Clock::time_point deadline);
  // Sends sig to the child's process group (and to the child itself). No-op once reaped.
  void signal(int sig);
  // SIGTERM, wait up to grace, then SIGKILL and reap (bounded too). Returns how it ended,
  // or nothing if even SIGKILL did not reap it in time (a process stuck in the kernel).
  std::optional<ExitStatus> terminate(std::chrono::milliseconds grace);

 private:
  void kill_and_reap();
  pid_t pid_ = -1;
  std::optional<ExitStatus> exit_;
  bool sigkilled_ = false;  // SIGKILL was sent: the exit status is marked forced
};

// Stops several children at once with one shared grace period: SIGTERM to all that
// still run, wait until all have exited or the grace ends, SIGKILL the rest and reap them.
void terminate_all(std::span<Process* const> processes, std::chrono::milliseconds grace);

// How long a SIGKILLed child is given to be reaped before gossipctl gives up on it.
inline constexpr std::chrono::milliseconds kKillReapTimeout{5000};

// For its lifetime, SIGINT and SIGTERM set a flag that every wait loop checks (so a
// Ctrl-C stops the children in order instead of killing gossipctl), and SIGPIPE is
// ignored. The previous dispositions come back in the destructor.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int received() const;  // the signal received, 0 while none

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_pipe_ {};
};

bool is_executable_file(const std::string& path);

// The flag's value (a path, or a bare name looked up in PATH), or default_name beside
// gossipctl's own executable.
Result<std::string> resolve_program(const std::string& flag_value, std::string_view default_name,
                                    std::string_view flag);

}  // namespace gossip::cli
