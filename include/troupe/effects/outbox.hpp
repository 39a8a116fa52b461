#pragma once

/// \file
/// Outbox records: what the dispatcher knows of one effect, kept in the
/// `outbox` table, and the policies that govern them. See docs/effects.md
/// and docs/storage.md.

#include <troupe/error.hpp>
#include <troupe/effects/effect.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::effects {

/// One entry of an effect's history (kept in its outbox record).
struct attempt_entry {
  /// When, in milliseconds since the epoch.
  std::int64_t time_ms = 0;
  /// "execute", "query" or "operator".
  std::string action;
  /// What it came to: "completed", "failed", "unknown", "not_found",
  /// "requeued", ...
  std::string result;
  std::string detail;
};

/// What the dispatcher knows of one effect (operator API, callbacks).
struct effect_info {
  std::string id;
  std::string type;
  std::string owner;
  effect_status status = effect_status::pending;
  /// The last attempt's outcome is not known (it must be resolved before
  /// anything is retried).
  bool in_doubt = false;
  std::uint32_t attempts = 0;
  std::uint32_t queries = 0;
  std::uint32_t round = 0;
  std::string result;
  std::string reason;
  std::int64_t created_ms = 0;
  std::int64_t finished_ms = 0;
  std::vector<attempt_entry> history;
};

/// How the dispatcher retries one type of effect.
struct retry_policy {
  /// Attempts to execute, at most; queries of an unknown outcome are
  /// counted separately, against the same limit.
  std::uint32_t max_attempts = 10;
  /// Wait after the first attempt, doubled after each further one up to
  /// `max_backoff`.
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{60'000};
  /// Called on the dispatcher's thread when attempts run out: the effect is
  /// then `failed` (every attempt certainly failed) or `unknown` (some
  /// outcome stayed unknown), its history kept. The owner learns it too.
  std::function<void(const effect_info&)> on_threshold;

  std::chrono::milliseconds backoff(std::uint32_t attempts) const {
    auto d = initial_backoff;
    for (std::uint32_t i = 1; i < attempts && d < max_backoff; ++i) d *= 2;
    return std::min(d, max_backoff);
  }
};

/// How long finished outbox records are kept, and how they are removed.
struct retention_policy {
  /// Completed records are removed after this; failed ones after
  /// `failed`. Unknown ones are kept until an operator resolves them.
  std::chrono::milliseconds completed{std::chrono::hours(24)};
  std::chrono::milliseconds failed{std::chrono::hours(24 * 7)};
  /// How often, and how many at most each time.
  std::chrono::milliseconds sweep_interval{std::chrono::minutes(1)};
  std::size_t sweep_batch = 10'000;
};

namespace detail {

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

  void note(std::int64_t now, std::string action, std::string result, std::string detail) {
    auto& h = info.history;
    if (h.size() == max_history) h.erase(h.begin());
    h.push_back({now, std::move(action), std::move(result), std::move(detail)});
  }
};

/// Values: a format byte, then JSON (these records are written a few times
/// per effect; their readability in a store dump is worth more than bytes).
inline constexpr char record_format = 1;

inline std::string encode(const record& r) {
  const auto& i = r.info;
  boost::json::array history;
  for (auto& h : i.history)
    history.push_back({{"t", h.time_ms}, {"action", h.action}, {"result", h.result}, {"detail", h.detail}});
  boost::json::object o{{"type", i.type},
                         {"owner", i.owner},
                         {"status", to_string(i.status)},
                         {"in_doubt", i.in_doubt},
                         {"attempts", i.attempts},
                         {"queries", i.queries},
                         {"round", i.round},
                         {"result", i.result},
                         {"reason", i.reason},
                         {"created", i.created_ms},
                         {"finished", i.finished_ms},
                         {"due", r.due_ms},
                         {"request", r.request},
                         {"history", std::move(history)}};
  std::string v(1, record_format);
  v += boost::json::serialize(o);
  return v;
}

inline record decode(std::string_view id, std::string_view v) {
  if (v.empty() || v[0] != record_format)
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " has an unknown format");
  try {
    auto o = boost::json::parse(v.substr(1)).as_object();
    record r;
    auto& i = r.info;
    using boost::json::value_to;
    i.id = id;
    i.type = value_to<std::string>(o.at("type"));
    i.owner = value_to<std::string>(o.at("owner"));
    auto s = effect_status_from(o.at("status").as_string());
    if (!s) throw std::runtime_error("unknown status");
    i.status = *s;
    i.in_doubt = o.at("in_doubt").as_bool();
    i.attempts = value_to<std::uint32_t>(o.at("attempts"));
    i.queries = value_to<std::uint32_t>(o.at("queries"));
    i.round = value_to<std::uint32_t>(o.at("round"));
    i.result = value_to<std::string>(o.at("result"));
    i.reason = value_to<std::string>(o.at("reason"));
    i.created_ms = value_to<std::int64_t>(o.at("created"));
    i.finished_ms = value_to<std::int64_t>(o.at("finished"));
    r.due_ms = value_to<std::int64_t>(o.at("due"));
    r.request = value_to<std::string>(o.at("request"));
    for (auto& x : o.at("history").as_array()) {
      auto& h = x.as_object();
      i.history.push_back({value_to<std::int64_t>(h.at("t")), value_to<std::string>(h.at("action")),
                           value_to<std::string>(h.at("result")), value_to<std::string>(h.at("detail"))});
    }
    return r;
  } catch (const std::exception& ex) {
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " cannot be read: " + ex.what());
  }
}

} // namespace detail
} // namespace troupe::effects
