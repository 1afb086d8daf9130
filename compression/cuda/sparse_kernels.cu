// Kernels of the sparse codecs: exact top-k selection, gather and scatter.
//
// Top-k (the CPU's exact path, topk_codec.cc): three radix rounds over the 31 bits
// of the magnitude key (11, 11, 9 bits; each a histogram of the candidates and a
// one-thread walk down it, device_math.h's radix_narrow) find the k-th largest key
// t and how many of its ties to keep. Then a stable compaction in tiles of 256
// elements: per-tile counts of keys above t and equal to t, one exclusive scan of
// both over the tiles, and each tile writes its kept elements at
// (kept before the tile) + (rank within the tile), the first `remaining` ties in
// index order. The output is sorted by index by construction.

#include "compression/cuda/kernels.h"

namespace gossip::compression::cuda::kernels {

namespace {

constexpr unsigned kThreads = 256;
constexpr uint64_t kMaxBlocks = 8192;
constexpr unsigned kTile = 256;          // elements per compaction tile = threads per block
constexpr unsigned kScanThreads = 1024;  // the tile scan runs in one block of 32 warps
constexpr unsigned kFullMask = 0xffffffffu;
// Histogram blocks each clear and flush up to 2048 shared bins: enough blocks to
// fill the GPU, few enough that each counts many elements.
constexpr unsigned kMaxHistogramBlocks = 1024;

unsigned grid_for(uint64_t work) {
  const uint64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

uint64_t tiles_of(uint64_t n) { return (n + kTile - 1) / kTile; }

__device__ uint64_t first_index() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ uint64_t grid_stride() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// Scratch layout: the histogram, the radix state, then four per-tile arrays.
struct TopkScratch {
  unsigned long long* hist;  // kRadixMaxBins
  RadixState* state;
  uint32_t* above_count;             // per tile: keys > t
  uint32_t* tie_count;               // per tile: keys == t
  unsigned long long* above_before;  // exclusive scans of the two
  unsigned long long* ties_before;
};

size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

TopkScratch carve(void* base, uint64_t n, size_t* total) {
  const uint64_t tiles = tiles_of(n);
  auto* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* at = p == nullptr ? nullptr : p + off;
    off += align_up(bytes);
    return at;
  };
  TopkScratch s;
  s.hist = reinterpret_cast<unsigned long long*>(take(kRadixMaxBins * sizeof(unsigned long long)));
  s.state = reinterpret_cast<RadixState*>(take(sizeof(RadixState)));
  s.above_count = reinterpret_cast<uint32_t*>(take(tiles * sizeof(uint32_t)));
  s.tie_count = reinterpret_cast<uint32_t*>(take(tiles * sizeof(uint32_t)));
  s.above_before = reinterpret_cast<unsigned long long*>(take(tiles * sizeof(unsigned long long)));
  s.ties_before = reinterpret_cast<unsigned long long*>(take(tiles * sizeof(unsigned long long)));
  if (total != nullptr) *total = off;
  return s;
}

__global__ void topk_init_kernel(RadixState* st, uint64_t k, TopkReport* report) {
  st->prefix = 0;
  st->mask = 0;
  st->remaining = k;
  report->first_non_finite = kNone;
  report->kept = 0;
}

// Counts the candidates' digits of this round: per-block shared counters, added
// to the global histogram once per block. The first round also finds inf and NaN.
__global__ void radix_histogram_kernel(const float* x, uint64_t n, const RadixState* st,
                                       RadixRound rd, unsigned long long* hist,
                                       unsigned long long* first_non_finite) {
  __shared__ uint32_t local[kRadixMaxBins];
  const uint32_t bins = 1u << rd.bits;
  for (uint32_t b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const RadixState s = *st;
  for (uint64_t i = first_index(); i < n; i += grid_stride()) {
    const uint32_t key = mag_key(x[i]);
    if (first_non_finite != nullptr && key >= kNonFiniteKey)
      atomicMin(first_non_finite, static_cast<unsigned long long>(i));
    if (radix_candidate(key, s)) atomicAdd(&local[(key >> rd.shift) & (bins - 1)], 1u);
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < bins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], static_cast<unsigned long long>(local[b]));
}

__global__ void radix_narrow_kernel(const unsigned long long* hist, RadixRound rd, RadixState* st) {
  RadixState s = *st;
  radix_narrow(hist, rd, s);
  *st = s;
}

__global__ void tile_counts_kernel(const float* x, uint64_t n, const RadixState* st,
                                   uint32_t* above_count, uint32_t* tie_count) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kTile + threadIdx.x;
  const uint32_t t = st->prefix;
  const bool in = i < n;
  const uint32_t key = in ? mag_key(x[i]) : 0;
  const int above = __syncthreads_count(in && key > t);
  const int ties = __syncthreads_count(in && key == t);
  if (threadIdx.x == 0) {
    above_count[blockIdx.x] = static_cast<uint32_t>(above);
    tie_count[blockIdx.x] = static_cast<uint32_t>(ties);
  }
}

__device__ unsigned long long warp_inclusive_scan(unsigned long long v) {
  const unsigned lane = threadIdx.x & 31u;
  for (unsigned off = 1; off < 32; off <<= 1) {
    const unsigned long long up = __shfl_up_sync(kFullMask, v, off);
    if (lane >= off) v += up;
  }
  return v;
}

// Inclusive scan of v across a block of kScanThreads; returns the block's total.
__device__ unsigned long long block_inclusive_scan(unsigned long long& v,
                                                   unsigned long long* warp_sums) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  v = warp_inclusive_scan(v);
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) warp_sums[lane] = warp_inclusive_scan(warp_sums[lane]);
  __syncthreads();
  if (warp > 0) v += warp_sums[warp - 1];
  const unsigned long long total = warp_sums[31];
  __syncthreads();  // warp_sums is reused by the next call
  return total;
}

