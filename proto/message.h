#pragma once
// The peer wire (daemon <-> daemon): a ZeroMQ multipart message.
//
//   frame 0: the envelope, then the body: two msgpack arrays back to back
//            envelope = [magic, version, kind, from, round, length]
//            body     = the fields of the kind's struct below, in declaration order
//   frame 1: the payload, exactly `length` bytes (absent when length == 0)
//
// The envelope carries only what every message carries; each kind has a struct of
// its own with its own fields. Large arrays (model slices) travel in the payload
// frame, never through msgpack.
//
// Every version keeps [magic, version, ...] as the start of its envelope, so that a
// daemon refuses another version's message by number instead of misreading it.
//
// This file is the one list of kinds: adding one is an enum value, a struct with
// kKind and fields(), its place in Body, and its checks in message.cc.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "base/status.h"

namespace gossip::proto {

inline constexpr uint32_t kWireMagic = 0x47535044;  // "GSPD"
// Version 1 (a flat msgpack map header, before typed messages) is refused by name;
// version 3 added state-offer's `numel`, version 4 its `chunk_elems` and manifest and
// state-request's chunk range, version 5 ring-probe's member list and the member kind,
// version 7 ring-probe's `merge`, version 8 ps-params' `clock`, the envelope's `epoch`
// and the member kind `sync`, version 9 the kind ring-norms, version 10 ring-address's
// `transport`, version 11 ring-probe's `holds_result`, version 12 heartbeat's `ask`.
inline constexpr uint32_t kWireVersion = 12;

enum class Kind : uint8_t {
  kHello = 1,
  kModelChunk = 2,
  kBye = 3,
  kRingAddress = 4,
  kNcclId = 5,
  kHeartbeat = 6,
  kJoin = 7,
  kStateOffer = 8,
  kStateRequest = 9,
  kStateChunk = 10,
  kRingProbe = 11,
  kCopyRequest = 12,
  kPsPush = 13,
  kPsPull = 14,
  kPsParams = 15,
  kPsReplica = 16,
  kInitialModel = 17,
  kTuneReport = 18,
  kInspect = 19,
  kMember = 20,
  kRingNorms = 21,
};
inline constexpr uint8_t kMaxKind = 21;
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
  kChain = 8,  // a composed sparse codec: selection + quantized values + packed indices
};
inline constexpr uint8_t kMaxCodecId = 8;
const char* codec_name(CodecId c);

// model-chunk `tensor` values: 0 is the flat model (or, for CHOCO, a correction to
// the sender's public copy); kPublicCopyTensor is CHOCO's public copy itself, raw.
inline constexpr uint32_t kPublicCopyTensor = 1;
inline constexpr uint64_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// What every message carries. `round` is the round the message belongs to (a
// model or state chunk) or the sender's next round (everything else; 0 before its
// first). `length` is the payload frame's size; the transport sets it, and
// `version` and `from`. `epoch` is the sender's member-list epoch (daemon/admission.h:
// the joins it knows of): a node that hears a peer ahead of its own asks it for the
// adds it missed (a partition, a lost message), rather than waiting for a restart.
struct Envelope {
  uint32_t version = kWireVersion;
  Kind kind = Kind::kHello;
  uint32_t from = 0;
  uint64_t round = 0;
  uint64_t length = 0;
  uint64_t epoch = 0;
};

// The first message on a connection, and "I am alive, wait for me again".
struct Hello {
  static constexpr Kind kKind = Kind::kHello;
  uint64_t layout = 0;  // sender's layout fingerprint (0 while no trainer attached)
  template <class F>
  void fields(F&& f) {
    f("layout", layout);
  }
};

// A slice [offset, offset + numel) of the sender's flat model for the envelope's
// round; payload: the slice in `codec`.
struct ModelChunk {
  static constexpr Kind kKind = Kind::kModelChunk;
  uint64_t seq = 0;     // per (sender, round), from 0
  uint32_t tensor = 0;  // 0, or kPublicCopyTensor (CHOCO)
  uint64_t offset = 0;
  uint64_t numel = 0;
  CodecId codec = CodecId::kNone;
  double weight = 1.0;  // push-sum's weight (SGP); 1 for every other strategy
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("seq", seq), f("tensor", tensor), f("offset", offset), f("numel", numel);
    f("codec", codec), f("weight", weight), f("layout", layout);
  }
};

