#pragma once

// Exponential backoff, the one used by supervision restarts, redelivery and
// the outbox's retries.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace troupe::detail {

/// `initial` for `attempt` 1, doubled for each further attempt, capped at
/// `max` (never overflows).
template <class Rep, class Period>
std::chrono::duration<Rep, Period> exponential_backoff(std::chrono::duration<Rep, Period> initial,
                                                       std::chrono::duration<Rep, Period> max,
                                                       std::uint32_t attempt) noexcept {
  auto d = initial;
  for (std::uint32_t i = 1; i < attempt && d < max; ++i) d = d > max / 2 ? max : d * 2;
  return std::min(d, max);
}

/// `d` varied uniformly by up to ±`jitter` (a fraction in [0, 1)).
template <class Rep, class Period, class Rng>
std::chrono::nanoseconds jittered(std::chrono::duration<Rep, Period> d, double jitter, Rng& rng) {
  if (jitter <= 0) return std::chrono::duration_cast<std::chrono::nanoseconds>(d);
  const double f = 1 + std::uniform_real_distribution<double>(-jitter, jitter)(rng);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double, std::nano>(std::chrono::duration<double, std::nano>(d).count() * f));
}

} // namespace troupe::detail
