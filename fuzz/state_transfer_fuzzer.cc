// A joining node's side of state transfer (sgd/membership/state_transfer.h: StateTransfer::fetch)
// fed a hostile stream: offers, state chunks, byes and heartbeats from three peers,
// in any order, with any rounds, steps, chunkings, manifests, offsets, sizes,
// weights, layouts and values. The messages cross the real wire encoding
// (peers/memory_channel.h encodes and decodes as the TCP channel does), one per turn
// of the joiner's wait loop (its tick), and the join is cancelled when the input ends.
//
// Each peer holds a true state (peers 1 and 2 the same one, peer 3 another), which
// it may offer and send honestly, so that multi-donor downloads are reached.
//
// Input: byte 0 sets --trim (0 or 1) and a weight bound (none or 4), byte 1 the
// model's size (1..64 elements, its low six bits) and whether the strategy shares a
// state as large besides it (bit 6); then records of an op byte and a sender byte:
//   op % 4 == 0  offer: flags (has_state, right layout, wrong size, honest manifest,
//                a weight), round (8 bytes), step (8), chunk_elems (1, 1..16), the
//                weight (8, a double, with its flag; else 1); a manifest that is not
//                honest is read from the input (16 bytes a chunk)
//   op % 4 == 1  chunk: round (8), seq (1), flags (right layout, honest values,
//                honest place), weight (8, a double); a place that is not honest is
//                offset (8) and numel (2, mod 512); values that are not honest are
//                numel floats (4 bytes each); missing bytes are zeros
//   op % 4 == 2  bye
//   op % 4 == 3  heartbeat
//
// Checked beyond "no crash, no hang, no sanitizer report", for a state that comes
// out: it has the model's size and the shared state's, no NaN or Inf, a finite
// positive weight within the bound, it comes from one of the peers and, without a
// trim, it is one peer's true state bit for bit (every chunk was checked against a
// manifest, and no input can forge a hash).

#include <sodium.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/byte_reader.h"
#include "fuzz/invariant.h"
#include "peers/memory_channel.h"
#include "peers/router.h"
#include "sgd/membership/state_transfer.h"

