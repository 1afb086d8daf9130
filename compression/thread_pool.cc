#include "compression/thread_pool.h"

#include <pthread.h>

#include <algorithm>

namespace gossip::compression {

ThreadPool::ThreadPool(size_t threads) {
  for (size_t i = 1; i < std::max<size_t>(threads, 1); ++i)
    workers_.emplace_back([this, i] {
      pthread_setname_np(pthread_self(), "gossip-codec");
      work(i - 1);
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : workers_) t.join();
}

std::vector<std::pair<size_t, size_t>> ThreadPool::split(size_t n, size_t grain, size_t parts) {
  std::vector<std::pair<size_t, size_t>> r;
  if (n == 0) return r;
  grain = std::max<size_t>(grain, 1);
  parts = std::clamp<size_t>(n / grain, 1, std::max<size_t>(parts, 1));
  // Range boundaries on multiples of 16 elements, so each thread's part of a
  // vectorized loop starts aligned with the others'.
  size_t per = (n + parts - 1) / parts;
  per = (per + 15) / 16 * 16;
  for (size_t b = 0; b < n; b += per) r.emplace_back(b, std::min(n, b + per));
  return r;
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t)>& fn) {
  auto ranges = split(n, grain, threads());
  if (ranges.size() <= 1) {
    if (!ranges.empty()) fn(ranges[0].first, ranges[0].second);
    return;
  }
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    ranges_ = ranges;
    pending_ = ranges.size() - 1;
    ++generation_;
  }
  start_.notify_all();
  fn(ranges[0].first, ranges[0].second);  // the caller takes the first range
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::work(size_t index) {
  uint64_t seen = 0;
  while (true) {
    std::pair<size_t, size_t> range;
    const std::function<void(size_t, size_t)>* fn = nullptr;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      // Worker i takes range i+1; with fewer ranges than workers some sit out.
      if (index + 1 >= ranges_.size()) continue;
      range = ranges_[index + 1];
      fn = fn_;
    }
    (*fn)(range.first, range.second);
    {
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

void parallel_for(ThreadPool* pool, size_t n, size_t grain,
                  const std::function<void(size_t, size_t)>& fn) {
  if (pool && pool->threads() > 1 && n >= 2 * grain)
    pool->parallel_for(n, grain, fn);
  else if (n > 0)
    fn(0, n);
}

}  // namespace gossip::compression
