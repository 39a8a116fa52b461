#pragma once

/// \file
/// `troupe::testing::step_wall_clock`: steps the wall clock troupe reads
/// for its stored time stamps (record times, dedup marks, horizons,
/// retention, outbox times), as an NTP correction or an operator would, in
/// this process. For fault tests; timers (steady clock) are not affected.

#include <troupe/detail/clock.hpp>

#include <chrono>

namespace troupe::testing {

/// Moves troupe's wall clock by `by` (forward if positive, back if not),
/// for every thread of this process, from now on.
inline void step_wall_clock(std::chrono::milliseconds by) noexcept {
  troupe::detail::wall_clock_step_ms.fetch_add(by.count(), std::memory_order_relaxed);
}

/// How far `step_wall_clock` has moved the clock in all.
inline std::chrono::milliseconds wall_clock_step() noexcept {
  return std::chrono::milliseconds(troupe::detail::wall_clock_step_ms.load(std::memory_order_relaxed));
}

} // namespace troupe::testing
