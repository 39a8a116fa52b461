#pragma once

/// \file
/// What a `rocksdb_store` reports of its own work: its writer thread's
/// time (`rocksdb_store::writer_times`) and its compactions
/// (`rocksdb_store::compactions`).

#include <chrono>
#include <cstdint>

namespace troupe::persistence {

/// Where a store's writer thread spent its time since the store was opened
/// (see `rocksdb_store::writer_times`).
struct writer_times {
  /// Wall time on groups: from taking the requests queued to the end of
  /// the group's bookkeeping after their completions (the rest of the
  /// thread's time it waited for requests).
  std::chrono::nanoseconds busy{0};
  /// Of `busy`, wall time in RocksDB's write: the WAL's append and sync
  /// and the memtable inserts.
  std::chrono::nanoseconds writing{0};
  /// The writer thread's CPU time during those writes; the rest of
  /// `writing` it waited for the disk's sync (or for a core).
  std::chrono::nanoseconds writing_cpu{0};
};

/// A store's compactions since it was opened.
struct compaction_totals {
  std::uint64_t compactions = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
};

} // namespace troupe::persistence
