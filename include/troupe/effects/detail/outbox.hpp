#pragma once

// The outbox table and its records: what the dispatcher knows of one
// effect, plus the request and when it is due next (docs/storage.md).

#include <troupe/error.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/error.hpp>
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

/// The most history entries a record keeps (the oldest are dropped).
inline constexpr std::size_t max_history = 32;

/// An outbox record: the effect as the dispatcher keeps it, plus the
/// request and when it is due next.
struct record {
  effect_info info;
  std::string request;
  std::int64_t due_ms = 0;
  /// The dispatcher that reported its latest outcome to the owner (the
  /// sender of that delivery); empty before, or in a record written before
  /// the field was.
  std::string reporter;
  /// Its owner confirmed the latest outcome (its reporter heard so): from
  /// then on the store may drop the record once its retention has passed.
  /// (A finished record written before the field was counts as confirmed.)
  bool confirmed = false;

  void note(std::int64_t now, std::string action, std::string result, std::string detail) {
    auto& h = info.history;
    if (h.size() == max_history) h.erase(h.begin());
    h.push_back({now, std::move(action), std::move(result), std::move(detail)});
  }
};

// -- the stored form: a format byte, then JSON --------------------------------
//
// These records are written a few times per effect; their readability in a
// store dump is worth more than bytes. The JSON's field names are the
// members' below (Boost.Describe), in this order.

struct stored_history_entry {
  std::int64_t t = 0;
  std::string action, result, detail;
};
BOOST_DESCRIBE_STRUCT(stored_history_entry, (), (t, action, result, detail))

struct stored_record {
  std::string type, owner;
  effect_status status = effect_status::pending;
  bool in_doubt = false;
  std::uint32_t attempts = 0, queries = 0, round = 0;
  std::string result, reason;
  std::int64_t created = 0, finished = 0, due = 0;
  std::string request;
  std::vector<stored_history_entry> history;
  std::string reporter;
  bool confirmed = false;
};
BOOST_DESCRIBE_STRUCT(stored_record, (),
                      (type, owner, status, in_doubt, attempts, queries, round, result, reason, created, finished, due,
                       request, history, reporter, confirmed))

inline constexpr char record_format = 1;

inline std::string encode(const record& r) {
  const auto& i = r.info;
  stored_record s{i.type,   i.owner,  i.status,     i.in_doubt,    i.attempts, i.queries,  i.round,
                  i.result, i.reason, i.created_ms, i.finished_ms, r.due_ms,   r.request,  {},
                  r.reporter, r.confirmed};
  s.history.reserve(i.history.size());
  for (auto& h : i.history) s.history.push_back({h.time_ms, h.action, h.result, h.detail});
  std::string v(1, record_format);
  v += persistence::to_json_text(s);
  return v;
}

/// Throws `errc::corrupt_record` naming the operation for a record that
/// cannot be read.
inline record decode(std::string_view id, std::string_view v) {
  if (v.empty() || v[0] != record_format)
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " has an unknown format");
  stored_record s;
  try {
    auto j = boost::json::parse(boost::json::string_view(v.data() + 1, v.size() - 1));
    // Written before records named their reporter: none; before they said
    // whether their outcome was confirmed: a finished one was.
    if (auto* o = j.if_object()) {
      if (!o->contains("reporter")) (*o)["reporter"] = "";
      if (!o->contains("confirmed")) (*o)["confirmed"] = o->contains("status") && (*o)["status"] != "pending";
    }
    s = boost::json::value_to<stored_record>(j);
  } catch (const std::exception& ex) {
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " cannot be read: " + ex.what());
  }
  record r;
  auto& i = r.info;
  i.id = id;
  i.type = std::move(s.type);
  i.owner = std::move(s.owner);
  i.status = s.status;
  i.in_doubt = s.in_doubt;
  i.attempts = s.attempts;
  i.queries = s.queries;
  i.round = s.round;
  i.result = std::move(s.result);
  i.reason = std::move(s.reason);
  i.created_ms = s.created;
  i.finished_ms = s.finished;
  r.due_ms = s.due;
  r.request = std::move(s.request);
  r.reporter = std::move(s.reporter);
  r.confirmed = s.confirmed;
  i.history.reserve(s.history.size());
  for (auto& h : s.history) i.history.push_back({h.t, std::move(h.action), std::move(h.result), std::move(h.detail)});
  return r;
}

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
  const auto r = decode(key.substr(1), value);
  if (!r.confirmed) return std::nullopt;
  const auto keep = r.info.status == effect_status::completed ? completed
                    : r.info.status == effect_status::failed  ? failed
                                                              : std::chrono::milliseconds::max();
  if (keep == std::chrono::milliseconds::max()) return std::nullopt;
  return r.info.finished_ms + keep.count();
}

} // namespace troupe::effects::detail
