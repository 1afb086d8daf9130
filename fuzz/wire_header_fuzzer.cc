// The peer wire header decoder (proto/message.h: decode_header) on hostile frames.
//
// Checked beyond "no crash, no sanitizer report", for a frame that decodes:
//  - the header keeps decode_header's promises: a known version, kind and codec, a
//    payload within kMaxPayloadBytes, raw fp32 sizes that match, no offset overflow, a
//    finite non-negative weight;
//  - it re-encodes (encode_header) to a frame within kMaxHeaderBytes that decodes to
//    the same fields, and encoding that gives the same bytes again (one encoding per
//    header);
//  - validate_payload accepts exactly the payload the header announces.

#include <cstring>
#include <string>
#include <string_view>

#include "fuzz/invariant.h"
#include "proto/message.h"

namespace gossip::fuzz {
namespace {

using proto::CodecId;
using proto::Header;

bool same_fields(const Header& a, const Header& b) {
  // The weight bit for bit: -0.0 must stay -0.0.
  return a.v == b.v && a.kind == b.kind && a.from == b.from && a.round == b.round &&
         a.seq == b.seq && a.tensor == b.tensor && a.offset == b.offset && a.codec == b.codec &&
         a.numel == b.numel && a.bytes == b.bytes && a.layout == b.layout &&
         std::memcmp(&a.weight, &b.weight, sizeof(double)) == 0;
}

void check_promises(const Header& h) {
  expect(h.v == proto::kWireVersion, "a decoded header has this daemon's version");
  expect(std::string_view(proto::kind_name(h.kind)) != "?", "a decoded header has a known kind");
  expect(std::string_view(proto::codec_name(h.codec)) != "?", "a decoded header has a known codec");
  expect(h.bytes <= proto::kMaxPayloadBytes, "a decoded header's payload is within the limit");
  if (h.numel > 0) {
    expect(h.offset <= UINT64_MAX - h.numel, "a decoded slice does not overflow");
    if (h.codec == CodecId::kNone)
      expect(h.bytes % 4 == 0 && h.bytes / 4 == h.numel, "a raw fp32 slice is numel * 4 bytes");
    else
      expect(h.bytes > 0, "a compressed slice has a payload");
  }
  expect(h.weight >= 0.0 && h.weight <= 1.7976931348623157e308,
         "a decoded weight is finite and >= 0");
}

}  // namespace
}  // namespace gossip::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  using namespace gossip::fuzz;
  auto h = proto::decode_header(data, size);
  if (!h) {
    expect(!h.status().message().empty(), "a refused header comes with a message");
    return 0;
  }
  check_promises(*h);

  const std::string frame = proto::encode_header(*h);
  expect(frame.size() <= proto::kMaxHeaderBytes, "an encoded header fits the header limit");
  auto again = proto::decode_header(frame.data(), frame.size());
  if (!again) fail("a decoded header re-encodes to one that decodes: " + again.status().message());
  expect(same_fields(*h, *again), "a decoded header re-encodes to the same fields");
  expect(proto::encode_header(*again) == frame, "a header has one encoding");

  const size_t frames = h->bytes == 0 ? 0 : 1;
  const Status st = proto::validate_payload(*h, frames, static_cast<size_t>(h->bytes));
  if (!st) fail("validate_payload accepts the payload its header announces: " + st.message());
  expect(!proto::validate_payload(*h, frames, static_cast<size_t>(h->bytes) + 1).is_ok(),
         "validate_payload refuses a payload longer than announced");
  return 0;
}
