#pragma once

// The definitions of `ledger` (troupe/testing/detail/ledger.hpp).

#include <troupe/testing/detail/ledger.hpp>
#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/json.hpp>

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

namespace troupe::testing::detail {

TROUPE_DECL void ledger::closer::operator()(rocksdb::DB* db) const noexcept { delete db; }

TROUPE_DECL ledger::ledger(const std::string& path, bool sync, bool wal) : sync_(sync && wal), wal_(wal) {
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

TROUPE_DECL std::optional<ledger::entry> ledger::find(const std::string& key) const {
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

TROUPE_DECL void ledger::put(const std::string& key, entry e) {
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

TROUPE_DECL std::map<std::string, ledger::entry> ledger::all() const {
  if (!db_) return entries_;
  std::map<std::string, entry> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}));
  for (it->SeekToFirst(); it->Valid(); it->Next())
    out[it->key().ToString()] = persistence::from_json_text<entry>(it->value().ToStringView());
  return out;
}

} // namespace troupe::testing::detail
