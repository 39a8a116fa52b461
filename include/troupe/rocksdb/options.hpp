#pragma once

/// \file
/// `troupe::persistence::rocksdb_options`: the settings of a `rocksdb_store`.

#include <troupe/persistence/records.hpp>

// Declared only: a user who gives a file system includes RocksDB's header.
namespace rocksdb {
class FileSystem;
}

#include <cstddef>
#include <memory>

namespace troupe::persistence {

/// Settings of a `rocksdb_store`.
struct rocksdb_options {
  /// What an acknowledged write survives (see `durability`).
  persistence::durability durability = durability::sync;
  /// Create the directory and the database if missing.
  bool create_if_missing = true;
  /// Persistence IDs whose key prefix and highest sequence number the
  /// writer keeps in memory (about 100 bytes each: 1 MB by default). Beyond it, the least
  /// recently written are dropped and read again (one seek) at their next
  /// write: a store with millions of IDs (one per order) stays bounded.
  std::size_t id_cache = 10'000;
  /// The memory the write buffers (memtables) of the journal and every
  /// table share, in bytes: once they hold this much, RocksDB flushes the
  /// largest. The store's memory then stays bounded however many tables it
  /// has and however long it runs (0: RocksDB's default, 64 MiB per column
  /// family, and its level sizes). Level 1 of each column family holds
  /// half of it (at least 4 MiB), in files of a quarter of that, so that a
  /// compaction from level 0 rewrites about as much as it brings
  /// (docs/storage.md).
  std::size_t write_buffers = 64u << 20;
  /// The block cache every column family shares, in bytes; it also holds
  /// the partitions of the files' indexes and filters, so that they do not
  /// grow in memory with what is stored.
  std::size_t block_cache = 64u << 20;
  /// Open a store whose WAL is damaged before its end (which refuses to
  /// open with `corrupt_store` otherwise) at the last consistent point
  /// before the damage: every write from there on is dropped, `salvaged()`
  /// names what was, and the dropped events' numbers are never handed out
  /// again. For an operator who has decided to lose them; see
  /// docs/storage.md.
  bool salvage = false;
  /// The file system RocksDB uses; null: the machine's. Tests give a
  /// `troupe::testing::faulty_file_system`.
  std::shared_ptr<rocksdb::FileSystem> file_system{};
};

} // namespace troupe::persistence
