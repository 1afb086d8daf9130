#pragma once
// Starts real gossipd processes on loopback for integration tests, and cleans up
// after them whatever the test does: processes are SIGKILLed and reaped, the run
// directory is removed, and no shared-memory arena may be left behind.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/process.h"

namespace gossip::testing {

// A child process with stdout and stderr in a log file: gossipctl's Process, plus
// the log and an exit code convenient for assertions.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& log);
  // Still running: SIGTERM, and SIGKILL after 5 s. A daemon SIGKILLed cannot remove its
  // shared-memory arena, and a test's daemons left one each in /dev/shm (7.5 MB a node
  // of the deploy tests' clusters, every CI run). A test that means to kill, kills.
  ~ChildProcess();
  ChildProcess(ChildProcess&&) = default;
  ChildProcess& operator=(ChildProcess&&) = default;

  pid_t pid() const { return process_.pid(); }
  bool running() { return process_.running() && !process_.poll().has_value(); }
  // Waits up to `timeout` for the exit; returns the exit code, 128+signal, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  void signal(int sig) { process_.signal(sig); }
  cli::Process& process() { return process_; }
  std::string log() const;

 private:
  cli::Process process_;
  std::filesystem::path log_;
};

// Free loopback TCP ports (bound and released; fine for tests on one machine), none
// handed out before by this process.
std::vector<int> free_ports(int n);

class Cluster {
 public:
  // `extra` flags are passed to every daemon (e.g. {"--period", "4"}).
  Cluster(int nodes, std::vector<std::string> extra);
  ~Cluster();

  const std::filesystem::path& run_dir() const { return run_dir_; }
  // Every daemon's --run-id: random, so that a daemon of a test running beside this
  // one that still tries a port this cluster reuses is not taken for a member.
  const std::string& run_id() const { return run_id_; }
  std::string ipc_endpoint(int node) const;
  std::string peer_endpoint(int node) const;
  // Starts daemon `node` and waits (bounded) until its IPC socket exists.
  void start(int node);
  // Flags for one daemon only, after `extra` (e.g. its own --metrics-port).
  void set_node_flags(int node, std::vector<std::string> flags) {
    node_flags_[node] = std::move(flags);
  }
  // The endpoint the other daemons are given for `node` (its own --listen stays
  // peer_endpoint(node)): a wrong or blocked port in their peer lists.
  void advertise(int node, std::string endpoint) { advertised_[node] = std::move(endpoint); }
  // Another executable for one daemon (the hostile node of tests/security).
  void set_node_binary(int node, std::string path) { node_binaries_[node] = std::move(path); }
  void start_all();
  ChildProcess& daemon(int node) { return daemons_[node]; }
  std::string log(int node) const { return daemons_[node].log(); }

 private:
  void stop_daemons();  // every daemon, started or not
  int n_;
  std::vector<std::string> extra_;
  std::vector<std::vector<std::string>> node_flags_;
  std::map<int, std::string> node_binaries_;
  std::map<int, std::string> advertised_;
  std::filesystem::path run_dir_;
  std::string run_id_;
  std::vector<int> ports_;
  std::vector<ChildProcess> daemons_;
};

// Names of /dev/shm objects that gossipd creates, for leak checks.
std::vector<std::string> gossipd_shm_objects(pid_t daemon_pid);

std::string binary(const std::string& name);  // test_bin_dir()/name

// A fresh CURVE key pair (Z85), for clusters under --secret-key.
struct KeyPair {
  std::string pub, sec;
};
KeyPair curve_keypair();

// A file's whole text; empty when it cannot be read.
std::string read_text(const std::filesystem::path& path);

}  // namespace gossip::testing
