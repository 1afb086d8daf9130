#pragma once
// Just enough JSON for gossipctl: a writer for the one-object reports it prints, and a
// reader for the trainers' flat one-line result files ({"key": scalar, ...}), which
// parses with nlohmann-json.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gossip::cli {

// A JSON string literal, quotes included. Control characters are escaped and bytes that
// are not valid UTF-8 become U+FFFD, so the output is valid JSON for any input (log lines).
std::string json_quote(std::string_view s);
// The shortest text that reads back as v; "null" for NaN and infinities.
std::string json_number(double v);
// [a, b, ...] of json_number.
std::string json_number_array(std::span<const double> values);

// Builds one JSON object, fields in the order they are added: {"a": 1, "b": "x"}.
class JsonObjectWriter {
 public:
  JsonObjectWriter& add_string(std::string_view key, std::string_view value);
  JsonObjectWriter& add_bool(std::string_view key, bool value);
  JsonObjectWriter& add_number(std::string_view key, double value);
  JsonObjectWriter& add_int(std::string_view key, int64_t value);
  JsonObjectWriter& add_uint(std::string_view key, uint64_t value);
  JsonObjectWriter& add_null(std::string_view key);
  // value must already be valid JSON text (an array, a nested object).
  JsonObjectWriter& add_raw(std::string_view key, std::string_view json);
  std::string str() const { return body_ + "}"; }

 private:
  void add_key(std::string_view key);
  std::string body_ = "{";
  bool first_ = true;
};

// One member of a flat object. Nested objects and arrays are accepted but only kept
// as kNested (their content is dropped), so new fields in a result file never break reading.
struct JsonScalar {
  enum class Kind { kNull, kBool, kNumber, kString, kNested };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;  // the string's value, or the number's text (exact for integers)
};

using FlatJsonObject = std::map<std::string, JsonScalar, std::less<>>;

// Parses one JSON object (surrounding whitespace allowed). Errors say what and where
// (line and column); nothing is thrown.
Result<FlatJsonObject> parse_flat_json_object(std::string_view text);

// Field access with errors that name the key.
Result<double> json_get_number(const FlatJsonObject& obj, std::string_view key);
// A non-negative integer (byte counts), exact up to 2^64-1.
Result<uint64_t> json_get_uint(const FlatJsonObject& obj, std::string_view key);

}  // namespace gossip::cli
