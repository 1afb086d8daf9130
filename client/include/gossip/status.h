#pragma once
// One error type for the whole code base (leveldb's named-constructor Status):
// every network, IPC, file and parse path returns a Status or a Result<T> whose
// message names what failed and with which peer, file or key. Installed with the
// client's headers (and included from the source tree as base/status.h).

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gossip {

class [[nodiscard]] Status {
 public:
  enum class Code { kOk, kInvalid, kIoError, kTimeout, kProtocol, kMismatch, kClosed, kNotFound };

  Status() = default;
  static Status ok() { return Status(); }
  static Status invalid(std::string m) { return Status(Code::kInvalid, std::move(m)); }
  static Status io_error(std::string m) { return Status(Code::kIoError, std::move(m)); }
  static Status timeout(std::string m) { return Status(Code::kTimeout, std::move(m)); }
  static Status protocol(std::string m) { return Status(Code::kProtocol, std::move(m)); }
  static Status mismatch(std::string m) { return Status(Code::kMismatch, std::move(m)); }
  static Status closed(std::string m) { return Status(Code::kClosed, std::move(m)); }
  static Status not_found(std::string m) { return Status(Code::kNotFound, std::move(m)); }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where it happened: "peer 3: " + message.
  Status with_context(const std::string& where) const {
    return is_ok() ? *this : Status(code_, where + ": " + message_);
  }

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) { assert(!std::get<Status>(v_).is_ok()); }  // NOLINT

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gossip

#define GOSSIP_RETURN_IF_ERROR(expr) \
  do {                               \
    ::gossip::Status _st = (expr);   \
    if (!_st.is_ok()) return _st;    \
  } while (0)
