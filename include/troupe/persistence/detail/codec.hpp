#pragma once

// Binary keys and values of the on-disk format (docs/storage.md).

#include <troupe/error.hpp>
#include <troupe/persistence/records.hpp>

#include <boost/crc.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace troupe::persistence::detail {

inline void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}
inline void put_u32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}
inline void put_u64(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}
inline std::uint64_t get_be(std::string_view in, std::size_t at, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

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

inline constexpr std::size_t max_persistence_id = 0xFFFF;

/// `u16 length` + the persistence ID: the prefix of every key of one ID.
inline std::string id_prefix(std::string_view pid) {
  if (pid.empty() || pid.size() > max_persistence_id)
    throw error(errc::invalid_argument, "persistence ID must have 1 to 65535 bytes");
  std::string k;
  k.reserve(2 + pid.size() + 8);
  put_u16(k, static_cast<std::uint16_t>(pid.size()));
  k.append(pid);
  return k;
}

/// Prefix + big-endian sequence number: keys of one ID sort by sequence.
inline std::string seq_key(std::string_view prefix, sequence_nr seq) {
  std::string k(prefix);
  put_u64(k, seq);
  return k;
}

inline sequence_nr seq_of_key(std::string_view key) { return get_be(key, key.size() - 8, 8); }

/// `key` is a sequence key of the ID whose prefix is `prefix`.
inline bool has_prefix(std::string_view key, std::string_view prefix) {
  return key.size() == prefix.size() + 8 && key.substr(0, prefix.size()) == prefix;
}

/// Event value: crc32c of the rest | u32 version | u16 manifest length |
/// manifest | payload.
/// The first 10 bytes of an event value (crc, version, manifest length);
/// the manifest and the payload follow. The manifest must fit in a u16.
inline void event_header(const event_record& e, char (&out)[10]) noexcept {
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<char>(e.version >> (24 - 8 * i));
  out[8] = static_cast<char>(e.manifest.size() >> 8);
  out[9] = static_cast<char>(e.manifest.size());
  crc32c_state crc;
  crc.update({out + 4, 6});
  crc.update(e.manifest);
  crc.update(e.payload);
  const auto c = crc.value();
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(c >> (24 - 8 * i));
}

inline std::string encode_event(const event_record& e) {
  if (e.manifest.size() > 0xFFFF) throw error(errc::invalid_argument, "manifest longer than 65535 bytes");
  char header[10];
  event_header(e, header);
  std::string out;
  out.reserve(10 + e.manifest.size() + e.payload.size());
  out.append(header, 10).append(e.manifest).append(e.payload);
  return out;
}

/// Decodes an event value; false if it is truncated or its checksum fails.
inline bool decode_event(std::string_view v, sequence_nr seq, event_record& out) {
  if (v.size() < 10) return false;
  auto body = v.substr(4);
  if (get_be(v, 0, 4) != crc32c(body)) return false;
  auto manifest_len = get_be(body, 4, 2);
  if (body.size() < 6 + manifest_len) return false;
  out.seq = seq;
  out.version = static_cast<std::uint32_t>(get_be(body, 0, 4));
  out.manifest.assign(body.substr(6, manifest_len));
  out.payload.assign(body.substr(6 + manifest_len));
  return true;
}

/// Snapshot value: crc32c of the rest | i64 timestamp (ms) | payload.
inline std::string encode_snapshot(const snapshot_record& s) {
  std::string body;
  body.reserve(8 + s.payload.size());
  put_u64(body, static_cast<std::uint64_t>(s.timestamp_ms));
  body.append(s.payload);
  std::string out;
  put_u32(out, crc32c(body));
  out.append(body);
  return out;
}

inline bool decode_snapshot(std::string_view v, sequence_nr seq, snapshot_record& out) {
  if (v.size() < 12) return false;
  auto body = v.substr(4);
  if (get_be(v, 0, 4) != crc32c(body)) return false;
  out.seq = seq;
  out.timestamp_ms = static_cast<std::int64_t>(get_be(body, 0, 8));
  out.payload.assign(body.substr(8));
  return true;
}

} // namespace troupe::persistence::detail
