#pragma once
// `gossipctl simulate`: a cluster of N nodes in this process on virtual time
// (sim/world.h): the real strategies, router and codecs over simulated links, one
// CSV row per round and a summary. With --joins, nodes joining by seeds instead
// (sim/joins.h): one CSV row per join.

#include <string>

#include "base/status.h"
#include "cli/command.h"
#include "peers/memory_channel.h"
#include "sim/joins.h"

namespace gossip::cli {

// "latency=1ms,jitter=100us,bandwidth=1Gbit": every link's model. Times take ns, us,
// ms or s; bandwidth is bits per second with an optional k, M or G (or "0": none).
Result<peers::Link> parse_link(const std::string& spec);

Subcommand add_simulate_command(CLI::App& parent);

// --joins: runs the join simulation, writes joins.csv into `out` (if set) and prints
// its summary; the exit code.
int run_join_simulation(const sim::JoinOptions& options, const std::string& out);

}  // namespace gossip::cli
