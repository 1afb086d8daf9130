// The C ABI over gossip::Client. Nothing throws across it: Client reports through
// Status, and the only allocations that can throw are caught here.
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "base/version.h"
#include "gossip/client.h"
#include "gossip/gossip.h"

struct gossip_client {
  std::unique_ptr<gossip::Client> client;
  std::string last_error;
  std::optional<gossip::Model> model;  // from the last successful attach
};

namespace {

thread_local std::string connect_error;

int code_of(const gossip::Status& s) {
  using C = gossip::Status::Code;
  switch (s.code()) {
    case C::kOk:
      return GOSSIP_OK;
    case C::kTimeout:
      return GOSSIP_ETIMEOUT;
    case C::kClosed:
      return GOSSIP_ECLOSED;
    case C::kInvalid:
    case C::kMismatch:
      return GOSSIP_EREFUSED;
    default:
      return GOSSIP_EIO;
  }
}

int fail(gossip_client* c, const gossip::Status& s) {
  c->last_error = s.message();
  return code_of(s);
}

void fill(gossip_step_result* out, const gossip::StepResult& r) {
  if (!out) return;
  out->step = r.step;
  out->synced = r.synced ? 1 : 0;
  out->round = r.round;
  out->payload_sent = r.traffic.payload_sent;
  out->payload_recv = r.traffic.payload_recv;
  out->wire_sent = r.traffic.wire_sent;
  out->wire_recv = r.traffic.wire_recv;
}

}  // namespace

