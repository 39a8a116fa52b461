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

/// The first key past every key that starts with `prefix` (bytewise
/// order); empty if there is none (`prefix` empty or all 0xFF bytes).
inline std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xFF) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
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

/// Whether a record's metadata entries fit (`max_metadata_bytes`; then
/// every key and value fits its `u16` length too).
inline bool valid_metadata(const record_metadata& m) noexcept { return m.entries_bytes() <= max_metadata_bytes; }

/// The metadata entries as stored: `u16` key length | key | `u16` value
/// length | value, for each.
inline std::string encode_entries(const record_metadata& m) {
  std::string out;
  if (m.entries.empty()) return out;
  out.reserve(m.entries_bytes());
  for (auto& [k, v] : m.entries) {
    troupe::detail::put_be<2>(out, k.size());
    out.append(k);
    troupe::detail::put_be<2>(out, v.size());
    out.append(v);
  }
  return out;
}

inline bool decode_entries(std::string_view in, record_metadata& out) {
  out.entries.clear();
  std::size_t at = 0;
  while (at < in.size()) {
    if (in.size() - at < 2) return false;
    const auto kl = get_be(in, at, 2);
    if (in.size() - at - 2 < kl + 2) return false;
    auto key = in.substr(at + 2, kl);
    at += 2 + kl;
    const auto vl = get_be(in, at, 2);
    if (in.size() - at - 2 < vl) return false;
    out.entries.emplace_back(std::string(key), std::string(in.substr(at + 2, vl)));
    at += 2 + vl;
  }
  return true;
}

/// The checksums of format 2 start from this byte, so that a format-1
/// value (whose checksum covers the same bytes without it) never passes as
/// a format-2 one: a store part-way through its migration tells them apart.
inline constexpr char format_2_seed = '\x02';

// -- events, format 2 ---------------------------------------------------------
//
// crc32c of (seed, the rest) | u32 version | u16 manifest length |
// i64 written (ms) | u16 metadata length | manifest | metadata | payload

inline constexpr std::size_t event_header_size = 20;

/// The fixed part of an event's value, for metadata entries `entries`
/// (encoded) and write time `written_ms`; the manifest, the entries and the
/// payload follow it. The manifest and the entries must fit in a `u16`.
inline void event_header(const event_record& e, std::int64_t written_ms, std::string_view entries,
                         char (&out)[event_header_size]) noexcept {
  troupe::detail::store_be<4>(out + 4, e.version);
  troupe::detail::store_be<2>(out + 8, static_cast<std::uint16_t>(e.manifest.size()));
  troupe::detail::store_be<8>(out + 10, static_cast<std::uint64_t>(written_ms));
  troupe::detail::store_be<2>(out + 18, static_cast<std::uint16_t>(entries.size()));
  crc32c_state crc;
  crc.update({&format_2_seed, 1});
  crc.update({out + 4, event_header_size - 4});
  crc.update(e.manifest);
  crc.update(entries);
  crc.update(e.payload);
  troupe::detail::store_be<4>(out, crc.value());
}

/// The whole value of `e` (its metadata's time as it is).
inline std::string encode_event(const event_record& e) {
  if (e.manifest.size() > max_manifest) throw error(troupe::errc::invalid_argument, "manifest longer than 65535 bytes");
  if (!valid_metadata(e.metadata))
    throw error(troupe::errc::invalid_argument, "record metadata longer than 65535 bytes");
  const auto entries = encode_entries(e.metadata);
  char header[event_header_size];
  event_header(e, e.metadata.written_ms, entries, header);
  std::string out;
  out.reserve(event_header_size + e.manifest.size() + entries.size() + e.payload.size());
  out.append(header, event_header_size).append(e.manifest).append(entries).append(e.payload);
  return out;
}

