#pragma once
// Text that came from another process (a peer, a client, a routing id), made safe for
// a log line or an error message: printable ASCII only, anything else '?', at most
// `max` characters, and `cut` appended where there was more.

#include <algorithm>
#include <string>
#include <string_view>

namespace gossip::proto {

inline std::string printable_text(std::string_view s, size_t max, std::string_view cut = "") {
  std::string out;
  out.reserve(std::min(s.size(), max) + cut.size());
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (s.size() > max) out += cut;
  return out;
}

}  // namespace gossip::proto
