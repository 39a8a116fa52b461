#pragma once

// The outbox table and its records: what the dispatcher knows of one
// effect, plus the request and when it is due next (docs/storage.md).

#include <troupe/error.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/error.hpp>
#include <troupe/effects/detail/record_codec.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/persistence/records.hpp>

#include <boost/describe/class.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  // Asked for every record a compaction meets: the three fields it needs
  // read from the parsed text (in a buffer on the stack), without building
  // the record. A record without them is decoded in full, which reads the
  // older forms or throws (and the store keeps what it cannot read).
  const auto expiry = [&](bool confirmed_, effect_status status_, std::int64_t finished_) -> std::optional<std::int64_t> {
    const auto keep = status_ == effect_status::completed ? completed
                      : status_ == effect_status::failed  ? failed
                                                          : std::chrono::milliseconds::max();
    if (!confirmed_ || keep == std::chrono::milliseconds::max()) return std::nullopt;
    return finished_ + keep.count();
  };
  if (!value.empty() && value[0] == record_format) {
    unsigned char buffer[4096];
    boost::json::monotonic_resource memory(buffer, sizeof buffer);
    boost::json::error_code ec;
    const auto j = boost::json::parse(boost::json::string_view(value.data() + 1, value.size() - 1), ec, &memory,
                                      persistence::json_text_options());
    const auto* o = ec ? nullptr : j.if_object();
    const auto* status = o ? o->if_contains("status") : nullptr;
    const auto* finished = o ? o->if_contains("finished") : nullptr;
    const auto* confirmed = o ? o->if_contains("confirmed") : nullptr;
    if (status && status->is_string() && finished && finished->is_int64() && confirmed && confirmed->is_bool()) {
      const auto& st = status->get_string();
      return expiry(confirmed->get_bool(),
                    st == "completed" ? effect_status::completed
                    : st == "failed"  ? effect_status::failed
                                      : effect_status::pending, // kept either way
                    finished->get_int64());
    }
  }
  const auto r = decode(key.substr(1), value);
  return expiry(r.confirmed, r.info.status, r.info.finished_ms);
}

} // namespace troupe::effects::detail
