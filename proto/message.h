#pragma once
// The peer wire (daemon <-> daemon): a ZeroMQ multipart message whose first frame
// is a msgpack map header and whose following frames are raw payload, so large
// arrays are never copied through msgpack.
//
//   frame 0: {v, kind, from, round, seq, tensor, offset, codec, numel, bytes, layout}
//   frame 1: payload of exactly `bytes` bytes (absent when bytes == 0)

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace gossip::proto {

inline constexpr uint32_t kWireVersion = 1;

enum class Kind : uint8_t {
  kHello = 1,       // first message on a connection: who I am and my layout fingerprint
  kModelChunk = 2,  // a slice [offset, offset+numel) of a node's flat model for `round`
  kBye = 3,         // the sender is shutting down
  kRingAddress =
      4,        // to the left ring neighbor: the sender's ring transport listens on port `offset`;
                // `seq`: a token the neighbor must present when it connects (0: none)
  kNcclId = 5,  // from the lowest id to every node: the ncclUniqueId (kNcclIdBytes) of the
                // communicator for `round`
  // Churn (sgd/state_transfer.h). None of them makes the receiver wait for the sender in rounds.
  kHeartbeat = 6,  // the sender is alive; `round`: its next round
  kJoin = 7,       // the sender starts without state and asks who has one
  kStateOffer =
      8,  // answer to join: the sender's next `round` and its step (`offset`); 0, 0: no state
  kStateRequest = 9,  // send me the state you offered for `round`
  kStateChunk = 10,   // raw fp32 slice [offset, offset+numel) of the sender's model before `round`;
                      // in an elastic ring, of the all-reduce result of `round`
  kRingProbe = 11,  // elastic ring (sgd/ring_membership.h): the sender re-forms the ring it had at
                    // epoch `offset` (view `seq`); `round`: its next round; `tensor` 1: it
                    // restarted and asks back in
  kCopyRequest =
      12,  // CHOCO (sgd/choco_sgd.h): the receiver's public copy at the sender is stale; send
           // the copy itself (a model-chunk with tensor kPublicCopyTensor) from your next round on
};
inline constexpr uint8_t kMaxKind = 12;
// model-chunk `tensor` values: 0 is the flat model (or, for CHOCO, a correction to
// the sender's public copy); kPublicCopyTensor is CHOCO's public copy itself, raw.
inline constexpr uint32_t kPublicCopyTensor = 1;
inline constexpr uint64_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
const char* kind_name(Kind k);

// Payload encodings. compression/ implements them; the wire only knows the ids.
enum class CodecId : uint8_t {
  kNone = 0,  // raw little-endian fp32
  kFp16 = 1,
  kBf16 = 2,
  kInt8 = 3,
  kQsgd = 4,
  kSign = 5,
  kTopk = 6,
  kRandk = 7,
};
inline constexpr uint8_t kMaxCodecId = 7;
const char* codec_name(CodecId c);

struct Header {
  uint32_t v = kWireVersion;
  Kind kind = Kind::kHello;
  uint32_t from = 0;    // sender's node id
  uint64_t round = 0;   // synchronization round the payload belongs to
  uint64_t seq = 0;     // per (sender, round) chunk sequence, starts at 0
  uint32_t tensor = 0;  // reserved for per-tensor exchanges; 0 for the flat model
  uint64_t offset = 0;  // first element of the slice in the flat model
  CodecId codec = CodecId::kNone;
  uint64_t numel = 0;   // elements in the slice
  uint64_t bytes = 0;   // payload frame size in bytes
  uint64_t layout = 0;  // sender's layout fingerprint (0 while unknown)
  // Push-sum weight carried with a model chunk (SGP). Optional on the wire: absent
  // means 1.0, which every other strategy sends. Finite and >= 0 when present.
  double weight = 1.0;
};

// Upper bound of one payload frame; ZMQ_MAXMSGSIZE is set from it so an oversized
// frame is cut off by ZeroMQ before it is buffered.
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{256} << 20;
inline constexpr size_t kMaxHeaderBytes = 512;

std::string encode_header(const Header& h);

// Strict decoding: a msgpack map with exactly the known keys (plus the optional
// float 'weight'), each an unsigned integer in range, a known version, kind and codec, and
// self-consistent sizes (bytes == numel * 4 for raw fp32, a non-empty payload for the other codecs,
// whose exact size only the codec can check, and no payload for hello/bye).
Result<Header> decode_header(const void* data, size_t size);

// Checks the frames that followed a decoded header: how many and how large.
Status validate_payload(const Header& h, size_t payload_frames, size_t payload_bytes);

// ZMTP 3 framing: 1 flag byte plus a 1-byte or 8-byte length.
inline constexpr uint64_t zmtp_frame_overhead(uint64_t frame_bytes) {
  return frame_bytes <= 255 ? 2 : 9;
}

}  // namespace gossip::proto
