#pragma once

// What a result changes: the next state of the effect's record, whether it
// is written, and the outcome its owner learns. A pure function of the
// result, the adapter's abilities and policy, and the time.

#include <troupe/effects/adapter.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/retry_policy.hpp>
#include <troupe/effects/detail/attempt.hpp>
#include <troupe/effects/detail/erased_adapter.hpp>
#include <troupe/effects/detail/outbox.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace troupe::effects::detail {

/// What a result changes.
struct plan {
  record rec;
  result::what kind{};
  /// The record is written (with `update`'s delivery, atomically).
  bool write = true;
  /// No longer this dispatcher's concern (the record is gone).
  bool drop = false;
  /// The attempts ran out: the policy's `on_threshold` is called.
  bool threshold = false;
  /// The outcome the owner learns.
  std::optional<effect_updated> update;
};

/// Ends the effect in `s` at `now`, with `text` as its result (completed)
/// or its reason.
inline void finish(record& r, effect_status s, std::string text, std::int64_t now) {
  r.info.status = s;
  r.info.in_doubt = false;
  r.info.finished_ms = now;
  if (s == effect_status::completed) {
    r.info.result = std::move(text);
    r.info.reason.clear();
  } else {
    r.info.reason = std::move(text);
  }
}

/// The event that tells the owner where the effect stands.
inline effect_updated update_of(const record& r) {
  return {r.info.id, r.info.status, r.info.result, r.info.reason, r.info.attempts, r.info.round};
}

/// The plan for `res`, given the adapter of its type (null if none is
/// registered) at time `now`.
inline plan decide(const result& res, const erased_adapter* a, std::int64_t now) {
  using what = result::what;
  plan p;
  p.kind = res.kind;
  p.rec = res.rec;
  auto& r = p.rec;
  auto& i = r.info;
  static const retry_policy no_policy;
  const retry_policy& policy = a ? a->policy : no_policy;
  auto retry_after = [&](std::chrono::milliseconds d) {
    i.status = effect_status::pending;
    r.due_ms = now + d.count();
  };
  auto give_up = [&](effect_status s, std::string why) {
    finish(r, s, std::move(why), now);
    p.threshold = true;
  };
  switch (res.kind) {
  case what::gone:
    p.write = false;
    p.drop = true;
    return p;
  case what::stale: p.write = false; return p;
  case what::mark_failed:
    p.write = false;
    retry_after(policy.backoff(i.attempts + 1));
    return p;
  case what::no_adapter:
    r.note(now, "execute", "failed", "no adapter for effect type '" + i.type + "'");
    finish(r, effect_status::failed, "no adapter registered for effect type '" + i.type + "'", now);
    break;
  case what::unresolvable:
    r.note(now, "execute", "unknown", "cannot be resolved");
    finish(r, effect_status::unknown,
           "the outcome of attempt " + std::to_string(i.attempts) +
               " is unknown (it was interrupted), and the adapter can neither query nor retry with the same key",
           now);
    break;
  case what::executed: {
    i.attempts += 1;
    const auto& o = res.out;
    if (o.what == outcome::kind::completed) {
      r.note(now, "execute", "completed", o.detail);
      finish(r, effect_status::completed, o.detail, now);
    } else if (o.what == outcome::kind::failed) {
      r.note(now, "execute", o.permanent ? "refused" : "failed", o.detail);
      i.in_doubt = false;
      if (o.permanent)
        finish(r, effect_status::failed, o.detail, now);
      else if (i.attempts >= policy.max_attempts)
        give_up(effect_status::failed, "gave up after " + std::to_string(i.attempts) + " attempts: " + o.detail);
      else
        retry_after(policy.backoff(i.attempts));
    } else {
      r.note(now, "execute", "unknown", o.detail);
      if (a && (a->can_query || a->idempotent)) {
        i.in_doubt = true;
        if (!a->can_query && i.attempts >= policy.max_attempts)
          give_up(effect_status::unknown,
                  "still unknown after " + std::to_string(i.attempts) + " attempts: " + o.detail);
        else
          retry_after(policy.backoff(i.attempts));
      } else {
        finish(r, effect_status::unknown,
               o.detail + " (the adapter can neither query nor retry with the same key: an operator must check)", now);
      }
    }
    break;
  }
  case what::queried: {
    i.queries += 1;
    const auto& q = res.answer;
    switch (q.what) {
    case query_result::kind::completed:
      r.note(now, "query", "completed", q.detail);
      finish(r, effect_status::completed, q.detail, now);
      break;
    case query_result::kind::failed:
    case query_result::kind::not_found: {
      const bool found = q.what == query_result::kind::failed;
      r.note(now, "query", found ? "failed" : "not_found", q.detail);
      i.in_doubt = false;
      if (i.attempts >= policy.max_attempts)
        give_up(effect_status::failed, "gave up after " + std::to_string(i.attempts) + " attempts" +
                                           (found ? ": " + q.detail : std::string(" (the system never saw it)")));
      else
        retry_after(found ? policy.backoff(i.attempts) : std::chrono::milliseconds(0));
      break;
    }
    case query_result::kind::unknown:
      r.note(now, "query", "unknown", q.detail);
      if (i.queries >= policy.max_attempts)
        give_up(effect_status::unknown, "still unknown after " + std::to_string(i.queries) + " queries: " + q.detail);
      else
        retry_after(policy.backoff(i.queries));
      break;
    }
    break;
  }
  }
  if (i.status != effect_status::pending) p.update = update_of(r);
  return p;
}

} // namespace troupe::effects::detail
