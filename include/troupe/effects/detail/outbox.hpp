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

#include <cstdint>
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
};
BOOST_DESCRIBE_STRUCT(stored_record, (),
                      (type, owner, status, in_doubt, attempts, queries, round, result, reason, created, finished, due,
                       request, history, reporter))

inline constexpr char record_format = 1;

inline std::string encode(const record& r) {
  const auto& i = r.info;
  stored_record s{i.type,   i.owner,  i.status,     i.in_doubt,    i.attempts, i.queries, i.round,
                  i.result, i.reason, i.created_ms, i.finished_ms, r.due_ms,   r.request, {},
                  r.reporter};
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
    // Written before records named their reporter: none.
    if (auto* o = j.if_object(); o && !o->contains("reporter")) (*o)["reporter"] = "";
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
  i.history.reserve(s.history.size());
  for (auto& h : s.history) i.history.push_back({h.t, std::move(h.action), std::move(h.result), std::move(h.detail)});
  return r;
}

} // namespace troupe::effects::detail
