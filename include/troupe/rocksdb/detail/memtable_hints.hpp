#pragma once

// Prefix extractors for RocksDB's memtable insert hints: a write lands next
// to the previous write of the same persistence ID (or table owner, or kind
// of key), so the memtable does not search its skiplist from the top for
// every record.

#include <troupe/persistence/detail/codec.hpp>
#include <troupe/detail/bytes.hpp>

#include <rocksdb/slice.h>
#include <rocksdb/slice_transform.h>

#include <memory>

namespace troupe::persistence::detail {

/// A journal key's `id` part (its u16 length and the ID's bytes).
/// Sequence number 0 (never an event: the start of `delete_up_to`'s range
/// deletion) is outside the domain: RocksDB 7.8 keeps one hint per prefix
/// for both the point and the range-deletion memtables, and a hint from one
/// used in the other corrupts the skiplist.
class id_prefix_transform final : public rocksdb::SliceTransform {
public:
  const char* Name() const override { return "troupe.id_prefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return {key.data(), troupe::detail::prefixed_length(key.ToStringView())};
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    const auto k = key.ToStringView();
    const auto n = troupe::detail::prefixed_length(k);
    return n != 0 && k.size() == n + 8 && seq_of_key(k) != 0;
  }
};

/// A table key's owner part, when the key starts with a length-prefixed
/// name (as the keys of most tables troupe's layers register do); any other
/// key's first byte (the outbox's keys: a kind byte, then the operation ID;
/// the work index's: the ID, then a nul), so that the keys of one kind go
/// in next to the last one of that kind instead of from the top. Tables
/// have no range deletions.
class table_prefix_transform final : public rocksdb::SliceTransform {
public:
  const char* Name() const override { return "troupe.table_prefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    const auto n = troupe::detail::prefixed_length(key.ToStringView());
    return {key.data(), n != 0 && key.size() > n ? n : 1};
  }
  bool InDomain(const rocksdb::Slice& key) const override { return !key.empty(); }
};

inline std::shared_ptr<const rocksdb::SliceTransform> id_prefix_extractor() {
  static const auto instance = std::make_shared<const id_prefix_transform>();
  return instance;
}

inline std::shared_ptr<const rocksdb::SliceTransform> table_prefix_extractor() {
  static const auto instance = std::make_shared<const table_prefix_transform>();
  return instance;
}

} // namespace troupe::persistence::detail
