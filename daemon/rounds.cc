// The daemon's rounds (daemon/daemon.h): when the node's trainers have all handed in
// their replicas (or a bucket of their gradients), the round goes to the sync worker;
// its result is guarded (NaN/Inf, the strategy's refusals) and written back, and the
// trainers waiting on it are answered.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/failures.h"
#include "base/finite.h"
#include "base/refusals.h"
#include "daemon/daemon.h"

namespace gossip::daemon {

namespace ipc = proto::ipc;

void Daemon::on_sync_range(const std::string& route, const ipc::SyncRange& m) {
  TrainerSession* s = sessions_.find(route);
  if (!s) return reply(route, ipc::Error{"sync_range before attach"});
  if (!strategy_->gradients)
    return reply(route, ipc::Error{fmt::format(
                            "sync_range: the node's strategy '{}' exchanges models; buckets of "
                            "gradients are for a gradient strategy (allreduce)",
                            config_.strategy.name)});
  if (s->waiting) return reply(route, ipc::Error{"sync_range while a sync is pending"});
  const uint64_t numel = arena_->numel();
  if (m.numel == 0 || m.offset > numel || m.numel > numel - m.offset)
    return reply(route, ipc::Error{fmt::format(
                            "sync_range: elements [{}, {}) are not a bucket of the model's {}",
                            m.offset, m.offset + m.numel, numel)});
  if (s->buckets.size() >= 4096)
    return reply(route, ipc::Error{"sync_range: more than 4096 buckets waiting"});
  s->buckets.push_back(m);
  if (m.last) time_.wait_begins(s->slot, std::chrono::steady_clock::now());
  arena_->pull(s->slot, m.offset, m.numel);
  maybe_start_bucket();
}

void Daemon::maybe_start_next() {
  maybe_submit_start();
  maybe_start_round();
  maybe_start_bucket();
}

void Daemon::maybe_start_bucket() {
  if (round_running_ || joining_ || starting_) return;
  auto sessions = sessions_.all();
  if (sessions.empty()) return;
  for (auto* s : sessions)
    if (s->buckets.empty()) return;  // the node's trainers hand in each bucket together
  const ipc::SyncRange front = sessions[0]->buckets.front();
  for (auto* s : sessions) {
    const auto& b = s->buckets.front();
    if (b.offset == front.offset && b.numel == front.numel) continue;
    // Trainers of one node that cut the gradients differently cannot be averaged.
    const std::string why = fmt::format(
        "sync_range: the node's trainers handed in different buckets ([{}, {}) and [{}, {}))",
        front.offset, front.offset + front.numel, b.offset, b.offset + b.numel);
    spdlog::error("{}", why);
    for (auto* o : sessions) {
      o->buckets.pop_front();
      reply(o->route, ipc::Error{why});
    }
    return maybe_start_bucket();
  }
  if (sessions.size() == 1) {
    round_model_ = arena_->slot(sessions[0]->slot).subspan(front.offset, front.numel);
  } else {
    node_model_.resize(arena_->numel());
    auto sum = std::span<float>(node_model_).subspan(front.offset, front.numel);
    auto first = arena_->slot(sessions[0]->slot).subspan(front.offset, front.numel);
    std::copy(first.begin(), first.end(), sum.begin());
    for (size_t t = 1; t < sessions.size(); ++t) {
      auto x = arena_->slot(sessions[t]->slot).subspan(front.offset, front.numel);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
    }
    const float inv = 1.0f / static_cast<float>(sessions.size());
    for (auto& v : sum) v *= inv;
    round_model_ = sum;
  }
  participants_.clear();
  bucket_ = front;
  for (auto* s : sessions) {
    participants_.push_back(s->route);
    bucket_.step = std::max(bucket_.step, s->buckets.front().step);
    bucket_.last = bucket_.last || s->buckets.front().last;
  }
  round_running_ = true;
  bucket_round_ = true;
  round_started_ = true;
  time_.round_begins(std::chrono::steady_clock::now(), static_cast<uint32_t>(sessions.size()),
                     worker_->traffic().totals().payload_sent);
  guard_nonfinite();
  worker_->submit_bucket(round_model_, bucket_.offset, round_, bucket_.step);
}

void Daemon::finish_bucket() {
  auto result = worker_->take_result();
  if (!result) return;
  round_running_ = false;
  bucket_round_ = false;
  round_ = result->round + 1;
  time_.round_ends(std::chrono::steady_clock::now(), worker_->traffic().totals().payload_sent);
  if (result->status.is_ok()) {
    guard_result();
    if (bucket_.last) step_ = bucket_.step;
  } else {
    spdlog::error("round {} (bucket [{}, {})) failed: {}", round_ - 1, bucket_.offset,
                  bucket_.offset + bucket_.numel, result->status.message());
  }
  const ipc::SyncOk ok = sync_ok(bucket_.step);
  for (const auto& route : participants_) {
    TrainerSession* s = sessions_.find(route);
    if (!s || s->buckets.empty()) continue;
    s->buckets.pop_front();
    if (!result->status) {
      reply(route, ipc::Error{fmt::format("synchronization failed: {}", result->status.message())});
      continue;
    }
    auto dst = arena_->slot(s->slot).subspan(bucket_.offset, bucket_.numel);
    if (dst.data() != round_model_.data())
      std::copy(round_model_.begin(), round_model_.end(), dst.begin());
    arena_->push(s->slot, bucket_.offset, bucket_.numel);
    reply(route, ok);
  }
  participants_.clear();
  maybe_start_next();
}

void Daemon::maybe_start_round() {
  if (round_running_ || joining_ || starting_ || !sessions_.all_waiting()) return;
  auto waiting = sessions_.all();
  // The node's trainers start together: a late one would join at the node's step
  // instead of training the first period with the others.
  if (round_ == 0 && !round_started_ && waiting.size() < config_.expect_trainers) {
    if (!waiting_for_trainers_logged_)
      spdlog::info("{} of {} trainers attached; the first round waits for the others",
                   waiting.size(), config_.expect_trainers);
    waiting_for_trainers_logged_ = true;
    return;
  }
  if (overlapped() && staged_ready_) {
    // The trainers are at a step boundary, blocked until we reply: the last round's
    // change goes into their replicas now, on top of the steps they took meanwhile.
    for (auto* s : waiting) {
      auto x = arena_->slot(s->slot).subspan(staged_fragment_.offset, staged_fragment_.numel);
      for (size_t i = 0; i < x.size(); ++i) x[i] += staged_[i];
    }
    staged_ready_ = false;
  }
  // A sync() asks for the whole model (the end of a run), whatever the schedule.
  const bool whole = std::any_of(waiting.begin(), waiting.end(),
                                 [](const TrainerSession* s) { return s->sync_whole; });
  if (config_.strategy.overlap_steps > 0 && !whole) {
    // Local SGD with --overlap-steps: a sync point TAU steps after a round's start
    // only merges its result (above); a round starts every period / fragments steps.
    uint64_t step = 0;
    for (auto* s : waiting) step = std::max(step, s->sync_step);
    const uint64_t every = config_.strategy.period / config_.strategy.fragments;
    if (step % every != 0) {
      step_ = step;
      const ipc::SyncOk ok = sync_ok(step);
      for (auto* s : waiting) {
        s->waiting = false;
        arena_->push(s->slot, staged_fragment_.offset, staged_fragment_.numel);
        reply(s->route, ok);
      }
      return;
    }
  }
  if (strategy_->central_model) {
    // Crossbow's SMA: the learners are corrected towards the central model in place,
    // and the round averages the central models across nodes.
    const uint32_t learners = config_.strategy.learners_per_device;
    if (waiting.size() < learners) {
      if (!waiting_for_learners_logged_)
        spdlog::info("sma: {} of {} learners attached; the rounds start when all are",
                     waiting.size(), learners);
      waiting_for_learners_logged_ = true;
      return;
    }
    if (!central_)
      central_ = std::make_unique<sgd::CentralModel>(config_.strategy.sma_alpha,
                                                     config_.strategy.sma_momentum);
    std::vector<std::span<float>> replicas;
    for (auto* s : waiting) replicas.push_back(arena_->slot(s->slot));
    round_model_ = central_->update(replicas);
  } else if (waiting.size() == 1) {
    // One trainer, blocked until we reply: the round can run in place on its replica.
    round_model_ = arena_->slot(waiting[0]->slot);
  } else {
    // Several trainers on one node first agree among themselves: their mean is the
    // node's contribution to the round.
    node_model_.resize(arena_->numel());
    auto first = arena_->slot(waiting[0]->slot);
    std::copy(first.begin(), first.end(), node_model_.begin());
    for (size_t t = 1; t < waiting.size(); ++t) {
      auto x = arena_->slot(waiting[t]->slot);
      for (size_t i = 0; i < node_model_.size(); ++i) node_model_[i] += x[i];
    }
    const float inv = 1.0f / static_cast<float>(waiting.size());
    for (auto& v : node_model_) v *= inv;
    round_model_ = node_model_;
  }
  guard_nonfinite();
  participants_.clear();
  uint64_t step = 0;
  for (auto* s : waiting) {
    participants_.push_back(s->route);
    step = std::max(step, s->sync_step);
  }
  step_ = step;
  round_running_ = true;
  round_started_ = true;
  time_.round_begins(std::chrono::steady_clock::now(), static_cast<uint32_t>(waiting.size()),
                     worker_->traffic().totals().payload_sent);
  spdlog::debug("round {} at step {} with {} local trainer(s)", round_, step_, waiting.size());
  fragment_ = whole ? Fragment{0, round_model_.size()} : fragment_of(round_);
  round_overlapped_ = overlapped() && !(whole && !async());
  if (fragment_.numel != round_model_.size() && !round_overlapped_) {
    // Streamed syncs: this round's fragment only, as a part of the model.
    worker_->submit_bucket(round_model_.subspan(fragment_.offset, fragment_.numel),
                           fragment_.offset, round_, step_);
    return;
  }
  if (!round_overlapped_) {
    worker_->submit(round_model_, round_, step_);
    return;
  }
  const auto part = round_model_.subspan(fragment_.offset, fragment_.numel);
  async_model_.assign(part.begin(), part.end());
  staged_.assign(part.begin(), part.end());
  round_model_ = async_model_;
  if (fragment_.numel == arena_->numel())
    worker_->submit(round_model_, round_, step_);
  else
    worker_->submit_bucket(round_model_, fragment_.offset, round_, step_);
  const ipc::SyncOk ok = sync_ok(step_);
  for (const auto& route : participants_) {
    if (TrainerSession* s = sessions_.find(route)) {
      s->waiting = false;
      arena_->push(s->slot);  // the last round's staged change, if any
      reply(route, ok);
    }
  }
  participants_.clear();
}

Daemon::Fragment Daemon::fragment_of(uint64_t round) const {
  const uint64_t numel = arena_->numel();
  const uint64_t f = config_.strategy.fragments;
  if (f <= 1) return {0, numel};
  // Equal parts of whole 64-byte lines, so that no two fragments share a cache line.
  constexpr uint64_t kLine = 16;
  const uint64_t lines = (numel + kLine - 1) / kLine;
  const uint64_t i = round % f;
  const uint64_t begin = std::min(numel, lines * i / f * kLine);
  const uint64_t end = std::min(numel, lines * (i + 1) / f * kLine);
  return {begin, end - begin};
}

void Daemon::stage_async_change() {
  for (size_t i = 0; i < staged_.size(); ++i) staged_[i] = async_model_[i] - staged_[i];
  staged_fragment_ = fragment_;
  staged_ready_ = true;
}

void Daemon::guard_result() {
  // What the ring, the all-gather, the servers or the neighbors returned: a peer's
  // NaN or Inf would reach the trainers and every later round. The node goes on from
  // its last good model instead (a gradient strategy, whose result is a step, skips
  // the step).
  if (!any_nonfinite(round_model_)) return;
  count_refusal(Refusal::kNonFinite);
  const bool fallback = !strategy_->gradients && last_good_.size() == round_model_.size();
  if (fallback)
    std::copy(last_good_.begin(), last_good_.end(), round_model_.begin());
  else
    std::fill(round_model_.begin(), round_model_.end(), 0.0f);
  count_failure(Failure::kNonFiniteResult);
  worker_->note_error(
      fmt::format("round {}: the synchronized result holds NaN or Inf, which a "
                  "peer sent",
                  round_ - 1));
  spdlog::error("round {}: the synchronized {} holds NaN or Inf, which a peer sent: {}", round_ - 1,
                strategy_->gradients ? "gradient" : "model",
                fallback               ? "the node goes back to its last good model"
                : strategy_->gradients ? "this step is skipped"
                                       : "the node starts from zeros (it has no good model yet)");
}

void Daemon::handle_round_done() {
  if (joining_) return finish_join();
  if (starting_) return finish_start();
  if (bucket_round_) return finish_bucket();
  auto result = worker_->take_result();
  if (!result) return;
  round_running_ = false;
  round_ = result->round + 1;
  if (result->period) tuned_period_ = *result->period;
  time_.round_ends(std::chrono::steady_clock::now(), worker_->traffic().totals().payload_sent);
  if (result->step && *result->step != step_) {
    // Back in an elastic ring at the members' step: the trainers follow (SyncOk.step).
    spdlog::info("the node's step moves from {} to {}, the members' step", step_, *result->step);
    step_ = *result->step;
    // SMA: the central model is the members' now, not a step of this node's own
    // trajectory; its momentum would kick it by the jump.
    if (central_) central_->took(round_model_);
  }
  // Before the trainers hear of the round: a scrape after their sync counts it
  // (Operations.MetricsAreScrapedAndMoveWithTraffic read 2 of 3 rounds once).
  publish_gauges();
  if (round_overlapped_) {
    // Its trainers were answered when it started; they see the change at a later sync.
    round_overlapped_ = false;
    if (result->status.is_ok() && any_nonfinite(async_model_)) {
      count_refusal(Refusal::kNonFinite);
      spdlog::error(
          "round {}: the synchronized model holds NaN or Inf, which a peer sent: its "
          "change is dropped",
          round_ - 1);
    } else if (result->status.is_ok()) {
      stage_async_change();
      // What the NaN/Inf guard falls back to: the node's model as this round left it.
      if (fragment_.numel == arena_->numel())
        last_good_.assign(async_model_.begin(), async_model_.end());
      else if (last_good_.size() == arena_->numel())
        std::copy(async_model_.begin(), async_model_.end(),
                  last_good_.begin() + static_cast<ptrdiff_t>(fragment_.offset));
    } else {
      spdlog::error("round {} failed: {}", round_ - 1, result->status.message());
    }
    maybe_start_next();
    return;
  }
  if (result->status.is_ok()) guard_result();
  if (result->status.is_ok()) watch_divergence();
  if (result->status.is_ok() && divergence_.diverged() && config_.strategy.on_divergence == "stop")
    result->status = Status::invalid(divergence_.reason());
  if (result->status.is_ok()) {
    // What the NaN/Inf guard falls back to; gradients have no such model.
    if (!strategy_->gradients) last_good_.assign(round_model_.begin(), round_model_.end());
    if (central_) {  // SMA: each learner is pulled towards the central model the nodes agreed on
      std::vector<std::span<float>> replicas;
      for (const auto& route : participants_)
        if (TrainerSession* s = sessions_.find(route)) replicas.push_back(arena_->slot(s->slot));
      if (!replicas.empty()) central_->correct(replicas);
    }
    const ipc::SyncOk ok = sync_ok(step_);
    for (const auto& route : participants_) {
      TrainerSession* s = sessions_.find(route);
      if (!s) continue;
      // What the round changed: the whole model, or this round's fragment.
      const auto synced = round_model_.subspan(fragment_.offset, fragment_.numel);
      auto dst = arena_->slot(s->slot).subspan(fragment_.offset, fragment_.numel);
      if (!central_ && dst.data() != synced.data())
        std::copy(synced.begin(), synced.end(), dst.begin());
      arena_->push(s->slot, fragment_.offset, fragment_.numel);
      s->waiting = false;
      reply(route, ok);
    }
  } else {
    spdlog::error("round {} failed: {}", round_ - 1, result->status.message());
    for (const auto& route : participants_) {
      if (TrainerSession* s = sessions_.find(route)) {
        s->waiting = false;
        reply(route,
              ipc::Error{fmt::format("synchronization failed: {}", result->status.message())});
      }
    }
  }
  participants_.clear();
  maybe_start_next();
}

}  // namespace gossip::daemon
