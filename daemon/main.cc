// gossipd: the per-node daemon. See daemon/gossipd.example.toml for the config.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "daemon/config.h"
#include "daemon/daemon.h"

int main(int argc, char** argv) {
  using gossip::Status;
  auto config = gossip::daemon::config_from_args(argc, argv);
  if (!config) {
    if (config.status().code() == Status::Code::kClosed) {  // --help, --print-options
      std::fputs(config.status().message().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "gossipd: %s\n", config.status().message().c_str());
    return 2;
  }
  spdlog::set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e [node {}] [%l] %v", config->node_id));
  spdlog::set_level(spdlog::level::from_str(config->log_level));

  // Before any thread exists, so that signals reach only the daemon's signalfd.
  gossip::daemon::block_signals();
  auto daemon = gossip::daemon::Daemon::create(*config);
  if (!daemon) {
    spdlog::error("{}", daemon.status().message());
    return 1;
  }
  return (*daemon)->run();
}
