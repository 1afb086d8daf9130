#pragma once
// `gossipctl simulate`: a cluster of N nodes in this process on virtual time
// (sim/world.h): the real strategies, router and codecs over simulated links, one
// CSV row per round and a summary.

#include <string>

#include "base/status.h"
#include "cli/command.h"
#include "peers/memory_channel.h"

namespace gossip::cli {

// "latency=1ms,jitter=100us,bandwidth=1Gbit": every link's model. Times take ns, us,
// ms or s; bandwidth is bits per second with an optional k, M or G (or "0": none).
Result<peers::Link> parse_link(const std::string& spec);

Subcommand add_simulate_command(CLI::App& parent);

}  // namespace gossip::cli
