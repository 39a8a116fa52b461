#pragma once

// Expired values of a table dropped in RocksDB's compactions
// (`journal::set_expiry`): one filter factory per table's column family,
// which asks the expiry the layer above gave for that table, if any.

#include <troupe/persistence/records.hpp>
#include <troupe/detail/clock.hpp>

#include <rocksdb/compaction_filter.h>

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
  }
  std::shared_ptr<const expiry_fn> get(const std::string& table) const {
    std::lock_guard g(mutex_);
    auto it = by_table_.find(table);
    return it == by_table_.end() ? nullptr : it->second;
  }

private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const expiry_fn>> by_table_;
};

/// Drops a value whose expiry has passed. RocksDB turns a dropped value
/// into a deletion where older versions of its key may lie below.
class expiry_filter final : public rocksdb::CompactionFilter {
public:
  explicit expiry_filter(std::shared_ptr<const expiry_fn> f) : f_(std::move(f)), now_(troupe::detail::now_ms()) {}
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
    return std::make_unique<expiry_filter>(std::move(f));
  }
  const char* Name() const override { return "troupe.expiry"; }

private:
  std::shared_ptr<const expiries> all_;
  std::string table_;
};

} // namespace troupe::persistence::detail
