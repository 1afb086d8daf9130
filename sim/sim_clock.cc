#include "sim/sim_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace gossip {

// Signal's storage for parked tasks is private; the simulated clock is its one user.
class sim_access {
 public:
  static std::vector<size_t>& parked(Signal& s) { return s.parked_; }
};

namespace sim {

namespace {
// The task the calling thread runs, and the clock it belongs to.
thread_local size_t tls_task = SIZE_MAX;
thread_local const SimClock* tls_clock = nullptr;

int64_t ns_of(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

SimClock::SimClock() : now_ns_(ns_of(TimePoint(kStart))) {}

SimClock::~SimClock() = default;

TimePoint SimClock::now() const {
  if (tls_clock == this && tls_task < tasks_.size()) {
    TaskState& t = *tasks_[tls_task];
    if (++t.reads > kMaxReadsWithoutWait) {
      std::fprintf(stderr,
                   "simulation: task %s read the time %llu times without waiting: a loop "
                   "that waits for time to pass must wait on the clock\n",
                   t.name.c_str(), static_cast<unsigned long long>(t.reads));
      std::abort();
    }
  }
  return TimePoint(std::chrono::nanoseconds(now_ns_.load(std::memory_order_relaxed)));
}

std::chrono::system_clock::time_point SimClock::wall() const {
  // A fixed calendar origin: the same run prints the same times.
  const auto origin = std::chrono::sys_days(std::chrono::year(2026) / 1 / 1);
  return std::chrono::system_clock::time_point(origin) +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(elapsed());
}

SimClock::TaskState* SimClock::current_task() const {
  if (tls_clock != this || tls_task >= tasks_.size()) {
    // A bug: only the clock's tasks may wait on it.
    std::fprintf(stderr, "simulation: a thread that is not one of the clock's tasks waited\n");
    std::abort();
  }
  return tasks_[tls_task].get();
}

void SimClock::at(TimePoint when, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  const int64_t t = std::max(ns_of(when), now_ns_.load(std::memory_order_relaxed));
  events_.emplace(std::pair{t, next_seq_++}, Event{kNone, 0, std::move(fn)});
}

void SimClock::make_runnable(size_t task) {
  TaskState& t = *tasks_[task];
  if (t.state != State::kParked) return;
  if (t.parked_on) {
    auto& parked = sim_access::parked(*t.parked_on);
    parked.erase(std::remove(parked.begin(), parked.end(), task), parked.end());
    t.parked_on = nullptr;
  }
  t.state = State::kRunnable;
  runnable_.push_back(task);
}

void SimClock::notify(Signal& signal) {
  std::lock_guard lock(mu_);
  // Copied: make_runnable edits the list.
  const std::vector<size_t> parked = sim_access::parked(signal);
  for (size_t task : parked) make_runnable(task);
}

void SimClock::switch_away(std::unique_lock<std::mutex>& lock) {
  while (runnable_.empty()) {
    if (done_ == tasks_.size()) {
      current_ = kNone;
      all_done_.notify_all();
      return;
    }
    if (events_.empty()) deadlock();
    auto it = events_.begin();
    now_ns_.store(it->first.first, std::memory_order_relaxed);
    Event e = std::move(it->second);
    events_.erase(it);
    events_run_.fetch_add(1, std::memory_order_relaxed);
    if (e.task != kNone) {
      TaskState& t = *tasks_[e.task];
      if (t.state == State::kParked && t.wait_id == e.wait_id) make_runnable(e.task);
      continue;
    }
    // A callback (a delivery) may notify signals and schedule more: it runs without
    // the lock, while no task runs.
    current_ = kScheduler;
    lock.unlock();
    e.fn();
    lock.lock();
  }
  const size_t next = runnable_.front();
  runnable_.pop_front();
  tasks_[next]->state = State::kRunning;
  current_ = next;
  switches_.fetch_add(1, std::memory_order_relaxed);
  tasks_[next]->cv.notify_one();
}

void SimClock::park(std::unique_lock<std::mutex>& lock, size_t self) {
  TaskState& me = *tasks_[self];
  me.reads = 0;
  switch_away(lock);
  me.cv.wait(lock, [&] { return current_ == self; });
}

bool SimClock::wait_until(Signal& signal, TimePoint until, const std::function<bool()>& ready) {
  if (ready()) return true;
  TaskState& me = *current_task();
  const size_t self = tls_task;
  while (true) {
    if (now() >= until) return ready();
    {
      std::unique_lock lock(mu_);
      me.state = State::kParked;
      me.parked_on = &signal;
      sim_access::parked(signal).push_back(self);
      ++me.wait_id;
      if (until != TimePoint::max())
        events_.emplace(std::pair{ns_of(until), next_seq_++}, Event{self, me.wait_id, {}});
      park(lock, self);
    }
    if (ready()) return true;
  }
}

void SimClock::sleep_until(TimePoint until) {
  TaskState& me = *current_task();
  const size_t self = tls_task;
  std::unique_lock lock(mu_);
  // Even a sleep that is already over lets the other runnable tasks go first.
  me.state = State::kParked;
  ++me.wait_id;
  const int64_t t = std::max(ns_of(until), now_ns_.load(std::memory_order_relaxed));
  events_.emplace(std::pair{t, next_seq_++}, Event{self, me.wait_id, {}});
  park(lock, self);
}

void SimClock::deadlock() {
  std::string waiting;
  for (const auto& t : tasks_)
    if (t->state == State::kParked) waiting += (waiting.empty() ? "" : ", ") + t->name;
  std::fprintf(stderr,
               "simulation: every task waits without a deadline and nothing is scheduled "
               "(at %.3f s of virtual time): %s\n",
               std::chrono::duration<double>(elapsed()).count(), waiting.c_str());
  std::abort();
}

void SimClock::run(std::vector<Task> tasks) {
  std::vector<std::thread> threads;
  {
    std::unique_lock lock(mu_);
    // Tasks of an earlier run() have finished; their slots are reused, so their
    // leftover timers go (a stale one could wake a new task that has the same slot
    // and wait number). Scheduled callbacks stay: they are the world's, not a task's.
    tasks_.clear();
    runnable_.clear();
    done_ = 0;
    for (auto it = events_.begin(); it != events_.end();)
      it = it->second.task == kNone ? std::next(it) : events_.erase(it);
    for (auto& t : tasks) {
      auto state = std::make_unique<TaskState>();
      state->name = std::move(t.name);
      state->run = std::move(t.run);
      runnable_.push_back(tasks_.size());
      tasks_.push_back(std::move(state));
    }
    if (tasks_.empty()) return;
    for (size_t i = 0; i < tasks_.size(); ++i)
      threads.emplace_back([this, i] {
        tls_clock = this;
        tls_task = i;
        {
          std::unique_lock lock(mu_);
          tasks_[i]->cv.wait(lock, [&] { return current_ == i; });
        }
        tasks_[i]->run();
        std::unique_lock lock(mu_);
        tasks_[i]->state = State::kDone;
        ++done_;
        switch_away(lock);
      });
    switch_away(lock);
    all_done_.wait(lock, [&] { return done_ == tasks_.size(); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace sim
}  // namespace gossip
