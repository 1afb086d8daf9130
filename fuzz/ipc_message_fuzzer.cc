// The trainer <-> daemon IPC decoder (proto/ipc.h: decode) on hostile messages: attach
// and every other kind.
//
// Checked beyond "no crash, no sanitizer report", for a message that decodes:
//  - it re-encodes to a message that decodes to the same kind, and that one encodes to
//    the very same bytes (encode writes every field, so equal bytes mean equal fields);
//  - an attach's layout passes validate_layout (decode promises it), and its offsets
//    and sizes can be computed, and it equals itself.

#include <string>
#include <variant>

#include "fuzz/invariant.h"
#include "proto/ipc.h"
#include "proto/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  using namespace gossip::fuzz;
  namespace ipc = proto::ipc;
  auto m = ipc::decode(data, size);
  if (!m) {
    expect(!m.status().message().empty(), "a refused message comes with a message");
    return 0;
  }
  if (const auto* attach = std::get_if<ipc::Attach>(&*m)) {
    const Status st = proto::validate_layout(attach->layout);
    if (!st) fail("an attach that decodes has a valid layout: " + st.message());
    const auto offsets = proto::tensor_offsets(attach->layout);
    expect(offsets.size() == attach->layout.tensors.size(), "one offset per tensor");
    expect(proto::padded_numel(attach->layout) >= attach->layout.total_numel(),
           "padding only adds elements");
    expect(!proto::first_difference(attach->layout, attach->layout).has_value(),
           "a layout does not differ from itself");
  }

  const std::string bytes = ipc::encode(*m);
  auto again = ipc::decode(bytes.data(), bytes.size());
  if (!again) fail("a decoded message re-encodes to one that decodes: " + again.status().message());
  expect(again->index() == m->index(), "a decoded message re-encodes to the same kind");
  expect(ipc::encode(*again) == bytes, "a decoded message re-encodes to the same fields");
  return 0;
}