// The sender is shutting down.
struct Bye {
  static constexpr Kind kKind = Kind::kBye;
  template <class F>
  void fields(F&&) {}
};

// To the left ring neighbor: the sender's ring transport listens on `port`.
struct RingAddress {
  static constexpr Kind kKind = Kind::kRingAddress;
  // What the ring runs over at the sender: under --transport auto each node picks RDMA
  // or TCP alone, and a neighbor on the other one cannot connect.
  enum Transport : uint8_t { kTcp = 0, kRdma = 1 };
  uint16_t port = 0;
  uint64_t token = 0;  // the neighbor presents it when it connects (0: none)
  uint64_t view =
      0;  // the membership view the address belongs to (sgd/membership/ring_membership.h)
  uint64_t layout = 0;
  uint8_t transport = kTcp;
  template <class F>
  void fields(F&& f) {
    f("port", port), f("token", token), f("view", view), f("layout", layout),
        f("transport", transport);
  }
};

// From rank 0 to every rank: the ncclUniqueId of communicator `generation`;
// payload: kNcclIdBytes.
struct NcclId {
  static constexpr Kind kKind = Kind::kNcclId;
  uint64_t generation = 0;
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("generation", generation), f("layout", layout);
  }
};

// Churn (sgd/membership/state_transfer.h). None of them makes the receiver wait for the sender.
// The sender is alive, and in this round (the header's). `ask`: a neighbor's round waited for the
// sender's model longer than usual, and asks whether its daemon is up; one that is
// answers with a heartbeat at once (sgd/overlay/neighbor_exchange.h, the patience).
struct Heartbeat {
  static constexpr Kind kKind = Kind::kHeartbeat;
  bool ask = false;
  template <class F>
  void fields(F&& f) {
    f("ask", ask);
  }
};

// The sender starts without state and asks who has one.
struct Join {
  static constexpr Kind kKind = Kind::kJoin;
  template <class F>
  void fields(F&&) {}
};

// The answer to a join or a state request: the state before the envelope's round.
// Payload (when has_state): its manifest, the kStateHashBytes BLAKE2b hash of each
// of its ceil(numel / chunk_elems) raw fp32 chunks in order. Donors that hold the
// same state offer the same manifest, so a joiner fetches chunks from all of them
// and checks each against it (sgd/membership/state_transfer.h).
struct StateOffer {
  static constexpr Kind kKind = Kind::kStateOffer;
  bool has_state = false;  // false: the sender offers nothing
  uint64_t step = 0;       // the trainers' step the state belongs to
  // Elements its state-chunks will carry: the model, then what the strategy's
  // members hold alike besides it (local SGD's outer momentum), so that a joiner
  // whose strategy keeps another size refuses the offer instead of a transfer.
  uint64_t numel = 0;
  uint64_t layout = 0;
  uint64_t chunk_elems = 0;  // elements per chunk (the last may hold fewer)
  double weight = 1.0;       // push-sum's weight of the state; its chunks carry it too
  template <class F>
  void fields(F&& f) {
    f("has_state", has_state), f("step", step), f("numel", numel), f("layout", layout);
    f("chunk_elems", chunk_elems), f("weight", weight);
  }
};
inline constexpr uint64_t kStateHashBytes = 16;

// Chunks [first, first + count) of the state before the envelope's round, which the
// sender offered (count 0: to the end). The answer is a state-offer for that round
// (has_state false when the sender no longer holds it), then the chunks.
struct StateRequest {
  static constexpr Kind kKind = Kind::kStateRequest;
  uint64_t first = 0;
  uint64_t count = 0;
  template <class F>
  void fields(F&& f) {
    f("first", first), f("count", count);
  }
};

// A slice of the sender's model before the envelope's round (in an elastic ring,
// of the all-reduce result of that round); payload: raw fp32.
struct StateChunk {
  static constexpr Kind kKind = Kind::kStateChunk;
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t numel = 0;
  double weight = 1.0;  // push-sum's weight of the state
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("seq", seq), f("offset", offset), f("numel", numel), f("weight", weight);
    f("layout", layout);
  }
};

