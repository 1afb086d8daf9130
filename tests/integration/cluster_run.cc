#include "cluster_run.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "harness.h"

namespace gossip::testing {

using namespace std::chrono_literals;

double number_field(const std::string& json, const std::string& key) {
  std::smatch m;
  std::regex re("\"" + key + "\": *([-0-9.eE]+)");
  if (!std::regex_search(json, m, re)) {
    ADD_FAILURE() << "no numeric field '" << key << "' in " << json;
    return -1;
  }
  return std::stod(m[1]);
}

std::pair<std::string, double> run_cluster(std::vector<std::string> args, std::string* daemon_log,
                                           const std::function<void(pid_t)>& started) {
  char dir[] = "/tmp/gossip-training-XXXXXX";
  if (!::mkdtemp(dir)) return {"", 0};
  std::vector<std::string> argv = {binary("gossipctl"),
                                   "cluster",
                                   "--out",
                                   (std::filesystem::path(dir) / "run").string(),
                                   "--json",
                                   "--timeout",
                                   "120"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto start = std::chrono::steady_clock::now();
  ChildProcess p(argv, std::filesystem::path(dir) / "gossipctl.log");
  if (started) started(p.pid());
  int rc = p.wait(150s);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string log = p.log();
  if (daemon_log) {
    std::ifstream in(std::filesystem::path(dir) / "run" / "gossipd-0.log");
    std::stringstream text;
    text << in.rdbuf();
    *daemon_log = text.str();
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rc, 0) << log;
  auto at = log.rfind("{\"ok\"");
  if (at == std::string::npos) return {"", seconds};
  std::string json = log.substr(at);
  EXPECT_NE(json.find("\"ok\": true"), std::string::npos) << json;
  std::cout << "[ figures  ] " << json << " (" << seconds << " s)\n";
  return {json, seconds};
}

}  // namespace gossip::testing