/// Decodes a format-2 event value; false if it is truncated or its
/// checksum fails.
inline bool decode_event(std::string_view v, sequence_nr seq, event_record& out) {
  if (v.size() < event_header_size) return false;
  crc32c_state crc;
  crc.update({&format_2_seed, 1});
  crc.update(v.substr(4));
  if (get_be(v, 0, 4) != crc.value()) return false;
  const auto manifest_len = get_be(v, 8, 2);
  const auto entries_len = get_be(v, 18, 2);
  if (v.size() < event_header_size + manifest_len + entries_len) return false;
  out.seq = seq;
  out.version = static_cast<std::uint32_t>(get_be(v, 4, 4));
  out.metadata.written_ms = static_cast<std::int64_t>(get_be(v, 10, 8));
  out.manifest.assign(v.substr(event_header_size, manifest_len));
  if (!decode_entries(v.substr(event_header_size + manifest_len, entries_len), out.metadata)) return false;
  out.payload.assign(v.substr(event_header_size + manifest_len + entries_len));
  return true;
}

// -- snapshots, format 2 -------------------------------------------------------
//
// crc32c of (seed, the rest) | i64 timestamp (ms) | u32 state version |
// i64 written (ms) | u16 metadata length | metadata | payload

inline constexpr std::size_t snapshot_header_size = 26;

inline std::string encode_snapshot(const snapshot_record& s) {
  if (!valid_metadata(s.metadata))
    throw error(troupe::errc::invalid_argument, "record metadata longer than 65535 bytes");
  const auto entries = encode_entries(s.metadata);
  std::string out(4, '\0');
  out.reserve(snapshot_header_size + entries.size() + s.payload.size());
  put_u64(out, static_cast<std::uint64_t>(s.timestamp_ms));
  put_u32(out, s.version);
  put_u64(out, static_cast<std::uint64_t>(s.metadata.written_ms));
  troupe::detail::put_be<2>(out, entries.size());
  out.append(entries).append(s.payload);
  crc32c_state crc;
  crc.update({&format_2_seed, 1});
  crc.update(std::string_view(out).substr(4));
  troupe::detail::store_be<4>(out.data(), crc.value());
  return out;
}

inline bool decode_snapshot(std::string_view v, sequence_nr seq, snapshot_record& out) {
  if (v.size() < snapshot_header_size) return false;
  crc32c_state crc;
  crc.update({&format_2_seed, 1});
  crc.update(v.substr(4));
  if (get_be(v, 0, 4) != crc.value()) return false;
  const auto entries_len = get_be(v, 24, 2);
  if (v.size() < snapshot_header_size + entries_len) return false;
  out.seq = seq;
  out.timestamp_ms = static_cast<std::int64_t>(get_be(v, 4, 8));
  out.version = static_cast<std::uint32_t>(get_be(v, 12, 4));
  out.metadata.written_ms = static_cast<std::int64_t>(get_be(v, 16, 8));
  if (!decode_entries(v.substr(snapshot_header_size, entries_len), out.metadata)) return false;
  out.payload.assign(v.substr(snapshot_header_size + entries_len));
  return true;
}

// -- format 1, read by the migration only --------------------------------------

/// Event value of format 1: crc32c of the rest | u32 version | u16
/// manifest length | manifest | payload.
inline bool decode_event_v1(std::string_view v, sequence_nr seq, event_record& out) {
  if (v.size() < 10) return false;
  auto body = v.substr(4);
  if (get_be(v, 0, 4) != crc32c(body)) return false;
  auto manifest_len = get_be(body, 4, 2);
  if (body.size() < 6 + manifest_len) return false;
  out = {};
  out.seq = seq;
  out.version = static_cast<std::uint32_t>(get_be(body, 0, 4));
  out.manifest.assign(body.substr(6, manifest_len));
  out.payload.assign(body.substr(6 + manifest_len));
  return true;
}

/// Snapshot value of format 1: crc32c of the rest | i64 timestamp (ms) |
/// payload.
inline bool decode_snapshot_v1(std::string_view v, sequence_nr seq, snapshot_record& out) {
  if (v.size() < 12) return false;
  auto body = v.substr(4);
  if (get_be(v, 0, 4) != crc32c(body)) return false;
  out = {};
  out.seq = seq;
  out.timestamp_ms = static_cast<std::int64_t>(get_be(body, 0, 8));
  out.payload.assign(body.substr(8));
  return true;
}

} // namespace troupe::persistence::detail
