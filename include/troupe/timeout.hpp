#pragma once

/// \file
/// `troupe::no_timeout`, and how the library reads a timeout or a deadline.
///
/// Every timeout troupe takes (`ask`, `receive`, `gather`, `ctx.ask`) reads
/// the same way: a positive duration is the wait; a duration that has
/// passed (zero or negative), or a deadline at or before now, has expired
/// (an ask fails with `errc::timeout` at once and sends nothing; a receive
/// takes a matching message already queued or fails at once);
/// `troupe::no_timeout`, or any duration too long to count in nanoseconds,
/// never expires. A timeout computed as `deadline - now()` therefore never
/// turns into "wait for ever".

#include <chrono>

namespace troupe {

/// A timeout that never expires: `ask(m, troupe::no_timeout)`,
/// `ctx.receive<M>(troupe::no_timeout)`, `gather(refs, m, troupe::no_timeout)`,
/// `system_config::ask_timeout` (its default).
inline constexpr std::chrono::nanoseconds no_timeout = std::chrono::nanoseconds::max();

namespace detail {

template <class X>
inline constexpr bool is_duration = false;
template <class Rep, class Period>
inline constexpr bool is_duration<std::chrono::duration<Rep, Period>> = true;

template <class X>
inline constexpr bool is_time_point = false;
template <class C, class D>
inline constexpr bool is_time_point<std::chrono::time_point<C, D>> = true;

/// A timeout as the library carries it: `no_timeout` (never), zero (passed)
/// or the wait (at least 1 ns).
template <class Rep, class Period>
constexpr std::chrono::nanoseconds timeout_of(std::chrono::duration<Rep, Period> d) noexcept {
  using ns = std::chrono::nanoseconds;
  if (d <= d.zero()) return ns::zero();
  // Compared as floating point: converting a long duration to nanoseconds
  // would overflow.
  if (std::chrono::duration<long double, std::nano>(d).count() >= static_cast<long double>(ns::max().count()))
    return no_timeout;
  return std::chrono::ceil<ns>(d); // a positive wait stays positive
}

/// The wait left until `deadline` on the steady clock; a deadline reached
/// already has passed.
template <class Duration>
std::chrono::nanoseconds timeout_until(std::chrono::time_point<std::chrono::steady_clock, Duration> deadline) noexcept {
  if (deadline == deadline.max()) return no_timeout;
  const auto now = std::chrono::steady_clock::now();
  if (deadline <= now) return std::chrono::nanoseconds::zero(); // compared before subtracting: no overflow
  return timeout_of(deadline - now);
}

constexpr bool expired(std::chrono::nanoseconds t) noexcept { return t <= t.zero(); }
constexpr bool unlimited(std::chrono::nanoseconds t) noexcept { return t == no_timeout; }

/// A delay in nanoseconds, saturated (a huge one never comes, a past one at once).
template <class Rep, class Period>
constexpr std::chrono::nanoseconds saturated(std::chrono::duration<Rep, Period> d) noexcept {
  using ns = std::chrono::nanoseconds;
  const long double x = std::chrono::duration<long double, std::nano>(d).count();
  if (x >= static_cast<long double>(ns::max().count())) return ns::max();
  if (x <= 0) return ns::zero();
  return std::chrono::ceil<ns>(d);
}

} // namespace detail
} // namespace troupe
