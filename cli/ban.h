#pragma once
// `gossipctl ban ID`: on a running node (with CURVE), the peer ID is banned from now on,
// as with --ban-peer at start: its key is refused, nothing is sent to it, and what it
// sends on a connection it already has is dropped. The ban is this node's: run it on
// every node that should stop trusting ID.

#include "cli/command.h"

namespace gossip::cli {

Subcommand add_ban_command(CLI::App& parent);

}  // namespace gossip::cli
