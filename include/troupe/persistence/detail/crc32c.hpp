#pragma once

// CRC-32C (Castagnoli) of journal and snapshot values.

#include <boost/crc.hpp>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace troupe::persistence::detail {

/// CRC-32C (Castagnoli), as Boost.CRC defines it.
using crc32c_type = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TROUPE_CRC32C_SSE42 1
/// The same CRC with the SSE 4.2 instruction, 8 bytes at a time: recovery
/// checks every record, and the table-driven version was 40% of its time.
/// `crc` is the running, not yet inverted, value.
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42(std::uint32_t crc, std::string_view data) noexcept {
  std::uint64_t c = crc;
  const char* p = data.data();
  std::size_t n = data.size();
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = __builtin_ia32_crc32qi(c32, static_cast<unsigned char>(*p));
  return c32;
}
#endif

inline bool cpu_has_crc32c() noexcept {
#ifdef TROUPE_CRC32C_SSE42
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

/// CRC-32C of several pieces in a row.
class crc32c_state {
public:
  explicit crc32c_state(bool hardware = cpu_has_crc32c()) noexcept : hardware_(hardware) {}

  void update(std::string_view data) noexcept {
#ifdef TROUPE_CRC32C_SSE42
    if (hardware_) {
      running_ = crc32c_sse42(running_, data);
      return;
    }
#endif
    table_.process_bytes(data.data(), data.size());
  }
  std::uint32_t value() const noexcept { return hardware_ ? running_ ^ 0xFFFFFFFF : table_.checksum(); }

private:
  bool hardware_;
  std::uint32_t running_ = 0xFFFFFFFF;
  crc32c_type table_;
};

/// The checksum of records: CRC-32C of `data`.
inline std::uint32_t crc32c(std::string_view data) noexcept {
  crc32c_state s;
  s.update(data);
  return s.value();
}

} // namespace troupe::persistence::detail
