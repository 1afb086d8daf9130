// Model layouts (proto/layout.h): comparison messages, fingerprints, replica offsets.

#include "proto/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace gossip::proto {
namespace {

using ::testing::HasSubstr;

Layout mlp() {
  Layout l;
  l.tensors = {{"fc1.weight", DType::kF32, 784 * 256},
               {"fc1.bias", DType::kF32, 256},
               {"fc2.weight", DType::kF32, 256 * 10},
               {"fc2.bias", DType::kF32, 10}};
  return l;
}

TEST(Layout, EqualLayoutsHaveNoDifference) {
  EXPECT_EQ(first_difference(mlp(), mlp()), std::nullopt);
  EXPECT_EQ(first_difference(Layout{}, Layout{}), std::nullopt);
}

TEST(Layout, DifferentSize) {
  Layout other = mlp();
  other.tensors[2].numel = 256 * 12;
  auto d = first_difference(mlp(), other);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "tensor 2 'fc2.weight': node has f32[2560], trainer has f32[3072]");
  // The words name the two sides.
  d = first_difference(mlp(), other, "this node", "peer 4");
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "tensor 2 'fc2.weight': this node has f32[2560], peer 4 has f32[3072]");
}

TEST(Layout, DifferentName) {
  Layout other = mlp();
  other.tensors[1].name = "fc1.b";
  other.tensors[3].numel = 11;  // a later difference is not the one reported
  auto d = first_difference(mlp(), other);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "tensor 1: node has 'fc1.bias', trainer has 'fc1.b'");
}

TEST(Layout, ExtraTensor) {
  Layout other = mlp();
  other.tensors.push_back({"fc3.weight", DType::kF32, 100});
  auto d = first_difference(mlp(), other);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "tensor 4 'fc3.weight': node has 4 tensors, trainer has 5");
}

TEST(Layout, MissingTensor) {
  Layout other = mlp();
  other.tensors.pop_back();
  auto d = first_difference(mlp(), other);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "tensor 3 'fc2.bias': node has 4 tensors, trainer has 3");
  d = first_difference(mlp(), Layout{});
  ASSERT_TRUE(d);
  EXPECT_THAT(*d, HasSubstr("tensor 0 'fc1.weight'"));
}

TEST(Layout, Fingerprint) {
  const uint64_t f = mlp().fingerprint();
  EXPECT_EQ(f, mlp().fingerprint());
  EXPECT_NE(f, Layout{}.fingerprint());

  Layout renamed = mlp();
  renamed.tensors[3].name = "fc2.Bias";
  EXPECT_NE(renamed.fingerprint(), f);

  Layout resized = mlp();
  resized.tensors[0].numel += 1;
  EXPECT_NE(resized.fingerprint(), f);

  Layout reordered = mlp();
  std::swap(reordered.tensors[1], reordered.tensors[3]);
  EXPECT_NE(reordered.fingerprint(), f);

  Layout shorter = mlp();
  shorter.tensors.pop_back();
  EXPECT_NE(shorter.fingerprint(), f);

  // Moving a byte from one name to the next changes the fingerprint too.
  Layout a, b;
  a.tensors = {{"ab", DType::kF32, 1}, {"c", DType::kF32, 1}};
  b.tensors = {{"a", DType::kF32, 1}, {"bc", DType::kF32, 1}};
  EXPECT_NE(a.fingerprint(), b.fingerprint());
}

TEST(Layout, OffsetsAreAligned) {
  Layout l;
  l.tensors = {{"a", DType::kF32, 1},  {"b", DType::kF32, 16}, {"c", DType::kF32, 17},
               {"d", DType::kF32, 15}, {"e", DType::kF32, 32}, {"f", DType::kF32, 3}};
  auto off = tensor_offsets(l);
  ASSERT_EQ(off.size(), l.tensors.size());
  EXPECT_EQ(off, (std::vector<uint64_t>{0, 16, 32, 64, 80, 112}));
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_EQ(off[i] * dtype_size(l.tensors[i].dtype) % 64, 0u) << i;
    if (i > 0) {
      EXPECT_GE(off[i], off[i - 1] + l.tensors[i - 1].numel) << "tensors overlap at " << i;
    }
  }
  EXPECT_EQ(padded_numel(l), 128u);
  EXPECT_GE(padded_numel(l), off.back() + l.tensors.back().numel);
  EXPECT_EQ(padded_numel(l) * 4 % 64, 0u);
  EXPECT_EQ(l.total_numel(), 84u);
}

TEST(Layout, PaddedNumelConsistentWithOffsets) {
  Layout l = mlp();
  auto off = tensor_offsets(l);
  EXPECT_EQ(off, (std::vector<uint64_t>{0, 200704, 200960, 203520}));
  EXPECT_EQ(padded_numel(l), 203536u);
  EXPECT_GE(padded_numel(l), l.total_numel());
  EXPECT_TRUE(tensor_offsets(Layout{}).empty());
  EXPECT_EQ(padded_numel(Layout{}), 0u);
}

TEST(Layout, Validate) {
  EXPECT_TRUE(validate_layout(mlp()).is_ok());
  Status st = validate_layout(Layout{});
  EXPECT_EQ(st.code(), Status::Code::kInvalid);
  EXPECT_THAT(st.message(), HasSubstr("no tensors"));

  Layout dup = mlp();
  dup.tensors[2].name = "fc1.weight";
  EXPECT_THAT(validate_layout(dup).message(), HasSubstr("tensor 2 'fc1.weight' appears twice"));

  Layout zero = mlp();
  zero.tensors[1].numel = 0;
  EXPECT_THAT(validate_layout(zero).message(), HasSubstr("tensor 1 'fc1.bias' has 0 elements"));

  Layout max = mlp();
  max.tensors = {{"a", DType::kF32, kMaxModelNumel - 1}, {"b", DType::kF32, 1}};
  EXPECT_TRUE(validate_layout(max).is_ok());
  max.tensors[1].numel = 2;
  EXPECT_THAT(validate_layout(max).message(), HasSubstr("at tensor 1 'b'"));
}

TEST(Layout, Dtype) {
  for (const DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto parsed = parse_dtype(dtype_name(d));
    ASSERT_TRUE(parsed.is_ok()) << dtype_name(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(*parse_dtype("float16"), DType::kF16);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  auto bad = parse_dtype("f64");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("unsupported dtype 'f64' (supported: f32, bf16, f16)"));
}

// A 16-bit model's tensors start on 64-byte boundaries too: every 32 elements.
TEST(Layout, SixteenBitOffsetsAreAlignedToo) {
  Layout l;
  l.tensors = {{"a", DType::kBF16, 1}, {"b", DType::kBF16, 32}, {"c", DType::kBF16, 33}};
  EXPECT_EQ(tensor_offsets(l), (std::vector<uint64_t>{0, 32, 64}));
  EXPECT_EQ(padded_numel(l), 128u);
  EXPECT_EQ(l.dtype(), DType::kBF16);
  EXPECT_TRUE(validate_layout(l).is_ok());
  Layout f32 = l;
  for (auto& t : f32.tensors) t.dtype = DType::kF32;
  EXPECT_NE(f32.fingerprint(), l.fingerprint()) << "peers of another dtype refuse each other";
}

TEST(Layout, OneDtypeForTheWholeModel) {
  Layout l = mlp();
  l.tensors[2].dtype = DType::kF16;
  EXPECT_THAT(validate_layout(l).message(),
              HasSubstr("tensor 2 'fc2.weight' is f16 and tensor 0 'fc1.weight' f32: one dtype for "
                        "the whole model"));
}

}  // namespace
}  // namespace gossip::proto
