#pragma once

// The delivery layer's tables and their records (docs/storage.md): keys
// start with the owner's length-prefixed persistence ID; values are a format
// byte, then big-endian fields.

#include <troupe/error.hpp>
#include <troupe/delivery/error.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/bytes.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::delivery::detail {

/// The tables the delivery layer registers with a journal.
struct tables {
  /// A sender's unconfirmed deliveries and dead letters.
  persistence::table deliveries;
  /// A receiver's dedup marks.
  persistence::table dedup;

  static tables of(persistence::journal& j) { return {j.open_table("deliveries"), j.open_table("dedup")}; }
};

/// The owner's persistence ID with its u16 length: the start of its keys.
inline std::string key_prefix(std::string_view pid) { return troupe::detail::prefixed(pid, 1); }

/// In `deliveries`: the owner's prefix, 'p' (pending) or 'x' (dead letter),
/// then the delivery ID. In `dedup`: the prefix, then the ID (`kind` 0).
/// Built in one allocation.
inline std::string key(std::string_view prefix, char kind, std::string_view id) {
  std::string k;
  k.reserve(prefix.size() + 1 + id.size());
  k += prefix;
  if (kind != 0) k += kind;
  k += id;
  return k;
}

/// A delivery recorded and not yet confirmed.
struct outgoing {
  std::string to;
  std::string id;
  std::string manifest;
  std::uint32_t version = 1;
  std::string payload;
  std::int64_t created_ms = 0;
};

inline constexpr char value_format = 1;

/// A pending delivery (`dead_ms` 0) or a dead letter: format · u32 length ·
/// receiver · u32 length · manifest · u32 version · i64 created · u32
/// attempts · i64 given up · payload.
inline std::string encode_outgoing(const outgoing& o, std::uint32_t attempts = 0, std::int64_t dead_ms = 0) {
  using namespace troupe::detail;
  std::string v;
  v.reserve(1 + 4 + o.to.size() + 4 + o.manifest.size() + 4 + 8 + 4 + 8 + o.payload.size());
  v.push_back(value_format);
  put_u32(v, static_cast<std::uint32_t>(o.to.size()));
  v += o.to;
  put_u32(v, static_cast<std::uint32_t>(o.manifest.size()));
  v += o.manifest;
  put_u32(v, o.version);
  put_u64(v, static_cast<std::uint64_t>(o.created_ms));
  put_u32(v, attempts);
  put_u64(v, static_cast<std::uint64_t>(dead_ms));
  v += o.payload;
  return v;
}

inline error bad_value(std::string_view what) {
  return error(errc::corrupt_record, "unreadable " + std::string(what) + " record in the delivery tables");
}

/// Throws `corrupt_record` for a value that is truncated or of another format.
inline outgoing decode_outgoing(std::string_view id, std::string_view v, std::uint32_t* attempts = nullptr,
                                std::int64_t* dead_ms = nullptr) {
  troupe::detail::byte_reader in(v);
  try {
    if (in.take(1)[0] != value_format) throw bad_value("delivery");
    outgoing o;
    o.id = id;
    o.to = in.take(in.be(4));
    o.manifest = in.take(in.be(4));
    o.version = static_cast<std::uint32_t>(in.be(4));
    o.created_ms = static_cast<std::int64_t>(in.be(8));
    const auto a = static_cast<std::uint32_t>(in.be(4));
    const auto d = static_cast<std::int64_t>(in.be(8));
    o.payload = in.rest();
    if (attempts) *attempts = a;
    if (dead_ms) *dead_ms = d;
    return o;
  } catch (const std::out_of_range&) {
    throw bad_value("delivery");
  }
}

/// A dedup mark: format · i64 time processed · u8 has reply · reply.
inline std::string encode_mark(std::int64_t time_ms, const std::optional<std::string>& reply) {
  std::string v;
  v.reserve(1 + 8 + 1 + (reply ? reply->size() : 0));
  v.push_back(value_format);
  troupe::detail::put_u64(v, static_cast<std::uint64_t>(time_ms));
  v.push_back(reply ? 1 : 0);
  if (reply) v += *reply;
  return v;
}

/// The time the mark was made; its reply into `reply`.
inline std::int64_t decode_mark(std::string_view v, std::optional<std::string>& reply) {
  troupe::detail::byte_reader in(v);
  try {
    if (in.take(1)[0] != value_format) throw bad_value("dedup");
    const auto time_ms = static_cast<std::int64_t>(in.be(8));
    if (in.take(1)[0] != 0) reply = std::string(in.rest());
    return time_ms;
  } catch (const std::out_of_range&) {
    throw bad_value("dedup");
  }
}

} // namespace troupe::delivery::detail
