#include "experiments/trainer/idx_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "experiments/trainer/dataset.h"
#include "temp_dir.h"

namespace gossip::trainer {
namespace {

using ::gossip::trainer::testing::TempDir;

const std::string kDir = kDefaultDataDir;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// An unsigned-byte IDX file: magic 00 00 08 ndims, big-endian dims, then `data`.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                               uint8_t type = 0x08) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void expect_error(const Result<IdxArray>& result, const std::string& path,
                  const std::string& fragment) {
  ASSERT_FALSE(result.is_ok()) << "read " << path << " although it is " << fragment;
  const std::string& message = result.status().message();
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

TEST(IdxReader, ReadsTheRealTrainingImages) {
  auto images = read_idx(kDir + "/train-images-idx3-ubyte.gz");
  ASSERT_TRUE(images.is_ok()) << images.status().message();
  EXPECT_EQ(images->dims, (std::vector<uint32_t>{60000, 28, 28}));
  EXPECT_EQ(images->data.size(), 60000u * 28 * 28);
  // Real images: some black and some white pixels, not all one value.
  const auto [lo, hi] = std::minmax_element(images->data.begin(), images->data.end());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
}

TEST(IdxReader, ReadsTheRealLabels) {
  for (const auto& [name, count] : {std::pair{"train", 60000u}, std::pair{"t10k", 10000u}}) {
    const std::string path = kDir + "/" + name + "-labels-idx1-ubyte.gz";
    auto labels = read_idx(path);
    ASSERT_TRUE(labels.is_ok()) << labels.status().message();
    EXPECT_EQ(labels->dims, (std::vector<uint32_t>{count}));
    std::array<size_t, 10> histogram{};
    for (uint8_t y : labels->data) {
      ASSERT_LT(y, 10) << path;
      ++histogram[y];
    }
    // Fashion-MNIST is balanced: every class has a tenth of the samples.
    for (size_t c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], count / 10) << path << " class " << c;
  }
}

TEST(IdxReader, LoadsBothSplitsAsADataset) {
  auto train = load_fashion_mnist(kDir, Split::kTrain);
  ASSERT_TRUE(train.is_ok()) << train.status().message();
  EXPECT_EQ(train->size(), 60000u);
  EXPECT_EQ(train->pixels.size(), 60000u * kImagePixels);
  auto test = load_fashion_mnist(kDir, Split::kTest);
  ASSERT_TRUE(test.is_ok()) << test.status().message();
  EXPECT_EQ(test->size(), 10000u);

  // gather() gives floats in [0, 1] that match the bytes.
  std::vector<float> x(2 * kImagePixels);
  std::vector<uint8_t> y(2);
  const std::vector<uint32_t> indices = {7, 59999};
  train->gather(indices, x, y);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(y[i], train->labels[indices[i]]);
    for (size_t p = 0; p < kImagePixels; ++p) {
      const float v = x[i * kImagePixels + p];
      ASSERT_GE(v, 0.0f);
      ASSERT_LE(v, 1.0f);
      ASSERT_FLOAT_EQ(v, train->pixels[indices[i] * kImagePixels + p] / 255.0f);
    }
  }
}

TEST(IdxReader, ReadsAPlainFileToo) {
  TempDir dir;
  const std::string path = dir.file("plain-idx1-ubyte");
  write_bytes(path, idx_bytes({3}, {4, 5, 6}));
  auto array = read_idx(path);
  ASSERT_TRUE(array.is_ok()) << array.status().message();
  EXPECT_EQ(array->dims, (std::vector<uint32_t>{3}));
  EXPECT_EQ(array->data, (std::vector<uint8_t>{4, 5, 6}));
}

