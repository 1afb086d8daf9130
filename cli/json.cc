#include "cli/json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace gossip::cli {
namespace {

// Result files are flat; anything nested deeper than this is refused.
constexpr int kMaxDepth = 32;

}  // namespace

std::string json_quote(std::string_view s) {
  // nlohmann's escaping: control characters as \uXXXX, invalid UTF-8 replaced by U+FFFD.
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{}", v);
}

std::string json_number_array(std::span<const double> values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += json_number(values[i]);
  }
  return out + "]";
}

void JsonObjectWriter::add_key(std::string_view key) {
  if (!first_) body_ += ", ";
  first_ = false;
  body_ += json_quote(key);
  body_ += ": ";
}

JsonObjectWriter& JsonObjectWriter::add_string(std::string_view key, std::string_view value) {
  add_key(key);
  body_ += json_quote(value);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_bool(std::string_view key, bool value) {
  add_key(key);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_number(std::string_view key, double value) {
  add_key(key);
  body_ += json_number(value);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_int(std::string_view key, int64_t value) {
  add_key(key);
  body_ += fmt::format("{}", value);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_uint(std::string_view key, uint64_t value) {
  add_key(key);
  body_ += fmt::format("{}", value);
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_null(std::string_view key) {
  add_key(key);
  body_ += "null";
  return *this;
}

JsonObjectWriter& JsonObjectWriter::add_raw(std::string_view key, std::string_view json) {
  add_key(key);
  body_ += json;
  return *this;
}

Result<FlatJsonObject> parse_flat_json_object(std::string_view text) {
  // nlohmann's parser is iterative; the depth limit only keeps a result line sane.
  bool too_deep = false;
  const nlohmann::json::parser_callback_t limit_depth =
      [&too_deep](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
        if ((event == nlohmann::json::parse_event_t::object_start ||
             event == nlohmann::json::parse_event_t::array_start) &&
            depth > kMaxDepth) {
          too_deep = true;
          return false;  // skip it; reported below
        }
        return true;
      };
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.begin(), text.end(), limit_depth);
  } catch (const nlohmann::json::exception& e) {
    return Status::protocol(fmt::format("bad JSON: {}", e.what()));  // says where
  }
  if (too_deep) return Status::protocol(fmt::format("bad JSON: nested deeper than {}", kMaxDepth));
  if (!doc.is_object()) {
    return Status::protocol(fmt::format("bad JSON: expected an object, got {}", doc.type_name()));
  }
  FlatJsonObject obj;
  for (const auto& [key, value] : doc.items()) {
    JsonScalar s;
    switch (value.type()) {
      case nlohmann::json::value_t::boolean:
        s.kind = JsonScalar::Kind::kBool;
        s.boolean = value.get<bool>();
        break;
      case nlohmann::json::value_t::string:
        s.kind = JsonScalar::Kind::kString;
        s.text = value.get<std::string>();
        break;
      case nlohmann::json::value_t::number_unsigned:  // exact up to 2^64-1
        s.kind = JsonScalar::Kind::kNumber;
        s.number = value.get<double>();
        s.text = std::to_string(value.get<uint64_t>());
        break;
      case nlohmann::json::value_t::number_integer:
        s.kind = JsonScalar::Kind::kNumber;
        s.number = value.get<double>();
        s.text = std::to_string(value.get<int64_t>());
        break;
      case nlohmann::json::value_t::number_float:
        s.kind = JsonScalar::Kind::kNumber;
        s.number = value.get<double>();
        s.text = value.dump();
        break;
      case nlohmann::json::value_t::object:
      case nlohmann::json::value_t::array:
        s.kind = JsonScalar::Kind::kNested;
        break;
      default:  // null (and nothing else occurs in parsed text)
        break;
    }
    obj.insert_or_assign(key, std::move(s));
  }
  return obj;
}

Result<double> json_get_number(const FlatJsonObject& obj, std::string_view key) {
  const auto it = obj.find(key);
  if (it == obj.end()) return Status::not_found(fmt::format("missing field \"{}\"", key));
  if (it->second.kind != JsonScalar::Kind::kNumber) {
    return Status::protocol(fmt::format("field \"{}\" is not a number", key));
  }
  return it->second.number;
}

Result<uint64_t> json_get_uint(const FlatJsonObject& obj, std::string_view key) {
  auto number = json_get_number(obj, key);
  if (!number) return number.status();
  const std::string& text = obj.find(key)->second.text;
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && ptr == text.data() + text.size()) return v;
  // 1.5e6 and the like: accept whole non-negative values that fit.
  const double d = *number;
  if (d >= 0 && d < 18446744073709551616.0 && std::floor(d) == d) return static_cast<uint64_t>(d);
  return Status::protocol(fmt::format("field \"{}\" is not a non-negative integer: {}", key, text));
}

}  // namespace gossip::cli
