// A starting node's side of the start-up broadcast (sgd/membership/initial_model.h:
// InitialModel::fetch) fed a hostile stream: initial-model chunks and requests from
// node 0 (the source) and two other peers, in any order, with any seqs, offsets,
// sizes, totals, layouts and values, through the real wire encoding
// (peers/memory_channel.h), one message per turn of the fetch's wait loop (its tick);
// the fetch is cancelled when the input ends.
//
// Input: byte 0 sets the model's size (1..64 elements); then records of an op byte
// and a sender byte (sender % 3: node 0, 2 or 3):
//   op % 2 == 0  chunk: seq (1), offset (1), numel (1, mod 80), total (1, mod 80),
//                flags (right layout), then numel floats (4 bytes each; missing
//                bytes are zeros)
//   op % 3 == 1  request
//   op % 3 == 2  digest: flags (odd: the digest of the fetcher's own model, else 8
//                bytes), total (1, mod 80)
//
// Checked beyond "no crash, no hang, no sanitizer report", for a fetch that succeeds:
// the model holds no NaN or Inf, and either node 0 sent at least one chunk and every
// element is one that node 0 sent for that position (no other peer's value, no stale
// one), or node 0 sent the digest of the model as it was, which is left unchanged.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "fuzz/byte_reader.h"
#include "fuzz/invariant.h"
#include "peers/memory_channel.h"
#include "peers/router.h"
#include "sgd/membership/initial_model.h"

namespace gossip::fuzz {
namespace {

constexpr uint64_t kLayout = 0x1234;

// What node 0 sent for each position: any of these may end up there.
using Sent = std::map<uint64_t, std::set<uint32_t>>;  // position -> float bit patterns

void feed(Reader& in, std::vector<std::unique_ptr<peers::MemoryChannel>>& senders, Sent& sent,
          bool& source_sent, uint64_t own_digest, bool& source_digest) {
  const uint8_t op = in.take<uint8_t>();
  const size_t who = in.take<uint8_t>() % senders.size();
  peers::MemoryChannel& from = *senders[who];
  if (op % 3 == 2) {
    const bool own = in.take<uint8_t>() & 1;
    const uint64_t digest = own ? own_digest : in.take<uint64_t>();
    const uint64_t total = in.take<uint8_t>() % 80;
    if (who == 0 && digest == own_digest) source_digest = true;
    (void)from.send(
        1, 0, proto::InitialModel{proto::InitialModel::kDigest, digest, 0, 0, total, kLayout});
    return;
  }
  if (op % 3 == 1) {
    (void)from.send(1, 0, proto::InitialModel{proto::InitialModel::kRequest, 0, 0, 0, 0, kLayout});
    return;
  }
  proto::InitialModel chunk;
  chunk.what = proto::InitialModel::kChunk;
  chunk.seq = in.take<uint8_t>();
  chunk.offset = in.take<uint8_t>();
  chunk.numel = in.take<uint8_t>() % 80;
  chunk.total = in.take<uint8_t>() % 80;
  chunk.layout = (in.take<uint8_t>() & 1) ? kLayout : kLayout + 1;
  auto payload = std::make_shared<std::vector<std::byte>>(chunk.numel * sizeof(float));
  for (size_t i = 0; i < chunk.numel; ++i) {
    const float x = in.take<float>();
    std::memcpy(payload->data() + i * sizeof(float), &x, sizeof x);
    if (who == 0) {
      uint32_t bits = 0;
      std::memcpy(&bits, &x, sizeof bits);
      sent[chunk.offset + i].insert(bits);
    }
  }
  if (who == 0) source_sent = true;
  (void)from.send_shared(1, 0, chunk, std::move(payload));
}

}  // namespace
}  // namespace gossip::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gossip;
  if (size < 1) return 0;
  fuzz::Reader in(data + 1, size - 1);
  peers::MemoryHub hub;
  auto fetcher = hub.join(1, {0, 2, 3});
  std::vector<std::unique_ptr<peers::MemoryChannel>> senders;
  for (uint32_t id : {0u, 2u, 3u}) senders.push_back(hub.join(id, {0, 1, 2, 3}));
  peers::Router router(*fetcher);
  sgd::InitialModel initial(router, 16);

  std::atomic<bool> cancel{false};
  fuzz::Sent sent;
  bool source_sent = false, source_digest = false;
  std::vector<float> model(1 + data[0] % 64, -7.0f);
  const std::vector<float> before = model;
  const uint64_t own_digest = sgd::InitialModel::digest(model);
  const auto tick = [&] {
    if (in.done())
      cancel = true;
    else
      fuzz::feed(in, senders, sent, source_sent, own_digest, source_digest);
  };
  const Status st =
      initial.fetch(model, fuzz::kLayout,
                    std::chrono::steady_clock::now() + std::chrono::seconds(5), &cancel, tick);
  if (!st) return 0;
  if (model == before) {
    fuzz::expect(source_digest || source_sent,
                 "a model left as it was is one node 0 sent the digest (or the chunks) of");
    return 0;
  }
  fuzz::expect(source_sent, "a fetched initial model came from node 0's chunks");
  for (size_t i = 0; i < model.size(); ++i) {
    fuzz::expect(std::isfinite(model[i]), "a fetched initial model holds no NaN or Inf");
    uint32_t bits = 0;
    std::memcpy(&bits, &model[i], sizeof bits);
    fuzz::expect(sent[i].count(bits) == 1, "every element is one node 0 sent for its position");
  }
  return 0;
}
