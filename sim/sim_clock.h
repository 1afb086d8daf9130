#pragma once
// Virtual time for the simulation (base/clock.h): a discrete-event scheduler. Each
// simulated node's code runs as a task on a thread of its own, but only one task runs
// at a time; it runs until it waits (on a signal with a deadline, or a sleep), and
// then the next runnable task runs. When none is runnable, time jumps to the earliest
// scheduled event (a timer, a message's arrival). No thread ever waits on real time,
// and the order of everything depends only on the tasks' code: the same inputs give
// the same run, event for event.
//
// Computing costs no virtual time; a task that should take time (a trainer's steps)
// sleeps for it.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace gossip::sim {

class SimClock final : public Clock {
 public:
  // Where virtual time starts: far enough from zero that nothing mistakes a stamp for
  // "never", as with the real steady clock (which counts from boot).
  static constexpr Duration kStart = std::chrono::hours(24);
  // A task that reads the time this many times without waiting is stuck in a loop
  // that waits for time to pass without letting it: a bug, reported with its name.
  static constexpr uint64_t kMaxReadsWithoutWait = 50'000'000;

  SimClock();
  ~SimClock() override;
  SimClock(const SimClock&) = delete;
  SimClock& operator=(const SimClock&) = delete;

  TimePoint now() const override;
  std::chrono::system_clock::time_point wall() const override;
  bool wait_until(Signal& signal, TimePoint until, const std::function<bool()>& ready) override;
  void sleep_until(TimePoint until) override;
  bool schedules() const override { return true; }
  void at(TimePoint when, std::function<void()> fn) override;

  struct Task {
    std::string name;
    std::function<void()> run;
  };
  // Runs the tasks to their end, one at a time, from now(); the caller's thread only
  // waits. A wait that nothing can end (every task waits without a deadline and
  // nothing is scheduled) is a bug in the simulated code: it aborts, naming the tasks.
  void run(std::vector<Task> tasks);

  Duration elapsed() const { return now() - TimePoint(kStart); }
  uint64_t events() const { return events_run_.load(std::memory_order_relaxed); }
  uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }

 protected:
  void notify(Signal& signal) override;

 private:
  enum class State { kRunnable, kRunning, kParked, kDone };
  struct TaskState {
    std::string name;
    std::function<void()> run;
    std::condition_variable cv;
    State state = State::kRunnable;
    uint64_t wait_id = 0;  // which wait a timer belongs to (stale ones are skipped)
    Signal* parked_on = nullptr;
    uint64_t reads = 0;  // now() calls since the last wait
  };
  struct Event {
    size_t task = kNone;  // a task's timer, or
    uint64_t wait_id = 0;
    std::function<void()> fn;  // a scheduled callback
  };
  static constexpr size_t kNone = SIZE_MAX;
  static constexpr size_t kScheduler = SIZE_MAX - 1;  // running events, no task

  TaskState* current_task() const;
  // Gives the CPU away and blocks until this task runs again.
  void park(std::unique_lock<std::mutex>& lock, size_t self);
  // Picks the next task to run (advancing time through the events if none is
  // runnable) and hands over to it; kNone when every task is done.
  void switch_away(std::unique_lock<std::mutex>& lock);
  void make_runnable(size_t task);
  [[noreturn]] void deadlock();

  mutable std::mutex mu_;
  std::atomic<int64_t> now_ns_;
  std::vector<std::unique_ptr<TaskState>> tasks_;
  std::deque<size_t> runnable_;
  size_t current_ = kNone;
  size_t done_ = 0;
  std::condition_variable all_done_;
  // (time, order of scheduling) -> event: the same time runs in scheduling order.
  std::map<std::pair<int64_t, uint64_t>, Event> events_;
  uint64_t next_seq_ = 0;
  std::atomic<uint64_t> events_run_{0}, switches_{0};
};

}  // namespace gossip::sim
