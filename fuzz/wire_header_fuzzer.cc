// The peer wire's head decoder (proto/message.h: decode_head) on hostile frames.
//
// Checked beyond "no crash, no sanitizer report", for a frame that decodes:
//  - the message keeps decode_head's promises: this daemon's version, a known kind
//    whose body is that kind's struct, a payload within kMaxPayloadBytes, raw fp32
//    sizes that match, no slice overflow, a finite non-negative weight, no payload
//    for the kinds without one (the parameter server's push, params and replica
//    updates and snapshots carry slices);
//  - it re-encodes (encode_head) to a frame within kMaxHeaderBytes that decodes to
//    the same message, and encoding that gives the same bytes again (one encoding
//    per message);
//  - validate_payload accepts exactly the payload the envelope announces.

#include <cmath>
#include <string>
#include <string_view>
#include <variant>

#include "fuzz/invariant.h"
#include "proto/message.h"

namespace gossip::fuzz {
namespace {

using proto::CodecId;

void check_slice(const proto::Envelope& e, uint64_t offset, uint64_t numel, CodecId codec,
                 double weight) {
  expect(numel > 0, "a decoded slice has elements");
  expect(offset <= UINT64_MAX - numel, "a decoded slice does not overflow");
  if (codec == CodecId::kNone)
    expect(e.length % 4 == 0 && e.length / 4 == numel, "a raw fp32 slice is numel * 4 bytes");
  else
    expect(e.length > 0, "a compressed slice has a payload");
  expect(std::string_view(proto::codec_name(codec)) != "?", "a decoded slice has a known codec");
  expect(std::isfinite(weight) && weight >= 0.0, "a decoded weight is finite and >= 0");
}

void check_promises(const proto::Message& m) {
  const proto::Envelope& e = m.envelope;
  expect(e.version == proto::kWireVersion, "a decoded head has this daemon's version");
  expect(std::string_view(proto::kind_name(e.kind)) != "?", "a decoded head has a known kind");
  expect(proto::kind_of(m.body) == e.kind, "the body is the envelope's kind");
  expect(e.length <= proto::kMaxPayloadBytes, "a decoded payload is within the limit");
  if (const auto* c = std::get_if<proto::ModelChunk>(&m.body))
    check_slice(e, c->offset, c->numel, c->codec, c->weight);
  else if (const auto* s = std::get_if<proto::StateChunk>(&m.body))
    check_slice(e, s->offset, s->numel, CodecId::kNone, s->weight);
  else if (const auto* p = std::get_if<proto::PsPush>(&m.body))
    check_slice(e, p->offset, p->numel, p->codec, 1.0);
  else if (const auto* q = std::get_if<proto::PsParams>(&m.body))
    check_slice(e, q->offset, q->numel, q->codec, 1.0);
  else if (const auto* r = std::get_if<proto::PsReplica>(&m.body);
           r && r->what != proto::PsReplica::kRequest)
    check_slice(e, r->offset, r->numel, CodecId::kNone, 1.0);
  else if (const auto* i = std::get_if<proto::InitialModel>(&m.body);
           i && i->what == proto::InitialModel::kChunk)
    check_slice(e, i->offset, i->numel, CodecId::kNone, 1.0);
  else if (const auto* t = std::get_if<proto::TuneReport>(&m.body))
    expect(t->samples <= proto::kMaxTuneSamples && e.length == t->samples * sizeof(float),
           "a tune-report carries its samples, at most kMaxTuneSamples");
  else if (const auto* i = std::get_if<proto::Inspect>(&m.body))
    expect(i->what <= proto::Inspect::kStatus &&
               e.length <= (i->what == proto::Inspect::kPing ? proto::kMaxInspectProbeBytes
                                                             : proto::kMaxInspectReportBytes) &&
               (e.length == 0 ||
                (i->what != proto::Inspect::kAskLinks && i->what != proto::Inspect::kAskStatus)),
           "an inspect message's payload is within its what's limit");
  else if (const auto* r = std::get_if<proto::RingProbe>(&m.body))
    expect(r->members <= proto::kMaxRingProbeMembers && e.length == r->members * sizeof(uint32_t),
           "a ring-probe carries its members' ids");
  else if (const auto* b = std::get_if<proto::Member>(&m.body))
    expect(
        b->what <= proto::Member::kLastWhat &&
            (b->what == proto::Member::kSync ? e.length == 0
                                             : e.length > 0 && e.length <= proto::kMaxMemberBytes),
        "a member message carries 1 byte to kMaxMemberBytes, a sync none");
  else if (const auto* n = std::get_if<proto::RingNorms>(&m.body))
    expect(n->chunks > 0 && n->chunks <= proto::kMaxRingNormChunks &&
               e.length == n->chunks * sizeof(float),
           "a ring-norms message carries a norm per chunk");
  else if (std::holds_alternative<proto::NcclId>(m.body))
    expect(e.length == proto::kNcclIdBytes, "an nccl-id carries the id's bytes");
  else if (const auto* o = std::get_if<proto::StateOffer>(&m.body); o && o->has_state)
    expect(o->chunk_elems > 0 && e.length % proto::kStateHashBytes == 0 &&
               e.length / proto::kStateHashBytes ==
                   o->numel / o->chunk_elems + (o->numel % o->chunk_elems != 0),
           "a state-offer with a state carries a hash per chunk");
  else
    expect(e.length == 0, "a kind without payload announces none");
  if (const auto* a = std::get_if<proto::RingAddress>(&m.body)) {
    expect(a->port != 0, "a ring address has a port");
    expect(a->transport <= proto::RingAddress::kRdma, "a ring address names a known transport");
  }
}

}  // namespace
}  // namespace gossip::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  using namespace gossip::fuzz;
  auto m = proto::decode_head(data, size);
  if (!m) {
    expect(!m.status().message().empty(), "a refused head comes with a message");
    return 0;
  }
  check_promises(*m);

  const proto::Envelope& e = m->envelope;
  const std::string frame = proto::encode_head(e.from, e.round, m->body, e.length);
  expect(frame.size() <= proto::kMaxHeaderBytes, "an encoded head fits the head limit");
  auto again = proto::decode_head(frame.data(), frame.size());
  if (!again) fail("a decoded head re-encodes to one that decodes: " + again.status().message());
  const proto::Envelope& e2 = again->envelope;
  expect(e2.kind == e.kind && e2.from == e.from && e2.round == e.round && e2.length == e.length,
         "a decoded head re-encodes to the same envelope");
  expect(proto::encode_head(e2.from, e2.round, again->body, e2.length) == frame,
         "a message has one encoding (so its body came back field for field)");

  const size_t frames = e.length == 0 ? 0 : 1;
  const Status st = proto::validate_payload(e, frames, static_cast<size_t>(e.length));
  if (!st) fail("validate_payload accepts the payload its envelope announces: " + st.message());
  expect(!proto::validate_payload(e, frames, static_cast<size_t>(e.length) + 1).is_ok(),
         "validate_payload refuses a payload longer than announced");
  return 0;
}
