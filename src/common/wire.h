// Bounds-checked binary encoding for every message kolo sends: negotiation
// requests and responses, store commands. Little-endian, length-prefixed strings
// and arrays. The reader checks every length against the bytes that remain before
// it allocates, and throws WireError on anything malformed.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kolo::wire {

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  template <typename T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void put(T value) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_bytes(std::span<const std::uint8_t> data) {
    put<std::uint32_t>(static_cast<std::uint32_t>(data.size()));
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void put_string(std::string_view s) {
    put_bytes({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
  }
  template <typename T>
  void put_vector(const std::vector<T>& values) {
    put<std::uint32_t>(static_cast<std::uint32_t>(values.size()));
    for (const T& v : values) put(v);
  }

  std::vector<std::uint8_t>& bytes() { return bytes_; }
  std::vector<std::uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<std::uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> data) : data_(data) {}

  template <typename T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // A yes/no byte: 0 or 1, so that each value has one encoding.
  bool get_flag() {
    const auto byte = get<std::uint8_t>();
    if (byte > 1) throw WireError("invalid flag byte " + std::to_string(byte));
    return byte == 1;
  }
  std::span<const std::uint8_t> get_bytes(std::size_t max_len) {
    auto len = get<std::uint32_t>();
    if (len > max_len) throw WireError("field of " + std::to_string(len) + " bytes exceeds limit " + std::to_string(max_len));
    need(len);
    auto out = data_.subspan(pos_, len);
    pos_ += len;
    return out;
  }
  std::string get_string(std::size_t max_len) {
    auto b = get_bytes(max_len);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  template <typename T>
  std::vector<T> get_vector(std::size_t max_count) {
    auto n = get<std::uint32_t>();
    if (n > max_count) throw WireError("array of " + std::to_string(n) + " elements exceeds limit " + std::to_string(max_count));
    need(static_cast<std::size_t>(n) * sizeof(T));
    std::vector<T> out(n);
    for (auto& v : out) v = get<T>();
    return out;
  }
  // Reads a count that announces `min_bytes_each` or more bytes per item; rejects
  // counts the remaining input cannot hold, before anything is allocated.
  std::uint32_t get_count(std::size_t max_count, std::size_t min_bytes_each) {
    auto n = get<std::uint32_t>();
    if (n > max_count || static_cast<std::size_t>(n) * min_bytes_each > remaining())
      throw WireError("count " + std::to_string(n) + " is out of bounds");
    return n;
  }

  std::size_t remaining() const { return data_.size() - pos_; }
  bool done() const { return pos_ == data_.size(); }
  void expect_done() const {
    if (!done()) throw WireError(std::to_string(remaining()) + " trailing bytes");
  }

 private:
  void need(std::size_t n) const {
    if (n > remaining()) throw WireError("message truncated");
  }
  std::span<const std::uint8_t> data_;
  std::size_t pos_ = 0;
};

}  // namespace kolo::wire
