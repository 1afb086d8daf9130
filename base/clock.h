#pragma once
// The one source of time for the code that waits on peers: deadlines, heartbeats,
// dead-after, patience, backoff. Two implementations: the real clock (gossipd, and
// the tests that run real threads), and the simulation's discrete-event clock
// (sim/sim_clock.h), where no thread sleeps and time jumps to the next event, so a
// thousand nodes run in one process, the same way for the same seed.
//
// A component reads time and waits through the clock its channel gives it
// (peers::PeerChannel::clock), never through std::chrono's clocks directly.
// Time points keep steady_clock's type: a simulated clock's points are on its own
// axis, and the two are never compared (each node has one clock).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gossip {

using TimePoint = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;

class Clock;

// What a task waits on besides time: a mailbox that got a message, a job that came.
// Whoever changes the state a waiter's predicate reads calls notify() afterwards.
class Signal {
 public:
  explicit Signal(Clock& clock) : clock_(clock) {}
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

  void notify();  // wakes every waiter; they check their predicates again
  Clock& clock() const { return clock_; }

 private:
  friend class RealClock;
  friend class sim_access;
  Clock& clock_;
  // The real clock's: waiters block on cv_, under mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  // The simulated clock's: the tasks parked on this signal, in the order they came.
  std::vector<size_t> parked_;
};

class Clock {
 public:
  virtual ~Clock() = default;

  virtual TimePoint now() const = 0;
  // Calendar time, for what is compared with another node's (clock offsets).
  virtual std::chrono::system_clock::time_point wall() const = 0;
  // Returns true as soon as ready() holds, or ready() at `until`. ready() is checked
  // first, and again after every notify of `signal`.
  virtual bool wait_until(Signal& signal, TimePoint until, const std::function<bool()>& ready) = 0;
  virtual void sleep_until(TimePoint until) = 0;
  void sleep_for(Duration d) { sleep_until(now() + d); }
  // Runs `fn` at `when`, on the clock's own schedule: the simulation's deliveries.
  // Only a simulated clock schedules; the real clock has no use for it.
  virtual bool schedules() const { return false; }
  virtual void at(TimePoint when, std::function<void()> fn);

  // The process's real clock (steady_clock, system_clock).
  static Clock& real();

 protected:
  friend class Signal;
  virtual void notify(Signal& signal) = 0;
};

class RealClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point wall() const override {
    return std::chrono::system_clock::now();
  }
  bool wait_until(Signal& s, TimePoint until, const std::function<bool()>& ready) override {
    std::unique_lock lock(s.mu_);
    return s.cv_.wait_until(lock, until, ready);
  }
  void sleep_until(TimePoint until) override { std::this_thread::sleep_until(until); }

 protected:
  void notify(Signal& s) override {
    // Taking the lock orders this notify after a waiter's check of its predicate:
    // either it saw the change, or it is already waiting and is woken.
    { std::lock_guard lock(s.mu_); }
    s.cv_.notify_all();
  }
};

inline Clock& Clock::real() {
  static RealClock clock;
  return clock;
}

inline void Clock::at(TimePoint, std::function<void()>) {
  // A bug, not an input: only simulated clocks are asked to schedule (schedules()).
  std::abort();
}

inline void Signal::notify() { clock_.notify(*this); }

}  // namespace gossip
