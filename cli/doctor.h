#pragma once
// `gossipctl doctor`: asks one node to gather every member's row of the link matrix
// (daemon/inspector.h), prints the matrix, and says for each problem what is wrong
// and what to do. Exits 1 when it found a problem, so that scripts can use it.

#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/inspect.h"

namespace gossip::cli {

struct Finding {
  bool problem = true;  // false: worth knowing, not wrong (a lossy link, skewed clocks)
  std::string text;
};

// What is wrong in the cluster, one sentence each, the most fundamental first (a node
// that is down before the links to it).
std::vector<Finding> diagnose(const ClusterLinks& c);
std::string format_doctor_table(const ClusterLinks& c, const std::vector<Finding>& findings);
std::string format_doctor_json(const ClusterLinks& c, const std::vector<Finding>& findings);

struct DoctorOptions {
  std::string node = "ipc:///run/gossipd/gossipd-0.sock";
  bool json = false;
  double timeout_s = 10;
};
int run_doctor(const DoctorOptions& options);
Subcommand add_doctor_command(CLI::App& parent);

}  // namespace gossip::cli
