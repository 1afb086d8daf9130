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

uint64_t blocks_of(uint64_t n, uint32_t block) { return (n + block - 1) / block; }

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
// int8 and sign: one thread per block computes its scale (in index order), then
// one thread per element (int8) or per byte of bits (sign).

template <bool kSign>
__global__ void block_scales_kernel(const float* x, uint64_t n, uint32_t block, uint64_t nb,
                                    uint8_t* out, unsigned long long* first_bad) {
  for (uint64_t b = first_index(); b < nb; b += grid_stride()) {
    const uint64_t lo = b * block, hi = min_u64(n, lo + block);
    BlockScale s = kSign ? sign_block_scale(x, lo, hi) : int8_block_scale(x, lo, hi);
    if (!s.finite) {
      atomicMin(first_bad, static_cast<unsigned long long>(b));
      s.scale = 0.0f;
    }
    store_f32le(out + 4 * b, s.scale);
  }
}

__global__ void int8_values_kernel(const float* x, uint64_t n, uint32_t block, uint64_t nb,
                                   uint8_t* out) {
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    out[4 * nb + i] = int8_quantize(x[i], load_f32le(out + 4 * (i / block)));
}

__global__ void sign_bits_kernel(const float* x, uint64_t n, uint64_t nb, uint8_t* out) {
  const uint64_t bytes = (n + 7) / 8;
  for (uint64_t g = first_index(); g < bytes; g += grid_stride())
    out[4 * nb + g] = sign_pack_byte(x, n, g);
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
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    y[i] = int8_dequantize(in[4 * nb + i], load_f32le(in + 4 * (i / block)));
}

__global__ void sign_decode_kernel(const uint8_t* in, uint64_t n, uint32_t block, uint64_t nb,
                                   float* y) {
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    y[i] = sign_decode_element(in + 4 * nb, i, load_f32le(in + 4 * (i / block)));
}

// ---------------------------------------------------------------------------
// qsgd: one thread per bucket computes its norm into the payload, then one thread
// per group of eight codes (which fill exactly q.bits bytes).

__global__ void qsgd_norms_kernel(const float* x, uint64_t n, uint32_t bucket, uint64_t nb,
                                  uint8_t* out, unsigned long long* first_bad) {
  for (uint64_t b = first_index(); b < nb; b += grid_stride()) {
    const uint64_t lo = b * bucket, hi = min_u64(n, lo + bucket);
    BucketNorm s = qsgd_bucket_norm(x, lo, hi);
    if (s.status != kNormOk) {
      atomicMin(first_bad, static_cast<unsigned long long>(b));
      s.norm = 0.0f;
    }
    store_f32le(out + 4 * b, s.norm);
  }
}

__global__ void qsgd_groups_kernel(const float* x, uint64_t n, QsgdShape q, uint64_t key,
                                   uint64_t nb, uint8_t* out) {
  const uint64_t groups = (n + 7) / 8;
  for (uint64_t g = first_index(); g < groups; g += grid_stride())
    qsgd_encode_group(x, n, g, out, q, key, out + 4 * nb + g * q.bits);
}

__global__ void qsgd_check_kernel(const uint8_t* in, uint64_t n, QsgdShape q, uint64_t nb,
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

__global__ void qsgd_decode_kernel(const uint8_t* in, uint64_t n, QsgdShape q, uint64_t nb,
                                   float* y) {
  const uint8_t* codes = in + 4 * nb;
  const uint64_t groups = (n + 7) / 8;
  for (uint64_t g = first_index(); g < groups; g += grid_stride())
    qsgd_for_each_code(codes + g * q.bits, n, g, q.bits, [&](uint64_t i, uint64_t code) {
      y[i] = qsgd_decode_value(code, load_f32le(in + 4 * (i / q.bucket)), q);
    });
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
  const uint64_t nb = blocks_of(n, block);
  block_scales_kernel<false>
      <<<grid_for(nb), kThreads, 0, stream>>>(x, n, block, nb, out, first_bad_block);
  int8_values_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, block, nb, out);
  return cudaGetLastError();
}

cudaError_t sign_encode(const float* x, uint64_t n, uint32_t block, uint8_t* out,
                        unsigned long long* first_bad_block, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = blocks_of(n, block);
  block_scales_kernel<true>
      <<<grid_for(nb), kThreads, 0, stream>>>(x, n, block, nb, out, first_bad_block);
  sign_bits_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(x, n, nb, out);
  return cudaGetLastError();
}

cudaError_t qsgd_encode(const float* x, uint64_t n, QsgdShape q, uint64_t seed, uint8_t* out,
                        unsigned long long* first_bad_bucket, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = blocks_of(n, q.bucket);
  qsgd_norms_kernel<<<grid_for(nb), kThreads, 0, stream>>>(x, n, q.bucket, nb, out,
                                                           first_bad_bucket);
  qsgd_groups_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(x, n, q, stream_key(seed), nb,
                                                                     out);
  return cudaGetLastError();
}

cudaError_t int8_check(const uint8_t* in, uint64_t n, uint32_t block, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int8_check_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, blocks_of(n, block), bad);
  return cudaGetLastError();
}

cudaError_t sign_check(const uint8_t* in, uint64_t n, uint32_t block, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = blocks_of(n, block);
  sign_check_kernel<<<grid_for(nb), kThreads, 0, stream>>>(in, n, nb, bad);
  return cudaGetLastError();
}

cudaError_t qsgd_check(const uint8_t* in, uint64_t n, QsgdShape q, unsigned long long* bad,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t nb = blocks_of(n, q.bucket);
  qsgd_check_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(in, n, q, nb, bad);
  return cudaGetLastError();
}

cudaError_t int8_decode(const uint8_t* in, uint64_t n, uint32_t block, float* y,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int8_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, block, blocks_of(n, block), y);
  return cudaGetLastError();
}

cudaError_t sign_decode(const uint8_t* in, uint64_t n, uint32_t block, float* y,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sign_decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, block, blocks_of(n, block), y);
  return cudaGetLastError();
}

cudaError_t qsgd_decode(const uint8_t* in, uint64_t n, QsgdShape q, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  qsgd_decode_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(in, n, q,
                                                                     blocks_of(n, q.bucket), y);
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
