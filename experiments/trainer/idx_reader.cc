#include "experiments/trainer/idx_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace gossip::trainer {
namespace {

// DEFLATE's largest expansion (258 bytes from a 2-bit code, about 1032:1): a header
// that promises more than the stream could hold is refused before allocating.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr size_t kMaxHeaderBytes = 4 + 4 * kMaxIdxDims;
// A file larger than the largest array (stored uncompressed, or in gzip's stored blocks
// with their few bytes per 64 KB) is refused before it is read.
constexpr uint64_t kMaxFileBytes = kMaxHeaderBytes + kMaxIdxBytes + kMaxIdxBytes / 1024 + 4096;

// n bytes, zeroed, in transparent huge pages where the kernel gives them on request
// (THP "madvise"): in 4 KB pages the training set's 47 MB is 11,500 page faults, which
// cost some 20 us each on this project's virtual machines. With libdeflate in place of
// zlib's gzread, a one-step `gossip-train --standalone` took 0.22 s of CPU and 3,550
// page faults instead of 0.49 s and 16,300 (2026-12-08).
void resize_in_huge_pages(std::vector<uint8_t>& v, size_t n) {
  v.reserve(n);  // allocated, not touched yet
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto at = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t begin = (at + kHuge - 1) & ~(kHuge - 1), end = (at + n) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  v.resize(n);
}

// The whole file. Read, not mapped: a file cut short by another process while it is
// read must end in an error, not in SIGBUS.
Result<std::vector<uint8_t>> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::io_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Status::io_error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return Status::invalid(fmt::format("{}: not a regular file", path));
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes)
    return Status::invalid(
        fmt::format("{}: IDX array too large (a file of {} bytes)", path, st.st_size));
  std::vector<uint8_t> bytes;
  resize_in_huge_pages(bytes, static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::io_error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    if (n == 0) break;  // cut short since fstat: what was read is checked like any file
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

struct Header {
  std::vector<uint32_t> dims;
  size_t bytes = 0;    // of the header itself
  uint64_t total = 0;  // elements (bytes) after it
};

// The header at the start of `b` (at most kMaxHeaderBytes of the file's contents).
Result<Header> parse_header(const std::string& path, std::span<const uint8_t> b) {
  if (b.size() < 4)
    return Status::invalid(
        fmt::format("{}: too short for an IDX header ({} bytes)", path, b.size()));
  if (b[0] != 0 || b[1] != 0)
    return Status::invalid(
        fmt::format("{}: bad IDX magic {:02x}{:02x}{:02x}{:02x}", path, b[0], b[1], b[2], b[3]));
  if (b[2] != 0x08)
    return Status::invalid(fmt::format(
        "{}: unsupported IDX element type 0x{:02x} (only 0x08, unsigned byte)", path, b[2]));
  const uint32_t ndims = b[3];
  if (ndims == 0 || ndims > kMaxIdxDims)
    return Status::invalid(
        fmt::format("{}: bad IDX dimension count {} (1..{})", path, ndims, kMaxIdxDims));
  Header h;
  h.bytes = 4 + 4 * size_t{ndims};
  if (b.size() < h.bytes) return Status::invalid(fmt::format("{}: truncated IDX header", path));
  h.total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    const uint8_t* d = &b[4 + 4 * i];
    const uint32_t v =
        (uint32_t{d[0]} << 24) | (uint32_t{d[1]} << 16) | (uint32_t{d[2]} << 8) | uint32_t{d[3]};
    if (v == 0) return Status::invalid(fmt::format("{}: IDX dimension {} is 0", path, i));
    h.total *= v;  // cannot overflow before the check: v < 2^32 and total <= 2^31
    if (h.total > kMaxIdxBytes)
      return Status::invalid(
          fmt::format("{}: IDX array too large (more than {} bytes)", path, kMaxIdxBytes));
    h.dims.push_back(v);
  }
  return h;
}

// How a gzip stream read with zlib ended.
enum class Ending { kComplete, kCut, kCorrupt };
struct Inflated {
  uint64_t bytes = 0;  // inflated, up to where it stopped
  Ending ending = Ending::kComplete;
  std::string why;  // kCorrupt: zlib's message
};

// Whether the bytes at `p` (n of them) begin another gzip member.
bool gzip_magic(const uint8_t* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

// zlib, a block at a time: the gzip stream `in` inflated until it ends or `stop` bytes
// came out, the first out.size() of them into `out` (the header, which libdeflate, whole
// buffers only, cannot give alone), the rest counted (why libdeflate refused a stream).
// Members follow one another; bytes after the last that begin no member are ignored, as
// gzip and zlib's gzread ignore them.
Inflated zlib_inflate(std::span<const uint8_t> in, std::span<uint8_t> out, uint64_t stop) {
  Inflated r;
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return {0, Ending::kCorrupt, "zlib did not start"};
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());  // under 4 GiB: kMaxFileBytes
  uint8_t sink[16384];
  while (r.bytes < stop) {
    const bool prefix = r.bytes < out.size();
    z.next_out = prefix ? out.data() + r.bytes : sink;
    z.avail_out = static_cast<uInt>(prefix ? out.size() - r.bytes
                                           : std::min<uint64_t>(sizeof sink, stop - r.bytes));
    const uInt room = z.avail_out;
    const int rc = inflate(&z, Z_NO_FLUSH);
    r.bytes += room - z.avail_out;
    if (rc == Z_STREAM_END) {
      if (!gzip_magic(z.next_in, z.avail_in)) break;
      inflateReset(&z);
    } else if (rc == Z_BUF_ERROR) {  // no progress: the input ran out inside a member
      r.ending = Ending::kCut;
      break;
    } else if (rc != Z_OK) {
      r.ending = Ending::kCorrupt;
      r.why = z.msg ? z.msg : "zlib error " + std::to_string(rc);
      break;
    }
  }
  inflateEnd(&z);
  return r;
}

