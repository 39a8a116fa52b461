#pragma once

// The delivery layer's tables and their records (docs/storage.md): keys
// start with the owner's length-prefixed persistence ID; values are a format
// byte, then big-endian fields.

#include <troupe/error.hpp>
#include <troupe/delivery/error.hpp>
#include <troupe/delivery/detail/dedup_marks.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/work_index.hpp>
#include <troupe/detail/bytes.hpp>
#include <troupe/detail/compile_mode.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::delivery {

/// The delivery layer's reason in the work index
/// (`persistence::work_index`): a sender is marked with it while it has
/// unconfirmed deliveries. Claimed for "troupe.delivery" whenever the layer
/// opens its tables in a journal.
inline constexpr char work_reason = 'd';

} // namespace troupe::delivery

namespace troupe::delivery::detail {

/// The tables the delivery layer registers with a journal.
struct tables {
  /// A sender's unconfirmed deliveries and dead letters.
  persistence::table deliveries;
  /// A receiver's dedup marks, by sender and delivery ID.
  persistence::table dedup;
  /// The marks of the first layout (`dedup`: by delivery ID only), if the
  /// store has that table: each receiver moves its own into `dedup` when
  /// it starts.
  std::optional<persistence::table> dedup_by_id;
  /// The entities with work (`persistence::work_index`): a sender is marked
  /// while it has unconfirmed deliveries.
  persistence::table work;

  static constexpr std::string_view dedup_name = "dedup_v2";
  static constexpr std::string_view dedup_by_id_name = "dedup";

  static tables of(persistence::journal& j) {
    persistence::work_index::claim_reason(work_reason, "troupe.delivery");
    return {j.open_table("deliveries"), j.open_table(dedup_name), j.find_table(dedup_by_id_name),
            j.open_table(persistence::work_index::table_name)};
  }
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

/// What identifies a delivery at its receiver, after the receiver's prefix
/// in `dedup`: the sender's name (`u16` length, then its bytes), then the
/// delivery ID. A mark moved from the first layout has an empty sender: it
/// stands for its ID from any sender (that layout did not say which).
inline std::string mark_key(std::string_view sender, std::string_view id) {
  std::string k = troupe::detail::prefixed(sender, id.size());
  k += id;
  return k;
}

/// The sender the mark of `key` (a `mark_key`) names; empty for a moved one.
inline std::string_view sender_of_mark(std::string_view key) {
  const auto n = troupe::detail::prefixed_length(key);
  return n == 0 ? std::string_view{} : key.substr(2, n - 2);
}

/// A delivery recorded and not yet confirmed.
struct outgoing {
  std::string to;
  std::string id;
  std::string manifest;
  std::uint32_t version = 1;
  std::string payload;
  /// When its horizon started: its record, or its last re-queue.
  std::int64_t created_ms = 0;
  /// When it was first recorded (a re-queue keeps it): what the receiver's
  /// dedup retention is counted against. 0: `created_ms`.
  std::int64_t first_ms = 0;

  std::int64_t first_recorded_ms() const noexcept { return first_ms != 0 ? first_ms : created_ms; }
};

/// The format byte of dedup marks, and of the first layout of delivery values.
inline constexpr char value_format = 1;
/// The format byte of delivery values, since they keep the first record time.
inline constexpr char outgoing_format = 2;

/// A pending delivery (`dead_ms` 0) or a dead letter: format (2) · u32
/// length · receiver · u32 length · manifest · u32 version · i64 created ·
/// i64 first recorded · u32 attempts · i64 given up · payload. (Format 1
/// has no first record time: it is the created time.)
TROUPE_DECL std::string encode_outgoing(const outgoing& o, std::uint32_t attempts = 0, std::int64_t dead_ms = 0);

TROUPE_DECL error bad_value(std::string_view what);

/// Throws `corrupt_record` for a value that is truncated or of another format.
TROUPE_DECL outgoing decode_outgoing(std::string_view id, std::string_view v, std::uint32_t* attempts = nullptr,
                                std::int64_t* dead_ms = nullptr);

/// A dedup mark of a processed delivery: format (1) · i64 time processed ·
/// u8 has reply · reply.
TROUPE_DECL std::string encode_mark(std::int64_t time_ms, const std::optional<std::string>& reply);

/// The other values under a mark's key: a delivery whose handler failed
/// `failures` times so far (2 · i64 time of the last failure · u32
/// failures · reason), or one rejected after them (3 · i64 time · u32
/// failures · reason).
inline constexpr char failing_format = 2;
inline constexpr char rejected_format = 3;

TROUPE_DECL std::string encode_failure(bool rejected, std::int64_t time_ms, std::uint32_t failures,
                                  std::string_view reason);

/// A value of `dedup` as a mark. Throws `corrupt_record` for a value that
/// is truncated or of another format.
TROUPE_DECL dedup_marks::mark decode_mark(std::string_view v);

} // namespace troupe::delivery::detail

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/delivery/impl/codec.ipp>
#endif
