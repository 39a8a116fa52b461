#pragma once

/// \file
/// What a journal holds, independent of the store: events, snapshots, and
/// the key-value tables that layers above keep next to the journal.

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::persistence {

namespace detail {
class table_registry;
}

/// Sequence numbers of a persistence ID start at 1 and never repeat.
using sequence_nr = std::uint64_t;

inline constexpr sequence_nr max_sequence_nr = std::numeric_limits<sequence_nr>::max();

/// What a record carries besides its content, written atomically with it
/// and returned by every read: when it was written, and a small map of
/// entries the application or a tracing hook fills (causation and
/// correlation IDs, trace context). The store keeps the entries as given;
/// their encoded size (2 + key + 2 + value bytes each) is at most
/// `max_metadata_bytes`.
struct record_metadata {
  /// Milliseconds since the epoch when the record was written: a store
  /// given 0 sets it to the time of its write. 0 on records written before
  /// stores kept it (on-disk format 1).
  std::int64_t written_ms = 0;
  /// Keys are unique (`set` replaces); order is kept.
  std::vector<std::pair<std::string, std::string>> entries;

  /// The value of `key`, or null.
  const std::string* get(std::string_view key) const noexcept {
    for (auto& [k, v] : entries)
      if (k == key) return &v;
    return nullptr;
  }

  /// Sets `key` to `value`, replacing an entry of the same key.
  record_metadata& set(std::string key, std::string value) {
    for (auto& [k, v] : entries)
      if (k == key) {
        v = std::move(value);
        return *this;
      }
    entries.emplace_back(std::move(key), std::move(value));
    return *this;
  }

  /// The entries' encoded size.
  std::size_t entries_bytes() const noexcept {
    std::size_t n = 0;
    for (auto& [k, v] : entries) n += 4 + k.size() + v.size();
    return n;
  }

  friend bool operator==(const record_metadata&, const record_metadata&) = default;
};

/// The most bytes a record's metadata entries take (see `record_metadata`).
inline constexpr std::size_t max_metadata_bytes = 0xFFFF;

/// One journaled event: its sequence number, the stable name and version of
/// its type (for upcasting old versions), the serialized payload, and its
/// metadata.
struct event_record {
  sequence_nr seq = 0;
  std::string manifest;
  std::uint32_t version = 1;
  std::string payload;
  record_metadata metadata{};

  friend bool operator==(const event_record&, const event_record&) = default;
};

/// The manifest of the record a salvage (`rocksdb_options::salvage`) leaves
/// at the last number of each persistence ID's dropped events, with payload
/// `{"from": a, "to": b}`: recovery passes over the numbers it covers, and
/// the next event continues after it, so that no number that may have been
/// acknowledged is handed out again.
inline constexpr std::string_view events_lost_manifest = "troupe.events_lost";

/// A snapshot of an actor's state after event `seq`.
struct snapshot_record {
  sequence_nr seq = 0;
  /// Milliseconds since the epoch when it was taken.
  std::int64_t timestamp_ms = 0;
  std::string payload;
  /// The version of the state type that wrote `payload` (for upcasting a
  /// snapshot of an older state type; 1 for records of format-1 stores).
  std::uint32_t version = 1;
  record_metadata metadata{};

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

/// A key-value table that a layer above keeps next to the journal, by a
/// stable name (in the RocksDB store, the column family of that name). Get
/// one from the store: `journal::open_table(name)`; it is valid for that
/// store only. The layer that registers a table owns its keys and values;
/// a journal write carries changes to it atomically with its events.
class table {
public:
  /// Not a table of any store (every store refuses it).
  table() = default;

  friend bool operator==(table, table) = default;

private:
  friend class detail::table_registry;
  explicit table(std::uint32_t index) noexcept : index_(index) {}

  std::uint32_t index_ = 0; // 0: none; tables are numbered from 1
};

/// A put (`value` set) or a delete (`value` empty) of one key in a table.
struct table_write {
  persistence::table table;
  std::string key;
  std::optional<std::string> value;
  /// Only if the key does not exist (`create`): otherwise the whole write
  /// fails with `errc::key_exists`, nothing of it applied. Checked by the
  /// store atomically with the write (a claim no second writer can also win).
  bool only_new = false;

  static table_write put(persistence::table t, std::string key, std::string value) {
    return {t, std::move(key), std::move(value)};
  }
  /// Puts `value` under a key that must not exist yet.
  static table_write create(persistence::table t, std::string key, std::string value) {
    return {t, std::move(key), std::move(value), true};
  }
  static table_write erase(persistence::table t, std::string key) { return {t, std::move(key), std::nullopt}; }
};

/// When a value of a table may go (`journal::set_expiry`): wall-clock
/// milliseconds since the epoch (the clock of `written_ms`), or none for a
/// value that stays. Called on the store's threads: thread-safe, cheap,
/// and it must not throw.
using expiry_fn = std::function<std::optional<std::int64_t>(std::string_view key, std::string_view value)>;

/// What a successful write survives. See docs/storage.md.
enum class durability : std::uint8_t {
  /// fsync before acknowledging: survives power loss and OS crash (default).
  sync,
  /// Written to the OS before acknowledging: survives a process crash
  /// (`kill -9`), not power loss.
  async,
  /// No write-ahead log: for tests and benchmarks only; a crash may lose
  /// acknowledged writes.
  none,
};

} // namespace troupe::persistence