namespace gossip::fuzz {
namespace {

constexpr uint64_t kLayout = 0x1234;

// Peer p's true state (p in 1..3): peers 1 and 2 hold the same.
float true_value(uint32_t peer, size_t i) {
  return (peer == 3 ? 3.0f : 1.0f) + 0.25f * static_cast<float>(i);
}

struct Peer {
  std::unique_ptr<peers::MemoryChannel> channel;
  uint32_t id = 0;
  uint64_t chunk_elems = 1;  // of its last offer
};

// Sends the next record from one of the peers to the joiner (node 0).
// `state_numel`: the joiner's model and shared state.
void feed(Reader& in, std::vector<Peer>& peers, size_t state_numel) {
  const uint8_t op = in.take<uint8_t>();
  Peer& from = peers[in.take<uint8_t>() % peers.size()];
  switch (op % 4) {
    case 0: {
      const uint8_t flags = in.take<uint8_t>();
      const uint64_t round = in.take<uint64_t>();
      proto::StateOffer offer;
      offer.has_state = flags & 1;
      offer.layout = (flags & 2) ? kLayout : kLayout + 1;
      offer.step = in.take<uint64_t>();
      from.chunk_elems = 1 + in.take<uint8_t>() % 16;
      if (!offer.has_state) {
        (void)from.channel->send(0, round, offer);
        return;
      }
      offer.numel = state_numel + ((flags & 4) ? 1 : 0);
      offer.chunk_elems = from.chunk_elems;
      if (flags & 16) offer.weight = in.take<double>();
      const uint64_t chunks = (offer.numel + offer.chunk_elems - 1) / offer.chunk_elems;
      auto manifest = std::make_shared<std::vector<std::byte>>(chunks * proto::kStateHashBytes);
      for (uint64_t c = 0; c < chunks; ++c) {
        auto* out = reinterpret_cast<unsigned char*>(manifest->data() + c * proto::kStateHashBytes);
        if (flags & 8) {
          std::vector<float> v;
          for (uint64_t i = c * offer.chunk_elems;
               i < std::min<uint64_t>(offer.numel, (c + 1) * offer.chunk_elems); ++i)
            v.push_back(true_value(from.id, i));
          crypto_generichash(out, proto::kStateHashBytes,
                             reinterpret_cast<const unsigned char*>(v.data()),
                             v.size() * sizeof(float), nullptr, 0);
        } else {
          for (uint64_t k = 0; k < proto::kStateHashBytes; ++k) out[k] = in.take<uint8_t>();
        }
      }
      (void)from.channel->send_shared(0, round, offer, std::move(manifest));
      return;
    }
    case 1: {
      const uint64_t round = in.take<uint64_t>();
      proto::StateChunk chunk;
      chunk.seq = in.take<uint8_t>();
      const uint8_t flags = in.take<uint8_t>();
      chunk.weight = in.take<double>();
      chunk.layout = (flags & 1) ? kLayout : kLayout + 1;
      if (flags & 4) {
        chunk.offset = chunk.seq * from.chunk_elems;
        chunk.numel = chunk.offset < state_numel
                          ? std::min<uint64_t>(from.chunk_elems, state_numel - chunk.offset)
                          : 1;
      } else {
        chunk.offset = in.take<uint64_t>();
        chunk.numel = in.take<uint16_t>() % 512;
      }
      auto payload = std::make_shared<std::vector<std::byte>>(chunk.numel * sizeof(float));
      for (size_t i = 0; i < chunk.numel; ++i) {
        const float x = (flags & 2) ? true_value(from.id, chunk.offset + i) : in.take<float>();
        std::memcpy(payload->data() + i * sizeof(float), &x, sizeof x);
      }
      (void)from.channel->send_shared(0, round, chunk, std::move(payload));
      return;
    }
    case 2:
      (void)from.channel->send(0, 0, proto::Bye{});
      return;
    default:
      (void)from.channel->send(0, 0, proto::Heartbeat{});
  }
}

}  // namespace
}  // namespace gossip::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  if (size < 2) return 0;
  fuzz::Reader in(data + 2, size - 2);
  peers::MemoryHub hub;
  auto joiner = hub.join(0, {1, 2, 3});
  std::vector<fuzz::Peer> others;
  for (uint32_t id : {1u, 2u, 3u}) others.push_back({hub.join(id, {0, 1, 2, 3}), id});
  peers::Router router(*joiner);
  sgd::StateTransfer transfer(router, [](uint32_t) { return false; });

  const size_t numel = 1 + data[1] % 64;
  const size_t shared = (data[1] & 64) ? numel : 0;
  const size_t state_numel = numel + shared;
  std::atomic<bool> cancel{false};
  sgd::JoinOptions o;
  o.offer_wait = std::chrono::milliseconds(1000);
  o.trim = data[0] & 1;
  o.max_weight = (data[0] & 2) ? 4.0 : 0.0;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  o.cancel = &cancel;
  o.tick = [&] {
    if (in.done())
      cancel = true;
    else
      fuzz::feed(in, others, state_numel);
  };
  auto got = transfer.fetch(numel, shared, fuzz::kLayout, o);
  if (!got.is_ok() || !got->has_value()) return 0;
  const sgd::NodeState& s = **got;
  fuzz::expect(s.model.size() == numel, "a fetched state has the model's size");
  fuzz::expect(s.shared.size() == shared, "a fetched state has the shared state's size");
  for (float x : s.model) fuzz::expect(std::isfinite(x), "a fetched state holds no NaN or Inf");
  for (float x : s.shared) fuzz::expect(std::isfinite(x), "a fetched state holds no NaN or Inf");
  fuzz::expect(std::isfinite(s.weight) && s.weight > 0, "a fetched weight is finite and positive");
  fuzz::expect(o.max_weight == 0 || s.weight <= o.max_weight, "a fetched weight is within bounds");
  fuzz::expect(s.from >= 1 && s.from <= 3, "a fetched state comes from a peer");
  if (o.trim == 0) {
    bool one_of = false;
    for (uint32_t p : {1u, 3u}) {
      bool same = true;
      for (size_t i = 0; i < numel + shared && same; ++i)
        same = (i < numel ? s.model[i] : s.shared[i - numel]) == fuzz::true_value(p, i);
      one_of |= same;
    }
    fuzz::expect(one_of, "without a trim, a fetched state is a peer's true state bit for bit");
  }
  return 0;
}
