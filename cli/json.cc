#include "cli/json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <tuple>

namespace gossip::cli {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return 0;
  }
  return len;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

constexpr int kMaxDepth = 32;

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Result<FlatJsonObject> parse_object_document() {
    FlatJsonObject obj;
    skip_ws();
    if (!consume('{')) return error("expected '{'");
    skip_ws();
    if (!consume('}')) {
      for (;;) {
        skip_ws();
        std::string key;
        if (peek() != '"') return error("expected a key string");
        GOSSIP_RETURN_IF_ERROR(parse_string(key));
        skip_ws();
        if (!consume(':')) return error("expected ':' after key \"" + key + "\"");
        JsonScalar value;
        GOSSIP_RETURN_IF_ERROR(parse_value(value, 1));
        obj.insert_or_assign(std::move(key), std::move(value));
        skip_ws();
        if (consume(',')) continue;
        if (consume('}')) break;
        return error("expected ',' or '}'");
      }
    }
    skip_ws();
    if (i_ != s_.size()) return error("unexpected text after the object");
    return obj;
  }

 private:
  Status error(const std::string& what) const {
    return Status::protocol(fmt::format("JSON at offset {}: {}", i_, what));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool consume(char c) {
    if (peek() != c || i_ >= s_.size()) return false;
    ++i_;
    return true;
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }

  Status parse_value(JsonScalar& out, int depth) {
    skip_ws();
    if (depth > kMaxDepth) return error("nested too deeply");
    const char c = peek();
    if (c == '"') {
      out.kind = JsonScalar::Kind::kString;
      return parse_string(out.text);
    }
    if (c == '{' || c == '[') {
      out.kind = JsonScalar::Kind::kNested;
      return skip_container(depth);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      out.kind = JsonScalar::Kind::kNumber;
      return parse_number(out);
    }
    for (const auto& [word, kind, value] : {std::tuple{"true", JsonScalar::Kind::kBool, true},
                                            std::tuple{"false", JsonScalar::Kind::kBool, false},
                                            std::tuple{"null", JsonScalar::Kind::kNull, false}}) {
      const std::string_view w(word);
      if (s_.substr(i_, w.size()) == w) {
        i_ += w.size();
        out.kind = kind;
        out.boolean = value;
        return Status::ok();
      }
    }
    return error("expected a value");
  }

  Status skip_container(int depth) {
    const char close = peek() == '{' ? '}' : ']';
    const bool is_object = close == '}';
    ++i_;
    skip_ws();
    if (consume(close)) return Status::ok();
    for (;;) {
      skip_ws();
      if (is_object) {
        std::string key;
        if (peek() != '"') return error("expected a key string");
        GOSSIP_RETURN_IF_ERROR(parse_string(key));
        skip_ws();
        if (!consume(':')) return error("expected ':'");
      }
      JsonScalar ignored;
      GOSSIP_RETURN_IF_ERROR(parse_value(ignored, depth + 1));
      skip_ws();
      if (consume(',')) continue;
      if (consume(close)) return Status::ok();
      return error(fmt::format("expected ',' or '{}'", close));
    }
  }

  Status parse_number(JsonScalar& out) {
    const size_t start = i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - d;
    };
    consume('-');
    if (peek() == '0') {
      ++i_;
    } else if (digits() == 0) {
      return error("bad number");
    }
    if (consume('.') && digits() == 0) return error("bad number: digits expected after '.'");
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (!consume('+')) consume('-');
      if (digits() == 0) return error("bad number: digits expected in exponent");
    }
    out.text = std::string(s_.substr(start, i_ - start));
    const auto [ptr, ec] =
        std::from_chars(out.text.data(), out.text.data() + out.text.size(), out.number);
    if (ec == std::errc::result_out_of_range) {
      out.number = out.text[0] == '-' ? -HUGE_VAL : HUGE_VAL;
    } else if (ec != std::errc() || ptr != out.text.data() + out.text.size()) {
      return error("bad number " + out.text);
    }
    return Status::ok();
  }

  Result<uint32_t> parse_hex4() {
    if (i_ + 4 > s_.size()) return error("truncated \\u escape");
    uint32_t v = 0;
    const auto [ptr, ec] = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, v, 16);
    if (ec != std::errc() || ptr != s_.data() + i_ + 4) return error("bad \\u escape");
    i_ += 4;
    return v;
  }

  Status parse_string(std::string& out) {
    out.clear();
    ++i_;  // the opening quote
    for (;;) {
      if (i_ >= s_.size()) return error("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return Status::ok();
      if (static_cast<unsigned char>(c) < 0x20) return error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return error("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          auto cp = parse_hex4();
          if (!cp) return cp.status();
          uint32_t code = *cp;
          if (code >= 0xD800 && code <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            auto lo = parse_hex4();
            if (!lo) return lo.status();
            if (*lo >= 0xDC00 && *lo <= 0xDFFF) {
              code = 0x10000 + ((code - 0xD800) << 10) + (*lo - 0xDC00);
            } else {
              append_utf8(out, 0xFFFD);
              code = *lo;
            }
          }
          if (code >= 0xD800 && code <= 0xDFFF) code = 0xFFFD;  // a lone surrogate
          append_utf8(out, code);
          break;
        }
        default:
          return error(fmt::format("bad escape \\{}", e));
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (u < 0x20 || u == 0x7F) {
            out += fmt::format("\\u{:04x}", u);
          } else {
            out += c;
          }
      }
      ++i;
      continue;
    }
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  out += '"';
  return out;
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
  return Parser(text).parse_object_document();
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
  const std::string& lit = obj.find(key)->second.text;
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(lit.data(), lit.data() + lit.size(), v);
  if (ec == std::errc() && ptr == lit.data() + lit.size()) return v;
  // 1.5e6 and the like: accept whole non-negative values that fit.
  const double d = *number;
  if (d >= 0 && d < 18446744073709551616.0 && std::floor(d) == d) return static_cast<uint64_t>(d);
  return Status::protocol(fmt::format("field \"{}\" is not a non-negative integer: {}", key, lit));
}

}  // namespace gossip::cli
