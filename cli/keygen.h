#pragma once
// `gossipctl keygen`: a fresh CURVE key pair (ZeroMQ's Z85 text) for a node's config.

#include <string>

#include "base/status.h"
#include "cli/command.h"

namespace gossip::cli {

struct KeyPair {
  std::string public_key;  // 40 Z85 characters
  std::string secret_key;
};

// Fails when this libzmq was built without CURVE.
Result<KeyPair> curve_keypair();

Subcommand add_keygen_command(CLI::App& parent);

}  // namespace gossip::cli
