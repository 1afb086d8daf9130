#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/cluster.h"
#include "peers/loopback_ports.h"
#include "tests/bin_dir.h"

namespace gossip::testing {

using namespace std::chrono_literals;

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& log)
    : log_(log) {
  auto p = cli::Process::spawn({argv, log.string(), ""});
  if (!p) throw std::runtime_error(p.status().message());
  process_ = std::move(p).value();
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  auto exit = process_.wait_until(std::chrono::steady_clock::now() + timeout);
  if (!exit) return -1;
  return exit->signal ? 128 + exit->signal : exit->code;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ChildProcess::log() const { return read_text(log_); }

ChildProcess::~ChildProcess() {
  if (process_.running()) process_.terminate(5s);
}

std::vector<int> free_ports(int n) {
  // Ports below the kernel's ephemeral range (peers/loopback_ports.h), which
  // bind(0) (the daemons' ring listeners) and outgoing connections never take. Never
  // the same port twice in one process: a test that picks ports (for metrics, a relay)
  // and then starts a Cluster, which picks its own, must not get one it already holds.
  static std::mutex mu;
  static std::set<int> given;
  std::lock_guard lock(mu);
  auto picked = ::gossip::peers::pick_loopback_ports(n + 8);
  std::vector<int> ports;
  if (picked)
    for (int p : *picked)
      if (static_cast<int>(ports.size()) < n && given.insert(p).second) ports.push_back(p);
  return ports;
}

std::string binary(const std::string& name) { return ::gossip::test_bin_dir() + "/" + name; }

Cluster::Cluster(int nodes, std::vector<std::string> extra)
    : n_(nodes),
      extra_(std::move(extra)),
      node_flags_(nodes),
      ports_(free_ports(nodes)),
      daemons_(nodes) {
  char tmpl[] = "/tmp/gossip-test-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  run_dir_ = tmpl;
  run_id_ = "test-" + run_dir_.filename().string().substr(std::string("gossip-test-").size());
}

void Cluster::stop_daemons() {
  std::vector<cli::Process*> all;
  for (auto& d : daemons_) all.push_back(&d.process());
  cli::terminate_all(all, 5s);  // SIGTERM, one shared grace, SIGKILL the rest, reap
}

Cluster::~Cluster() {
  stop_daemons();
  daemons_.clear();
  std::error_code ec;
  std::filesystem::remove_all(run_dir_, ec);
}

std::string Cluster::ipc_endpoint(int node) const {
  return "ipc://" + (run_dir_ / ("gossipd-" + std::to_string(node) + ".sock")).string();
}

std::string Cluster::peer_endpoint(int node) const {
  return "tcp://127.0.0.1:" + std::to_string(ports_[node]);
}

void Cluster::start(int node) {
  const auto custom = node_binaries_.find(node);
  std::vector<std::string> argv = {
      custom == node_binaries_.end() ? binary("gossipd") : custom->second,
      "--id",
      std::to_string(node),
      "--listen",
      peer_endpoint(node),
      "--run-dir",
      run_dir_.string(),
      "--run-id",
      run_id_};
  for (int j = 0; j < n_; ++j)
    if (j != node) {
      argv.push_back("--peer");
      const auto a = advertised_.find(j);
      argv.push_back(std::to_string(j) + "=" +
                     (a == advertised_.end() ? peer_endpoint(j) : a->second));
    }
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  argv.insert(argv.end(), node_flags_[node].begin(), node_flags_[node].end());
  daemons_[node] = ChildProcess(argv, run_dir_ / ("gossipd-" + std::to_string(node) + ".log"));
  auto sock = run_dir_ / ("gossipd-" + std::to_string(node) + ".sock");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!std::filesystem::exists(sock)) {
    if (!daemons_[node].running())
      throw std::runtime_error("gossipd " + std::to_string(node) + " exited:\n" + log(node));
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("gossipd " + std::to_string(node) + " did not create its socket");
    std::this_thread::sleep_for(10ms);
  }
}

void Cluster::start_all() {
  // The ports are found free, then bound by the daemons a moment later: another test's
  // process can take one meanwhile (as an outgoing connection's ephemeral port), and
  // the daemon exits with "Address already in use". Then the whole cluster starts
  // again on new ports (every node's peer list names them), at most 3 times.
  for (int attempt = 1;; ++attempt) {
    try {
      for (int i = 0; i < n_; ++i) start(i);
      return;
    } catch (const std::runtime_error& e) {
      if (attempt == 3 || std::string(e.what()).find("Address already in use") == std::string::npos)
        throw;
      stop_daemons();
      daemons_ = std::vector<ChildProcess>(n_);
      ports_ = free_ports(n_);
    }
  }
}

std::vector<std::string> gossipd_shm_objects(pid_t daemon_pid) {
  std::vector<std::string> found;
  // gossipd-<uid>-<node>-<pid>-<nonce>
  const std::string pid = "-" + std::to_string(daemon_pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = e.path().filename().string();
    if (name.starts_with("gossipd-") && name.find(pid) != std::string::npos) found.push_back(name);
  }
  return found;
}

KeyPair curve_keypair() {
  char p[41] = {}, s[41] = {};
  if (zmq_curve_keypair(p, s) != 0) throw std::runtime_error("zmq_curve_keypair failed");
  return {p, s};
}

}  // namespace gossip::testing
