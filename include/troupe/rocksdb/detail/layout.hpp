#pragma once

// The column families of a RocksDB store and the reads of `meta` and the
// journal that both the store and its writer make.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/persistence/detail/table_registry.hpp>

#include <rocksdb/db.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::persistence::detail {

struct rocksdb_layout {
  /// The column families the store itself owns; every other one is a table.
  static constexpr const char* own_column_families[] = {"default", "journal", "snapshots", "meta"};

  static bool reserved(std::string_view name) noexcept {
    return std::find(std::begin(own_column_families), std::end(own_column_families), name) !=
           std::end(own_column_families);
  }

  rocksdb::DB* db = nullptr;
  rocksdb::ColumnFamilyHandle* journal = nullptr;
  rocksdb::ColumnFamilyHandle* snapshots = nullptr;
  rocksdb::ColumnFamilyHandle* meta = nullptr;
  /// By table slot (`table_registry`); set once, before the table is
  /// handed out.
  std::array<std::atomic<rocksdb::ColumnFamilyHandle*>, table_registry::capacity> tables{};

  /// The column family of `t`, or null if `t` is none of this store's.
  rocksdb::ColumnFamilyHandle* table_cf(table t) const noexcept {
    const auto slot = table_registry::slot_of(t);
    return slot < tables.size() ? tables[slot].load(std::memory_order_acquire) : nullptr;
  }

  /// The `meta` key of an ID's deletion watermark.
  static std::string highest_key(std::string_view prefix) {
    std::string k("h");
    k += prefix;
    return k;
  }

  /// The number of the last event of the ID with `seq <= at_most` (0 if none).
  sequence_nr last_seq(const std::string& prefix, sequence_nr at_most) const {
    const rocksdb::Slice lower(prefix); // not read past into the IDs before
    rocksdb::ReadOptions ro;
    ro.iterate_lower_bound = &lower;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, journal));
    it->SeekForPrev(seq_key(prefix, at_most));
    if (it->Valid() && has_prefix(it->key().ToStringView(), prefix)) return seq_of_key(it->key().ToStringView());
    if (!it->status().ok())
      throw error(status_code(it->status()), "cannot read the journal: " + it->status().ToString());
    return 0;
  }

  /// The number of the first event of the ID with `seq > after` (0 if none).
  sequence_nr next_seq(const std::string& prefix, sequence_nr after) const {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions{}, journal));
    it->Seek(seq_key(prefix, after + 1));
    if (it->Valid() && has_prefix(it->key().ToStringView(), prefix)) return seq_of_key(it->key().ToStringView());
    if (!it->status().ok())
      throw error(status_code(it->status()), "cannot read the journal: " + it->status().ToString());
    return 0;
  }

  /// The highest number a deletion removed (0 if none).
  sequence_nr read_watermark(const std::string& prefix) const {
    std::string v;
    auto st = db->Get(rocksdb::ReadOptions{}, meta, highest_key(prefix), &v);
    if (st.IsNotFound()) return 0;
    if (!st.ok()) throw error(status_code(st), "cannot read a highest sequence number: " + st.ToString());
    if (v.size() != 8) throw error(errc::corrupt_record, "a highest sequence number in meta is not 8 bytes");
    return get_be(v, 0, 8);
  }

  /// The highest sequence number ever written for the ID.
  sequence_nr read_highest(const std::string& prefix) const {
    return std::max(last_seq(prefix, max_sequence_nr), read_watermark(prefix));
  }
};

} // namespace troupe::persistence::detail
