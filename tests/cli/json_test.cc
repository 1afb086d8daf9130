#include "cli/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gossip::cli {
namespace {

TEST(JsonQuote, EscapesWhatJsonRequires) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_quote("l1\nl2\tx\r"), "\"l1\\nl2\\tx\\r\"");
  EXPECT_EQ(json_quote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(json_quote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
}

TEST(JsonQuote, KeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json_quote("caf\xc3\xa9 \xe2\x82\xac"), "\"caf\xc3\xa9 \xe2\x82\xac\"");
  // U+FFFD in UTF-8 for each byte that is not part of a valid sequence.
  EXPECT_EQ(json_quote("bad\xff!"), "\"bad\xef\xbf\xbd!\"");
  EXPECT_EQ(json_quote("cut\xc3"), "\"cut\xef\xbf\xbd\"");
  EXPECT_EQ(json_quote("\xed\xa0\x80"), "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");  // a surrogate
}

TEST(JsonNumber, RoundTripsAndNullsNonFinite) {
  EXPECT_EQ(json_number(0.84), "0.84");
  EXPECT_EQ(json_number(12.5), "12.5");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  const double third = 1.0 / 3.0;
  auto parsed = parse_flat_json_object("{\"x\": " + json_number(third) + "}");
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(*json_get_number(*parsed, "x"), third);
  EXPECT_EQ(json_number_array(std::vector<double>{0.5, 1}), "[0.5, 1]");
}

TEST(JsonObjectWriter, WritesFieldsInOrder) {
  JsonObjectWriter w;
  w.add_bool("ok", false)
      .add_string("error", "trainer \"1\" failed")
      .add_int("nodes", -4)
      .add_uint("bytes", 18446744073709551615ull)
      .add_number("acc", 0.5)
      .add_null("out")
      .add_raw("list", "[1, 2]");
  EXPECT_EQ(w.str(),
            "{\"ok\": false, \"error\": \"trainer \\\"1\\\" failed\", \"nodes\": -4, "
            "\"bytes\": 18446744073709551615, \"acc\": 0.5, \"out\": null, \"list\": [1, 2]}");
  EXPECT_EQ(JsonObjectWriter().str(), "{}");
}

TEST(ParseFlatJsonObject, ReadsTheTrainerResultLine) {
  auto obj = parse_flat_json_object(
      "{\"node\":0,\"steps\":600,\"accuracy_local\":0.83,\"accuracy_average\":0.84,\"loss\":0.45,"
      "\"payload_sent\":123456789012,\"payload_recv\":1,\"wire_sent\":9007199254740993,\"wire_"
      "recv\":2,"
      "\"wall_seconds\":12.3}\n");
  ASSERT_TRUE(obj.is_ok()) << obj.status().message();
  EXPECT_DOUBLE_EQ(*json_get_number(*obj, "accuracy_local"), 0.83);
  EXPECT_EQ(*json_get_uint(*obj, "payload_sent"), 123456789012u);
  EXPECT_EQ(*json_get_uint(*obj, "wire_sent"), 9007199254740993u);  // exact beyond 2^53
  EXPECT_EQ(*json_get_uint(*obj, "steps"), 600u);
}

TEST(ParseFlatJsonObject, ScalarsStringsAndNestedValues) {
  auto obj = parse_flat_json_object(
      R"( { "s": "a\"b\\n\u00e9\ud83d\ude00", "t": true, "f": false, "n": null, "neg": -1.5e-3,
            "arr": [1, {"x": [2]}], "obj": {"k": "v"} } )");
  ASSERT_TRUE(obj.is_ok()) << obj.status().message();
  EXPECT_EQ(obj->at("s").text, "a\"b\\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(obj->at("t").boolean);
  EXPECT_EQ(obj->at("f").kind, JsonScalar::Kind::kBool);
  EXPECT_EQ(obj->at("n").kind, JsonScalar::Kind::kNull);
  EXPECT_DOUBLE_EQ(obj->at("neg").number, -1.5e-3);
  EXPECT_EQ(obj->at("arr").kind, JsonScalar::Kind::kNested);
  EXPECT_EQ(obj->at("obj").kind, JsonScalar::Kind::kNested);
  EXPECT_TRUE(parse_flat_json_object("{}").is_ok());
}

