// Kernels of the dense codecs. Each thread runs one step of the CPU codec's loop
// through device_math.h (one element, one block's scale, one byte of sign bits,
// one group of eight qsgd codes), so the arithmetic is the CPU's and only the
// indexing here is device-specific. Grid-stride loops over 64-bit indices.

#include "compression/cuda/kernels.h"

namespace gossip::compression::cuda::kernels {

namespace {

constexpr unsigned kThreads = 256;
constexpr uint64_t kMaxBlocks = 8192;

unsigned grid_for(uint64_t work) {
  const uint64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

__device__ uint64_t first_index() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ uint64_t grid_stride() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// ---------------------------------------------------------------------------
// fp16 / bf16

template <bool kBf16>
__global__ void half_encode_kernel(const float* x, uint64_t n, uint8_t* out) {
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    store_le16(out + 2 * i, kBf16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]));
}

template <bool kBf16>
__global__ void half_decode_kernel(const uint8_t* in, uint64_t n, float* y) {
  for (uint64_t i = first_index(); i < n; i += grid_stride()) {
    const uint16_t h = load_le16(in + 2 * i);
    y[i] = kBf16 ? bf16_to_float(h) : fp16_to_float(h);
  }
}

// ---------------------------------------------------------------------------
// Per-block scales (int8, sign) and per-bucket norms (qsgd). The CPU sums a block
// in index order (in double), so one thread walks each block in order to get the
// same bits. Walking it straight from global memory, the 32 threads of a warp read
// 32 lines a block apart, and the pass ran at a third of the copy's speed. Here a
// CTA takes kThreads consecutive blocks and stages them kChunk elements at a time
// in shared memory with coalesced loads (one line per block); each thread then feeds
// its block's piece to its accumulator (device_math.h's *Acc). The odd stride
// kChunk + 1 puts a warp's reads in 32 banks. Blocks under kChunk elements are
// walked straight from global memory: a warp's blocks are then contiguous.

constexpr uint32_t kChunk = 32;

struct WriteScale {
  uint8_t* out;
  unsigned long long* first_bad;
  __device__ void operator()(uint64_t b, BlockScale s) const {
    if (!s.finite) {
      atomicMin(first_bad, static_cast<unsigned long long>(b));
      s.scale = 0.0f;
    }
    store_f32le(out + 4 * b, s.scale);
  }
  __device__ void operator()(uint64_t b, BucketNorm s) const {
    if (s.status != kNormOk) {
      atomicMin(first_bad, static_cast<unsigned long long>(b));
      s.norm = 0.0f;
    }
    store_f32le(out + 4 * b, s.norm);
  }
};

template <typename Acc>
__global__ void staged_scales_kernel(const float* x, uint64_t n, uint32_t block, uint64_t nb,
                                     WriteScale write) {
  __shared__ float staged[kThreads * (kChunk + 1)];
  for (uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads; first < nb;
       first += static_cast<uint64_t>(gridDim.x) * kThreads) {
    const uint64_t b = first + threadIdx.x;
    const uint64_t len = b < nb ? min_u64(n - b * block, block) : 0;
    Acc acc;
    for (uint64_t c = 0; c < block; c += kChunk) {
      for (uint32_t t = threadIdx.x; t < kThreads * kChunk; t += kThreads) {
        const uint32_t k = t / kChunk, j = t % kChunk;
        const uint64_t blk = first + k;
        const uint64_t i = blk * block + c + j;
        if (blk < nb && c + j < block && i < n) staged[k * (kChunk + 1) + j] = x[i];
      }
      __syncthreads();
      const uint64_t m = len > c ? min_u64(kChunk, len - c) : 0;
      for (uint32_t j = 0; j < m; ++j) acc.add(staged[threadIdx.x * (kChunk + 1) + j]);
      __syncthreads();
    }
    if (b < nb) write(b, acc.finish(len));
  }
}

template <typename Acc>
__global__ void direct_scales_kernel(const float* x, uint64_t n, uint32_t block, uint64_t nb,
                                     WriteScale write) {
  for (uint64_t b = first_index(); b < nb; b += grid_stride()) {
    const uint64_t lo = b * block, hi = min_u64(n, lo + block);
    Acc acc;
    for (uint64_t i = lo; i < hi; ++i) acc.add(x[i]);
    write(b, acc.finish(hi - lo));
  }
}

template <typename Acc>
void launch_scales(const float* x, uint64_t n, uint32_t block, uint64_t nb, WriteScale write,
                   cudaStream_t stream) {
  if (block < kChunk) {
    direct_scales_kernel<Acc><<<grid_for(nb), kThreads, 0, stream>>>(x, n, block, nb, write);
  } else {
    staged_scales_kernel<Acc><<<grid_for(nb), kThreads, 0, stream>>>(x, n, block, nb, write);
  }
}

// ---------------------------------------------------------------------------
// int8 and sign values, one element a thread (coalesced loads and stores), except
// the sign bits: one warp ballot packs 32 elements.

// i / d: a 32-bit division where the indices fit (a 64-bit one is a long
// instruction sequence on a GPU); `narrow` is the same for every thread.
__device__ uint64_t index_div(uint64_t i, uint32_t d, bool narrow) {
  return narrow ? static_cast<uint32_t>(i) / d : i / d;
}

// int8 with blocks of 32 elements or more, in one pass: a warp per block takes its
// max with coalesced loads and a warp reduction (a max has no order, so the bits
// are the CPU's), then quantizes the block, which is still in L1.
__global__ void int8_encode_warp_kernel(const float* x, uint64_t n, uint32_t block, uint64_t nb,
                                        uint8_t* out, unsigned long long* first_bad) {
  const unsigned lane = threadIdx.x % 32;
  const uint64_t warps = grid_stride() / 32;
  for (uint64_t b = first_index() / 32; b < nb; b += warps) {
    const uint64_t lo = b * block, hi = min_u64(n, lo + block);
    Int8ScaleAcc acc;
    for (uint64_t i = lo + lane; i < hi; i += 32) acc.add(x[i]);
    acc.max_bits = __reduce_max_sync(0xffffffffu, acc.max_bits);
    BlockScale s = acc.finish(hi - lo);
    if (!s.finite) {
      if (lane == 0) atomicMin(first_bad, static_cast<unsigned long long>(b));
      s.scale = 0.0f;
    }
    if (lane == 0) store_f32le(out + 4 * b, s.scale);
    for (uint64_t i = lo + lane; i < hi; i += 32) out[4 * nb + i] = int8_quantize(x[i], s.scale);
  }
}

__global__ void int8_values_kernel(const float* x, uint64_t n, uint32_t block, uint64_t nb,
                                   uint8_t* out) {
  const bool narrow = n <= UINT32_MAX;
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    out[4 * nb + i] = int8_quantize(x[i], load_f32le(out + 4 * index_div(i, block, narrow)));
}

// One warp ballot packs 32 elements' signs into 4 bytes, element i at bit i % 8 of
// byte i / 8 (little endian), bits past n zero; sign_pack_byte's layout.
__global__ void sign_bits_kernel(const float* x, uint64_t n, uint64_t nb, uint8_t* out) {
  const uint64_t bytes = (n + 7) / 8;
  const uint64_t words = (n + 31) / 32;
  const unsigned lane = threadIdx.x % 32;
  const uint64_t warps = grid_stride() / 32;
  for (uint64_t w = first_index() / 32; w < words; w += warps) {
    const uint64_t i = 32 * w + lane;
    const uint32_t bits = __ballot_sync(0xffffffffu, i < n && x[i] >= 0.0f);
    const uint64_t at = 4 * w;  // first byte of this word in the bit section
    if (at + 4 <= bytes && reinterpret_cast<uintptr_t>(out) % 4 == 0) {
      if (lane == 0) *reinterpret_cast<uint32_t*>(out + 4 * nb + at) = bits;
    } else if (lane < 4 && at + lane < bytes) {
      out[4 * nb + at + lane] = static_cast<uint8_t>(bits >> (8 * lane));
    }
  }
}

// Scales first, then elements: nb <= n, so one pass over n covers both.
__global__ void int8_check_kernel(const uint8_t* in, uint64_t n, uint64_t nb,
                                  unsigned long long* bad) {
  for (uint64_t i = first_index(); i < n; i += grid_stride()) {
    if (i < nb && !int8_scale_valid(load_f32le(in + 4 * i)))
      atomicMin(&bad[0], static_cast<unsigned long long>(i));
    if (in[4 * nb + i] == 0x80) atomicMin(&bad[1], static_cast<unsigned long long>(i));
  }
}

__global__ void sign_check_kernel(const uint8_t* in, uint64_t n, uint64_t nb,
                                  unsigned long long* bad) {
  for (uint64_t b = first_index(); b < nb; b += grid_stride())
    if (!sign_scale_valid(load_f32le(in + 4 * b)))
      atomicMin(&bad[0], static_cast<unsigned long long>(b));
  if (first_index() == 0 && !padding_clear(in[4 * nb + (n - 1) / 8], n)) atomicMin(&bad[1], 0ull);
}

__global__ void int8_decode_kernel(const uint8_t* in, uint64_t n, uint32_t block, uint64_t nb,
                                   float* y) {
  const bool narrow = n <= UINT32_MAX;
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    y[i] = int8_dequantize(in[4 * nb + i], load_f32le(in + 4 * index_div(i, block, narrow)));
}

__global__ void sign_decode_kernel(const uint8_t* in, uint64_t n, uint32_t block, uint64_t nb,
                                   float* y) {
  const bool narrow = n <= UINT32_MAX;
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    y[i] = sign_decode_element(in + 4 * nb, i, load_f32le(in + 4 * index_div(i, block, narrow)));
}

// ---------------------------------------------------------------------------
// qsgd: the bucket norms as the scales above, then one thread per group of eight
// codes (which fill exactly q.bits bytes).

// Element i's block and that block's scale, for ascending i: one division, then a
// step whenever i crosses into the next block.
struct BlockCursor {
  const uint8_t* scales;
  uint32_t block;
  uint64_t b, end;
  float scale;
  __device__ BlockCursor(const uint8_t* scales_le, uint32_t block_size, uint64_t i)
      : scales(scales_le),
        block(block_size),
        b(i / block_size),
        end((b + 1) * block_size),
        scale(load_f32le(scales_le + 4 * b)) {}
  __device__ float at(uint64_t i) {
    while (i >= end) {
      ++b;
      end += block;
      scale = load_f32le(scales + 4 * b);
    }
    return scale;
  }
};

__global__ void qsgd_groups_kernel(const float* x, uint64_t n, QsgdShape q, uint64_t key,
                                   uint64_t nb, uint8_t* out) {
  const uint64_t groups = (n + 7) / 8;
  for (uint64_t g = first_index(); g < groups; g += grid_stride())
    qsgd_encode_group(x, n, g, out, q, key, out + 4 * nb + g * q.bits);
}

// A group of eight codes a thread (any q.bits): the fallback for codes over 16 bits.
__global__ void qsgd_check_groups_kernel(const uint8_t* in, uint64_t n, QsgdShape q, uint64_t nb,
                                         unsigned long long* bad) {
  for (uint64_t b = first_index(); b < nb; b += grid_stride())
    if (!qsgd_norm_valid(load_f32le(in + 4 * b)))
      atomicMin(&bad[0], static_cast<unsigned long long>(b));
  const uint8_t* codes = in + 4 * nb;
  const uint64_t used_bits = n * q.bits;
  if (first_index() == 0 && !padding_clear(codes[(used_bits - 1) / 8], used_bits))
    atomicMin(&bad[1], 0ull);
  const uint64_t groups = (n + 7) / 8;
  for (uint64_t g = first_index(); g < groups; g += grid_stride())
    qsgd_for_each_code(codes + g * q.bits, n, g, q.bits, [&](uint64_t i, uint64_t code) {
      if (!qsgd_level_valid(code, q)) atomicMin(&bad[2], static_cast<unsigned long long>(i));
    });
}

__global__ void qsgd_decode_groups_kernel(const uint8_t* in, uint64_t n, QsgdShape q, uint64_t nb,
                                          float* y) {
  const uint8_t* codes = in + 4 * nb;
  const uint64_t groups = (n + 7) / 8;
  for (uint64_t g = first_index(); g < groups; g += grid_stride()) {
    BlockCursor c(in, q.bucket, 8 * g);
    qsgd_for_each_code(codes + g * q.bits, n, g, q.bits, [&](uint64_t i, uint64_t code) {
      y[i] = qsgd_decode_value(code, c.at(i), q);
    });
  }
}

// One element a thread where a code spans at most three bytes (q.bits <= 16, every
// level the CPU codec takes): element i's bits start at bit i * q.bits of the code
// section, LSB first (qsgd_for_each_code's order: a group of eight fills exactly
// q.bits bytes). The stores of the floats are then coalesced.
__device__ uint64_t qsgd_code_at(const uint8_t* codes, uint64_t code_bytes, uint64_t i,
                                 uint32_t bits) {
  const uint64_t bit = i * bits;
  const uint64_t at = bit / 8;
  uint32_t w = codes[at];
  if (at + 1 < code_bytes) w |= static_cast<uint32_t>(codes[at + 1]) << 8;
  if (at + 2 < code_bytes) w |= static_cast<uint32_t>(codes[at + 2]) << 16;
  return (w >> (bit % 8)) & ((1u << bits) - 1);
}

__global__ void qsgd_check_kernel(const uint8_t* in, uint64_t n, QsgdShape q, uint64_t nb,
                                  unsigned long long* bad) {
  const uint8_t* codes = in + 4 * nb;
  const uint64_t used_bits = n * q.bits, code_bytes = (used_bits + 7) / 8;
  if (first_index() == 0 && !padding_clear(codes[code_bytes - 1], used_bits))
    atomicMin(&bad[1], 0ull);
  for (uint64_t i = first_index(); i < n; i += grid_stride()) {
    if (i < nb && !qsgd_norm_valid(load_f32le(in + 4 * i)))
      atomicMin(&bad[0], static_cast<unsigned long long>(i));
    if (!qsgd_level_valid(qsgd_code_at(codes, code_bytes, i, q.bits), q))
      atomicMin(&bad[2], static_cast<unsigned long long>(i));
  }
}

__global__ void qsgd_decode_kernel(const uint8_t* in, uint64_t n, QsgdShape q, uint64_t nb,
                                   float* y) {
  const uint8_t* codes = in + 4 * nb;
  const uint64_t code_bytes = (n * q.bits + 7) / 8;
  const bool narrow = n <= UINT32_MAX;
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    y[i] = qsgd_decode_value(qsgd_code_at(codes, code_bytes, i, q.bits),
                             load_f32le(in + 4 * index_div(i, q.bucket, narrow)), q);
}

// ---------------------------------------------------------------------------
// Error feedback (error_feedback.cc): two separately rounded steps, as on the CPU.

__global__ void ef_add_kernel(const float* e, const float* u, uint64_t n, float* out) {
  for (uint64_t i = first_index(); i < n; i += grid_stride()) out[i] = add_rn(e[i], u[i]);
}

__global__ void ef_subtract_kernel(const float* corrected, const float* sent, uint64_t n,
                                   float* e) {
  for (uint64_t i = first_index(); i < n; i += grid_stride()) e[i] = sub_rn(corrected[i], sent[i]);
}

}  // namespace