// Elastic ring (sgd/membership/ring_membership.h): the sender re-forms the ring it had at
// `epoch` (view `view`); the envelope's round is its next round. The payload lists
// the view's `members` (uint32 little-endian ids), so that a node hears of a member
// that another took in and it did not. `merge` joins two rings that trained apart (a
// partition that healed): kOffer, from a live ring to a node outside it that it may
// merge with (the list is the sender's view); kMerging, a re-forming that merges two
// rings, or that runs before the union's first round (the list is the union).
// `holds_result`: the sender holds the result of the round before its next round, so
// it may be the member that sends that result to members behind (sgd/membership/peer_ring.h).
struct RingProbe {
  static constexpr Kind kKind = Kind::kRingProbe;
  enum Merge : uint8_t { kReform = 0, kOffer = 1, kMerging = 2 };
  uint64_t epoch = 0;
  uint64_t view = 0;
  bool restarted = false;  // it restarted and asks back in
  uint64_t members = 0;
  uint8_t merge = kReform;
  bool holds_result = false;
  template <class F>
  void fields(F&& f) {
    f("epoch", epoch), f("view", view), f("restarted", restarted), f("members", members),
        f("merge", merge), f("holds_result", holds_result);
  }
};

// CHOCO (sgd/strategies/choco/choco_sgd.h): the receiver's public copy at the sender is stale; send
// the copy itself (a model-chunk of tensor kPublicCopyTensor) from your next round on.
struct CopyRequest {
  static constexpr Kind kKind = Kind::kCopyRequest;
  template <class F>
  void fields(F&&) {}
};

// Parameter servers (sgd/strategies/ps/). A worker's update of shard `shard` since its last
// push, at its clock (the envelope's round); payload: the slice [offset, offset +
// numel) of the shard's update, in `codec`. The slices of one push arrive in order.
struct PsPush {
  static constexpr Kind kKind = Kind::kPsPush;
  uint32_t shard = 0;
  uint64_t offset = 0;  // within the shard
  uint64_t numel = 0;
  CodecId codec = CodecId::kNone;
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("shard", shard), f("offset", offset), f("numel", numel), f("codec", codec);
    f("layout", layout);
  }
};

// A worker at clock `round` (the envelope's) asks for shard `shard`: the server
// answers when its mode lets that clock go on (bsp: every live worker pushed it;
// ssp: the slowest is at most S behind; async: at once).
struct PsPull {
  static constexpr Kind kKind = Kind::kPsPull;
  uint32_t shard = 0;
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("shard", shard), f("layout", layout);
  }
};

// The server's answer to a pull at clock `round` (the envelope's): a slice of the
// shard's parameters, in `codec`, and the clock the shard is at (bsp: the last it
// applied; async, ssp: the slowest counted worker's last push), from which a worker
// behind it (one that joined) goes on.
struct PsParams {
  static constexpr Kind kKind = Kind::kPsParams;
  uint32_t shard = 0;
  uint64_t offset = 0;  // within the shard
  uint64_t numel = 0;
  CodecId codec = CodecId::kNone;
  uint64_t layout = 0;
  uint64_t clock = 0;
  template <class F>
  void fields(F&& f) {
    f("shard", shard), f("offset", offset), f("numel", numel), f("codec", codec);
    f("layout", layout), f("clock", clock);
  }
};

// Replica servers (--ps-replicas): a shard's holder hands the next live holder of
// its chain what it applied, so that the replica holds the same parameters and takes
// over when the holder dies. `what`: an update the holder applied with weight
// 1 / divisor, from `worker`; a snapshot of the shard's parameters (the answer to a
// request); or a request for a snapshot (a replica that starts, or lost its feeder;
// no payload). The envelope's round is the shard's version (bsp) or the worker's
// clock (async, ssp). Payload: raw fp32.
struct PsReplica {
  static constexpr Kind kKind = Kind::kPsReplica;
  enum What : uint8_t { kUpdate = 0, kSnapshot = 1, kRequest = 2 };
  uint32_t shard = 0;
  uint64_t offset = 0;  // within the shard
  uint64_t numel = 0;
  uint8_t what = kUpdate;
  uint32_t worker = 0;
  uint32_t divisor = 1;
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("shard", shard), f("offset", offset), f("numel", numel), f("what", what);
    f("worker", worker), f("divisor", divisor), f("layout", layout);
  }
};

