#pragma once

// The outbox table: its keys, its pending index and when the store may drop
// a record (the records and their stored form: record_codec.hpp;
// docs/storage.md).

#include <troupe/error.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/error.hpp>
#include <troupe/effects/detail/record_codec.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::effects::detail {

/// The outbox, as the effects layer registers it with a journal.
inline persistence::table outbox_table(persistence::journal& j) { return j.open_table("outbox"); }

/// Outbox keys: 'e' then the operation ID.
inline std::string outbox_key(std::string_view id) {
  std::string k;
  k.reserve(1 + id.size());
  k += 'e';
  k += id;
  return k;
}

/// The index of the pending records: 'w' then the operation ID, present
/// while the record is pending (written with it). A dispatcher pages
/// through it instead of reading the whole outbox.
inline std::string pending_key(std::string_view id) {
  std::string k;
  k.reserve(1 + id.size());
  k += 'w';
  k += id;
  return k;
}
inline constexpr std::string_view pending_prefix = "w";
/// Present once the pending index holds every pending record (a store
/// written before the index had none: it is built once).
inline constexpr std::string_view pending_index_built = "i";

/// What goes with a write of `r`: its pending index entry, or its removal.
inline persistence::table_write pending_entry(persistence::table t, const record& r) {
  if (r.info.status == effect_status::pending) return persistence::table_write::put(t, pending_key(r.info.id), {});
  return persistence::table_write::erase(t, pending_key(r.info.id));
}

/// When the store may drop an outbox value (`journal::set_expiry`): a
/// finished record whose outcome its owner confirmed, once its retention
/// (`completed` or `failed`) has passed; never a pending or unknown one.
inline std::optional<std::int64_t> record_expiry(std::string_view key, std::string_view value,
                                                 std::chrono::milliseconds completed,
                                                 std::chrono::milliseconds failed) {
  if (key.empty() || key[0] != 'e') return std::nullopt;
  // A record that cannot be read throws: the store keeps it.
  const auto r = decode(key.substr(1), value);
  if (!r.confirmed) return std::nullopt;
  const auto keep = r.info.status == effect_status::completed ? completed
                    : r.info.status == effect_status::failed  ? failed
                                                              : std::chrono::milliseconds::max();
  if (keep == std::chrono::milliseconds::max()) return std::nullopt;
  return r.info.finished_ms + keep.count();
}

} // namespace troupe::effects::detail