TEST(IdxReader, RejectsATruncatedGzipFile) {
  TempDir dir;
  const std::string path = dir.file("truncated-labels-idx1-ubyte.gz");
  auto whole = read_bytes(kDir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_GT(whole.size(), 100u);
  whole.resize(whole.size() / 2);
  write_bytes(path, whole);
  expect_error(read_idx(path), path, "truncated");

  // Only the 8-byte gzip trailer (CRC and length) missing, or part of it: still refused,
  // and as cut short (libdeflate, taking the last bytes for the trailer, inflates such a
  // stream to more than the header promises).
  for (size_t cut = 1; cut <= 8; ++cut) {
    auto almost = read_bytes(kDir + "/t10k-labels-idx1-ubyte.gz");
    almost.resize(almost.size() - cut);
    write_bytes(path, almost);
    expect_error(read_idx(path), path, "truncated gzip stream");
  }

  // Cut within its first bytes, before the IDX header.
  whole.resize(12);
  write_bytes(path, whole);
  expect_error(read_idx(path), path, "truncated gzip stream");
}

// Bytes after the last gzip member that begin no other are ignored, as gzip ignores them.
TEST(IdxReader, IgnoresBytesAfterTheGzipStream) {
  TempDir dir;
  const std::string path = dir.file("trailing-idx1-ubyte.gz");
  write_gzip(path, idx_bytes({3}, {4, 5, 6}));
  auto bytes = read_bytes(path);
  bytes.insert(bytes.end(), {0, 0, 0, 0, 'x'});
  write_bytes(path, bytes);
  auto array = read_idx(path);
  ASSERT_TRUE(array.is_ok()) << array.status().message();
  EXPECT_EQ(array->data, (std::vector<uint8_t>{4, 5, 6}));
}

// gzip's members one after another read as one stream, as gunzip reads them.
TEST(IdxReader, ReadsAGzipFileOfSeveralMembers) {
  TempDir dir;
  const std::string path = dir.file("members-idx1-ubyte.gz"), second = dir.file("second.gz");
  const auto bytes = idx_bytes({6}, {1, 2, 3, 4, 5, 6});
  write_gzip(path, {bytes.begin(), bytes.begin() + 7});
  write_gzip(second, {bytes.begin() + 7, bytes.end()});
  auto whole = read_bytes(path);
  const auto tail = read_bytes(second);
  whole.insert(whole.end(), tail.begin(), tail.end());
  write_bytes(path, whole);
  auto array = read_idx(path);
  ASSERT_TRUE(array.is_ok()) << array.status().message();
  EXPECT_EQ(array->data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
}

// A header that promises more than its gzip stream can inflate to (DEFLATE expands at
// most about 1032:1) is refused before the reader allocates for it.
TEST(IdxReader, RejectsAHeaderThatPromisesMoreThanTheStreamHolds) {
  TempDir dir;
  const std::string path = dir.file("promises-idx3-ubyte.gz");
  write_gzip(path, idx_bytes({60000, 28, 28}, std::vector<uint8_t>(10, 1)));
  expect_error(read_idx(path), path, "the file inflates to at most");
}

TEST(IdxReader, RejectsDataShorterThanTheHeaderSays) {
  TempDir dir;
  const std::string path = dir.file("short-idx1-ubyte.gz");
  write_gzip(path, idx_bytes({100}, std::vector<uint8_t>(50, 1)));
  expect_error(read_idx(path), path, "truncated IDX data");
}

TEST(IdxReader, RejectsBytesAfterTheData) {
  TempDir dir;
  const std::string path = dir.file("long-idx1-ubyte.gz");
  write_gzip(path, idx_bytes({10}, std::vector<uint8_t>(11, 1)));
  expect_error(read_idx(path), path, "after the IDX data");
}

TEST(IdxReader, RejectsAWrongMagic) {
  TempDir dir;
  const std::string path = dir.file("magic-idx1-ubyte.gz");
  auto bytes = idx_bytes({4}, {1, 2, 3, 4});
  bytes[0] = 0x1f;
  write_gzip(path, bytes);
  expect_error(read_idx(path), path, "bad IDX magic");

  write_gzip(path, idx_bytes({4}, {1, 2, 3, 4}, /*type=*/0x0d));  // floats
  expect_error(read_idx(path), path, "unsupported IDX element type");

  write_gzip(path, idx_bytes({}, {}));
  expect_error(read_idx(path), path, "dimension count");

  write_gzip(path, idx_bytes({0, 5}, {}));
  expect_error(read_idx(path), path, "dimension 0 is 0");

  write_gzip(path, idx_bytes({65536, 65536}, {}));  // 4 GiB: refused before allocating
  expect_error(read_idx(path), path, "too large");

  write_gzip(path, {0, 0});
  expect_error(read_idx(path), path, "too short");
}

TEST(IdxReader, NamesAMissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent-idx1-ubyte.gz");
  auto result = read_idx(path);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), Status::Code::kNotFound);
  EXPECT_NE(result.status().message().find(path), std::string::npos);

  // The dataset loader says what is missing and how to install it.
  auto dataset = load_fashion_mnist(dir.path().string(), Split::kTrain);
  ASSERT_FALSE(dataset.is_ok());
  EXPECT_EQ(dataset.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(dataset.status().message(),
            "Fashion-MNIST not found at " + dir.file("train-images-idx3-ubyte.gz") +
                ": install Debian's dataset-fashion-mnist (scripts/install-deps.sh)");
}

TEST(IdxReader, DatasetRejectsMismatchedFiles) {
  TempDir dir;
  // 2 images of 28x28 but 3 labels.
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"),
             idx_bytes({2, 28, 28}, std::vector<uint8_t>(2 * 784, 7)));
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes({3}, {1, 2, 3}));
  auto dataset = load_fashion_mnist(dir.path().string(), Split::kTest);
  ASSERT_FALSE(dataset.is_ok());
  EXPECT_NE(dataset.status().message().find("3 labels"), std::string::npos)
      << dataset.status().message();

  // A label outside 0..9.
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes({2}, {1, 10}));
  dataset = load_fashion_mnist(dir.path().string(), Split::kTest);
  ASSERT_FALSE(dataset.is_ok());
  EXPECT_NE(dataset.status().message().find("label 10"), std::string::npos)
      << dataset.status().message();

  // Images that are not 28x28.
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"),
             idx_bytes({2, 14, 56}, std::vector<uint8_t>(2 * 784, 7)));
  dataset = load_fashion_mnist(dir.path().string(), Split::kTest);
  ASSERT_FALSE(dataset.is_ok());
  EXPECT_NE(dataset.status().message().find("[2, 14, 56]"), std::string::npos)
      << dataset.status().message();
}

}  // namespace
}  // namespace gossip::trainer
