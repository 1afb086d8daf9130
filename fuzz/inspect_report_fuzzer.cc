// The reports of gossipctl doctor and status --cluster (proto/inspect.h: decode_*),
// which peers send: the first byte picks the decoder, the rest is the report.
//
// Checked beyond "no crash, no sanitizer report", for a report that decodes:
//  - every string is printable ASCII of at most kMaxText characters (it reaches an
//    operator's terminal);
//  - every measurement is finite, and >= 0 or kNone (a clock offset may be negative);
//  - it re-encodes to bytes that decode to the same encoding.

#include <cmath>
#include <string>
#include <string_view>

#include "fuzz/invariant.h"
#include "proto/inspect.h"

namespace gossip::fuzz {
namespace {

namespace in = proto::inspect;

void check_text(std::string_view s) {
  expect(s.size() <= in::kMaxText, "a peer's string is cut to kMaxText");
  for (char c : s) expect(c >= 0x20 && c < 0x7f, "a peer's string is printable ASCII");
}

void check_measure(double v, bool may_be_negative = false) {
  expect(std::isfinite(v), "a measurement is finite");
  expect(may_be_negative || v >= 0 || v == in::kNone, "a measurement is >= 0 or kNone");
}

template <class T, class Decode>
void round_trip(const T& decoded, Decode decode) {
  const std::string bytes = in::encode(decoded);
  auto again = decode(bytes.data(), bytes.size());
  if (!again) fail("a decoded report re-encodes to one that decodes: " + again.status().message());
  expect(in::encode(*again) == bytes, "a decoded report re-encodes to the same bytes");
}

}  // namespace
}  // namespace gossip::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip::fuzz;
  if (size == 0) return 0;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  switch (data[0] % 4) {
    case 0:
      if (auto s = in::decode_summary(body, n)) {
        check_measure(s->elapsed_s);
        round_trip(*s, in::decode_summary);
      }
      break;
    case 1:
      if (auto r = in::decode_links(body, n)) {
        check_text(r->facts.version), check_text(r->facts.strategy);
        for (const auto& k : r->refused_keys) check_text(k);
        for (const auto& l : r->links) {
          check_text(l.endpoint), check_text(l.connect_error), check_text(l.version);
          check_text(l.strategy), check_text(l.last_refusal);
          for (double v : {l.connect_ms, l.rtt_ms, l.clock_error_ms, l.tcp_rtt_ms,
                           l.bandwidth_bytes_per_s, l.silent_ms})
            check_measure(v);
          check_measure(l.clock_offset_ms, true);
          expect(l.pongs <= l.pings, "no more pongs than pings");
        }
        round_trip(*r, in::decode_links);
      }
      break;
    case 2:
      if (auto s = in::decode_status(body, n)) {
        check_text(s->state), check_text(s->last_error), check_text(s->version);
        expect(s->samples.size() <= in::kMaxSamples, "at most kMaxSamples samples");
        for (float v : s->samples) expect(std::isfinite(v), "samples are finite");
        round_trip(*s, in::decode_status);
      }
      break;
    default:
      if (auto f = in::decode_facts(body, n)) {
        check_text(f->version), check_text(f->strategy);
        round_trip(*f, in::decode_facts);
      }
      break;
  }
  return 0;
}
