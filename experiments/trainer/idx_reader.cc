#include "experiments/trainer/idx_reader.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace gossip::trainer {
namespace {

struct GzFileCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzFileCloser>;

// Reads up to `len` bytes; a short count means end of data or an error (see gz_error).
Result<size_t> read_fully(gzFile f, const std::string& path, uint8_t* out, size_t len) {
  size_t got = 0;
  while (got < len) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(len - got, 1u << 30));
    const int n = gzread(f, out + got, chunk);
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return Status::io_error(fmt::format("{}: gzip read error: {}", path, msg));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

// A stream that ends early reads as a short count with Z_BUF_ERROR set; report it as
// a truncated file rather than as a short IDX body.
Status check_stream(gzFile f, const std::string& path) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_OK || err == Z_STREAM_END) return Status::ok();
  if (err == Z_BUF_ERROR) {
    return Status::invalid(fmt::format("{}: truncated gzip stream ({})", path, msg));
  }
  return Status::invalid(fmt::format("{}: corrupt gzip stream ({})", path, msg));
}

}  // namespace

Result<IdxArray> read_idx(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::not_found(fmt::format("{}: no such file", path));
  }
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    return Status::io_error(
        fmt::format("{}: cannot open: {}", path, errno ? std::strerror(errno) : "out of memory"));
  }
  gzFile f = file.get();

  uint8_t magic[4];
  auto got = read_fully(f, path, magic, sizeof magic);
  if (!got) return got.status();
  if (*got < sizeof magic) {
    GOSSIP_RETURN_IF_ERROR(check_stream(f, path));
    return Status::invalid(fmt::format("{}: too short for an IDX header ({} bytes)", path, *got));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return Status::invalid(fmt::format("{}: bad IDX magic {:02x}{:02x}{:02x}{:02x}", path, magic[0],
                                       magic[1], magic[2], magic[3]));
  }
  if (magic[2] != 0x08) {
    return Status::invalid(fmt::format(
        "{}: unsupported IDX element type 0x{:02x} (only 0x08, unsigned byte)", path, magic[2]));
  }
  const uint32_t ndims = magic[3];
  if (ndims == 0 || ndims > kMaxIdxDims) {
    return Status::invalid(
        fmt::format("{}: bad IDX dimension count {} (1..{})", path, ndims, kMaxIdxDims));
  }

  IdxArray array;
  std::vector<uint8_t> dim_bytes(4 * ndims);
  got = read_fully(f, path, dim_bytes.data(), dim_bytes.size());
  if (!got) return got.status();
  if (*got < dim_bytes.size()) {
    GOSSIP_RETURN_IF_ERROR(check_stream(f, path));
    return Status::invalid(fmt::format("{}: truncated IDX header", path));
  }
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    const uint8_t* b = &dim_bytes[4 * i];
    const uint32_t d =
        (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
    if (d == 0) return Status::invalid(fmt::format("{}: IDX dimension {} is 0", path, i));
    total *= d;  // cannot overflow before the check: d < 2^32 and total <= 2^31
    if (total > kMaxIdxBytes) {
      return Status::invalid(
          fmt::format("{}: IDX array too large (more than {} bytes)", path, kMaxIdxBytes));
    }
    array.dims.push_back(d);
  }

  array.data.resize(total);
  got = read_fully(f, path, array.data.data(), array.data.size());
  if (!got) return got.status();
  if (*got < total) {
    GOSSIP_RETURN_IF_ERROR(check_stream(f, path));
    return Status::invalid(fmt::format(
        "{}: truncated IDX data: header promises {} bytes, file has {}", path, total, *got));
  }
  // The data must end exactly here; reading on also verifies the gzip trailer (CRC).
  uint8_t extra = 0;
  got = read_fully(f, path, &extra, 1);
  if (!got) return got.status();
  GOSSIP_RETURN_IF_ERROR(check_stream(f, path));
  if (*got != 0) {
    return Status::invalid(fmt::format("{}: unexpected bytes after the IDX data", path));
  }
  return array;
}

}  // namespace gossip::trainer
