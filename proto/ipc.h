#pragma once
// The trainer <-> daemon control protocol over ipc://<run-dir>/gossipd-<node>.sock.
// Each message is one frame holding a msgpack map {v, kind, ...}. Parameters never
// travel here: they live in the shared-memory arena named in AttachOk.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "proto/layout.h"

namespace gossip::proto::ipc {

// 3: stats_reply's timing, attach_ok's fragments and overlap, sync's whole.
// 4: sync_ok's period. 5: sync's loss.
inline constexpr uint32_t kProtocolVersion = 5;
inline constexpr size_t kMaxIpcMessageBytes = 16u << 20;

// trainer -> daemon: join this node with a model of this layout.
struct Attach {
  uint32_t protocol = kProtocolVersion;
  std::string trainer;  // a human-readable name for logs
  uint32_t local_rank = 0;
  int32_t pid = 0;  // watched so that a trainer that dies is detached
  Layout layout;
  std::string device = "cpu";
};

// daemon -> trainer: where the trainer's replica lives and when to synchronize.
struct AttachOk {
  uint32_t node = 0;
  uint32_t nodes = 0;
  uint32_t slot = 0;  // the trainer's replica inside the arena
  std::string arena;  // POSIX shm name, e.g. "/gossipd-<uid>-<node>-<pid>"
  uint64_t arena_bytes = 0;
  uint64_t slot_offset = 0;       // byte offset of the trainer's replica
  std::vector<uint64_t> offsets;  // element offset of each tensor inside the replica
  std::string strategy;
  // The arena carries gradients, averaged at every step (synchronous SGD); otherwise
  // the model, synchronized in place. From the strategy's descriptor (sgd/registry.h).
  bool gradients = false;
  uint64_t period = 1;       // synchronize after every `period` steps
  uint64_t post_local = 0;   // ... and after every step while step <= post_local
  uint64_t step = 0;         // the node's current step; a late trainer starts here
  bool initialized = false;  // the replica already holds the node's model
  // Streamed syncs (--fragments): a sync at a step of the schedule covers one of
  // this many fragments of the model; Sync.whole covers all of it.
  uint64_t fragments = 1;
  // --overlap-steps: besides every `period` steps, sync `overlap` steps after each of
  // them, where the round that started then is merged into the replica.
  uint64_t overlap = 0;
};

// trainer -> daemon: I finished `step` and wait for the synchronized model.
struct Sync {
  uint64_t step = 0;
  // The whole model whatever the schedule (Client::sync(): the end of a run); a
  // step's sync under streamed syncs covers one fragment.
  bool whole = false;
  // The trainer's training loss: the mean of the `losses` it reported since its last
  // sync (Client::report_loss), which the daemon's divergence watch reads; 0 reports:
  // none (loss is then 0). A NaN or Inf among them makes the mean non-finite.
  double loss = 0;
  uint64_t losses = 0;
};

// trainer -> daemon, gradient strategies only (the arena carries gradients): the
// bucket [offset, offset + numel) of the replica holds this step's gradients; average
// it now, while backward computes the next one (wait-free backpropagation). Buckets
// are sent in the same order by every trainer of every node, `last` on the step's
// final one; each is answered by a SyncOk once the mean is in the replica, and the
// trainer may send the next before that answer.
struct SyncRange {
  uint64_t step = 0;
  uint64_t offset = 0;
  uint64_t numel = 0;
  bool last = false;
};

struct Traffic {
  uint64_t payload_sent = 0, payload_recv = 0;
  uint64_t wire_sent = 0, wire_recv = 0;
  uint64_t msgs_sent = 0, msgs_recv = 0;
  uint64_t dropped = 0;  // invalid messages received and dropped
};

// daemon -> trainer: the replica now holds the synchronized model.
struct SyncOk {
  uint64_t round = 0;
  uint64_t step = 0;
  Traffic traffic;  // this node's totals over all peers
  // Tune auto: the next sync is `period` steps after `step` (the daemon moves the
  // period between rounds); 0: the schedule of AttachOk.
  uint64_t period = 0;
};

// trainer -> daemon, once after attach when AttachOk.initialized was false: the
// replica holds this trainer's initial model; make it start from the cluster's (node
// 0's, which every node takes, so no two replicas start from their own random init).
// The answer is a SyncOk once the replica holds node 0's model.
struct Start {};

struct Detach {};
struct DetachOk {};
struct StatsRequest {};

// PeerStats::silent_ms of a peer never heard from.
inline constexpr uint64_t kNeverHeard = UINT64_MAX;

struct PeerStats {
  uint32_t id = 0;
  std::string endpoint;
  Traffic traffic;
  uint64_t silent_ms = kNeverHeard;  // since its last message arrived
};

// Where the node's time goes (daemon/time_accounts.h), in microseconds.
struct Timing {
  uint64_t trainer_wait_us = 0;      // its trainers blocked on the daemon, summed
  uint64_t trainer_attached_us = 0;  // its trainers attached, summed
  uint64_t rounds = 0;               // rounds timed
  uint64_t round_us = 0;             // their total duration
  uint64_t last_round_us = 0;
  uint64_t last_round_payload = 0;     // bytes this node sent in its last round
  uint64_t last_overlap_permille = 0;  // of the last round, trainers' time spent not waiting
};

struct StatsReply {
  uint32_t node = 0;
  std::string strategy;
  uint64_t round = 0;
  uint64_t step = 0;
  uint32_t trainers = 0;
  Traffic traffic;
  std::vector<PeerStats> peers;
  Timing timing;
};

// gossipctl -> daemon: gather the cluster's link matrix (doctor) or its members'
// status (status --cluster), waiting at most timeout_ms for the peers' answers
// (daemon/inspector.h).
struct InspectRequest {
  enum What : uint32_t { kLinks = 0, kStatus = 1 };
  uint32_t what = kLinks;
  uint64_t timeout_ms = 10000;
};
// The answer: parts[0] a proto::inspect::Summary, then one LinkRow or MemberStatus per
// node that answered, each as proto/inspect.h encodes it.
struct InspectReply {
  std::vector<std::string> parts;
};

// daemon -> trainer: the request failed; the message says why.
struct Error {
  std::string message;
};

// daemon -> trainer, unsolicited: the daemon is going away.
struct Shutdown {
  std::string reason;
};

// gossipctl leave -> daemon: leave the cluster in order. The daemon answers with the
// Shutdown its trainers get, says bye to its peers (which go on without it at once)
// and exits.
struct Leave {};

// gossipctl ban -> daemon: ban a peer on this running node (with CURVE). The daemon
// answers with the same Ban once it is in force, or an Error naming why not.
struct Ban {
  uint32_t peer = 0;
};

// gossipctl forget -> daemon: the members forget a node that is gone for good, under a
// majority (daemon/admission.h). The daemon answers with the same Forget once a
// majority of the members accepted, or an Error naming why not.
struct Forget {
  uint32_t peer = 0;
};

using Message =
    std::variant<Attach, AttachOk, Sync, SyncOk, Detach, DetachOk, StatsRequest, StatsReply, Error,
                 Shutdown, Start, SyncRange, InspectRequest, InspectReply, Leave, Ban, Forget>;

const char* message_name(const Message& m);
std::string encode(const Message& m);
// Strict: a map with a known kind, the protocol version, every field present with
// the right type, sizes within limits. Layouts are validated with validate_layout.
Result<Message> decode(const void* data, size_t size);

}  // namespace gossip::proto::ipc
