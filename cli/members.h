#pragma once
// What an operator changes about a running node's peers:
//  - `gossipctl ban ID`: on a running node (with CURVE), the peer ID is banned from now
//    on, as with --ban-peer at start: its key is refused, nothing is sent to it, and what
//    it sends on a connection it already has is dropped. The ban is this node's: run it
//    on every node that should stop trusting ID.
//  - `gossipctl forget ID`: node ID, gone for good, no longer counts toward the members'
//    majority (of ids given to joiners, and of forgets), once more than half of the
//    members that count accepted (each accepts only if it does not hear ID either): a
//    cluster that lost nodes one by one keeps a majority of those left. Asked of one
//    node, told to all.

#include "cli/command.h"

namespace gossip::cli {

Subcommand add_ban_command(CLI::App& parent);
Subcommand add_forget_command(CLI::App& parent);

}  // namespace gossip::cli
