#pragma once
// How gossipctl's subcommands plug into main: each registers its flags on a CLI11
// subcommand and hands back what to run once the command line has been parsed.

#include <CLI/CLI.hpp>
#include <functional>

namespace gossip::cli {

// Exit codes shared by the subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed
inline constexpr int kExitUsage = 2;    // bad flags or values; nothing was started

struct Subcommand {
  CLI::App* app = nullptr;   // owned by the parent CLI::App
  std::function<int()> run;  // the exit code
};

}  // namespace gossip::cli