cudaError_t half_encode(const float* x, uint64_t n, bool bf16, uint8_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bf16) {
    half_encode_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(x, n, out);
  } else {
    half_encode_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(x, n, out);
  }
  return cudaGetLastError();
}

cudaError_t half_decode(const uint8_t* in, uint64_t n, bool bf16, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bf16) {
    half_decode_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(in, n, y);
  } else {
    half_decode_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(in, n, y);
  }
  return cudaGetLastError();
}

cudaError_t int8_encode(const float* x, uint64_t n, uint32_t block, uint8_t* out,
                        unsigned long long* first_bad_block, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = block_count(n, block);
  if (block >= kChunk) {
    int8_encode_warp_kernel<<<grid_for(32 * nb), kThreads, 0, stream>>>(x, n, block, nb, out,
                                                                        first_bad_block);
    return cudaGetLastError();
  }
  launch_scales<Int8ScaleAcc>(x, n, block, nb, {out, first_bad_block}, stream);
  int8_values_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, block, nb, out);
  return cudaGetLastError();
}

cudaError_t sign_encode(const float* x, uint64_t n, uint32_t block, uint8_t* out,
                        unsigned long long* first_bad_block, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = block_count(n, block);
  launch_scales<SignScaleAcc>(x, n, block, nb, {out, first_bad_block}, stream);
  sign_bits_kernel<<<grid_for((n + 31) / 32 * 32), kThreads, 0, stream>>>(x, n, nb, out);
  return cudaGetLastError();
}