// Start-up (sgd/membership/initial_model.h): every node's replicas start from node 0's model.
// `what`: a request for it (no payload; asked again until it comes), or a slice
// [offset, offset + numel) of it, in order from seq 0, of a model of `total`
// elements (payload: raw fp32).
struct InitialModel {
  static constexpr Kind kKind = Kind::kInitialModel;
  // kDigest (node 0 to a peer): node 0's model hashes to `seq` (total, layout): a peer
  // whose replica hashes alike holds it already. A request's `seq` is the asker's own
  // digest (0: none), to which node 0 answers with the digest when they match.
  enum What : uint8_t { kRequest = 0, kChunk = 1, kDigest = 2 };
  uint8_t what = kRequest;
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t numel = 0;
  uint64_t total = 0;
  uint64_t layout = 0;
  template <class F>
  void fields(F&& f) {
    f("what", what), f("seq", seq), f("offset", offset), f("numel", numel), f("total", total);
    f("layout", layout);
  }
};

// --tune auto (daemon/tuner.h): what the sender measured over tuning epoch `epoch`,
// sent to every peer after the epoch's last round (the envelope's round is its next).
// Every node derives the same plan from the same reports. Payload: `samples` raw fp32,
// the sender's model before that round at the indices every node derives alike.
struct TuneReport {
  static constexpr Kind kKind = Kind::kTuneReport;
  uint64_t epoch = 0;
  double step_s = 0;       // its trainers' compute time per step
  double round_s = 0;      // the median duration of its compressed rounds
  double round_bytes = 0;  // the mean of the bytes it sent in one of them
  double probe_s = 0;      // its uncompressed probe round (0: not in this epoch)
  double probe_bytes = 0;
  uint64_t samples = 0;
  template <class F>
  void fields(F&& f) {
    f("epoch", epoch), f("step_s", step_s), f("round_s", round_s);
    f("round_bytes", round_bytes), f("probe_s", probe_s), f("probe_bytes", probe_bytes);
    f("samples", samples);
  }
};
inline constexpr uint64_t kMaxTuneSamples = 4096;
inline constexpr uint64_t kMaxRingProbeMembers = 4096;

// What gossipctl doctor and status --cluster ask of the nodes (daemon/inspector.h).
// A ping carries the sender's wall clock and, for a bandwidth probe, filler bytes; its
// pong echoes the ping's clock beside the answerer's, with the answerer's facts
// (proto/inspect.h) as payload. An ask (no payload) wants the answerer's row of the
// link matrix or its status, which comes back as a report of the same nonce.
struct Inspect {
  static constexpr Kind kKind = Kind::kInspect;
  enum What : uint8_t {
    kPing = 0,
    kPong = 1,
    kAskLinks = 2,
    kLinks = 3,
    kAskStatus = 4,
    kStatus = 5,
  };
  uint8_t what = kPing;
  uint64_t nonce = 0;
  uint64_t sent_us = 0;  // the sender's wall clock (µs since the Unix epoch)
  uint64_t echo_us = 0;  // a pong: the ping's sent_us
  template <class F>
  void fields(F&& f) {
    f("what", what), f("nonce", nonce), f("sent_us", sent_us), f("echo_us", echo_us);
  }
};
// A ping's filler (a bandwidth probe), and a report's encoded size (it goes on to
// gossipctl as one string of an IPC message, whose strings are at most 64 KiB).
inline constexpr uint64_t kMaxInspectProbeBytes = uint64_t{4} << 20;
inline constexpr uint64_t kMaxInspectReportBytes = uint64_t{60} << 10;

