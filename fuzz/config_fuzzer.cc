// gossipd's config parser (daemon/config.h: parse_config, then validate_config) on
// hostile TOML.
//
// Checked beyond "no crash, no sanitizer report":
//  - a refused document's message names the source, as config.h promises;
//  - a document that parses passes validate_config (parse_config runs the same
//    cross-field checks), keeps its source, and its codec spec makes a codec whose
//    canonical spec parses back;
//  - the derived values the daemon reads at start (nodes, remote peers sorted by id
//    and without this node, the IPC endpoint, the topology spec) can be computed.

#include <algorithm>
#include <string>

#include "compression/codec_spec.h"
#include "daemon/config.h"
#include "fuzz/invariant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  using namespace gossip::fuzz;
  const std::string source = "fuzz.toml";
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = daemon::parse_config(text, source);
  if (!c) {
    if (c.status().message().find(source) == std::string::npos)
      fail("a config error names its source: " + c.status().message());
    return 0;
  }
  expect(c->source == source, "a parsed config keeps its source");
  const Status st = daemon::validate_config(*c);
  if (!st) fail("a config that parses passes validate_config: " + st.message());

  auto codec = compression::make_codec(c->strategy.codec);
  if (!codec) fail("a parsed config's codec spec makes a codec: " + codec.status().message());
  auto canonical = compression::make_codec(codec->canonical());
  expect(canonical.is_ok() && canonical->canonical() == codec->canonical(),
         "a parsed config's canonical codec spec parses back");

  const auto remote = c->remote_peers();
  expect(std::none_of(remote.begin(), remote.end(),
                      [&](const daemon::PeerConfig& p) { return p.id == c->node_id; }),
         "remote peers exclude this node");
  expect(std::is_sorted(remote.begin(), remote.end(),
                        [](const auto& a, const auto& b) { return a.id < b.id; }),
         "remote peers are sorted by id");
  expect(c->nodes() == remote.size() + 1, "nodes counts the remote peers and this node");
  expect(c->ipc_endpoint().starts_with("ipc://"), "the IPC endpoint is an ipc:// one");
  expect(!c->topology_spec().empty(), "a topology spec is always there");
  return 0;
}
