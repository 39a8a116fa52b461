#pragma once

/// \file
/// What the dispatcher knows of one effect, as the operator API and the
/// threshold callback report it.

#include <troupe/effects/effect.hpp>

#include <cstdint>
#include <string>
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

/// What the dispatcher knows of one effect.
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

} // namespace troupe::effects
