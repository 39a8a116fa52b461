#pragma once

// A simulator's per-key records, in memory and optionally in a RocksDB
// database of its own (as a real provider has its own database).

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/json.hpp>

#include <boost/describe/class.hpp>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace troupe::testing::detail {

/// Synchronous writes (unless told otherwise): what the provider says it
/// did, it did.
class ledger {
public:
  struct entry {
    std::string status; // "charged", "declined", "sent"
    std::string ref;    // payment ID
    std::uint64_t performed = 0;
  };
  BOOST_DESCRIBE_CLASS(entry, (), (status, ref, performed), (), ())

  explicit ledger(const std::string& path, bool sync = true) : sync_(sync) {
    if (path.empty()) return;
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    auto st = rocksdb::DB::Open(o, path, &db);
    if (!st.ok()) throw error(persistence::errc::storage_failure, "simulator database " + path + ": " + st.ToString());
    db_.reset(db);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}));
    for (it->SeekToFirst(); it->Valid(); it->Next())
      entries_[it->key().ToString()] = persistence::from_json_text<entry>(it->value().ToStringView());
  }

  const entry* find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  void put(const std::string& key, entry e) {
    if (db_) {
      rocksdb::WriteOptions w;
      w.sync = sync_;
      auto st = db_->Put(w, key, persistence::to_json_text(e));
      if (!st.ok()) throw error(persistence::errc::storage_failure, "simulator database: " + st.ToString());
    }
    entries_[key] = std::move(e);
  }

  const std::map<std::string, entry>& all() const noexcept { return entries_; }

private:
  bool sync_ = true;
  std::unique_ptr<rocksdb::DB> db_;
  std::map<std::string, entry> entries_;
};

} // namespace troupe::testing::detail
