#pragma once

/// \file
/// What a `postgres_store` reports of its own work (`postgres_store::counts`).

#include <cstdint>

namespace troupe::persistence {

/// Commits so far, and the writes they carried (group commit's measure).
struct postgres_writer_counts {
  std::uint64_t commits = 0;
  std::uint64_t writes = 0;
  /// Commits whose answer was lost and whose outcome the server told.
  std::uint64_t resolved = 0;
  /// Groups run again one statement at a time (a write in them failed).
  std::uint64_t one_at_a_time = 0;
  /// Groups rolled back as a deadlock's victim, and run again.
  std::uint64_t deadlock_retries = 0;
};

} // namespace troupe::persistence