extern "C" {

int gossip_connect(const char* endpoint, const char* trainer, uint32_t local_rank, int timeout_ms,
                   gossip_client** out) {
  if (!endpoint || !out) {
    connect_error = "gossip_connect: endpoint and out must not be NULL";
    return GOSSIP_EINVAL;
  }
  try {
    gossip::ClientOptions o;
    o.endpoint = endpoint;
    if (trainer) o.trainer = trainer;
    o.local_rank = local_rank;
    if (timeout_ms > 0) o.timeout = std::chrono::milliseconds(timeout_ms);
    auto c = gossip::Client::connect(o);
    if (!c) {
      connect_error = c.status().message();
      return code_of(c.status());
    }
    *out = new gossip_client{std::move(c).value(), {}, std::nullopt};
    return GOSSIP_OK;
  } catch (const std::bad_alloc&) {
    connect_error = "out of memory";
    return GOSSIP_EIO;
  }
}

namespace {

// gossip_attach and gossip_attach_dtype; `dtype` is valid.
int attach(gossip_client* c, size_t n, const char* const* names, const uint64_t* numels,
           gossip::DType dtype, void** tensors, int* initialized) {
  if (n == 0 || !names || !numels || !tensors) {
    c->last_error = "gossip_attach: need n > 0 and non-NULL names, numels, tensors";
    return GOSSIP_EINVAL;
  }
  try {
    std::vector<gossip::TensorDesc> layout;
    for (size_t i = 0; i < n; ++i) {
      if (!names[i]) {
        c->last_error = "gossip_attach: names[" + std::to_string(i) + "] is NULL";
        return GOSSIP_EINVAL;
      }
      layout.push_back({names[i], numels[i], dtype});
    }
    auto m = c->client->attach(layout);
    if (!m) return fail(c, m.status());
    for (size_t i = 0; i < n; ++i) tensors[i] = m->bytes[i].data();
    if (initialized) *initialized = m->initialized ? 1 : 0;
    c->model = std::move(*m);
    return GOSSIP_OK;
  } catch (const std::bad_alloc&) {
    c->last_error = "out of memory";
    return GOSSIP_EIO;
  }
}

}  // namespace

int gossip_attach(gossip_client* c, size_t n, const char* const* names, const uint64_t* numels,
                  float** tensors, int* initialized) {
  if (!c) return GOSSIP_EINVAL;
  try {
    std::vector<void*> raw(tensors ? n : 0);
    const int rc = attach(c, n, names, numels, gossip::DType::kF32, tensors ? raw.data() : nullptr,
                          initialized);
    if (rc == GOSSIP_OK)
      for (size_t i = 0; i < n; ++i) tensors[i] = static_cast<float*>(raw[i]);
    return rc;
  } catch (const std::bad_alloc&) {
    c->last_error = "out of memory";
    return GOSSIP_EIO;
  }
}

int gossip_attach_dtype(gossip_client* c, size_t n, const char* const* names,
                        const uint64_t* numels, const char* dtype, void** tensors,
                        int* initialized) {
  if (!c) return GOSSIP_EINVAL;
  const std::string d = dtype ? dtype : "f32";
  gossip::DType t;
  if (d == "f32") {
    t = gossip::DType::kF32;
  } else if (d == "bf16") {
    t = gossip::DType::kBF16;
  } else if (d == "f16") {
    t = gossip::DType::kF16;
  } else {
    c->last_error = "gossip_attach_dtype: unknown dtype '" + d + "' (valid: f32, bf16, f16)";
    return GOSSIP_EINVAL;
  }
  return attach(c, n, names, numels, t, tensors, initialized);
}

int gossip_model(const gossip_client* c, gossip_model_info* out) {
  if (!c || !out || !c->model) return GOSSIP_EINVAL;
  out->node = c->model->node;
  out->nodes = c->model->nodes;
  out->start_step = c->model->start_step;
  out->initialized = c->model->initialized ? 1 : 0;
  std::memset(out->strategy, 0, sizeof out->strategy);
  std::strncpy(out->strategy, c->model->strategy.c_str(), sizeof out->strategy - 1);
  out->gradients = c->model->gradients ? 1 : 0;
  return GOSSIP_OK;
}

int gossip_model_schedule(const gossip_client* c, uint64_t* fragments, uint64_t* overlap) {
  if (!c || !fragments || !overlap || !c->model) return GOSSIP_EINVAL;
  *fragments = c->model->fragments;
  *overlap = c->model->overlap;
  return GOSSIP_OK;
}

int gossip_next_step_syncs(const gossip_client* c) {
  if (!c) return GOSSIP_EINVAL;
  return c->client->next_step_syncs() ? 1 : 0;
}

int gossip_report_loss(gossip_client* c, double loss) {
  if (!c) return GOSSIP_EINVAL;
  c->client->report_loss(loss);
  return GOSSIP_OK;
}

int gossip_step(gossip_client* c, gossip_step_result* out) {
  if (!c) return GOSSIP_EINVAL;
  auto r = c->client->step();
  if (!r) return fail(c, r.status());
  fill(out, *r);
  return GOSSIP_OK;
}

int gossip_sync(gossip_client* c, gossip_step_result* out) {
  if (!c) return GOSSIP_EINVAL;
  auto r = c->client->sync();
  if (!r) return fail(c, r.status());
  fill(out, *r);
  return GOSSIP_OK;
}

int gossip_start(gossip_client* c, gossip_step_result* out) {
  if (!c) return GOSSIP_EINVAL;
  auto r = c->client->start();
  if (!r) return fail(c, r.status());
  fill(out, *r);
  return GOSSIP_OK;
}

int gossip_send_bucket(gossip_client* c, uint64_t offset, uint64_t numel, int last) {
  if (!c) return GOSSIP_EINVAL;
  auto s = c->client->send_bucket(offset, numel, last != 0);
  return s ? GOSSIP_OK : fail(c, s);
}

int gossip_buckets_answered(gossip_client* c, uint64_t* out) {
  if (!c || !out) return GOSSIP_EINVAL;
  auto r = c->client->buckets_answered();
  if (!r) return fail(c, r.status());
  *out = *r;
  return GOSSIP_OK;
}

int gossip_wait_buckets(gossip_client* c, gossip_step_result* out) {
  if (!c) return GOSSIP_EINVAL;
  auto r = c->client->wait_buckets();
  if (!r) return fail(c, r.status());
  fill(out, *r);
  return GOSSIP_OK;
}

int gossip_detach(gossip_client* c) {
  if (!c) return GOSSIP_EINVAL;
  c->model.reset();  // its tensors point into the unmapped arena
  auto s = c->client->detach();
  return s ? GOSSIP_OK : fail(c, s);
}

void gossip_close(gossip_client* c) { delete c; }

const char* gossip_last_error(const gossip_client* c) {
  return c ? c->last_error.c_str() : connect_error.c_str();
}

const char* gossip_version(void) { return gossip::kVersion; }

}  // extern "C"
