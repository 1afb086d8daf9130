// gossipctl: the command-line tool around gossipd. Each subcommand lives in its own file
// and registers itself here: cluster, status, keygen, run, doctor, leave, ban, forget,
// simulate.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/version.h"
#include "cli/cluster.h"
#include "cli/command.h"
#include "cli/doctor.h"
#include "cli/keygen.h"
#include "cli/leave.h"
#include "cli/members.h"
#include "cli/run.h"
#include "cli/simulate.h"
#include "cli/status.h"

int main(int argc, char** argv) {
  using namespace gossip::cli;
  try {
    // stdout is for results (the table, the JSON object); every message goes to stderr.
    spdlog::set_default_logger(spdlog::stderr_color_st("gossipctl"));
    spdlog::set_pattern("gossipctl: %^%l%$: %v");
    CLI::App app{"gossipctl: control gossipd nodes and launch local clusters", "gossipctl"};
    app.set_version_flag("--version", std::string("gossipctl ") + gossip::kVersion);
    app.require_subcommand(1);
    std::vector<Subcommand> commands = {
        add_cluster_command(app), add_status_command(app), add_keygen_command(app),
        add_run_command(app),     add_doctor_command(app), add_leave_command(app),
        add_ban_command(app),     add_forget_command(app), add_simulate_command(app)};
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      std::string names;
      for (const Subcommand& c : commands) {
        known = known || c.app->get_name() == argv[1];
        names += (names.empty() ? "" : ", ") + c.app->get_name();
      }
      if (!known) {
        std::fprintf(stderr,
                     "gossipctl: unknown command '%s' (commands: %s; see gossipctl --help)\n",
                     argv[1], names.c_str());
        return kExitUsage;
      }
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);  // prints the help, or the error
      return code == 0 ? kExitOk : kExitUsage;
    }
    for (const Subcommand& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    std::fputs(app.help().c_str(), stderr);
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossipctl: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "gossipctl: internal error\n");
  }
  return kExitFailure;
}
