// gossipd: the per-node daemon. See daemon/gossipd.example.toml for the config.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/join_client.h"
#include "peers/curve_auth.h"

int main(int argc, char** argv) {
  using gossip::Status;
  auto config = gossip::daemon::config_from_args(argc, argv);
  if (!config) {
    if (config.status().code() == Status::Code::kClosed) {  // --help, --print-options, --check
      std::fputs(config.status().message().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "gossipd: %s\n", config.status().message().c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  if (!config->join.empty()) {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [joining] [%l] %v");
    gossip::daemon::JoinKeys keys;
    if (!config->secret_key.empty()) {
      auto pub = gossip::peers::curve_public_of(config->secret_key);
      if (!pub) {
        spdlog::error("{}", pub.status().message());
        return 2;
      }
      keys = {*pub, config->secret_key};
    }
    auto joined = gossip::daemon::join_by_seeds(gossip::daemon::join_seeds(*config), config->listen,
                                                std::chrono::seconds(60), keys);
    if (!joined) {
      spdlog::error("{}", joined.status().message());
      return 1;
    }
    config->node_id = joined->id;
    config->joined_round = joined->first_round;
    for (const auto& m : joined->members)
      if (m.id != joined->id)  // a ban needs CURVE (and a seed without it is trusted anyway)
        config->peers.push_back(
            {m.id, m.endpoint, m.public_key, m.banned && !config->secret_key.empty()});
    if (auto st = gossip::daemon::validate_config(*config); !st) {
      spdlog::error("joined as node {}, but: {}", joined->id, st.message());
      return 2;
    }
    spdlog::info("joined as node {} of {} (members' epoch {})", joined->id, joined->members.size(),
                 joined->epoch);
  }
  spdlog::set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e [node {}] [%l] %v", config->node_id));

  // Before any thread exists, so that signals reach only the daemon's signalfd.
  gossip::daemon::block_signals();
  auto daemon = gossip::daemon::Daemon::create(*config);
  if (!daemon) {
    spdlog::error("{}", daemon.status().message());
    return 1;
  }
  return (*daemon)->run();
}