cudaError_t qsgd_encode(const float* x, uint64_t n, QsgdShape q, uint64_t seed, uint8_t* out,
                        unsigned long long* first_bad_bucket, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = block_count(n, q.bucket);
  launch_scales<QsgdNormAcc>(x, n, q.bucket, nb, {out, first_bad_bucket}, stream);
  qsgd_groups_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(x, n, q, stream_key(seed), nb,
                                                                     out);
  return cudaGetLastError();
}

cudaError_t int8_check(const uint8_t* in, uint64_t n, uint32_t block, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int8_check_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, block_count(n, block), bad);
  return cudaGetLastError();
}

cudaError_t sign_check(const uint8_t* in, uint64_t n, uint32_t block, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = block_count(n, block);
  sign_check_kernel<<<grid_for(nb), kThreads, 0, stream>>>(in, n, nb, bad);
  return cudaGetLastError();
}

cudaError_t qsgd_check(const uint8_t* in, uint64_t n, QsgdShape q, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = block_count(n, q.bucket);
  if (q.bits > 16) {
    qsgd_check_groups_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(in, n, q, nb, bad);
  } else {
    qsgd_check_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, q, nb, bad);
  }
  return cudaGetLastError();
}

cudaError_t int8_decode(const uint8_t* in, uint64_t n, uint32_t block, float* y,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int8_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, block, block_count(n, block), y);
  return cudaGetLastError();
}

cudaError_t sign_decode(const uint8_t* in, uint64_t n, uint32_t block, float* y,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sign_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, block, block_count(n, block), y);
  return cudaGetLastError();
}

cudaError_t qsgd_decode(const uint8_t* in, uint64_t n, QsgdShape q, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = block_count(n, q.bucket);
  if (q.bits > 16) {
    qsgd_decode_groups_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(in, n, q, nb, y);
  } else {
    qsgd_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, q, nb, y);
  }
  return cudaGetLastError();
}

cudaError_t ef_add(const float* e, const float* u, uint64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ef_add_kernel<<<grid_for(n), kThreads, 0, stream>>>(e, u, n, out);
  return cudaGetLastError();
}

cudaError_t ef_subtract(const float* corrected, const float* sent, uint64_t n, float* e,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ef_subtract_kernel<<<grid_for(n), kThreads, 0, stream>>>(corrected, sent, n, e);
  return cudaGetLastError();
}

}  // namespace gossip::compression::cuda::kernels
