#pragma once

// Supervision's restart accounting: how many restarts are left in the
// window, and how long each one waits.

#include <troupe/supervision.hpp>
#include <troupe/detail/backoff.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

namespace troupe::detail {

/// Counts the restarts of one actor within `supervision::window`.
class restart_budget {
public:
  using clock = std::chrono::steady_clock;

  /// A failure at `now`: the backoff before the next restart, or nothing
  /// when `max_restarts` restarts were made in the current window. A
  /// failure after the window has passed opens a new one.
  std::optional<std::chrono::milliseconds> next(const supervision& policy, clock::time_point now) noexcept {
    if (restarts_ == 0 || now - window_start_ > policy.window) {
      window_start_ = now;
      restarts_ = 0;
    }
    if (restarts_ >= policy.max_restarts) return std::nullopt;
    ++restarts_;
    return exponential_backoff(policy.min_backoff, policy.max_backoff, restarts_);
  }

  std::uint32_t restarts() const noexcept { return restarts_; }

private:
  std::uint32_t restarts_ = 0;
  clock::time_point window_start_{};
};

} // namespace troupe::detail
