// SyncWorker's side of what gossipctl asks of a running node (daemon/sync_worker.h): an
// inspection for doctor and status --cluster, a ban, a forget and the admission list
// reloaded; each is handed from the daemon's thread to the sync thread, which applies
// it after its next poll of the router.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <mutex>

#include "base/version.h"
#include "daemon/sync_worker.h"

namespace gossip::daemon {

bool SyncWorker::inspect(const proto::ipc::InspectRequest& request) {
  {
    std::lock_guard lock(mu_);
    if (inspecting_) return false;
    inspecting_ = true;
    inspect_asked_ = request;
  }
  inspect_pending_.store(true, std::memory_order_release);
  transport_->wake();
  return true;
}

std::optional<proto::ipc::InspectReply> SyncWorker::take_inspection() {
  uint64_t n = 0;
  (void)!::read(inspect_fd_, &n, sizeof n);
  std::lock_guard lock(mu_);
  auto r = std::move(inspected_);
  inspected_.reset();
  if (r) inspecting_ = false;
  return r;
}

void SyncWorker::note_error(std::string what) {
  std::lock_guard lock(mu_);
  last_error_ = std::move(what);
  last_error_at_ = std::chrono::steady_clock::now();
}

void SyncWorker::ban(uint32_t peer) {
  {
    std::lock_guard lock(mu_);
    bans_.push_back(peer);
  }
  bans_pending_.store(true, std::memory_order_release);
  transport_->wake();
}

void SyncWorker::forget(uint32_t peer) {
  {
    std::lock_guard lock(mu_);
    forget_ = peer;
    forgotten_.reset();
  }
  bans_pending_.store(true, std::memory_order_release);
  transport_->wake();
}

std::optional<Status> SyncWorker::take_forgotten() {
  std::lock_guard lock(mu_);
  return std::exchange(forgotten_, std::nullopt);
}

void SyncWorker::apply_bans() {
  if (!bans_pending_.exchange(false, std::memory_order_acq_rel)) return;
  std::vector<uint32_t> bans;
  std::optional<uint32_t> forget;
  {
    std::lock_guard lock(mu_);
    bans.swap(bans_);
    forget = std::exchange(forget_, std::nullopt);
  }
  if (forget) {
    const auto done = [this](Status st) {
      std::lock_guard lock(mu_);
      forgotten_ = std::move(st);
    };
    if (admission_)
      admission_->forget(*forget, done);
    else
      done(Status::invalid("this node's strategy keeps no member list to forget from"));
  }
  for (uint32_t peer : bans)
    if (Status st = zmq_->ban(peer); !st) spdlog::error("ban of peer {}: {}", peer, st.message());
  std::lock_guard lock(peers_mu_);
  peers_copy_ = transport_->peers();
}

Result<size_t> SyncWorker::reload_admit_keys(const std::string& path) {
  auto keys = read_admit_keys(path);
  if (!keys) return keys.status();
  GOSSIP_RETURN_IF_ERROR(zmq_->set_admit_keys(*keys));
  return keys->size();
}

void SyncWorker::serve_inspector() {
  std::optional<proto::ipc::InspectRequest> asked;
  if (inspect_pending_.exchange(false, std::memory_order_acq_rel)) {  // mu_ only when asked
    std::lock_guard lock(mu_);
    asked = std::move(inspect_asked_);
    inspect_asked_.reset();
  }
  if (asked) (void)inspector_->begin(*asked);
  inspector_->tick();
  if (auto answer = inspector_->take()) {
    {
      std::lock_guard lock(mu_);
      inspected_ = std::move(answer);
    }
    const uint64_t one = 1;
    (void)!::write(inspect_fd_, &one, sizeof one);
  }
}

proto::inspect::MemberStatus SyncWorker::member_status() {
  const auto now = std::chrono::steady_clock::now();
  proto::inspect::MemberStatus s;
  s.node = node_;
  s.version = kVersion;
  s.round = next_round_;  // rounds begun: the one it is in counts
  s.step = last_step_;
  s.trainers = trainers_.load(std::memory_order_relaxed);
  const auto t = transport_->traffic().totals();
  s.sent_bytes = t.payload_sent;
  s.received_bytes = t.payload_recv;
  s.round_ms = last_round_ms_;
  if (last_round_end_)
    s.since_round_s = std::chrono::duration<double>(now - *last_round_end_).count();
  {
    std::lock_guard lock(mu_);
    s.last_error = last_error_;
    if (!last_error_.empty())
      s.last_error_age_s = std::chrono::duration<double>(now - last_error_at_).count();
    s.state = joining_                                 ? "joining"
              : membership_ && membership_->left_out() ? "left out"
              : in_round_                              ? "in round"
              : s.trainers == 0                        ? "no trainers"
              : rounds_done_ == 0                      ? "starting"
                                                       : "training";
  }
  s.samples = samples_;
  return s;
}

}  // namespace gossip::daemon
