#pragma once

// A simulator's per-key records, in memory and optionally in a RocksDB
// database of its own (as a real provider has its own database).

#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/json.hpp>

#include <boost/describe/class.hpp>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace troupe::testing::detail {

/// Synchronous writes (unless told otherwise): what the provider says it
/// did, it did. Without the write-ahead log (`wal` false), what was not
/// flushed yet is lost by a crash (benchmarks only).
class ledger {
public:
  struct entry {
    std::string status; // "charged", "declined", "sent"
    std::string ref;    // payment ID
    std::uint64_t performed = 0;
  };
  BOOST_DESCRIBE_CLASS(entry, (), (status, ref, performed), (), ())

  explicit ledger(const std::string& path, bool sync = true, bool wal = true) : sync_(sync && wal), wal_(wal) {
    if (path.empty()) return;
    rocksdb::Options o;
    o.create_if_missing = true;
    o.db_write_buffer_size = 8u << 20; // a provider's memory does not grow with its records
    rocksdb::BlockBasedTableOptions t;
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10)); // a new key (most lookups) reads no block
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    rocksdb::DB* db = nullptr;
    auto st = rocksdb::DB::Open(o, path, &db);
    if (!st.ok()) throw error(persistence::detail::status_code(st), "simulator database " + path + ": " + st.ToString());
    db_.reset(db);
  }

  /// The record of `key`: from the database when there is one (nothing is
  /// kept in memory then), else from memory.
  std::optional<entry> find(const std::string& key) const {
    if (db_) {
      std::string v;
      auto st = db_->Get(rocksdb::ReadOptions{}, key, &v);
      if (st.IsNotFound()) return std::nullopt;
      if (!st.ok()) throw error(persistence::detail::status_code(st), "simulator database: " + st.ToString());
      return persistence::from_json_text<entry>(v);
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  void put(const std::string& key, entry e) {
    if (db_) {
      rocksdb::WriteOptions w;
      w.sync = sync_;
      w.disableWAL = !wal_;
      auto st = db_->Put(w, key, persistence::to_json_text(e));
      if (!st.ok()) throw error(persistence::detail::status_code(st), "simulator database: " + st.ToString());
      return;
    }
    entries_[key] = std::move(e);
  }

  /// Every record (read whole: for checks after a run).
  std::map<std::string, entry> all() const {
    if (!db_) return entries_;
    std::map<std::string, entry> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}));
    for (it->SeekToFirst(); it->Valid(); it->Next())
      out[it->key().ToString()] = persistence::from_json_text<entry>(it->value().ToStringView());
    return out;
  }

private:
  bool sync_ = true;
  bool wal_ = true;
  std::unique_ptr<rocksdb::DB> db_;
  std::map<std::string, entry> entries_; // without a database
};

} // namespace troupe::testing::detail
