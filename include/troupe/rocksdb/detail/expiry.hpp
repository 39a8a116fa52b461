#pragma once

// Expired values of a table dropped in RocksDB's compactions
// (`journal::set_expiry`): one filter factory per table's column family,
// which asks the expiry the layer above gave for that table, if any. And
// which tables' files are compacted early for their deletions: those
// without an expiry.

#include <troupe/persistence/records.hpp>
#include <troupe/detail/clock.hpp>

#include <rocksdb/compaction_filter.h>
#include <rocksdb/table_properties.h>
#include <rocksdb/utilities/table_properties_collectors.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace troupe::persistence::detail {

/// The expiries of a store's tables, by table name. Thread-safe.
class expiries {
public:
  void set(const std::string& table, expiry_fn f) {
    auto p = f ? std::make_shared<const expiry_fn>(std::move(f)) : nullptr;
    std::lock_guard g(mutex_);
    by_table_[table] = std::move(p);
    any_.store(true, std::memory_order_release);
  }
  /// Whether any table was given an expiry (else the store drops nothing,
  /// and keeps no floor).
  bool any() const noexcept { return any_.load(std::memory_order_acquire); }
  std::shared_ptr<const expiry_fn> get(const std::string& table) const {
    std::lock_guard g(mutex_);
    auto it = by_table_.find(table);
    return it == by_table_.end() ? nullptr : it->second;
  }

  /// The store's expiry floor (`journal::expired_through`): durable, and
  /// never passed by a compaction's drops (set once written).
  std::int64_t floor() const noexcept { return floor_.load(std::memory_order_acquire); }
  void set_floor(std::int64_t f) noexcept { floor_.store(f, std::memory_order_release); }

private:
  std::atomic<std::int64_t> floor_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<bool> any_{false};
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const expiry_fn>> by_table_;
};

/// Drops a value whose expiry has passed. RocksDB turns a dropped value
/// into a deletion where older versions of its key may lie below.
class expiry_filter final : public rocksdb::CompactionFilter {
public:
  /// `floor`: the store's durable expiry floor; nothing past it is dropped
  /// (a value dropped now stays dropped after a crash; the floor says so).
  expiry_filter(std::shared_ptr<const expiry_fn> f, std::int64_t floor)
      : f_(std::move(f)), now_(std::min(troupe::detail::now_ms(), floor)) {}
  bool Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value, std::string*, bool*) const override {
    try {
      const auto e = (*f_)(key.ToStringView(), value.ToStringView());
      return e && *e <= now_;
    } catch (...) {
      return false; // kept: an expiry that fails keeps its value
    }
  }
  const char* Name() const override { return "troupe.expiry"; }

private:
  std::shared_ptr<const expiry_fn> f_;
  std::int64_t now_; // the compaction's time, read once
};

class expiry_filter_factory final : public rocksdb::CompactionFilterFactory {
public:
  expiry_filter_factory(std::shared_ptr<const expiries> all, std::string table)
      : all_(std::move(all)), table_(std::move(table)) {}
  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(const rocksdb::CompactionFilter::Context&) override {
    auto f = all_->get(table_);
    if (!f) return nullptr;
    return std::make_unique<expiry_filter>(std::move(f), all_->floor());
  }
  const char* Name() const override { return "troupe.expiry"; }

private:
  std::shared_ptr<const expiries> all_;
  std::string table_;
};

/// Marks a table's new file for compaction when it is heavy with
/// deletions (RocksDB's compact-on-deletion collector), so that a scan
/// does not walk them for long — unless the table has an expiry. A table
/// without one holds short-lived records (deliveries until confirmed,
/// marks of work until it is done), and its files are mostly deletions
/// once flushed. A table with one keeps its values for a retention (the
/// outbox's finished records): its files also hold the deletions of what
/// went with them (the outbox's pending index), and compacting each new
/// file at once would rewrite every retained value, again at each flush.
class deletion_compaction_factory final : public rocksdb::TablePropertiesCollectorFactory {
public:
  deletion_compaction_factory(std::shared_ptr<const expiries> all, std::string table)
      : all_(std::move(all)), table_(std::move(table)) {}
  rocksdb::TablePropertiesCollector*
  CreateTablePropertiesCollector(rocksdb::TablePropertiesCollectorFactory::Context c) override {
    try {
      if (all_->get(table_)) return new keep_collector;
    } catch (...) {
      return new keep_collector; // (never out into RocksDB)
    }
    return on_deletions_->CreateTablePropertiesCollector(c);
  }
  const char* Name() const override { return "troupe.compact_on_deletions"; }

private:
  /// Collects nothing, asks for no compaction.
  struct keep_collector final : rocksdb::TablePropertiesCollector {
    rocksdb::Status AddUserKey(const rocksdb::Slice&, const rocksdb::Slice&, rocksdb::EntryType,
                               rocksdb::SequenceNumber, std::uint64_t) override {
      return rocksdb::Status::OK();
    }
    rocksdb::Status Finish(rocksdb::UserCollectedProperties*) override { return rocksdb::Status::OK(); }
    rocksdb::UserCollectedProperties GetReadableProperties() const override { return {}; }
    const char* Name() const override { return "troupe.compact_on_deletions"; }
  };

  std::shared_ptr<const expiries> all_;
  std::string table_;
  // A window of 128 entries with 32 deletions, or 30% of the file.
  std::shared_ptr<rocksdb::TablePropertiesCollectorFactory> on_deletions_ =
      rocksdb::NewCompactOnDeletionCollectorFactory(128, 32, 0.3);
};

} // namespace troupe::persistence::detail
