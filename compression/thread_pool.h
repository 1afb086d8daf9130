#pragma once
// One pool of worker threads for the codecs' loops over large tensors: threads are
// started once and reused, never one per call.

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gossip::compression {

class ThreadPool {
 public:
  // threads counts the caller too: ThreadPool(1) starts no thread.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t threads() const { return workers_.size() + 1; }

  // Calls fn(begin, end) over [0, n) cut into at most threads() contiguous ranges of
  // at least `grain` elements, on the pool and the calling thread; returns when all
  // are done. Ranges are cut the same way for the same n, grain and threads, so
  // results that depend on the cut are reproducible. Not reentrant.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  // The ranges parallel_for uses, for codecs that need per-range state.
  static std::vector<std::pair<size_t, size_t>> split(size_t n, size_t grain, size_t parts);

 private:
  void work(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;  // guarded by mu_
  std::vector<std::pair<size_t, size_t>> ranges_;            // guarded by mu_
  uint64_t generation_ = 0;                                  // guarded by mu_
  size_t pending_ = 0;                                       // guarded by mu_
  bool stop_ = false;                                        // guarded by mu_
};

// The elements a codec's loop gives each thread at least: 64 Ki floats (256 KiB), below
// which waking another thread costs more than it saves.
inline constexpr size_t kParallelGrain = size_t{1} << 16;

// Runs fn over [0, n) on pool when there is one and n is large, else inline.
void parallel_for(ThreadPool* pool, size_t n, size_t grain,
                  const std::function<void(size_t, size_t)>& fn);

}  // namespace gossip::compression
