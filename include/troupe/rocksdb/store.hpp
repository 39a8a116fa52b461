#pragma once

/// \file
/// `troupe::persistence::rocksdb_store`: the journal, the snapshot store and
/// the tables of the layers above, on RocksDB, with one writer thread that
/// group-commits every actor's writes. The layout is the public contract in
/// docs/storage.md.
///
/// This header does not include RocksDB's: the engine is behind the store
/// (`detail::rocksdb_engine`). Header-only, it is defined at the end of
/// this header; with `TROUPE_SEPARATE_COMPILATION`, once, in the file that
/// includes `<troupe/rocksdb/impl/src.hpp>` (docs/building.md).

#include <troupe/detail/compile_mode.hpp>
#include <troupe/detail/function_ref.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>
#include <troupe/error.hpp>
#include <troupe/metrics.hpp>
#include <troupe/persistence/detail/live_ids.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/rocksdb/options.hpp>
#include <troupe/rocksdb/stats.hpp>

#include <asio/async_result.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
} // namespace rocksdb

namespace troupe::persistence {

namespace detail {
class rocksdb_engine;
}

/// A RocksDB database holding the journal, the snapshots, and one column
/// family for each table a layer above opens (`open_table`). One per actor
/// system; thread-safe.
///
/// Every write goes through one writer thread: it takes every request
/// queued meanwhile, checks each one's sequence numbers, and commits them
/// with one `WriteBatch` and one write (group commit), so RocksDB never
/// blocks an actor's thread and a synchronous write is shared by all the
/// actors that persisted at the same time.
class rocksdb_store {
public:
  /// The on-disk format this code writes; a store of a higher one is
  /// refused, an older one migrated when it is opened (docs/storage.md).
  static constexpr std::uint32_t format_version = 2;

  /// Opens (or creates) the store at `path`, with every table it already
  /// has. Throws `troupe::error`:
  /// - `store_locked` when another process (or another store object of this
  ///   one) has it open, naming the process;
  /// - `store_format_too_new` for a newer format (checked before anything
  ///   is written: the store is left unchanged);
  /// - `corrupt_store` when it is damaged beyond what a crash leaves (see
  ///   `rocksdb_options::salvage`), naming the file and what RocksDB found;
  /// - `storage_full`, or `storage_failure` for any other failure, with
  ///   RocksDB's message.
  TROUPE_DECL explicit rocksdb_store(const std::string& path, rocksdb_options options = {});
  /// Writes what is queued, then closes the database and its directory's lock.
  TROUPE_DECL ~rocksdb_store();
  rocksdb_store(const rocksdb_store&) = delete;
  rocksdb_store& operator=(const rocksdb_store&) = delete;

  /// The persistence IDs its live actors hold (one actor per ID).
  TROUPE_DECL detail::live_ids& live_ids() noexcept;
  /// The store's directory.
  TROUPE_DECL const std::string& path() const noexcept;
  /// What the latest failed operation reported (RocksDB's message, the
  /// persistence ID or table concerned); empty if none failed. With several
  /// failures at once, one of them.
  TROUPE_DECL std::string last_failure() const;
  /// What a salvage (`rocksdb_options::salvage`) found and left out, a line
  /// each: RocksDB's reports of the damaged WAL records (file, bytes,
  /// reason); for each persistence ID the numbers of its dropped events;
  /// the count of dropped records of each table. Empty when the store was
  /// not damaged, or not opened with `salvage`.
  TROUPE_DECL const std::vector<std::string>& salvaged() const noexcept;
  /// The format version the store had when it was opened (`format_version`
  /// for a new store), and how many records its migration to
  /// `format_version` rewrote (0 if it needed none).
  TROUPE_DECL std::uint32_t opened_format() const noexcept;
  TROUPE_DECL std::uint64_t migrated_records() const noexcept;

