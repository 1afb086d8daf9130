#include "cluster_run.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
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
                                           const std::function<void(pid_t)>& started,
                                           bool expect_ok) {
  char dir[] = "/tmp/gossip-training-XXXXXX";
  if (!::mkdtemp(dir)) return {"", 0};
  std::vector<std::string> argv = {binary("gossipctl"),
                                   "cluster",
                                   "--out",
                                   (std::filesystem::path(dir) / "run").string(),
                                   "--json",
                                   "--timeout",
                                   "120"};
  // The tests judge the final model: evaluations on the way (steps/10 by default, each
  // as costly as ~50 training steps) were half the trainers' CPU time.
  if (std::find(args.begin(), args.end(), "--eval-every") == args.end())
    argv.insert(argv.end(), {"--eval-every", "0"});
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
  EXPECT_EQ(rc, expect_ok ? 0 : 1) << log;
  auto at = log.rfind("{\"ok\"");
  if (at == std::string::npos) return {"", seconds};
  std::string json = log.substr(at);
  EXPECT_NE(json.find(expect_ok ? "\"ok\": true" : "\"ok\": false"), std::string::npos) << json;
  std::cout << "[ figures  ] " << json << " (" << seconds << " s)\n";
  return {json, seconds};
}

namespace {

// The source checkout: CMakeCache.txt beside build/bin names it (found at run time, so
// that no path is compiled into the test).
std::filesystem::path source_dir() {
  std::ifstream cache(std::filesystem::path(binary("")).parent_path().parent_path() /
                      "CMakeCache.txt");
  const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
  for (std::string line; std::getline(cache, line);)
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  return {};
}

}  // namespace

std::vector<ShownRun> readme_runs() {
  const auto readme = source_dir() / "README.md";
  std::ifstream in(readme);
  EXPECT_TRUE(in.good()) << "cannot read " << readme;
  std::vector<ShownRun> runs;
  const std::regex figure(R"(#[^#]*?([0-9]+\.[0-9]+) %)");
  std::string joined;
  for (std::string line; std::getline(in, line);) {
    const bool continued = !line.empty() && line.back() == '\\';
    joined += continued ? line.substr(0, line.size() - 1) : line;
    if (continued) continue;
    std::string text;
    text.swap(joined);
    if (text.rfind("build/bin/gossipctl cluster ", 0) != 0) continue;
    ShownRun run;
    std::smatch m;
    if (std::regex_search(text, m, figure)) run.accuracy = std::stod(m[1]) / 100;
    std::istringstream words(text.substr(0, text.find('#')));
    std::string word;
    words >> word >> word;  // build/bin/gossipctl cluster
    while (words >> word)
      if (word != "--json") run.args.push_back(word);
    EXPECT_GT(run.accuracy, 0) << "README.md: no accuracy (NN.NN %) in the comment of: " << text;
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace gossip::testing
