#pragma once
// Helpers for the gossipctl tests: a temporary directory, stand-in scripts for gossipd
// and gossip-train, running a program with a deadline, and "is anything left running?".

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/process.h"

namespace gossip::cli::testing {

// A fresh directory under /tmp (short, so IPC socket paths fit), removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/gossipctl-test-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_executable(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  ::chmod(path.c_str(), 0755);
}

// True while pid names a live process (a zombie counts as gone: it runs nothing).
inline bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;  // gone meanwhile
  return text[paren + 2] != 'Z';
}

// Waits up to timeout for pid to be gone.
inline bool wait_gone(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (process_alive(pid)) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Live processes (not zombies) whose command line mentions needle.
inline std::vector<std::string> processes_mentioning(const std::string& needle) {
  std::vector<std::string> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* e = ::readdir(proc)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file("/proc/" + name + "/cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(needle) != std::string::npos && process_alive(std::stoi(name))) {
      found.push_back(name + ": " + cmdline);
    }
  }
  ::closedir(proc);
  return found;
}

// The pids that the stand-in scripts recorded in dir (files pid-*).
inline std::vector<pid_t> recorded_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("pid-", 0) != 0) continue;
    const std::string text = read_file(entry.path().string());
    if (!text.empty()) pids.push_back(static_cast<pid_t>(std::stol(text)));
  }
  return pids;
}

struct RunResult {
  int exit_code = -1;  // -1: killed or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
  double seconds = 0;
};

// Runs argv (stdout and stderr captured in dir) and waits at most timeout; a program
// still running then is killed and the result says timed_out.
inline RunResult run_program(const std::vector<std::string>& argv, const std::string& dir,
                             std::chrono::seconds timeout = std::chrono::seconds(60)) {
  RunResult r;
  const std::string out_path = dir + "/run.stdout", err_path = dir + "/run.stderr";
  const auto start = std::chrono::steady_clock::now();
  auto p = Process::spawn(SpawnOptions{argv, out_path, err_path});
  if (!p) {
    r.err = p.status().message();
    return r;
  }
  auto e = p->wait_until(start + timeout);
  if (!e) {
    r.timed_out = true;
    p->terminate(std::chrono::milliseconds(2000));
  } else if (e->signal == 0) {
    r.exit_code = e->code;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// Stand-in for gossipd: records its pid and arguments, creates its socket file, runs
// until SIGTERM/SIGINT (exit 0). Behaviour switches come from the environment:
//   FAKE_DAEMON_IGNORE_TERM=1     ignore SIGTERM and SIGINT
//   FAKE_DAEMON_NO_SOCKET=1       never create the socket
//   FAKE_DAEMON_CRASH_NODE=I      node I exits with status 7 once its trainer has written a row
//   FAKE_PORT_TAKEN_NODE=I        node I's first start fails as gossipd does when its port
//                                 was taken (exit 1, "Address already in use")
inline constexpr const char* kFakeDaemon = R"SH(#!/bin/bash
echo "fake-gossipd $*" >&2
id=; dir=; listen=
while [ $# -gt 0 ]; do
  case "$1" in --id) id=$2; shift;; --run-dir) dir=$2; shift;; --listen) listen=$2; shift;; esac
  shift
done
echo "$listen" >> "$dir/listened-$id"
if [ "$id" = "${FAKE_PORT_TAKEN_NODE:-none}" ] && [ ! -e "$dir/port-taken-$id" ]; then
  touch "$dir/port-taken-$id"
  echo "gossipd $id: error: cannot listen on $listen: Address already in use" >&2
  exit 1
fi
echo $$ > "$dir/pid-gossipd-$id"
if [ -n "$FAKE_DAEMON_IGNORE_TERM" ]; then trap '' TERM INT; else trap 'echo "gossipd $id stopping" >&2; exit 0' TERM INT; fi
[ -n "$FAKE_DAEMON_NO_SOCKET" ] || touch "$dir/gossipd-$id.sock"
while :; do
  sleep 0.05
  if [ "$id" = "${FAKE_DAEMON_CRASH_NODE:-none}" ] && [ "$(wc -l 2>/dev/null < "$dir/node-$id.csv")" -ge 2 ] 2>/dev/null; then
    echo "gossipd $id: fatal: simulated crash" >&2
    exit 7
  fi
done
)SH";

// Stand-in for gossip-train: checks its daemon's socket exists, writes a CSV row every
// --eval-every steps (sleeping FAKE_STEP_SLEEP between rows, default 0.01 s) and the
// result file, exits 0. Switches:
//   FAKE_FAIL_NODE=I      node I prints "node I: simulated failure" and exits 3 halfway
//   FAKE_HANG_NODE=I      node I ignores SIGTERM and never finishes
//   FAKE_NO_RESULT_NODE=I node I exits 0 without writing its result
inline constexpr const char* kFakeTrainer = R"SH(#!/bin/bash
echo "fake-trainer $*"
node=; nodes=; steps=; csv=; result=; every=; endpoint=
while [ $# -gt 0 ]; do
  case "$1" in
    --node) node=$2; shift;; --nodes) nodes=$2; shift;; --steps) steps=$2; shift;;
    --csv) csv=$2; shift;; --result) result=$2; shift;; --eval-every) every=$2; shift;;
    --endpoint) endpoint=$2; shift;;
  esac
  shift
done
dir=$(dirname "$csv")
echo $$ > "$dir/pid-trainer-$node"
sock=${endpoint#ipc://}
[ -e "$sock" ] || { echo "trainer $node: cannot connect to $endpoint"; exit 5; }
if [ "$node" = "${FAKE_HANG_NODE:-none}" ]; then
  trap '' TERM INT
  while :; do sleep 0.05; done
fi
echo "step,wall_seconds,loss,test_accuracy,payload_sent,payload_recv,wire_sent,wire_recv" > "$csv"
for s in $(seq "$every" "$every" "$steps"); do
  echo "$s,0.5,0.4,0.75,$((s * 10)),$((s * 10)),$((s * 20)),$((s * 20))" >> "$csv"
  if [ "$node" = "${FAKE_FAIL_NODE:-none}" ] && [ "$s" -ge $((steps / 2)) ]; then
    echo "node $node: simulated failure"
    exit 3
  fi
  sleep "${FAKE_STEP_SLEEP:-0.01}"
done
[ "$node" = "${FAKE_NO_RESULT_NODE:-none}" ] && exit 0
printf '{"node":%d,"steps":%d,"accuracy_local":0.8%d,"accuracy_average":0.84,"loss":0.45,"payload_sent":%d,"payload_recv":%d,"wire_sent":%d,"wire_recv":%d,"wall_seconds":1.5}\n' \
  "$node" "$steps" "$node" $((1000 + node)) $((1000 + node)) $((2000 + node)) $((2000 + node)) > "$result.tmp"
mv "$result.tmp" "$result"
)SH";

}  // namespace gossip::cli::testing