  /// The database, for tests and tools, which include RocksDB's headers
  /// (not while a failed write's reopen is failing: then there is none).
  /// Never a `DeleteRange` on a table's column family: its memtable hints
  /// would corrupt the memtable.
  TROUPE_DECL rocksdb::DB& db() noexcept;
  TROUPE_DECL rocksdb::ColumnFamilyHandle* journal_cf() const noexcept;
  TROUPE_DECL rocksdb::ColumnFamilyHandle* snapshots_cf() const noexcept;
  TROUPE_DECL rocksdb::ColumnFamilyHandle* meta_cf() const noexcept;
  /// The column family of table `t` (null if `t` is not this store's).
  TROUPE_DECL rocksdb::ColumnFamilyHandle* column_family(table t) const noexcept;

  // -- tables -----------------------------------------------------------------

  /// The table named `name`: its column family, created on first use (a
  /// blocking call, once). Throws `invalid_argument` for an empty name or
  /// one of the store's own column families, `storage_failure` if RocksDB
  /// cannot create it.
  TROUPE_DECL table open_table(std::string_view name);
  /// The table named `name` if the store has it, without creating it.
  TROUPE_DECL std::optional<table> find_table(std::string_view name);
  /// Values of `t` whose time `f` gives has passed are dropped in the
  /// table's compactions (`journal::set_expiry`).
  TROUPE_DECL void set_expiry(table t, expiry_fn f);
  /// Compacts table `t`, dropping what has expired by now (the floor is
  /// raised durably first: nothing is dropped past it).
  TROUPE_DECL std::error_code drop_expired(table t);
  /// The expiry floor (`journal::expired_through`), kept in `meta`.
  TROUPE_DECL std::int64_t expired_through() const noexcept;

  // -- writes -----------------------------------------------------------------

