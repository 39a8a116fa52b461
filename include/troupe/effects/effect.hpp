#pragma once

/// \file
/// `troupe::effects::effect`: the state of one side effect on an external
/// system, as its owning actor keeps it (through events), and the
/// transitions between its states. See docs/effects.md.

#include <troupe/error.hpp>
#include <troupe/persistence/json.hpp>

#include <boost/describe/class.hpp>
#include <boost/describe/enum.hpp>
#include <boost/describe/enum_from_string.hpp>
#include <boost/describe/enum_to_string.hpp>
#include <boost/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::effects {

/// Where a side effect stands.
///
/// \code
/// not_requested ──start──▶ pending ──▶ completed
///                            │  ▲  ╲──▶ failed   ──requeue──▶ pending
///                            │  │   ╲─▶ unknown  ──requeue──▶ pending
///                            ▼  │        │ └──resolved──▶ completed | failed
///                       (retries, queries)
/// \endcode
///
/// `unknown` is a state, not an error: the external system may or may not
/// have performed the operation (a timeout, a dropped connection, a 5xx),
/// and nothing could tell which. It is never turned into a new operation
/// with a new key.
enum class effect_status : std::uint8_t { not_requested, pending, completed, failed, unknown };
BOOST_DESCRIBE_ENUM(effect_status, not_requested, pending, completed, failed, unknown)

inline std::string_view to_string(effect_status s) noexcept { return boost::describe::enum_to_string(s, "?"); }

inline std::optional<effect_status> effect_status_from(std::string_view s) noexcept {
  effect_status v{};
  if (!boost::describe::enum_from_string(std::string(s).c_str(), v)) return std::nullopt;
  return v;
}

/// Whether an effect may go from `from` to `to`: `pending` to an outcome;
/// an outcome other than `completed` back to `pending` (an operator's
/// re-queue); `unknown` to `completed` or `failed` (resolved later).
/// `completed` is final.
constexpr bool allowed(effect_status from, effect_status to) noexcept {
  using enum effect_status;
  switch (from) {
  case not_requested: return to == pending;
  case pending: return to == completed || to == failed || to == unknown;
  case failed: return to == pending;
  case unknown: return to == pending || to == completed || to == failed;
  case completed: return false;
  }
  return false;
}

/// One side effect as its owner's state holds it.
struct effect {
  /// The stable operation ID (`order:42:payment`), also the idempotency key.
  std::string id;
  /// The effect type: which adapter performs it.
  std::string type;
  effect_status status = effect_status::not_requested;
  /// The external system's result once completed (JSON text, for example
  /// the provider's payment ID), or the reason of a failure or of an
  /// unknown outcome.
  std::string result;
  std::string reason;
  /// Attempts made when the outcome was reported.
  std::uint32_t attempts = 0;
  /// How many times an operator re-queued it (outcomes of an older round
  /// are stale).
  std::uint32_t round = 0;

  /// The result as an `R` (throws if the effect has none or it does not
  /// convert).
  template <class R>
  R result_as() const {
    if (status != effect_status::completed || result.empty())
      throw error(troupe::errc::invalid_argument,
                  "effect " + id + " has no result (it is " + std::string(to_string(status)) + ")");
    return persistence::from_json_text<R>(result);
  }

  friend bool operator==(const effect&, const effect&) = default;
};
BOOST_DESCRIBE_STRUCT(effect, (), (id, type, status, result, reason, attempts, round))

/// Event: the owner requested effect `id` (written with its outbox record,
/// atomically).
struct effect_requested {
  static constexpr std::string_view manifest = "troupe.effect-requested";
  std::string id;
  std::string type;
};
BOOST_DESCRIBE_STRUCT(effect_requested, (), (id, type))

/// Event: the effect's status changed (an outcome the dispatcher reported,
/// or a re-queue).
struct effect_updated {
  static constexpr std::string_view manifest = "troupe.effect-updated";
  std::string id;
  effect_status status = effect_status::pending;
  std::string result;
  std::string reason;
  std::uint32_t attempts = 0;
  std::uint32_t round = 0;
};
BOOST_DESCRIBE_STRUCT(effect_updated, (), (id, status, result, reason, attempts, round))

/// The message the dispatcher delivers (reliably) to an effect's owner. Its
/// JSON is the change's own.
struct effect_update {
  static constexpr std::string_view manifest = "troupe.effect-update";
  effect_updated change;

  friend void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const effect_update& m) {
    boost::json::value_from(m.change, v);
  }
  friend effect_update tag_invoke(boost::json::value_to_tag<effect_update>, const boost::json::value& v) {
    return {boost::json::value_to<effect_updated>(v)};
  }
};

/// The effects of one owner, kept in its state (`State::effects`), changed
/// only by the events above. Ordered by ID, so that its JSON (in a
/// snapshot: an array of effects) does not depend on insertion order.
class effect_table {
public:
  /// The effect, or null if never requested.
  const effect* find(std::string_view id) const {
    auto it = effects_.find(id);
    return it == effects_.end() ? nullptr : &it->second;
  }

  effect_status status(std::string_view id) const {
    const auto* e = find(id);
    return e ? e->status : effect_status::not_requested;
  }

  /// Whether `u` changes the table (a stale round, or a transition that is
  /// not allowed, does not).
  bool accepts(const effect_updated& u) const {
    const auto* e = find(u.id);
    if (!e || u.round < e->round) return false;
    // A later round follows a re-queue; its messages may arrive in any order.
    if (u.round > e->round) return e->status != effect_status::completed && u.status != effect_status::not_requested;
    return allowed(e->status, u.status);
  }

  void apply(const effect_requested& r) {
    auto& e = effects_[r.id];
    if (e.status != effect_status::not_requested) return; // requested once
    e.id = r.id;
    e.type = r.type;
    e.status = effect_status::pending;
  }

  void apply(const effect_updated& u) {
    if (!accepts(u)) return;
    auto& e = effects_.find(u.id)->second;
    e.status = u.status;
    e.result = u.result;
    e.reason = u.reason;
    e.attempts = u.attempts;
    e.round = u.round;
  }

  auto begin() const { return effects_.begin(); }
  auto end() const { return effects_.end(); }
  std::size_t size() const noexcept { return effects_.size(); }

  friend bool operator==(const effect_table&, const effect_table&) = default;

  friend void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const effect_table& t) {
    auto& a = v.emplace_array();
    for (auto& [id, e] : t.effects_) a.push_back(boost::json::value_from(e, v.storage()));
  }

  friend effect_table tag_invoke(boost::json::value_to_tag<effect_table>, const boost::json::value& v) {
    effect_table t;
    for (auto& e : boost::json::value_to<std::vector<effect>>(v)) {
      auto id = e.id;
      t.effects_.emplace(std::move(id), std::move(e));
    }
    return t;
  }

private:
  std::map<std::string, effect, std::less<>> effects_;
};

} // namespace troupe::effects
