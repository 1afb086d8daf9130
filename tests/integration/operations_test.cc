// What operators see of real daemons: the Prometheus endpoint, scraped with a real
// HTTP client (Boost.Beast) while two nodes average, and `gossipctl status`.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "base/version.h"
#include "gossip/client.h"
#include "harness.h"
#include "test_client.h"

namespace gossip::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// `from`: the source address (another loopback address is another client to the server).
Reply http_request(int port, http::verb verb, const std::string& target,
                   const std::string& from = "") {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(5s);
  if (!from.empty()) {
    stream.socket().open(tcp::v4());
    stream.socket().bind(tcp::endpoint(asio::ip::make_address(from), 0));
  }
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  http::request<http::empty_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  return {static_cast<int>(res.result_int()), std::string(res[http::field::content_type]),
          res.body()};
}

// Raw bytes in, the status line out (or "" if the server just closed).
std::string raw_exchange(int port, const std::string& bytes) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(5s);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  asio::write(stream.socket(), asio::buffer(bytes));
  std::string got(256, '\0');
  beast::error_code ec;
  const size_t n = stream.socket().read_some(asio::buffer(got), ec);
  got.resize(ec ? 0 : n);
  return got.substr(0, got.find("\r\n"));
}

// A scrape's samples, name{labels} -> value. Reading a sample the scrape lacks fails
// the test and reads NaN (a std::map would read 0, and a check of "0" would pass).
class Samples {
 public:
  double operator[](const std::string& name) const {
    const auto it = values_.find(name);
    if (it != values_.end()) return it->second;
    ADD_FAILURE() << "the scrape has no sample " << name;
    return std::numeric_limits<double>::quiet_NaN();
  }
  size_t count(const std::string& name) const { return values_.count(name); }
  void set(std::string name, double value) { values_[std::move(name)] = value; }

 private:
  std::map<std::string, double> values_;
};

// Checks every sample line's syntax and that its family was declared with # TYPE
// first (a histogram's _bucket, _sum and _count samples are of the family the
// histogram declared).
Samples parse_exposition(const std::string& text) {
  static const std::regex sample(
      R"(^([a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? ([0-9.e+-]+)$)");
  Samples out;
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# TYPE ")) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.starts_with("#")) continue;
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    if (m.empty()) continue;
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!typed.count(family) && family.ends_with(suffix))
        family.resize(family.size() - std::strlen(suffix));
    EXPECT_TRUE(typed.count(family)) << m[1] << " has no # TYPE before its samples";
    out.set(m[1].str() + m[2].str(), std::stod(m[4]));
  }
  return out;
}

// Node 0's trainer computes 150 ms a step, node 1's nothing: node 1's trainer spends
// its time waiting for node 0 in every round, node 0's trainer little of it; both
// daemons time every round. What gossipctl status shows, through Client::status().
TEST(Operations, StatusSaysHowLongTheTrainersWaitAndTheRoundsTake) {
  Cluster c(2, {"--period", "1"});
  c.start_all();
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(connect_to(c, i));
    ASSERT_TRUE(clients.back());
    ASSERT_TRUE(clients.back()->attach({{"w", 1000}}).is_ok());
  }
  constexpr int kSteps = 6;
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; ++i)
      ts.emplace_back([&, i] {
        for (int s = 0; s < kSteps; ++s) {
          if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
          ASSERT_TRUE(clients[i]->step().is_ok());
        }
      });
    for (auto& t : ts) t.join();
  }
  std::vector<NodeStatus> status;
  for (int i = 0; i < 2; ++i) {
    auto st = clients[i]->status();
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    status.push_back(*st);
    EXPECT_EQ(st->rounds_timed, static_cast<uint64_t>(kSteps)) << "node " << i;
    EXPECT_GT(st->last_round_payload_bytes, 0u) << "node " << i;
    EXPECT_LE(st->trainer_wait_seconds, st->trainer_attached_seconds) << "node " << i;
  }
  const double wait1 = status[1].trainer_wait_seconds / status[1].trainer_attached_seconds;
  // Both wait for the rounds themselves, which a loaded machine slows (under the
  // sanitizers beside a build, node 0 waited 35 % of its time, past the 30 % this test
  // once allowed); node 1 waits for node 0's 150 ms of compute on top, every step.
  EXPECT_GT(status[1].trainer_wait_seconds - status[0].trainer_wait_seconds, 0.5 * kSteps * 0.150)
      << "node 1's trainer waits for node 0's compute in every round";
  EXPECT_GT(wait1, 0.6) << "node 1's trainer waits for node 0 in every round";
  EXPECT_GT(status[1].round_seconds, status[0].round_seconds)
      << "node 1's rounds start 150 ms before node 0 joins them";
  EXPECT_EQ(status[1].last_round_overlap, 0.0) << "local SGD's round blocks the trainer";
}