  /// Appends `events` atomically (all or none), completing with
  /// `void(std::error_code)` once they are durable as the store's durability
  /// mode promises. The sequence numbers must continue the ID's highest one
  /// without a gap (`errc::sequence_mismatch` otherwise; nothing written).
  template <class Token>
  auto async_write(std::string pid, std::vector<event_record> events, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler, std::string pid, std::vector<event_record> events) {
          submit(std::move(pid), std::move(events), {},
                 [h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))](
                     std::error_code ec) mutable { h.defer(ec); });
        },
        token, std::move(pid), std::move(events));
  }

  /// Appends `events` and applies `tables` in the same atomic write, with a
  /// plain callback, which runs on the writer thread (or at once: with
  /// `invalid_argument` for a table not of this store, `storage_failure`
  /// when the store is closing); it must not block. With no events, the
  /// persistence ID may be empty.
  TROUPE_DECL void submit(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
                          troupe::detail::unique_function<void(std::error_code)> done);
  /// Applies `tables` with the next group commit, without a callback (before
  /// any write requested after this call). Lost if that write fails, or if
  /// the store is closing. Throws `invalid_argument` for a table not of
  /// this store.
  TROUPE_DECL void write_later(std::vector<table_write> tables);
  /// Blocks until every write requested before, and everything
  /// `write_later` queued before, is durable (or failed).
  TROUPE_DECL std::error_code flush_writes();
  /// Blocking form of `submit` (through the same writer thread).
  TROUPE_DECL std::error_code write(std::string_view pid, const std::vector<event_record>& events,
                                    const std::vector<table_write>& tables = {});

  // -- reads ------------------------------------------------------------------

  /// The value of `key` in table `t` (empty if none).
  TROUPE_DECL std::error_code get(table t, std::string_view key, std::optional<std::string>& out);
  /// `get` without blocking: true, with `out` set, when memory answered
  /// (the value or its absence); false when it would read a file or wait.
  TROUPE_DECL bool try_get(table t, std::string_view key, std::optional<std::string>& out);

  /// Calls `f(key, value)` for the keys of table `t` that start with
  /// `prefix`, in key order, until it returns false.
  template <class F>
  std::error_code scan(table t, std::string_view prefix, F&& f) {
    return scan_from(t, prefix, prefix, std::forward<F>(f));
  }
  /// As `scan`, from the first key at or after `from`.
  template <class F>
  std::error_code scan_from(table t, std::string_view prefix, std::string_view from, F&& f) {
    return scan_keys(t, prefix, from, troupe::detail::function_ref<bool(std::string_view, std::string_view)>(f));
  }

  /// Calls `f(const event_record&)` for the events with `from <= seq <= to`,
  /// in order, at most `max` of them, iterating (memory stays bounded).
  /// `errc::corrupt_record` names the persistence ID and sequence number.
  template <class F>
  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max, F&& f) {
    return replay_events(pid, from, to, max, troupe::detail::function_ref<void(event_record&)>(f));
  }

  /// The highest sequence number ever written for `pid` (0 if none). It
  /// never decreases, also when events are deleted. Throws `troupe::error`
  /// if the store cannot say.
  TROUPE_DECL sequence_nr highest_sequence_nr(std::string_view pid);
  /// Deletes the events with `seq <= to` (a range delete; the highest
  /// sequence number stays).
  TROUPE_DECL std::error_code delete_up_to(std::string_view pid, sequence_nr to);

  // -- snapshots --------------------------------------------------------------

  /// Saves a snapshot; one at the same sequence number is overwritten.
  /// `invalid_argument` for metadata over `max_metadata_bytes`. A snapshot
  /// given without a write time (`metadata.written_ms`) gets the time of
  /// this call.
  TROUPE_DECL std::error_code save_snapshot(std::string_view pid, const snapshot_record& s);
  /// The latest snapshot matching `c`, if any. A snapshot that cannot be
  /// decoded yields `errc::corrupt_record` with only `out->seq` set (the
  /// caller may fall back to an older one with a lower `max_seq`).
  TROUPE_DECL std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                            std::optional<snapshot_record>& out);
  TROUPE_DECL std::error_code delete_snapshot(std::string_view pid, sequence_nr seq);
  TROUPE_DECL std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c);

  // -- statistics -------------------------------------------------------------

  /// Group-commit writes made, and events they carried (their ratio is the mean batch).
  TROUPE_DECL std::uint64_t batches_written() const noexcept;
  TROUPE_DECL std::uint64_t events_written() const noexcept;
  /// RocksDB records (puts and deletes, events and table changes) written
  /// by those group commits.
  TROUPE_DECL std::uint64_t records_written() const noexcept;
  /// Persistence IDs the writer has in memory now (at most
  /// `rocksdb_options::id_cache` between groups). Approximate while writes
  /// run; for tests and monitoring.
  TROUPE_DECL std::size_t cached_ids() const noexcept;
  /// How the writer thread spent its time since the store was opened: `busy`
  /// near the wall time means that a group always waits while one is
  /// written (docs/performance.md).
  TROUPE_DECL persistence::writer_times writer_times() const noexcept;
  /// RocksDB's compactions of the store's files since it was opened (and
  /// across its reopens after failures), and the bytes they read and wrote.
  TROUPE_DECL compaction_totals compactions() const noexcept;
  /// Adds the figures above to a metrics snapshot (`journal_of` does, for
  /// the actor system whose journal it is).
  TROUPE_DECL void report_metrics(metrics_snapshot& s) const;

private:
  TROUPE_DECL std::error_code scan_keys(table t, std::string_view prefix, std::string_view from,
                                        troupe::detail::function_ref<bool(std::string_view, std::string_view)> f);
  TROUPE_DECL std::error_code replay_events(std::string_view pid, sequence_nr from, sequence_nr to,
                                            std::uint64_t max, troupe::detail::function_ref<void(event_record&)> f);

  std::unique_ptr<detail::rocksdb_engine> engine_;
};

} // namespace troupe::persistence

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/rocksdb/impl/store.ipp>
#else
// The adapter's virtual functions are compiled once too.
#include <troupe/persistence/journal.hpp>
namespace troupe::persistence {
extern template class journal_of<rocksdb_store>;
}
#endif
