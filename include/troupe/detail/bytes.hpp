#pragma once

// Big-endian integers and length-prefixed names in byte strings: the one
// place every layer's binary keys and values are built and read from.
// Big-endian, so that keys sort as their numbers do.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::detail {

/// Appends `v` as `N` big-endian bytes.
template <std::size_t N, class U>
void put_be(std::string& out, U v) {
  static_assert(N <= 8, "troupe: at most 8 bytes");
  const auto x = static_cast<std::uint64_t>(v);
  for (std::size_t i = N; i-- > 0;) out.push_back(static_cast<char>(x >> (8 * i)));
}

/// Writes `v` as `N` big-endian bytes at `out`.
template <std::size_t N, class U>
void store_be(char* out, U v) noexcept {
  const auto x = static_cast<std::uint64_t>(v);
  for (std::size_t i = 0; i < N; ++i) out[i] = static_cast<char>(x >> (8 * (N - 1 - i)));
}

inline void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void put_u16(std::string& out, std::uint16_t v) { put_be<2>(out, v); }
inline void put_u32(std::string& out, std::uint32_t v) { put_be<4>(out, v); }
inline void put_u64(std::string& out, std::uint64_t v) { put_be<8>(out, v); }

/// The `bytes` big-endian bytes at `at` (the caller checked the size).
inline std::uint64_t get_be(std::string_view in, std::size_t at, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

/// The `bytes` little-endian bytes at `at` (the caller checked the size):
/// RocksDB's own formats (WAL records, write batches, table footers).
inline std::uint64_t get_le(std::string_view in, std::size_t at, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

/// The longest name a length prefix can carry.
inline constexpr std::size_t max_prefixed_name = 0xFFFF;

/// Appends `name` preceded by its length as a `u16`: the prefix of every
/// key that belongs to one persistence ID (its events, its table entries),
/// so that one ID's keys never run into another's. Throws
/// `std::length_error` for a name over 65,535 bytes.
inline void put_prefixed(std::string& out, std::string_view name) {
  if (name.size() > max_prefixed_name) throw std::length_error("name longer than 65535 bytes");
  put_u16(out, static_cast<std::uint16_t>(name.size()));
  out.append(name);
}

/// `put_prefixed` into a new string, with room for `extra` more bytes.
inline std::string prefixed(std::string_view name, std::size_t extra = 0) {
  std::string k;
  k.reserve(2 + name.size() + extra);
  put_prefixed(k, name);
  return k;
}

/// The length of the prefixed name at the start of `key` (2 + its u16), or
/// 0 if `key` is too short to hold one.
inline std::size_t prefixed_length(std::string_view key) noexcept {
  if (key.size() < 2) return 0;
  return 2 + static_cast<std::size_t>(get_be(key, 0, 2));
}

/// Reads bytes front to back, throwing `std::out_of_range`
/// when the input is shorter than a read asks for.
class byte_reader {
public:
  explicit byte_reader(std::string_view in) noexcept : in_(in) {}

  bool can_take(std::size_t n) const noexcept { return in_.size() - at_ >= n; }
  std::string_view take(std::size_t n) {
    if (!can_take(n)) throw std::out_of_range("truncated");
    auto out = in_.substr(at_, n);
    at_ += n;
    return out;
  }
  std::uint64_t be(std::size_t bytes) { return get_be(take(bytes), 0, bytes); }
  std::string_view rest() noexcept {
    auto out = in_.substr(at_);
    at_ = in_.size();
    return out;
  }
  std::size_t remaining() const noexcept { return in_.size() - at_; }

private:
  std::string_view in_;
  std::size_t at_ = 0;
};

} // namespace troupe::detail
