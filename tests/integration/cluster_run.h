#pragma once
// A whole training run through the README's own path: `gossipctl cluster ... --json`
// on the real Fashion-MNIST, for tests that judge accuracy, traffic and time.

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gossip::testing {

// The numeric field `key` of a JSON line (a test failure when it is missing).
double number_field(const std::string& json, const std::string& key);

// Runs `gossipctl cluster ... --json` and returns the JSON line and the wall seconds;
// with `daemon_log`, node 0's gossipd log too; `started` is called with gossipctl's
// pid as soon as it runs (an attacker's cue). With `expect_ok` false, a run that fails
// (exit 1, "ok": false) is what the test wants, and its JSON is returned all the same.
std::pair<std::string, double> run_cluster(std::vector<std::string> args,
                                           std::string* daemon_log = nullptr,
                                           const std::function<void(pid_t)>& started = nullptr,
                                           bool expect_ok = true);

// A local-cluster command the README shows (`build/bin/gossipctl cluster ... --json  #
// ... 85.69 %`): its arguments after `cluster` (without --json, which run_cluster adds)
// and the accuracy its comment states.
struct ShownRun {
  std::vector<std::string> args;
  double accuracy = -1;
};

// The README's `gossipctl cluster` commands in the order it shows them (read from the
// checkout this build was configured from, found through build/CMakeCache.txt). The
// training tests run these words, so a command or a figure that drifts from what the
// code does fails there.
std::vector<ShownRun> readme_runs();

}  // namespace gossip::testing
