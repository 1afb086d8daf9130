/* The C ABI over gossip::Client, for trainers in other languages (Python loads it
 * through ctypes). No exception crosses it: every call returns 0 on success or a
 * negative GOSSIP_E* code, and gossip_last_error() says what went wrong. */
#ifndef GOSSIP_GOSSIP_H_
#define GOSSIP_GOSSIP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GOSSIP_OK = 0,
  GOSSIP_EINVAL = -1,   /* bad argument */
  GOSSIP_EIO = -2,      /* socket or shared-memory failure */
  GOSSIP_ETIMEOUT = -3, /* the daemon did not answer in time */
  GOSSIP_EREFUSED = -4, /* the daemon refused (e.g. layout mismatch) */
  GOSSIP_ECLOSED = -5   /* the daemon shut down */
};

typedef struct gossip_client gossip_client;

typedef struct gossip_step_result {
  uint64_t step;
  int synced;
  uint64_t round;
  uint64_t payload_sent, payload_recv, wire_sent, wire_recv;
} gossip_step_result;

/* endpoint: "ipc://<run-dir>/gossipd-<node>.sock"; timeout_ms <= 0 means the default. */
int gossip_connect(const char* endpoint, const char* trainer, uint32_t local_rank, int timeout_ms,
                   gossip_client** out);
/* Attaches n tensors; on success tensors[i] points at tensor i inside the arena and
 * *initialized says whether it already holds the node's model. */
int gossip_attach(gossip_client* c, size_t n, const char* const* names, const uint64_t* numels,
                  float** tensors, int* initialized);
/* The same for a model of `dtype` ("f32", "bf16" or "f16"; NULL is "f32"): tensors[i]
 * points at tensor i's elements, 2 bytes each for bf16 and f16. The daemon averages in
 * fp32 and rounds a 16-bit replica back to nearest even. */
int gossip_attach_dtype(gossip_client* c, size_t n, const char* const* names,
                        const uint64_t* numels, const char* dtype, void** tensors,
                        int* initialized);
/* What the node said at attach; GOSSIP_EINVAL before a successful attach. gradients
 * 1 means the tensors carry gradients (averaged at every step: synchronous SGD); 0
 * that the strategy synchronizes the model in place. */
typedef struct gossip_model_info {
  uint32_t node, nodes;
  uint64_t start_step; /* the node's step count at attach */
  int initialized;     /* 1: the arena already held the node's model */
  char strategy[32];   /* the node's strategy, for logs */
  int gradients;
} gossip_model_info;
int gossip_model(const gossip_client* c, gossip_model_info* out);
/* Streamed and overlapped syncs (gossipd --fragments, --overlap-steps): a step's
 * synchronization covers one of *fragments fragments of the model, and with *overlap > 0
 * its result reaches the replica *overlap steps later; gossip_sync covers the whole model
 * at once: end a run with gossip_sync when *fragments > 1 or *overlap > 0.
 * GOSSIP_EINVAL before a successful attach. */
int gossip_model_schedule(const gossip_client* c, uint64_t* fragments, uint64_t* overlap);
/* 1 when the next gossip_step is a synchronization point, 0 when not, negative on error. */
int gossip_next_step_syncs(const gossip_client* c);
/* A step's training loss for the daemon's divergence watch (NaN and Inf included); the
 * next synchronization carries the mean of those reported since the last. Optional. */
int gossip_report_loss(gossip_client* c, double loss);
int gossip_step(gossip_client* c, gossip_step_result* out);
int gossip_sync(gossip_client* c, gossip_step_result* out);
/* Once after gossip_attach when `initialized` was 0 and the tensors hold this trainer's
 * initial model: blocks until they hold node 0's initial model (node 0's trainer
 * publishes its own), so that every replica starts from one model. */
int gossip_start(gossip_client* c, gossip_step_result* out);
/* Wait-free backpropagation (gradient strategies): hand in this step's gradients
 * [offset, offset + numel) of the replica as backward produces them, `last` != 0 on the
 * step's final bucket; gossip_wait_buckets blocks until every bucket's mean is in the
 * replica and counts the step. gossip_buckets_answered: how many of this step's
 * buckets are averaged already (no blocking). Offsets and sizes are in elements of the
 * model's dtype. */
int gossip_send_bucket(gossip_client* c, uint64_t offset, uint64_t numel, int last);
int gossip_buckets_answered(gossip_client* c, uint64_t* out);
int gossip_wait_buckets(gossip_client* c, gossip_step_result* out);
int gossip_detach(gossip_client* c);
void gossip_close(gossip_client* c);
/* The last error of c, or of the calling thread's last failed gossip_connect when c is NULL. */
const char* gossip_last_error(const gossip_client* c);

/* This library's version, "MAJOR.MINOR.PATCH" (the project's; the SONAME's major). */
const char* gossip_version(void);

#ifdef __cplusplus
}
#endif
#endif /* GOSSIP_GOSSIP_H_ */
