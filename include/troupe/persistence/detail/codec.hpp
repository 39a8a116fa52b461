#pragma once

// Binary keys and values of the journal and snapshot records: the on-disk
// format of docs/storage.md, the same for every store that stores bytes.

#include <troupe/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/crc32c.hpp>
#include <troupe/detail/bytes.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::persistence::detail {

using troupe::detail::get_be;
using troupe::detail::put_u32;
using troupe::detail::put_u64;

inline constexpr std::size_t max_persistence_id = troupe::detail::max_prefixed_name;
inline constexpr std::size_t max_manifest = 0xFFFF;

/// Whether every store accepts `pid` as a persistence ID (1 to 65,535 bytes).
inline bool valid_pid(std::string_view pid) noexcept { return !pid.empty() && pid.size() <= max_persistence_id; }

/// Throws `invalid_argument` naming the limit unless `valid_pid(pid)`.
inline void check_pid(std::string_view pid) {
  if (!valid_pid(pid))
    throw error(troupe::errc::invalid_argument,
                "persistence ID must have 1 to 65535 bytes (has " + std::to_string(pid.size()) + ")");
}

/// The persistence ID with its `u16` length: the prefix of every key of one
/// ID. Throws `invalid_argument` for an empty ID or one over 65,535 bytes.
inline std::string id_prefix(std::string_view pid) {
  if (pid.empty() || pid.size() > max_persistence_id)
    throw error(troupe::errc::invalid_argument, "persistence ID must have 1 to 65535 bytes");
  return troupe::detail::prefixed(pid, 8);
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
/// manifest | payload. The first 10 bytes (crc, version, manifest length);
/// the manifest and the payload follow. The manifest must fit in a u16.
inline void event_header(const event_record& e, char (&out)[10]) noexcept {
  troupe::detail::store_be<4>(out + 4, e.version);
  troupe::detail::store_be<2>(out + 8, static_cast<std::uint16_t>(e.manifest.size()));
  crc32c_state crc;
  crc.update({out + 4, 6});
  crc.update(e.manifest);
  crc.update(e.payload);
  troupe::detail::store_be<4>(out, crc.value());
}

inline std::string encode_event(const event_record& e) {
  if (e.manifest.size() > max_manifest) throw error(troupe::errc::invalid_argument, "manifest longer than 65535 bytes");
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
