#pragma once

// What RocksDB's compactions of one store have read and written
// (`rocksdb_store::compactions`): a monitor or a benchmark sees whether
// the cost of keeping the files sorted stays in proportion to what is
// written, or grows with what is stored.

#include <troupe/rocksdb/stats.hpp>

#include <rocksdb/listener.h>

#include <atomic>
#include <cstdint>

namespace troupe::persistence::detail {

/// Counts the compactions that completed, on RocksDB's background threads.
class compaction_counter final : public rocksdb::EventListener {
public:
  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo& info) override {
    if (!info.status.ok()) return;
    compactions_.fetch_add(1, std::memory_order_relaxed);
    read_.fetch_add(info.stats.total_input_bytes, std::memory_order_relaxed);
    written_.fetch_add(info.stats.total_output_bytes, std::memory_order_relaxed);
  }

  compaction_totals totals() const noexcept {
    return {compactions_.load(std::memory_order_relaxed), read_.load(std::memory_order_relaxed),
            written_.load(std::memory_order_relaxed)};
  }

private:
  std::atomic<std::uint64_t> compactions_{0};
  std::atomic<std::uint64_t> read_{0};
  std::atomic<std::uint64_t> written_{0};
};

} // namespace troupe::persistence::detail