// One block walks the tiles in chunks of kScanThreads, carrying the totals.
__global__ void tile_scan_kernel(const uint32_t* above_count, const uint32_t* tie_count,
                                 uint64_t tiles, unsigned long long* above_before,
                                 unsigned long long* ties_before, const RadixState* st,
                                 TopkReport* report) {
  __shared__ unsigned long long warp_sums[kScanThreads / 32];
  unsigned long long carry_above = 0, carry_ties = 0;
  for (uint64_t base = 0; base < tiles; base += kScanThreads) {
    const uint64_t j = base + threadIdx.x;
    const unsigned long long a = j < tiles ? above_count[j] : 0;
    const unsigned long long t = j < tiles ? tie_count[j] : 0;
    unsigned long long ia = a, it = t;
    const unsigned long long total_above = block_inclusive_scan(ia, warp_sums);
    const unsigned long long total_ties = block_inclusive_scan(it, warp_sums);
    if (j < tiles) {
      above_before[j] = carry_above + ia - a;
      ties_before[j] = carry_ties + it - t;
    }
    carry_above += total_above;
    carry_ties += total_ties;
  }
  if (threadIdx.x == 0) {
    const unsigned long long rem = st->remaining;
    report->kept = carry_above + (carry_ties < rem ? carry_ties : rem);
  }
}

// Rank of this thread among the threads of the block (kTile) whose pred is true.
__device__ uint32_t block_exclusive_rank(bool pred, uint32_t* warp_counts) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(kFullMask, pred);
  uint32_t rank = static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1u)));
  if (lane == 0) warp_counts[warp] = static_cast<uint32_t>(__popc(ballot));
  __syncthreads();
  for (unsigned w = 0; w < warp; ++w) rank += warp_counts[w];
  __syncthreads();  // warp_counts is reused by the next call
  return rank;
}

