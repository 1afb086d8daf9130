#include "cli/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

namespace gossip::cli {

namespace fs = std::filesystem;
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
[[noreturn]] void exec_child(char* const* argv, char* const* envp, pid_t parent, int in_fd,
                             int out_fd, int err_fd, int report_fd) {
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
    ::execve(argv[0], argv, envp);
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
  // The environment is built here: after fork only async-signal-safe calls are allowed.
  std::vector<std::string> env_entries;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(
        options.env.begin(), options.env.end(),
        [&](const std::string& o) { return std::string_view(o).substr(0, o.find('=')) == name; });
    if (!replaced) env_entries.emplace_back(entry);
  }
  env_entries.insert(env_entries.end(), options.env.begin(), options.env.end());
  std::vector<char*> envp;
  for (std::string& e : env_entries) envp.push_back(e.data());
  envp.push_back(nullptr);

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
    exec_child(argv.data(), envp.data(), parent, in_fd.get(), out_fd.get(), err,
               report_write.get());
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
    // A process never started (or already reaped) has nothing to wait for.
    for (Process* p : processes) {
      if (p != nullptr && p->running() && !p->poll()) any = true;
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

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
void record_stop_signal(int sig) { g_stop_signal = sig; }
}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = record_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
}

int StopSignals::received() const { return g_stop_signal; }

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

Result<std::string> resolve_program(const std::string& flag_value, std::string_view default_name,
                                    std::string_view flag) {
  std::error_code ec;
  if (flag_value.empty()) {
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec) {
      return Status::io_error(
          fmt::format("cannot resolve /proc/self/exe: {} (pass {} PATH)", ec.message(), flag));
    }
    const std::string candidate = (self.parent_path() / default_name).string();
    if (!is_executable_file(candidate)) {
      return Status::not_found(
          fmt::format("{} not found: {} is not an executable file (build it, or pass {} PATH)",
                      default_name, candidate, flag));
    }
    return candidate;
  }
  if (flag_value.find('/') == std::string::npos) {
    const char* path_env = std::getenv("PATH");
    std::string_view dirs = path_env != nullptr ? path_env : "";
    while (!dirs.empty()) {
      const size_t colon = dirs.find(':');
      std::string_view d = dirs.substr(0, colon);
      dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
      const std::string candidate = fmt::format("{}/{}", d.empty() ? "." : d, flag_value);
      if (is_executable_file(candidate)) return fs::absolute(candidate, ec).string();
    }
    return Status::not_found(fmt::format("{}: {} not found in PATH", flag, flag_value));
  }
  if (!is_executable_file(flag_value)) {
    return Status::not_found(fmt::format("{}: {} is not an executable file", flag, flag_value));
  }
  const fs::path abs = fs::absolute(flag_value, ec);
  return ec ? flag_value : abs.string();
}

}  // namespace gossip::cli
