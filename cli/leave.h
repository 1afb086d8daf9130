#pragma once
// `gossipctl leave`: the node leaves its cluster in order. Its daemon tells its trainers
// (a shutdown with the reason), says bye to its peers, which go on without it from
// their next round instead of waiting out a timeout, and exits.

#include "cli/command.h"

namespace gossip::cli {

Subcommand add_leave_command(CLI::App& parent);

}  // namespace gossip::cli