struct DecompressorFree {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// Decompresses the gzip stream `in` (its members one after another, as zlib_inflate())
// into out[0, out.size()), which holds exactly what the IDX header promises: the bytes
// written, or why the stream is refused. libdeflate only says that it failed; zlib reads
// such a stream again to say how.
Result<size_t> gunzip(const std::string& path, std::span<const uint8_t> in,
                      std::span<uint8_t> out) {
  std::unique_ptr<libdeflate_decompressor, DecompressorFree> d(libdeflate_alloc_decompressor());
  if (!d) return Status::io_error(fmt::format("{}: out of memory", path));
  size_t read = 0, written = 0;
  while (read == 0 || gzip_magic(in.data() + read, in.size() - read)) {
    size_t in_used = 0, out_used = 0;
    const auto rc = libdeflate_gzip_decompress_ex(d.get(), in.data() + read, in.size() - read,
                                                  out.data() + written, out.size() - written,
                                                  &in_used, &out_used);
    if (rc != LIBDEFLATE_SUCCESS) {
      // A stream cut a few bytes short can inflate to more than it holds (libdeflate
      // takes its last 8 bytes for the trailer): zlib tells a cut from extra data.
      const Inflated z = zlib_inflate(in, {}, out.size() + 1);
      if (z.ending == Ending::kCut)
        return Status::invalid(fmt::format("{}: truncated gzip stream", path));
      if (z.ending == Ending::kCorrupt)
        return Status::invalid(fmt::format("{}: corrupt gzip stream ({})", path, z.why));
      if (z.bytes > out.size())
        return Status::invalid(fmt::format("{}: unexpected bytes after the IDX data", path));
      return Status::invalid(fmt::format("{}: corrupt gzip stream", path));
    }
    read += in_used;
    written += out_used;
  }
  return written;
}

}  // namespace

Result<IdxArray> read_idx(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::not_found(fmt::format("{}: no such file", path));
  }
  auto file = read_file(path);
  if (!file) return file.status();
  const std::span<const uint8_t> in = *file;
  const bool gzipped = in.size() >= 2 && in[0] == 0x1f && in[1] == 0x8b;

  uint8_t prefix[kMaxHeaderBytes];
  std::span<const uint8_t> head = in.first(std::min(in.size(), kMaxHeaderBytes));
  Inflated start;
  if (gzipped) {
    start = zlib_inflate(in, prefix, sizeof prefix);
    if (start.ending == Ending::kCorrupt)
      return Status::invalid(fmt::format("{}: corrupt gzip stream ({})", path, start.why));
    head = std::span<const uint8_t>(prefix, start.bytes);
  }
  auto header = parse_header(path, head);
  if (!header && start.ending == Ending::kCut)
    return Status::invalid(fmt::format("{}: truncated gzip stream", path));
  if (!header) return header.status();
  const Header& h = *header;
  // Whether the contents can hold what the header promises, before allocating for it.
  const uint64_t most = gzipped ? in.size() * kMaxDeflateRatio : in.size();
  if (h.bytes + h.total > most) {
    return Status::invalid(fmt::format(
        "{}: truncated IDX data: header promises {} bytes, the file {} at most {}", path, h.total,
        gzipped ? "inflates to" : "has", most - std::min(most, h.bytes)));
  }

  IdxArray array;
  array.dims = h.dims;
  size_t size = in.size();
  if (gzipped) {
    // A stream that holds more than this is refused by gunzip().
    resize_in_huge_pages(array.data, h.bytes + h.total);
    auto got = gunzip(path, in, array.data);
    if (!got) return got.status();
    size = std::max(*got, h.bytes);  // the stream began with the header parsed above
    std::memmove(array.data.data(), array.data.data() + h.bytes, size - h.bytes);
  } else {
    resize_in_huge_pages(array.data, h.total);
    std::memcpy(array.data.data(), in.data() + h.bytes, std::min(h.total, in.size() - h.bytes));
  }
  if (size - h.bytes < h.total) {
    return Status::invalid(
        fmt::format("{}: truncated IDX data: header promises {} bytes, file has {}", path, h.total,
                    size - h.bytes));
  }
  if (size - h.bytes > h.total)
    return Status::invalid(fmt::format("{}: unexpected bytes after the IDX data", path));
  array.data.resize(h.total);
  return array;
}

}  // namespace gossip::trainer
