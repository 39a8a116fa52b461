#pragma once

// A simulator's per-key records, in memory and optionally in a RocksDB
// database of its own (as a real provider has its own database).
//
// RocksDB stays behind the definitions (testing/detail/impl/ledger.ipp):
// with TROUPE_SEPARATE_COMPILATION they are compiled once, in the RocksDB
// engine's library (<troupe/rocksdb/impl/src.hpp>), and a file that uses a
// simulator parses no RocksDB header; header-only, this file includes them.

#include <troupe/detail/compile_mode.hpp>

#include <boost/describe/class.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rocksdb {
class DB;
}

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

  /// Throws `troupe::error` (the store's code) if the database at a
  /// non-empty `path` cannot be opened.
  explicit ledger(const std::string& path, bool sync = true, bool wal = true);

  /// The record of `key`: from the database when there is one (nothing is
  /// kept in memory then), else from memory.
  std::optional<entry> find(const std::string& key) const;

  void put(const std::string& key, entry e);

  /// Every record (read whole: for checks after a run).
  std::map<std::string, entry> all() const;

private:
  struct closer {
    void operator()(rocksdb::DB* db) const noexcept;
  };

  bool sync_ = true;
  bool wal_ = true;
  std::unique_ptr<rocksdb::DB, closer> db_;
  std::map<std::string, entry> entries_; // without a database
};

} // namespace troupe::testing::detail

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/testing/detail/impl/ledger.ipp>
#endif
