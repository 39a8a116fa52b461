#pragma once

/// \file
/// What a journal and a snapshot store hold, independent of the store.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace troupe::persistence {

/// Sequence numbers of a persistence ID start at 1 and never repeat.
using sequence_nr = std::uint64_t;

inline constexpr sequence_nr max_sequence_nr = std::numeric_limits<sequence_nr>::max();

/// One journaled event: its sequence number, the stable name and version of
/// its type (for upcasting old versions), and the serialized payload.
struct event_record {
  sequence_nr seq = 0;
  std::string manifest;
  std::uint32_t version = 1;
  std::string payload;

  friend bool operator==(const event_record&, const event_record&) = default;
};

/// A snapshot of an actor's state after event `seq`.
struct snapshot_record {
  sequence_nr seq = 0;
  /// Milliseconds since the epoch when it was taken.
  std::int64_t timestamp_ms = 0;
  std::string payload;

  friend bool operator==(const snapshot_record&, const snapshot_record&) = default;
};

/// Which snapshots a load or a delete considers: those with
/// `min_seq <= seq <= max_seq` and `min_timestamp_ms <= timestamp <= max_timestamp_ms`.
struct snapshot_criteria {
  sequence_nr max_seq = max_sequence_nr;
  std::int64_t max_timestamp_ms = std::numeric_limits<std::int64_t>::max();
  sequence_nr min_seq = 0;
  std::int64_t min_timestamp_ms = 0;

  bool matches(const snapshot_record& s) const noexcept {
    return s.seq >= min_seq && s.seq <= max_seq && s.timestamp_ms >= min_timestamp_ms &&
           s.timestamp_ms <= max_timestamp_ms;
  }
};

/// The key-value tables the delivery and effects layers keep next to the
/// journal (column families `deliveries`, `dedup` and `outbox`). Their keys
/// and values belong to those layers; a journal write can carry changes to
/// them, atomically with its events.
enum class table : std::uint8_t { deliveries, dedup, outbox };

/// A put (`value` set) or a delete (`value` empty) of one key in a table.
struct table_write {
  persistence::table table = table::deliveries;
  std::string key;
  std::optional<std::string> value;

  static table_write put(persistence::table t, std::string key, std::string value) {
    return {t, std::move(key), std::move(value)};
  }
  static table_write erase(persistence::table t, std::string key) { return {t, std::move(key), std::nullopt}; }
};

/// What a successful write survives. See docs/storage.md.
enum class durability : std::uint8_t {
  /// fsync before acknowledging: survives power loss and OS crash (default).
  sync,
  /// Written to the OS before acknowledging: survives a process crash
  /// (`kill -9`), not power loss.
  async,
  /// No write-ahead log: for tests and benchmarks only; a crash may lose
  /// acknowledged events.
  none,
};

} // namespace troupe::persistence
