#pragma once
// gossip::Client: what a trainer links to attach to its node's gossipd.
//
//   auto client = gossip::Client::connect({.endpoint = "ipc:///tmp/run/gossipd-0.sock"});
//   auto model = (*client)->attach({{"fc1.weight", 784 * 256}, {"fc1.bias", 256}, ...});
//   // train in place on model->tensors[i] (they live in the daemon's shared memory)
//   // the node's step, not a counter of the trainer's own: see StepResult::step
//   for (uint64_t step = model->start_step; step < steps;) {
//     sgd_update(model);
//     auto r = (*client)->step();  // blocks at synchronization points
//     if (!r) return r.status();
//     step = r->step;
//   }
//
// Parameters are never copied through the socket: the daemon reads and writes the
// replica in the arena while the trainer is blocked at a synchronization point.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gossip/status.h"

namespace gossip {

// The element type of the replica in the arena, one for the whole model. The daemon
// averages in fp32 and rounds a 16-bit replica back to nearest even.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

struct TensorDesc {
  std::string name;
  uint64_t numel = 0;
  DType dtype = DType::kF32;
};

struct ClientOptions {
  std::string endpoint;  // "ipc://<run-dir>/gossipd-<node>.sock"
  std::string trainer = "trainer";
  uint32_t local_rank = 0;
  // Bounds every wait for the daemon, synchronization rounds included.
  std::chrono::milliseconds timeout{120000};
  // How long connect() waits for a daemon that is not up yet (its socket not there),
  // trying again with back-off; 0: the GOSSIP_STARTUP_TIMEOUT environment variable's
  // seconds if set (so that the C API and Python get it too), else fail at once.
  std::chrono::milliseconds startup_timeout{0};
};

// The trainer's replica, mapped from the daemon's arena.
struct Model {
  std::vector<std::span<float>> tensors;  // one span per TensorDesc, in order (fp32 models)
  // Each tensor's elements in its dtype, 2 bytes an element for bf16 and fp16 (little-
  // endian: the low byte first), 4 for fp32, whose bytes are those of `tensors`.
  std::vector<std::span<std::byte>> bytes;
  bool initialized = false;  // true: the arena already holds the node's model; do not re-init
  uint64_t start_step = 0;   // the node's step count at attach (a late trainer starts there)
  uint32_t node = 0;
  uint32_t nodes = 0;
  std::string strategy;  // the node's strategy, for logs
  // The tensors carry gradients (synchronous SGD): the trainer writes its gradients
  // there, steps, and applies its optimizer to the mean, averaged at every step.
  // Otherwise the strategy synchronizes the model in place.
  bool gradients = false;
  // Streamed syncs (gossipd --fragments): a step's sync covers one of this many
  // fragments of the model; overlapped ones (--overlap-steps): its result reaches the
  // replica this many steps later. sync() covers the whole model at once: end a run
  // with it when either is set (ends_apart()).
  uint64_t fragments = 1;
  uint64_t overlap = 0;
  bool ends_apart() const { return fragments > 1 || overlap > 0; }
};

struct Traffic {
  uint64_t payload_sent = 0, payload_recv = 0;  // bytes of parameters, all peers
  uint64_t wire_sent = 0, wire_recv = 0;        // bytes on the wire, headers and framing too
  uint64_t msgs_sent = 0, msgs_recv = 0;
  uint64_t dropped = 0;
};

struct StepResult {
  // Steps completed by this trainer, as the node counts them: after a
  // synchronization it is the node's step, which jumps when an elastic ring takes
  // the node back at the members' step. A trainer loops until it reaches its total.
  uint64_t step = 0;
  bool synced = false;  // this step was a synchronization point
  uint64_t round = 0;   // rounds completed by the node
  Traffic traffic;      // node totals as of the last synchronization
};

struct PeerStatus {
  uint32_t id = 0;
  std::string endpoint;
  Traffic traffic;
  std::optional<uint64_t> silent_ms;  // since its last message arrived; none: never heard
};

struct NodeStatus {
  uint32_t node = 0;
  std::string strategy;
  uint64_t round = 0;     // synchronization rounds completed
  uint64_t step = 0;      // the node's step count
  uint32_t trainers = 0;  // attached now
  Traffic traffic;        // over all peers; dropped counts bad IPC messages too
  std::vector<PeerStatus> peers;
  // Where the time goes: the trainers' time blocked on the daemon against their time
  // attached (summed over trainers), and the rounds.
  double trainer_wait_seconds = 0, trainer_attached_seconds = 0;
  uint64_t rounds_timed = 0;
  double round_seconds = 0;  // the timed rounds' total
  double last_round_seconds = 0;
  uint64_t last_round_payload_bytes = 0;  // sent by this node
  double last_round_overlap = 0;          // in [0, 1]: trainers training, not waiting
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Joins the node. Fails with the daemon's message if the layout differs from the
  // node's (it names the first differing tensor) or the daemon refuses otherwise.
  Result<Model> attach(const std::vector<TensorDesc>& layout);

  // Counts one local step. At the strategy's synchronization points it blocks until
  // the daemon has written the synchronized model into the replica.
  Result<StepResult> step();
  // A synchronization round of the whole model now, whatever the schedule (under
  // streamed syncs too). Collective: every trainer of every node must call it at the
  // same step.
  Result<StepResult> sync();
  // Start-up, once after attach() when Model::initialized is false and the replica
  // holds this trainer's initial model: blocks until the replica holds node 0's
  // initial model instead (node 0's own trainer publishes it), so that every
  // replica of the cluster starts from one model. Node 0 must start too; the wait
  // is bounded by the daemon's round timeout.
  Result<StepResult> start();
  // Wait-free backpropagation, for a gradient strategy (Model::gradients): instead of
  // step(), hand in the step's gradients bucket by bucket as backward produces them
  // (each a range of the replica, in the same order on every trainer of every node,
  // `last` on the final one); the daemon averages each while backward computes the
  // next. wait_buckets() then blocks until every bucket's mean is in the replica and
  // counts the step. buckets_answered() says, without blocking, how many of this
  // step's buckets are averaged already.
  Status send_bucket(uint64_t offset, uint64_t numel, bool last);
  Result<uint64_t> buckets_answered();
  Result<StepResult> wait_buckets();
  // The training loss of a step, for the daemon's divergence watch (a NaN, an Inf or a
  // loss ten times its first is logged there as an error and, with --on-divergence
  // stop, fails the syncs). The next synchronization carries the mean of the losses
  // reported since the last one. Optional: a trainer that reports none is watched by
  // its model's norm alone.
  void report_loss(double loss);
  // True when the next step() is a synchronization point.
  bool next_step_syncs() const;
  uint64_t steps() const;

  // The node's traffic counters without synchronizing.
  Result<Traffic> traffic();
  // What the node is doing (no attach needed): gossipctl status asks this.
  Result<NodeStatus> status();

  // Leaves the node; the replica is unmapped. Also done by the destructor.
  Status detach();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossip
