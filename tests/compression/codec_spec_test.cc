#include "compression/codec_spec.h"

#include <gtest/gtest.h>

namespace gossip::compression {
namespace {

TEST(CodecSpec, EveryFormParsesToItsCanonicalSpec) {
  const std::pair<const char*, const char*> cases[] = {
      {"none", "none"},
      {"fp16", "fp16"},
      {"bf16+ef", "bf16+ef"},
      {"int8", "int8:256"},
      {"int8:512", "int8:512"},
      {"qsgd:16", "qsgd:16"},
      {"sign", "sign:256"},
      {"sign+ef", "sign:256+ef"},
      {"topk:0.01", "topk:0.01"},
      {"topk:0.01+ef", "topk:0.01+ef"},
      {"topk:0.05:approx", "topk:0.05:approx"},
      {"topk:0.01:approx:fp16+ef", "topk:0.01:approx:fp16+ef"},
      {"topk:1", "topk:1"},
      {"randk:0.05", "randk:0.05"},
      {"randk:0.1:fp16", "randk:0.1:fp16"},
  };
  for (auto [in, canonical] : cases) {
    auto c = make_codec(in);
    ASSERT_TRUE(c.is_ok()) << in << ": " << c.status().message();
    EXPECT_EQ(c->canonical(), canonical) << in;
    auto again = make_codec(c->canonical());
    ASSERT_TRUE(again.is_ok()) << canonical;
    EXPECT_EQ(again->canonical(), canonical);
  }
}

TEST(CodecSpec, BadSpecsAreRefusedNamingTheProblemAndListingTheForms) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"+ef", "empty"},
      {"zstd", "unknown codec 'zstd'"},
      {"topk", "needs a ratio"},
      {"topk:0", "(0, 1]"},
      {"topk:1.5", "(0, 1]"},
      {"topk:-0.1", "(0, 1]"},
      {"topk:abc", "ratio"},
      {"topk:nan", "ratio"},
      {"topk:0.01:fast", "'fast'"},
      {"topk:0.01:fp16:approx", "'approx'"},
      {"randk:0.1:approx", "'approx'"},
      {"qsgd", "levels"},
      {"qsgd:0", "levels"},
      {"qsgd:100000", "levels"},
      {"int8:0", "block size"},
      {"int8:12:3", "at most"},
      {"fp16:2", "no parameter"},
      {"topk:0.01+ef+ef", "+ef goes at the end, once"},
  };
  for (auto [in, needle] : cases) {
    auto c = make_codec(in);
    ASSERT_FALSE(c.is_ok()) << in;
    EXPECT_NE(c.status().message().find(needle), std::string::npos)
        << in << ": " << c.status().message();
    EXPECT_NE(c.status().message().find("valid forms"), std::string::npos) << c.status().message();
  }
}

TEST(CodecSpec, BiasedCodecsSaySo) {
  EXPECT_TRUE(make_codec("topk:0.01")->codec->biased());
  EXPECT_TRUE(make_codec("sign")->codec->biased());
  EXPECT_FALSE(make_codec("randk:0.01")->codec->biased());
  EXPECT_FALSE(make_codec("qsgd:4")->codec->biased());
  EXPECT_FALSE(make_codec("none")->codec->biased());
}

}  // namespace
}  // namespace gossip::compression