TEST(ParseFlatJsonObject, RejectsMalformedInput) {
  for (const char* bad : {"",
                          "   ",
                          "[]",
                          "42",
                          "\"s\"",
                          "null",
                          "{",
                          "{\"a\"}",
                          "{\"a\":}",
                          "{\"a\":1,}",
                          "{\"a\":1} x",
                          "{\"a\":01}",
                          "{\"a\":1.}",
                          "{\"a\":-}",
                          "{\"a\":\"unterminated}",
                          "{\"a\":tru}",
                          "{a:1}",
                          "{\"a\":\"\\x\"}",
                          "{\"a\":[1,]}",
                          "{\"a\":1}{",
                          "garbage",
                          "{\"a\":1 /* c */}",
                          "{\"a\":\"\x01\"}"}) {
    auto r = parse_flat_json_object(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    EXPECT_FALSE(r.status().message().empty()) << bad;
  }
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_FALSE(parse_flat_json_object(deep).is_ok());
  std::string ok_depth = "{\"a\":" + std::string(10, '[') + std::string(10, ']') + "}";
  EXPECT_TRUE(parse_flat_json_object(ok_depth).is_ok());
}

TEST(ParseFlatJsonObject, ErrorsSayWhere) {
  // A result line cut short while the trainer was writing it.
  auto truncated = parse_flat_json_object(R"({"node":0,"steps":600,"accuracy_lo)");
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_NE(truncated.status().message().find("column"), std::string::npos)
      << truncated.status().message();
  auto garbage = parse_flat_json_object("{\"node\":0,\"steps\":@}");
  ASSERT_FALSE(garbage.is_ok());
  EXPECT_NE(garbage.status().message().find("column 19"), std::string::npos)
      << garbage.status().message();
  auto array = parse_flat_json_object("[1, 2]");
  ASSERT_FALSE(array.is_ok());
  EXPECT_NE(array.status().message().find("object"), std::string::npos) << array.status().message();
}

TEST(JsonGet, ErrorsNameTheKey) {
  auto obj = parse_flat_json_object(
      R"({"s": "x", "neg": -3, "frac": 1.5, "big": 2e6, "loss": null, "t": true, "arr": [1]})");
  ASSERT_TRUE(obj.is_ok());
  for (const char* key : {"missing_key", "s", "loss", "t", "arr"}) {
    auto number = json_get_number(*obj, key);
    ASSERT_FALSE(number.is_ok()) << key;
    EXPECT_NE(number.status().message().find(key), std::string::npos) << number.status().message();
    auto uint = json_get_uint(*obj, key);
    ASSERT_FALSE(uint.is_ok()) << key;
    EXPECT_NE(uint.status().message().find(key), std::string::npos) << uint.status().message();
  }
  for (const char* key : {"neg", "frac"}) {
    auto uint = json_get_uint(*obj, key);
    ASSERT_FALSE(uint.is_ok()) << key;
    EXPECT_NE(uint.status().message().find(key), std::string::npos) << uint.status().message();
  }
  EXPECT_EQ(*json_get_number(*obj, "neg"), -3);
  EXPECT_EQ(*json_get_number(*obj, "frac"), 1.5);
  EXPECT_EQ(*json_get_uint(*obj, "big"), 2000000u);
}

TEST(JsonGet, HugeIntegers) {
  auto obj = parse_flat_json_object(
      R"({"max": 18446744073709551615, "over": 18446744073709551616, "odd": 9007199254740993,)"
      R"( "min": -9223372036854775808, "zero": -0})");
  ASSERT_TRUE(obj.is_ok()) << obj.status().message();
  EXPECT_EQ(*json_get_uint(*obj, "max"), 18446744073709551615ull);
  EXPECT_EQ(*json_get_uint(*obj, "odd"), 9007199254740993ull);  // not rounded through a double
  EXPECT_EQ(*json_get_uint(*obj, "zero"), 0u);
  for (const char* key : {"over", "min"}) {
    auto uint = json_get_uint(*obj, key);
    ASSERT_FALSE(uint.is_ok()) << key;
    EXPECT_NE(uint.status().message().find(key), std::string::npos) << uint.status().message();
  }
  EXPECT_DOUBLE_EQ(*json_get_number(*obj, "over"), 18446744073709551616.0);
  // Beyond a double: nlohmann refuses the document (an error, not an exception).
  auto huge = parse_flat_json_object(R"({"huge": 1e400})");
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("1e400"), std::string::npos) << huge.status().message();
}

}  // namespace
}  // namespace gossip::cli
