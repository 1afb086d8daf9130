// gossip-attacker: the hostile processes of the attack tests (tests/security/).
// Each mode mounts one attack against a real cluster on loopback until it is
// killed (or for --seconds), and prints what it did, one line per event.
//
//   gossip-attacker idle-connect --parent PID [--seconds S]
//     Finds the gossipd children of PID (gossipctl cluster) and holds an idle TCP
//     connection open to every port each of them listens on, opening a new one
//     whenever a daemon closes it: the unauthenticated stranger of finding 1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: gossip-attacker idle-connect --parent PID [--seconds S]\n");
  std::exit(2);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pids of the gossipd processes whose parent is `parent`.
std::vector<int> daemons_of(int parent) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(e.path() / "stat");
    // pid (comm) state ppid ...
    const auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (stat.substr(open + 1, close - open - 1) != "gossipd") continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// The TCP ports a process listens on: its socket inodes matched against /proc/net/tcp.
std::set<int> listening_ports(int pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path("/proc") / std::to_string(pid) / "fd", ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int idle_connect(int parent, double seconds) {
  std::map<int, int> held;  // port -> fd
  std::set<int> known;
  uint64_t opened = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int pid : daemons_of(parent))
      for (int port : listening_ports(pid))
        if (known.insert(port).second) std::printf("port %d of gossipd %d\n", port, pid);
    for (int port : known) {
      auto it = held.find(port);
      if (it != held.end()) {
        // Closed by the daemon (EOF or reset): open another one.
        pollfd p{it->second, POLLIN, 0};
        char byte;
        if (::poll(&p, 1, 0) == 1 && ::recv(it->second, &byte, 1, MSG_DONTWAIT) <= 0) {
          ::close(it->second);
          held.erase(it);
        } else {
          continue;
        }
      }
      const int fd = connect_to(port);
      if (fd >= 0) {
        held[port] = fd;
        ++opened;
      }
    }
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("opened %llu idle connections to %zu ports\n", static_cast<unsigned long long>(opened),
              known.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  int parent = -1;
  double seconds = 3600;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--parent")
      parent = std::atoi(argv[i + 1]);
    else if (flag == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else
      usage();
  }
  if (mode == "idle-connect" && parent > 0) return idle_connect(parent, seconds);
  usage();
}