__global__ void compact_kernel(const float* x, uint64_t n, uint64_t k, const RadixState* st,
                               const unsigned long long* above_before,
                               const unsigned long long* ties_before, uint64_t* idx, float* val) {
  __shared__ uint32_t warp_counts[kTile / 32];
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kTile + threadIdx.x;
  const bool in = i < n;
  const float v = in ? x[i] : 0.0f;
  const uint32_t key = mag_key(v);
  const RadixState s = *st;
  const unsigned long long ties_earlier = ties_before[blockIdx.x];
  const uint32_t tie_rank = block_exclusive_rank(in && key == s.prefix, warp_counts);
  const bool keep = in && topk_keep(key, ties_earlier + tie_rank, s);
  const uint32_t keep_rank = block_exclusive_rank(keep, warp_counts);
  // Kept before this tile: every key above t, and the ties up to `remaining`.
  const uint64_t pos = above_before[blockIdx.x] + min_u64(ties_earlier, s.remaining) + keep_rank;
  if (keep && pos < k) {
    idx[pos] = i;
    val[pos] = v;
  }
}

__global__ void gather_kernel(const float* x, const uint64_t* idx, uint64_t k, float* val) {
  for (uint64_t j = first_index(); j < k; j += grid_stride()) val[j] = x[idx[j]];
}

__global__ void scatter_kernel(const uint64_t* idx, const float* val, uint64_t k, bool scaled,
                               float scale, float* y) {
  for (uint64_t j = first_index(); j < k; j += grid_stride())
    y[idx[j]] = scaled ? mul_rn(val[j], scale) : val[j];
}

}  // namespace

size_t topk_scratch_bytes(uint64_t n) {
  size_t total = 0;
  carve(nullptr, n, &total);
  return total;
}

cudaError_t topk_select(const float* x, uint64_t n, uint64_t k, void* scratch, uint64_t* idx,
                        float* val, TopkReport* report, cudaStream_t stream) {
  if (n == 0 || k == 0) return cudaSuccess;
  const TopkScratch s = carve(scratch, n, nullptr);
  const uint64_t tiles = tiles_of(n);
  if (tiles > 0x7fffffffu) return cudaErrorInvalidValue;  // beyond one grid of tiles (n > 5e11)
  topk_init_kernel<<<1, 1, 0, stream>>>(s.state, k, report);
  const unsigned hist_grid = grid_for(n) < kMaxHistogramBlocks ? grid_for(n) : kMaxHistogramBlocks;
  for (int r = 0; r < kRadixRounds; ++r) {
    cudaError_t err =
        cudaMemsetAsync(s.hist, 0, kRadixMaxBins * sizeof(unsigned long long), stream);
    if (err != cudaSuccess) return err;
    radix_histogram_kernel<<<hist_grid, kThreads, 0, stream>>>(
        x, n, s.state, kRadixRound[r], s.hist, r == 0 ? &report->first_non_finite : nullptr);
    radix_narrow_kernel<<<1, 1, 0, stream>>>(s.hist, kRadixRound[r], s.state);
  }
  tile_counts_kernel<<<static_cast<unsigned>(tiles), kTile, 0, stream>>>(
      x, n, s.state, s.above_count, s.tie_count);
  tile_scan_kernel<<<1, kScanThreads, 0, stream>>>(s.above_count, s.tie_count, tiles,
                                                   s.above_before, s.ties_before, s.state, report);
  compact_kernel<<<static_cast<unsigned>(tiles), kTile, 0, stream>>>(
      x, n, k, s.state, s.above_before, s.ties_before, idx, val);
  return cudaGetLastError();
}

cudaError_t gather(const float* x, const uint64_t* idx, uint64_t k, float* val,
                   cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  gather_kernel<<<grid_for(k), kThreads, 0, stream>>>(x, idx, k, val);
  return cudaGetLastError();
}

cudaError_t scatter(const uint64_t* idx, const float* val, uint64_t k, bool scaled, float scale,
                    float* y, cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  scatter_kernel<<<grid_for(k), kThreads, 0, stream>>>(idx, val, k, scaled, scale, y);
  return cudaGetLastError();
}

}  // namespace gossip::compression::cuda::kernels
