#pragma once

/// \file
/// `troupe::effects::retry_policy`: how the dispatcher retries one type of
/// effect, and what it calls when the attempts run out.

#include <troupe/effects/effect_info.hpp>
#include <troupe/detail/backoff.hpp>

#include <chrono>
#include <cstdint>
#include <functional>

namespace troupe::effects {

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

  /// The wait after attempt number `attempts`.
  std::chrono::milliseconds backoff(std::uint32_t attempts) const noexcept {
    return troupe::detail::exponential_backoff(initial_backoff, max_backoff, attempts);
  }

  /// Whether the numbers make sense: at least one attempt, and
  /// `0 < initial_backoff <= max_backoff`.
  bool valid() const noexcept {
    return max_attempts != 0 && initial_backoff.count() > 0 && max_backoff >= initial_backoff;
  }
};

} // namespace troupe::effects
