// The host side of the device codecs: sizes, scratch memory, launches, reading
// back the kernels' verdicts, and error messages worded as the CPU codecs word
// them. Sparse payloads are framed here with sparse_encoding.h.

#include "compression/cuda/device_codecs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compression/cuda/device_buffer.h"
#include "compression/cuda/device_math.h"
#include "compression/cuda/kernels.h"
#include "compression/randk_indices.h"
#include "compression/sparse_encoding.h"

namespace gossip::compression::cuda {

namespace {

using kernels::kNone;
using Words = unsigned long long;

uint8_t* bytes_of(std::byte* p) { return reinterpret_cast<uint8_t*>(p); }
const uint8_t* bytes_of(const std::byte* p) { return reinterpret_cast<const uint8_t*>(p); }

QsgdShape qsgd_shape(const DeviceCodecParams& p) {
  return {p.levels, p.bucket, qsgd_code_bits(p.levels)};
}

Status launched(cudaError_t err, const char* kernel) {
  return cuda_status(err, fmt::format("launching {}", kernel));
}

Status copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                  cudaStream_t stream) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
}

Status synchronize(cudaStream_t stream) {
  return cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

// Copies device memory to the host once the work queued before has run.
Status read_back(void* host, const void* dev, size_t bytes, cudaStream_t stream) {
  GOSSIP_RETURN_IF_ERROR(copy_async(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
  return synchronize(stream);
}

// `count` error words on the device, all kNone.
Result<DeviceBuffer> error_words(size_t count, cudaStream_t stream) {
  auto words = DeviceBuffer::scratch(count * sizeof(Words), stream);
  if (!words) return words.status();
  GOSSIP_RETURN_IF_ERROR(cuda_status(
      cudaMemsetAsync(words->as<void>(), 0xff, count * sizeof(Words), stream), "cudaMemsetAsync"));
  return words;
}

// The first non-finite element of x[lo, hi) (copied to the host: error paths only),
// or hi when there is none.
Status first_non_finite(const float* d_x, uint64_t lo, uint64_t hi, cudaStream_t stream,
                        uint64_t& at, float& value) {
  std::vector<float> block(hi - lo);
  GOSSIP_RETURN_IF_ERROR(read_back(block.data(), d_x + lo, block.size() * sizeof(float), stream));
  at = hi;
  for (uint64_t i = lo; i < hi; ++i) {
    if (!std::isfinite(block[i - lo])) {
      at = i;
      value = block[i - lo];
      break;
    }
  }
  return Status::ok();
}

// The CPU encoder's error for the first bad block of int8, sign or qsgd.
Status encode_error(const DeviceCodecParams& p, const float* d_x, uint64_t n, uint64_t bad_block,
                    cudaStream_t stream) {
  const uint32_t block = p.id == proto::CodecId::kQsgd ? p.bucket : p.block;
  const uint64_t lo = bad_block * block, hi = std::min<uint64_t>(n, lo + block);
  uint64_t at = hi;
  float value = 0;
  GOSSIP_RETURN_IF_ERROR(first_non_finite(d_x, lo, hi, stream, at, value));
  switch (p.id) {
    case proto::CodecId::kInt8:
      return Status::invalid(
          fmt::format("int8: cannot encode non-finite element {} ({})", at, value));
    case proto::CodecId::kSign:
      return Status::invalid(
          fmt::format("sign:{}: cannot encode non-finite element {} ({})", p.block, at, value));
    default:
      if (at == hi)
        return Status::invalid(
            fmt::format("qsgd:{}: bucket {} (elements {}..) has an L2 norm beyond fp32's range",
                        p.levels, bad_block, lo));
      return Status::invalid(
          fmt::format("qsgd:{}: cannot encode non-finite element {} ({})", p.levels, at, value));
  }
}

Status check_dense_size(const DeviceCodecParams& p, uint64_t bytes, uint64_t n) {
  const uint64_t need = dense_payload_bytes(p, n);
  if (bytes == need) return Status::ok();
  return Status::protocol(
      fmt::format("{}: payload is {} bytes, {} elements need {}", spec_of(p), bytes, n, need));
}

// The CPU decoder's error for what the check kernel found, or OK.
Status decode_error(const DeviceCodecParams& p, const uint8_t* in, uint64_t n, const Words bad[3],
                    cudaStream_t stream) {
  const std::string spec = spec_of(p);
  if (bad[0] != kNone) {
    uint8_t raw[4];
    GOSSIP_RETURN_IF_ERROR(read_back(raw, in + 4 * bad[0], 4, stream));
    const float s = load_f32le(raw);
    if (p.id == proto::CodecId::kQsgd)
      return Status::protocol(fmt::format("{}: bucket {} has invalid norm {}", spec, bad[0], s));
    return Status::protocol(fmt::format("{}: block {} has invalid scale {}", spec, bad[0], s));
  }
  if (p.id == proto::CodecId::kInt8) {
    if (bad[1] != kNone)
      return Status::protocol(
          fmt::format("{}: element {} is -128, outside [-127, 127]", spec, bad[1]));
    return Status::ok();
  }
  if (bad[1] != kNone)
    return Status::protocol(fmt::format("{}: padding bits of the last byte are not zero", spec));
  if (p.id == proto::CodecId::kQsgd && bad[2] != kNone) {
    // Read the offending group back and take the level out of it.
    const QsgdShape q = qsgd_shape(p);
    const uint64_t g = bad[2] / 8;
    const uint64_t code_bytes = (n * q.bits + 7) / 8;
    const uint64_t first = g * q.bits, count = std::min<uint64_t>(q.bits, code_bytes - first);
    uint8_t group[64] = {};
    GOSSIP_RETURN_IF_ERROR(
        read_back(group, in + 4 * block_count(n, q.bucket) + first, count, stream));
    uint64_t level = 0;
    qsgd_for_each_code(group, n, g, q.bits, [&](uint64_t i, uint64_t code) {
      if (i == bad[2]) level = code & ((uint64_t{1} << (q.bits - 1)) - 1);
    });
    return Status::protocol(
        fmt::format("{}: element {} has level {} above {}", spec, bad[2], level, p.levels));
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Sparse codecs.

Status encode_topk(const DeviceCodecParams& p, const float* d_x, uint64_t n,
                   std::vector<std::byte>& out, cudaStream_t stream) {
  const uint64_t k = sparse_count(p.ratio, n);
  if (k == 0) return encode_sparse(n, {}, {}, p.values, out);
  auto scratch = DeviceBuffer::scratch(kernels::topk_scratch_bytes(n), stream);
  if (!scratch) return scratch.status();
  auto d_idx = DeviceBuffer::scratch(k * sizeof(uint64_t), stream);
  if (!d_idx) return d_idx.status();
  auto d_val = DeviceBuffer::scratch(k * sizeof(float), stream);
  if (!d_val) return d_val.status();
  auto d_report = DeviceBuffer::scratch(sizeof(kernels::TopkReport), stream);
  if (!d_report) return d_report.status();
  GOSSIP_RETURN_IF_ERROR(launched(
      kernels::topk_select(d_x, n, k, scratch->as<void>(), d_idx->as<uint64_t>(),
                           d_val->as<float>(), d_report->as<kernels::TopkReport>(), stream),
      "topk_select"));
  kernels::TopkReport report{};
  GOSSIP_RETURN_IF_ERROR(read_back(&report, d_report->as<void>(), sizeof(report), stream));
  if (report.first_non_finite != kNone) {
    float v = 0;
    GOSSIP_RETURN_IF_ERROR(read_back(&v, d_x + report.first_non_finite, sizeof(float), stream));
    return Status::invalid(
        fmt::format("topk: x[{}] is not finite ({})", report.first_non_finite, v));
  }
  if (report.kept != k)
    return Status::io_error(fmt::format(
        "cuda: topk selection kept {} of {} elements (a kernel fault)", report.kept, k));
  std::vector<uint64_t> idx(k);
  std::vector<float> val(k);
  GOSSIP_RETURN_IF_ERROR(copy_async(idx.data(), d_idx->as<void>(), k * sizeof(uint64_t),
                                    cudaMemcpyDeviceToHost, stream));
  GOSSIP_RETURN_IF_ERROR(read_back(val.data(), d_val->as<void>(), k * sizeof(float), stream));
  // encode_sparse checks the indices are increasing and below n: a second check
  // of the compaction.
  return encode_sparse(n, idx, val, p.values, out);
}

Status encode_randk(const DeviceCodecParams& p, const float* d_x, uint64_t n, uint64_t seed,
                    std::vector<std::byte>& out, cudaStream_t stream) {
  const uint64_t k = sparse_count(p.ratio, n);
  const std::vector<uint64_t> idx = randk_indices(seed, n, k);
  std::vector<float> val(k);
  if (k > 0) {
    auto d_idx = DeviceBuffer::scratch(k * sizeof(uint64_t), stream);
    if (!d_idx) return d_idx.status();
    auto d_val = DeviceBuffer::scratch(k * sizeof(float), stream);
    if (!d_val) return d_val.status();
    GOSSIP_RETURN_IF_ERROR(copy_async(d_idx->as<void>(), idx.data(), k * sizeof(uint64_t),
                                      cudaMemcpyHostToDevice, stream));
    GOSSIP_RETURN_IF_ERROR(launched(
        kernels::gather(d_x, d_idx->as<uint64_t>(), k, d_val->as<float>(), stream), "gather"));
    GOSSIP_RETURN_IF_ERROR(read_back(val.data(), d_val->as<void>(), k * sizeof(float), stream));
  }
  return encode_sparse_values(n, val, p.values, out);
}

// Zeroes d_y, then scatters (idx, val) into it (times scale when `scaled`).
Status scatter_into(const std::vector<uint64_t>& idx, const std::vector<float>& val, bool scaled,
                    float scale, float* d_y, uint64_t n, cudaStream_t stream) {
  if (n > 0)
    GOSSIP_RETURN_IF_ERROR(
        cuda_status(cudaMemsetAsync(d_y, 0, n * sizeof(float), stream), "cudaMemsetAsync"));
  const uint64_t k = idx.size();
  if (k > 0) {
    auto d_idx = DeviceBuffer::scratch(k * sizeof(uint64_t), stream);
    if (!d_idx) return d_idx.status();
    auto d_val = DeviceBuffer::scratch(k * sizeof(float), stream);
    if (!d_val) return d_val.status();
    GOSSIP_RETURN_IF_ERROR(copy_async(d_idx->as<void>(), idx.data(), k * sizeof(uint64_t),
                                      cudaMemcpyHostToDevice, stream));
    GOSSIP_RETURN_IF_ERROR(copy_async(d_val->as<void>(), val.data(), k * sizeof(float),
                                      cudaMemcpyHostToDevice, stream));
    GOSSIP_RETURN_IF_ERROR(launched(
        kernels::scatter(d_idx->as<uint64_t>(), d_val->as<float>(), k, scaled, scale, d_y, stream),
        "scatter"));
  }
  return synchronize(stream);
}

// TopkCodec::decode, then decode_sparse_into's checks in its order, with its words.
Status decode_topk(const DeviceCodecParams& p, std::span<const std::byte> in, float* d_y,
                   uint64_t n, cudaStream_t stream) {
  const uint64_t k = sparse_count(p.ratio, n);
  auto h = parse_sparse_header(in, n, "topk");
  if (!h) return h.status();
  const uint64_t lo = p.approximate ? k - k / 10 : k;
  if (h->k < lo || h->k > k)
    return Status::protocol(
        fmt::format("topk: payload carries {} entries, {} expects {}", h->k, spec_of(p),
                    lo == k ? fmt::format("{}", k) : fmt::format("{} to {}", lo, k)));
  auto reader_error = [&](const std::string& what) {
    return Status::protocol(
        fmt::format("topk: sparse payload: {} (at byte {} of {})", what, h->bytes, in.size()));
  };
  auto type_name = [](ValueType t) { return t == ValueType::kF16 ? "fp16" : "fp32"; };
  if (h->encoding == IndexEncoding::kImplicit)
    return reader_error("payload carries no indices (a rand-k payload?)");
  if (h->values != p.values)
    return reader_error(fmt::format("values are {}, the codec expects {}", type_name(h->values),
                                    type_name(p.values)));
  auto v = decode_sparse(in, n, "topk");
  if (!v) return v.status();
  return scatter_into(v->indices, v->values, false, 1.0f, d_y, n, stream);
}

Status decode_randk(const DeviceCodecParams& p, std::span<const std::byte> in, uint64_t seed,
                    float* d_y, uint64_t n, cudaStream_t stream) {
  const uint64_t k = sparse_count(p.ratio, n);
  std::vector<float> val;
  GOSSIP_RETURN_IF_ERROR(decode_sparse_values(in, n, k, p.values, "randk", val));
  const std::vector<uint64_t> idx = randk_indices(seed, n, k);
  const float scale =
      k == 0 ? 1.0f : static_cast<float>(static_cast<double>(n) / static_cast<double>(k));
  return scatter_into(idx, val, true, scale, d_y, n, stream);
}

}  // namespace

Status encode_dense(const DeviceCodecParams& p, const float* d_x, uint64_t n, uint64_t seed,
                    std::byte* d_out, cudaStream_t stream) {
  GOSSIP_RETURN_IF_ERROR(check_params(p));
  if (!is_dense(p.id)) return Status::invalid(fmt::format("{}: not a dense codec", spec_of(p)));
  if (n == 0) return Status::ok();
  uint8_t* out = bytes_of(d_out);
  switch (p.id) {
    case proto::CodecId::kNone:
      GOSSIP_RETURN_IF_ERROR(
          copy_async(out, d_x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return synchronize(stream);
    case proto::CodecId::kFp16:
    case proto::CodecId::kBf16:
      GOSSIP_RETURN_IF_ERROR(launched(
          kernels::half_encode(d_x, n, p.id == proto::CodecId::kBf16, out, stream), "half_encode"));
      return synchronize(stream);
    default:
      break;
  }
  auto bad = error_words(1, stream);
  if (!bad) return bad.status();
  Words* d_bad = bad->as<Words>();
  cudaError_t err = cudaSuccess;
  if (p.id == proto::CodecId::kInt8) {
    err = kernels::int8_encode(d_x, n, p.block, out, d_bad, stream);
  } else if (p.id == proto::CodecId::kSign) {
    err = kernels::sign_encode(d_x, n, p.block, out, d_bad, stream);
  } else {
    err = kernels::qsgd_encode(d_x, n, qsgd_shape(p), seed, out, d_bad, stream);
  }
  GOSSIP_RETURN_IF_ERROR(launched(err, "dense encode"));
  Words first_bad = kNone;
  GOSSIP_RETURN_IF_ERROR(read_back(&first_bad, d_bad, sizeof(first_bad), stream));
  if (first_bad != kNone) return encode_error(p, d_x, n, first_bad, stream);
  return Status::ok();
}

Status decode_dense(const DeviceCodecParams& p, const std::byte* d_in, uint64_t bytes, float* d_y,
                    uint64_t n, cudaStream_t stream) {
  GOSSIP_RETURN_IF_ERROR(check_params(p));
  if (!is_dense(p.id)) return Status::invalid(fmt::format("{}: not a dense codec", spec_of(p)));
  GOSSIP_RETURN_IF_ERROR(check_dense_size(p, bytes, n));
  if (n == 0) return Status::ok();
  const uint8_t* in = bytes_of(d_in);
  switch (p.id) {
    case proto::CodecId::kNone:
      GOSSIP_RETURN_IF_ERROR(
          copy_async(d_y, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return synchronize(stream);
    case proto::CodecId::kFp16:
    case proto::CodecId::kBf16:
      GOSSIP_RETURN_IF_ERROR(launched(
          kernels::half_decode(in, n, p.id == proto::CodecId::kBf16, d_y, stream), "half_decode"));
      return synchronize(stream);
    default:
      break;
  }
  auto words = error_words(3, stream);
  if (!words) return words.status();
  Words* d_bad = words->as<Words>();
  cudaError_t err = cudaSuccess;
  if (p.id == proto::CodecId::kInt8) {
    err = kernels::int8_check(in, n, p.block, d_bad, stream);
  } else if (p.id == proto::CodecId::kSign) {
    err = kernels::sign_check(in, n, p.block, d_bad, stream);
  } else {
    err = kernels::qsgd_check(in, n, qsgd_shape(p), d_bad, stream);
  }
  GOSSIP_RETURN_IF_ERROR(launched(err, "dense payload check"));
  Words bad[3];
  GOSSIP_RETURN_IF_ERROR(read_back(bad, d_bad, sizeof(bad), stream));
  GOSSIP_RETURN_IF_ERROR(decode_error(p, in, n, bad, stream));
  if (p.id == proto::CodecId::kInt8) {
    err = kernels::int8_decode(in, n, p.block, d_y, stream);
  } else if (p.id == proto::CodecId::kSign) {
    err = kernels::sign_decode(in, n, p.block, d_y, stream);
  } else {
    err = kernels::qsgd_decode(in, n, qsgd_shape(p), d_y, stream);
  }
  GOSSIP_RETURN_IF_ERROR(launched(err, "dense decode"));
  return synchronize(stream);
}

Status encode(const DeviceCodecParams& p, const float* d_x, uint64_t n, uint64_t seed,
              std::vector<std::byte>& out, cudaStream_t stream) {
  out.clear();
  GOSSIP_RETURN_IF_ERROR(check_params(p));
  Status st;
  if (p.id == proto::CodecId::kTopk) {
    st = encode_topk(p, d_x, n, out, stream);
  } else if (p.id == proto::CodecId::kRandk) {
    st = encode_randk(p, d_x, n, seed, out, stream);
  } else {
    const uint64_t bytes = dense_payload_bytes(p, n);
    auto d_out = DeviceBuffer::scratch(bytes, stream);
    if (!d_out) return d_out.status();
    st = encode_dense(p, d_x, n, seed, d_out->as<std::byte>(), stream);
    if (st.is_ok()) {
      out.resize(bytes);
      st = read_back(out.data(), d_out->as<void>(), bytes, stream);
    }
  }
  if (!st.is_ok()) out.clear();
  return st;
}

Status decode(const DeviceCodecParams& p, std::span<const std::byte> in, uint64_t seed, float* d_y,
              uint64_t n, cudaStream_t stream) {
  GOSSIP_RETURN_IF_ERROR(check_params(p));
  if (p.id == proto::CodecId::kTopk) return decode_topk(p, in, d_y, n, stream);
  if (p.id == proto::CodecId::kRandk) return decode_randk(p, in, seed, d_y, n, stream);
  // Refuse a wrong size before uploading anything.
  GOSSIP_RETURN_IF_ERROR(check_dense_size(p, in.size(), n));
  auto d_in = DeviceBuffer::scratch(in.size(), stream);
  if (!d_in) return d_in.status();
  GOSSIP_RETURN_IF_ERROR(
      copy_async(d_in->as<void>(), in.data(), in.size(), cudaMemcpyHostToDevice, stream));
  return decode_dense(p, d_in->as<std::byte>(), in.size(), d_y, n, stream);
}

}  // namespace gossip::compression::cuda