// Membership (daemon/admission.h). A node that was never in the peer list asks a seed
// for an id: a join-request from a routing id "join-<nonce>" and envelope `from`
// kNoNode, its payload the endpoint its peers reach it on. The seed answers over the
// same connection: an answer (`id` assigned, `epoch` of the member list after it; the
// payload lists the members, "<id> <endpoint>" a line, the joiner included), a
// redirect to the coordinator (`id`; payload: its endpoint), or a refusal (payload:
// why). The coordinator tells every member of the new one: an add (`id`, `epoch`;
// payload: its endpoint; envelope round: the round it takes part from, 0 while not
// scheduled). An overlay's joiner that holds a state says so: a ready (`id` its own;
// payload: its endpoint), which a member answers with an add that schedules it. A
// coordinator that hears no majority of its members answers a join-request with a
// wait (payload: why), and the joiner asks again. Before it answers with an id, the
// coordinator proposes it to every member (a propose: `id`; payload as an add's), and
// each accepts (payload: the endpoint it accepts the id for) or declines (payload: why):
// a member accepts an id for one endpoint at a time, and the coordinator answers only
// once more than half of its members accepted.
struct Member {
  static constexpr Kind kKind = Kind::kMember;
  enum What : uint8_t {
    kJoinRequest = 0,
    kAnswer = 1,
    kRedirect = 2,
    kRefused = 3,
    kAdd = 4,
    kReady = 5,
    // A member behind a peer's epoch asks it for its adds (no payload).
    kSync = 6,
    kWait = 7,
    kPropose = 8,
    kAccept = 9,
    kDecline = 10,
    // gossipctl forget: a member proposes that node `id` (payload: its endpoint) no
    // longer counts toward the majority, members accept or decline as a propose's; once
    // more than half accepted, it tells every member (a forgotten, payload the same).
    kForget = 11,
    kForgotten = 12,
  };
  static constexpr uint8_t kLastWhat = kForgotten;
  uint8_t what = kJoinRequest;
  uint32_t id = 0;
  uint64_t epoch = 0;
  template <class F>
  void fields(F&& f) {
    f("what", what), f("id", id), f("epoch", epoch);
  }
};
inline constexpr uint32_t kNoNode = UINT32_MAX;  // a joiner's `from` before it has an id
inline constexpr uint64_t kMaxMemberBytes = uint64_t{64} << 10;

// The robust ring (--clip on, sgd/collectives/ring_all_reduce.h): before the envelope's
// round over the ring of view `view`, each member sends every other member the norms
// of its contribution's `chunks` pipeline chunks; payload: `chunks` float32
// (little-endian).
struct RingNorms {
  static constexpr Kind kKind = Kind::kRingNorms;
  uint64_t view = 0;
  uint64_t chunks = 0;
  template <class F>
  void fields(F&& f) {
    f("view", view), f("chunks", chunks);
  }
};
inline constexpr uint64_t kMaxRingNormChunks = uint64_t{1} << 20;

// In Kind order: Body's index is the kind minus one.
using Body =
    std::variant<Hello, ModelChunk, Bye, RingAddress, NcclId, Heartbeat, Join, StateOffer,
                 StateRequest, StateChunk, RingProbe, CopyRequest, PsPush, PsPull, PsParams,
                 PsReplica, InitialModel, TuneReport, Inspect, Member, RingNorms>;
static_assert(std::variant_size_v<Body> == kMaxKind);
inline Kind kind_of(const Body& b) { return static_cast<Kind>(b.index() + 1); }

struct Message {
  Envelope envelope;
  Body body;
};

// Upper bound of one payload frame; ZMQ_MAXMSGSIZE is set from it so an oversized
// frame is cut off by ZeroMQ before it is buffered.
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{256} << 20;
inline constexpr size_t kMaxHeaderBytes = 512;

// Frame 0 of a message from `from` for `round` whose payload is `length` bytes.
std::string encode_head(uint32_t from, uint64_t round, const Body& body, uint64_t length,
                        uint64_t epoch = 0);

// Strict decoding of frame 0: the magic, this daemon's version (a newer or older
// one is refused by number, never read), a known kind, exactly the kind's fields
// with the types they have, and the kind's own rules (payload sizes, ranges).
Result<Message> decode_head(const void* data, size_t size);

// Checks the frames that followed a decoded head: how many and how large.
Status validate_payload(const Envelope& e, size_t payload_frames, size_t payload_bytes);

// ZMTP 3 framing: 1 flag byte plus a 1-byte or 8-byte length.
inline constexpr uint64_t zmtp_frame_overhead(uint64_t frame_bytes) {
  return frame_bytes <= 255 ? 2 : 9;
}

}  // namespace gossip::proto
