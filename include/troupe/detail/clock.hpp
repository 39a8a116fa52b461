#pragma once

#include <chrono>
#include <cstdint>

namespace troupe::detail {

/// Wall-clock milliseconds since the epoch: the time stamps troupe stores
/// (snapshots, dedup marks, dead letters, outbox records).
inline std::int64_t now_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace troupe::detail
