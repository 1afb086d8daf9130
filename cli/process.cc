#include "cli/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>
#include <utility>

namespace gossip::cli {
namespace {

constexpr std::chrono::milliseconds kPollInterval{10};

// Closes a file descriptor when it goes out of scope.
class FdGuard {
 public:
  explicit FdGuard(int fd = -1) : fd_(fd) {}
  ~FdGuard() { reset(); }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

Result<int> open_output(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error(fmt::format("open {}: {}", path, std::strerror(errno)));
  return fd;
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(char* const* argv, pid_t parent, int in_fd, int out_fd, int err_fd,
                             int report_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect

  // Handlers are reset by exec, but ignored signals and the mask are inherited.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  if (::dup2(in_fd, STDIN_FILENO) >= 0 && (out_fd < 0 || ::dup2(out_fd, STDOUT_FILENO) >= 0) &&
      (err_fd < 0 || ::dup2(err_fd, STDERR_FILENO) >= 0)) {
    ::execv(argv[0], argv);
  }
  int err = errno;
  ssize_t ignored = ::write(report_fd, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

ExitStatus from_wait_status(int st) {
  ExitStatus e;
  if (WIFEXITED(st)) {
    e.code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    e.signal = WTERMSIG(st);
  } else {
    e.code = -1;
  }
  return e;
}

}  // namespace

std::string ExitStatus::describe() const {
  if (forced && signal == SIGKILL) return "did not exit on SIGTERM in time; SIGKILLed by gossipctl";
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, ::strsignal(signal));
  if (code < 0) return "ended with an unknown status";
  return fmt::format("exited with status {}", code);
}

Result<Process> Process::spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return Status::invalid("spawn: empty command line");
  }
  const std::string& program = options.argv[0];
  std::vector<char*> argv;
  argv.reserve(options.argv.size() + 1);
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  FdGuard in_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (in_fd.get() < 0) {
    return Status::io_error(fmt::format("open /dev/null: {}", std::strerror(errno)));
  }
  FdGuard out_fd, err_fd;
  if (!options.output_path.empty()) {
    auto fd = open_output(options.output_path);
    if (!fd) return fd.status();
    out_fd.reset(*fd);
  }
  if (!options.stderr_path.empty()) {
    auto fd = open_output(options.stderr_path);
    if (!fd) return fd.status();
    err_fd.reset(*fd);
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    return Status::io_error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  FdGuard report_read(report[0]), report_write(report[1]);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    return Status::io_error(fmt::format("fork for {}: {}", program, std::strerror(errno)));
  }
  if (pid == 0) {
    const int err = err_fd.get() >= 0 ? err_fd.get() : out_fd.get();
    exec_child(argv.data(), parent, in_fd.get(), out_fd.get(), err, report_write.get());
  }
  // Also here, so the group exists before spawn returns whichever side runs first
  // (EACCES once the child has exec'd is harmless).
  ::setpgid(pid, pid);
  report_write.reset();

  Process p;
  p.pid_ = pid;
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    p.wait_until(Clock::now() + kKillReapTimeout);  // it _exits at once
    return Status::io_error(fmt::format("exec {}: {}", program, std::strerror(child_errno)));
  }
  return p;
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exit_(std::move(other.exit_)),
      sigkilled_(other.sigkilled_) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    exit_ = std::move(other.exit_);
    sigkilled_ = other.sigkilled_;
  }
  return *this;
}

Process::~Process() { kill_and_reap(); }

std::optional<ExitStatus> Process::poll() {
  if (!running()) return exit_;
  // Peek first (WNOWAIT): while the child is an unreaped zombie its pid cannot be
  // reused, so sweeping its process group here can only hit what it left behind.
  siginfo_t info{};
  int r;
  do {
    r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (r < 0 && errno == EINTR);
  if (r == 0 && info.si_pid == 0) return std::nullopt;  // still running
  if (r == 0) ::kill(-pid_, SIGKILL);

  int st = 0;
  pid_t w;
  do {
    w = ::waitpid(pid_, &st, WNOHANG);
  } while (w < 0 && errno == EINTR);
  if (w == 0) return std::nullopt;
  ExitStatus e = w == pid_ ? from_wait_status(st) : ExitStatus{.code = -1};
  e.forced = sigkilled_;
  exit_ = e;
  return exit_;
}

std::optional<ExitStatus> Process::wait_until(Clock::time_point deadline) {
  if (pid_ <= 0) return exit_;  // never started: there is nothing to wait for
  for (;;) {
    if (auto e = poll()) return e;
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::min<Clock::duration>(kPollInterval, deadline - now));
  }
}

void Process::signal(int sig) {
  if (!running()) return;
  if (sig == SIGKILL) sigkilled_ = true;
  // The group normally holds the child and its own children; if the child left the
  // group, signal it directly.
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
}

std::optional<ExitStatus> Process::terminate(std::chrono::milliseconds grace) {
  Process* self = this;
  terminate_all(std::span<Process* const>(&self, 1), grace);
  return exit_;
}

void Process::kill_and_reap() {
  if (!running()) return;
  signal(SIGKILL);
  wait_until(Clock::now() + kKillReapTimeout);
}

void terminate_all(std::span<Process* const> processes, std::chrono::milliseconds grace) {
  auto any_running = [&] {
    bool any = false;
    for (Process* p : processes) {
      if (p != nullptr && !p->poll()) any = true;
    }
    return any;
  };
  auto wait_all = [&](Clock::time_point deadline) {
    while (any_running() && Clock::now() < deadline) std::this_thread::sleep_for(kPollInterval);
  };
  if (!any_running()) return;
  for (Process* p : processes) {
    if (p != nullptr) p->signal(SIGTERM);
  }
  wait_all(Clock::now() + grace);
  if (!any_running()) return;
  for (Process* p : processes) {
    if (p != nullptr) p->signal(SIGKILL);
  }
  wait_all(Clock::now() + kKillReapTimeout);
}

}  // namespace gossip::cli
