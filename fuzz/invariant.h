#pragma once
// What a fuzz target does when a decoder broke its contract without crashing: say
// which promise failed, then trap, so that libFuzzer saves the input as a crash and
// the replay driver (replay_main.cc) dies on it in ctest.

#include <cstdio>
#include <string_view>

namespace gossip::fuzz {

[[noreturn]] inline void fail(std::string_view what) {
  std::fprintf(stderr, "fuzz invariant violated: %.*s\n", static_cast<int>(what.size()),
               what.data());
  std::fflush(stderr);
  __builtin_trap();
}

// `what` is the promise, e.g. "a header that decodes re-encodes to one that decodes".
inline void expect(bool ok, const char* what) {
  if (!ok) fail(what);
}

}  // namespace gossip::fuzz
