#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace troupe::detail {

/// Added to the wall clock by `now_ms`: 0 but in tests that step the clock
/// (`troupe::testing::step_wall_clock`).
inline std::atomic<std::int64_t> wall_clock_step_ms{0};

/// Wall-clock milliseconds since the epoch: the time stamps troupe stores
/// (snapshots, dedup marks, dead letters, outbox records).
inline std::int64_t now_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count() +
         wall_clock_step_ms.load(std::memory_order_relaxed);
}

} // namespace troupe::detail
