#pragma once
// The kernel launchers (dense_kernels.cu, sparse_kernels.cu), private to the
// gossip_compression_cuda library. Each enqueues its kernels on `stream` and
// returns the launch error; none synchronizes. Pointers are device pointers; n == 0
// launches nothing. Error reports go to device words (`unsigned long long`, one
// per kind of failure) that the caller set to kNone beforehand: kernels lower them
// with atomicMin, so the first bad block or element wins whatever the schedule.
//
// The host logic (sizes, error messages, memory, synchronization) lives in
// device_codecs.cc, compiled by the host compiler with the project's warnings.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "compression/cuda/device_math.h"

namespace gossip::compression::cuda::kernels {

inline constexpr unsigned long long kNone = ~0ull;

// fp16 (bf16 = false) or bf16: 2n bytes at out.
cudaError_t half_encode(const float* x, uint64_t n, bool bf16, uint8_t* out, cudaStream_t stream);
cudaError_t half_decode(const uint8_t* in, uint64_t n, bool bf16, float* y, cudaStream_t stream);

// int8 and sign: the scale section, then the values or bits. A block holding an
// inf or NaN lowers *first_bad_block (its scale and values are then unspecified).
cudaError_t int8_encode(const float* x, uint64_t n, uint32_t block, uint8_t* out,
                        unsigned long long* first_bad_block, cudaStream_t stream);
cudaError_t sign_encode(const float* x, uint64_t n, uint32_t block, uint8_t* out,
                        unsigned long long* first_bad_block, cudaStream_t stream);
// first_bad_bucket: a non-finite element or a norm beyond fp32 (the host tells which).
cudaError_t qsgd_encode(const float* x, uint64_t n, QsgdShape q, uint64_t seed, uint8_t* out,
                        unsigned long long* first_bad_bucket, cudaStream_t stream);

// Validation of a payload of the exact size, before any write to y:
//   bad[0]: first block with an invalid scale (norm);
//   bad[1]: int8: first element -128; sign, qsgd: 0 when the padding bits are set;
//   bad[2]: qsgd: first element whose level exceeds S.
cudaError_t int8_check(const uint8_t* in, uint64_t n, uint32_t block, unsigned long long* bad,
                       cudaStream_t stream);
cudaError_t sign_check(const uint8_t* in, uint64_t n, uint32_t block, unsigned long long* bad,
                       cudaStream_t stream);
cudaError_t qsgd_check(const uint8_t* in, uint64_t n, QsgdShape q, unsigned long long* bad,
                       cudaStream_t stream);

cudaError_t int8_decode(const uint8_t* in, uint64_t n, uint32_t block, float* y,
                        cudaStream_t stream);
cudaError_t sign_decode(const uint8_t* in, uint64_t n, uint32_t block, float* y,
                        cudaStream_t stream);
cudaError_t qsgd_decode(const uint8_t* in, uint64_t n, QsgdShape q, float* y, cudaStream_t stream);

// Error feedback: out = e + u; e = corrected - sent.
cudaError_t ef_add(const float* e, const float* u, uint64_t n, float* out, cudaStream_t stream);
cudaError_t ef_subtract(const float* corrected, const float* sent, uint64_t n, float* e,
                        cudaStream_t stream);

// Top-k selection of k (1 <= k <= n) elements. Scratch: topk_scratch_bytes(n)
// bytes, 256-byte aligned. Writes the kept indices, ascending, and their values to
// idx[0..k) and val[0..k), and a TopkReport to *report (device memory).
struct TopkReport {
  unsigned long long first_non_finite;  // kNone when x is finite
  unsigned long long kept;              // must equal k: a self-check of the kernels
};
size_t topk_scratch_bytes(uint64_t n);
cudaError_t topk_select(const float* x, uint64_t n, uint64_t k, void* scratch, uint64_t* idx,
                        float* val, TopkReport* report, cudaStream_t stream);

// Sparse gather (val[j] = x[idx[j]]) and scatter (y[idx[j]] = val[j], or
// val[j] * scale when `scaled`: a plain copy keeps NaN payloads as the CPU's top-k
// decoder does; the rest of y is the caller's to zero).
cudaError_t gather(const float* x, const uint64_t* idx, uint64_t k, float* val,
                   cudaStream_t stream);
cudaError_t scatter(const uint64_t* idx, const float* val, uint64_t k, bool scaled, float scale,
                    float* y, cudaStream_t stream);

}  // namespace gossip::compression::cuda::kernels