TEST(Operations, MetricsAreScrapedAndMoveWithTraffic) {
  const auto ports = free_ports(2);
  Cluster c(2, {"--period", "1"});
  c.set_node_flags(0, {"--metrics-port", std::to_string(ports[0])});
  c.set_node_flags(1, {"--metrics-port", std::to_string(ports[1])});
  c.start_all();

  auto before = parse_exposition(http_request(ports[0], http::verb::get, "/metrics").body);
  EXPECT_EQ(before["gossipd_rounds_total"], 0);
  EXPECT_EQ(before["gossipd_trainers"], 0);
  EXPECT_EQ(before["gossipd_payload_bytes_sent_total{peer=\"1\"}"], 0);
  // Between rounds the daemon reads what its peers send (their hello), so a peer that is
  // up is heard from before any round; one that was never heard has no gauge.
  if (before.count("gossipd_peer_silent_seconds{peer=\"1\"}")) {
    EXPECT_LT(before["gossipd_peer_silent_seconds{peer=\"1\"}"], 10.0);
  }

  constexpr uint64_t kNumel = 10000;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(connect_to(c, i));
    ASSERT_TRUE(clients.back());
    ASSERT_TRUE(clients.back()->attach({{"w", kNumel}}).is_ok());
  }
  const auto steps = [&](int n) {
    std::vector<std::thread> ts;
    for (auto& cl : clients)
      ts.emplace_back([&, raw = cl.get()] {
        for (int s = 0; s < n; ++s) ASSERT_TRUE(raw->step().is_ok());
      });
    for (auto& t : ts) t.join();
  };
  steps(3);
  const Reply r1 = http_request(ports[0], http::verb::get, "/metrics");
  EXPECT_EQ(r1.status, 200);
  EXPECT_EQ(r1.content_type, "text/plain; version=0.0.4; charset=utf-8");
  auto m1 = parse_exposition(r1.body);
  EXPECT_EQ(m1["gossipd_trainers"], 1);
  EXPECT_GE(m1["gossipd_rounds_total"], 3);
  EXPECT_EQ(m1["gossipd_info{node=\"0\",strategy=\"local-sgd\",codec=\"none\",transport=\"auto\","
               "topology=\"complete\"}"],
            1);
  const double sent1 = m1["gossipd_payload_bytes_sent_total{peer=\"1\"}"];
  EXPECT_GT(sent1, 0);
  EXPECT_GE(m1["gossipd_bytes_sent_total{peer=\"1\"}"], sent1) << "wire bytes include framing";
  EXPECT_GT(m1["gossipd_payload_bytes_received_total{peer=\"1\"}"], 0);
  EXPECT_EQ(m1.count("gossipd_peer_silent_seconds{peer=\"1\"}"), 1u);
  EXPECT_LT(m1["gossipd_peer_silent_seconds{peer=\"1\"}"], 60);
  // The rounds are timed: a histogram whose +Inf bucket is its count, and a trainer
  // that did nothing but step spent its time attached mostly waiting.
  EXPECT_GE(m1["gossipd_round_duration_seconds_count"], 3);
  EXPECT_EQ(m1["gossipd_round_duration_seconds_bucket{le=\"+Inf\"}"],
            m1["gossipd_round_duration_seconds_count"]);
  EXPECT_GT(m1["gossipd_round_duration_seconds_sum"], 0);
  EXPECT_GT(m1["gossipd_trainer_attached_seconds_total"], 0);
  EXPECT_LE(m1["gossipd_trainer_wait_seconds_total"], m1["gossipd_trainer_attached_seconds_total"]);
  EXPECT_GT(m1["gossipd_last_round_payload_bytes"], 0);

  // The scrape agrees with what the daemon tells its trainers.
  auto t = clients[0]->traffic();
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(sent1, static_cast<double>(t->payload_sent));

  steps(4);
  auto m2 = parse_exposition(http_request(ports[0], http::verb::get, "/metrics").body);
  EXPECT_GE(m2["gossipd_rounds_total"], m1["gossipd_rounds_total"] + 4);
  EXPECT_GT(m2["gossipd_payload_bytes_sent_total{peer=\"1\"}"], sent1);
  EXPECT_GT(m2["gossipd_messages_sent_total{peer=\"1\"}"],
            m1["gossipd_messages_sent_total{peer=\"1\"}"]);

  // Node 1 serves its own counters.
  auto other = parse_exposition(http_request(ports[1], http::verb::get, "/metrics?x=1").body);
  EXPECT_GT(other["gossipd_payload_bytes_sent_total{peer=\"0\"}"], 0);

  // Everything else is refused by name, and the server keeps serving.
  EXPECT_EQ(http_request(ports[0], http::verb::get, "/").status, 404);
  EXPECT_EQ(http_request(ports[0], http::verb::post, "/metrics").status, 405);
  EXPECT_EQ(raw_exchange(ports[0], "GARBAGE\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  // An oversized header: a 400, or a reset if the server closes with our bytes unread.
  const std::string big =
      raw_exchange(ports[0], "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_TRUE(big.empty() || big == "HTTP/1.1 400 Bad Request") << big;
  EXPECT_EQ(http_request(ports[0], http::verb::get, "/metrics").status, 200);
  EXPECT_TRUE(c.daemon(0).running());
}

// Issue 46: a client that opened 32 connections to --metrics-port and sent each half a
// request got every later scrape reset for as long as it held them (the server kept 32,
// each for 10 s), and the Kubernetes liveness probe with them. Here 64 such connections
// are held, and reopened as soon as the server closes one, while the test scrapes: each
// scrape and each liveness probe is answered within a second.
TEST(Operations, ScrapesAreAnsweredWhileSixtyFourSlowClientsHoldConnections) {
  const auto ports = free_ports(1);
  Cluster c(1, {});
  c.set_node_flags(0, {"--metrics-port", std::to_string(ports[0])});
  c.start_all();
  ASSERT_EQ(http_request(ports[0], http::verb::get, "/metrics").status, 200);

  // The slow client: 64 connections, each with a request line and one header sent and
  // the rest never; a closed one is opened again at once.
  constexpr int kSlow = 64;
  std::atomic<bool> stop{false};
  std::atomic<int> reopened{0};
  std::thread slow([&] {
    const auto open = [&] {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(ports[0]));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        const char part[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
        (void)::send(fd, part, sizeof part - 1, MSG_NOSIGNAL);
      }
      return fd;
    };
    std::vector<int> fds;
    for (int i = 0; i < kSlow; ++i) fds.push_back(open());
    while (!stop) {
      // At most 8 new connections every 20 ms (400 a second): past the server's limit
      // of 8 from one address each new one takes the place of an older one.
      int opened = 0;
      for (int& fd : fds) {
        char byte;
        const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
        if (opened < 8 && (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))) {
          ::close(fd);
          fd = open();
          ++reopened, ++opened;
        }
      }
      std::this_thread::sleep_for(20ms);
    }
    for (int fd : fds) ::close(fd);
  });
  std::this_thread::sleep_for(200ms);  // every slow connection is in

  // The scrapes come from 127.0.0.2, as Prometheus does from an address of its own.
  // From the slow client's address a scrape is one of its connections, and the slow
  // client's new ones evict the oldest past the limit of 8 per address: a scrape that
  // took longer than the slow client's next 8 reopenings (under the sanitizers, on a
  // busy machine) was closed unanswered in a CI run.
  const auto timed = [&](const std::string& target) {
    const auto t0 = std::chrono::steady_clock::now();
    Reply r;
    try {
      r = http_request(ports[0], http::verb::get, target, "127.0.0.2");
    } catch (const std::exception& e) {
      ADD_FAILURE() << target << " while the slow connections are held: " << e.what();
    }
    return std::pair{r,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  };
  // Through three of the server's 2 s request deadlines.
  double slowest = 0;
  for (int i = 0; i < 6; ++i) {
    const auto [scrape, scrape_s] = timed("/metrics");
    slowest = std::max(slowest, scrape_s);
    EXPECT_EQ(scrape.status, 200) << "scrape " << i;
    EXPECT_NE(scrape.body.find("gossipd_rounds_total"), std::string::npos);
    EXPECT_LT(scrape_s, 1.0) << "scrape " << i;
    const auto [probe, probe_s] = timed("/healthz");
    slowest = std::max(slowest, probe_s);
    EXPECT_EQ(probe.status, 200) << "liveness probe " << i;
    EXPECT_EQ(probe.body, "ok\n");
    EXPECT_LT(probe_s, 1.0) << "liveness probe " << i;
    std::this_thread::sleep_for(1s);
  }
  std::cout << "[ figures  ] 12 answers beside " << kSlow << " slow connections, the slowest in "
            << slowest * 1000 << " ms; the server closed " << reopened.load() << " of them\n";
  // The daemon stops cleanly with the slow connections still open (their handlers
  // outlived the server's bookkeeping once, and gossipd crashed at SIGTERM).
  EXPECT_TRUE(c.daemon(0).running());
  c.daemon(0).signal(SIGTERM);
  EXPECT_EQ(c.daemon(0).wait(10s), 0) << c.log(0);
  stop = true;
  slow.join();
  EXPECT_GT(reopened.load(), kSlow) << "the server closed the slow connections (its deadline "
                                       "and the room it made for the scrapes)";
}

TEST(Operations, GossipctlStatusReportsTheNodeAndItsPeers) {
  Cluster c(3, {"--period", "1"});
  c.start_all();
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(connect_to(c, i));
    ASSERT_TRUE(clients.back());
    ASSERT_TRUE(clients.back()->attach({{"w", 5000}}).is_ok());
  }
  std::vector<std::thread> ts;
  for (auto& cl : clients)
    ts.emplace_back([raw = cl.get()] {
      for (int s = 0; s < 2; ++s) ASSERT_TRUE(raw->step().is_ok());
    });
  for (auto& t : ts) t.join();

  const auto run = [&](const std::string& args) {
    const std::string cmd = binary("gossipctl") + " status " + args + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int rc = ::pclose(p);
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  auto [rc, table] = run("--node " + c.ipc_endpoint(1));
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("node 1  strategy local-sgd"), std::string::npos) << table;
  EXPECT_NE(table.find("trainers 1"), std::string::npos) << table;
  EXPECT_NE(table.find(c.peer_endpoint(0)), std::string::npos) << table;
  EXPECT_NE(table.find(c.peer_endpoint(2)), std::string::npos) << table;
  EXPECT_NE(table.find("ago"), std::string::npos) << "peers were heard from: " << table;

  auto [rc2, json] = run("--json --node " + c.ipc_endpoint(2));
  EXPECT_EQ(rc2, 0) << json;
  EXPECT_NE(json.find("\"node\": 2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"trainers\": 1"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"silent_ms\": null"), std::string::npos)
      << "both peers were heard: " << json;

  auto [rc3, err] = run("--node " + (c.run_dir() / "gossipd-9.sock").string());
  EXPECT_EQ(rc3, 1);
  EXPECT_NE(err.find("no gossipd socket at"), std::string::npos) << err;
}

