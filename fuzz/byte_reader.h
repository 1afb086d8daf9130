#pragma once
// The fuzz input as a stream of fixed-size values: past its end every value reads as
// zeros (the missing bytes), so a target never reads out of bounds and every input,
// however short, is a valid one.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gossip::fuzz {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  template <class T>
  T take() {
    T v{};
    const size_t n = std::min(sizeof(T), size_ - std::min(at_, size_));
    std::memcpy(&v, data_ + at_, n);
    at_ += sizeof(T);
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace gossip::fuzz