// Every program says its version (base/version.h, CMakeLists.txt's project()).
TEST(Operations, EveryProgramAnswersVersion) {
  for (const char* program : {"gossipd", "gossipctl", "gossip-train"}) {
    FILE* f = ::popen((binary(program) + " --version 2>&1").c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[256];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    const int status = ::pclose(f);
    EXPECT_EQ(status, 0) << program << ": " << out;
    EXPECT_EQ(out.rfind(std::string(program) + " " + kVersion, 0), 0u) << out;
  }
}

// A trainer learns from the daemon whether its tensors carry gradients or the model,
// from the strategy's descriptor; it never compares strategy names.
TEST(Operations, AttachSaysWhetherTheArenaCarriesGradients) {
  for (const auto& [strategy, gradients] :
       {std::pair{"allreduce", true}, std::pair{"gossip", false}, std::pair{"local-sgd", false}}) {
    SCOPED_TRACE(strategy);
    Cluster c(1, {"--strategy", strategy});
    c.start_all();
    auto client = connect_to(c, 0);
    ASSERT_TRUE(client);
    auto model = client->attach({{"w", 8}});
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    EXPECT_EQ(model->gradients, gradients);
    EXPECT_EQ(model->strategy, strategy);
  }
}

}  // namespace
}  // namespace gossip::testing
