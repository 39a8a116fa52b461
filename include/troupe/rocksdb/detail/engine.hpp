#pragma once

// The RocksDB engine behind `troupe::persistence::rocksdb_store`
// (troupe/rocksdb/store.hpp): the journal, the snapshot store and the
// tables of the layers above, on RocksDB, with one writer thread that
// group-commits every actor's writes. The layout is the public contract in
// docs/storage.md. Only the store's implementation includes it (once, in a
// separately compiled build), so a user's file never parses RocksDB.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/rocksdb/options.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/rocksdb/detail/compaction_counter.hpp>
#include <troupe/rocksdb/detail/group_writer.hpp>
#include <troupe/persistence/detail/live_ids.hpp>
#include <troupe/rocksdb/detail/memtable_hints.hpp>
#include <troupe/rocksdb/detail/expiry.hpp>
#include <troupe/rocksdb/detail/format.hpp>
#include <troupe/rocksdb/detail/layout.hpp>
#include <troupe/rocksdb/detail/store_lock.hpp>
#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/rocksdb/detail/salvage.hpp>
#include <troupe/persistence/detail/table_registry.hpp>
#include <troupe/detail/bytes.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence::detail {

/// A RocksDB database holding the journal, the snapshots, and one column
/// family for each table a layer above opens (`open_table`). One per actor
/// system; thread-safe.
///
/// Every write goes through one writer thread: it takes every request
/// queued meanwhile, checks each one's sequence numbers, and commits them
/// with one `WriteBatch` and one write (group commit), so RocksDB never
/// blocks an actor's thread and a synchronous write is shared by all the
/// actors that persisted at the same time.
class rocksdb_engine {
public:
  /// The on-disk format this code writes; a store of a higher one is
  /// refused, an older one migrated when it is opened (docs/storage.md).
  static constexpr std::uint32_t format_version = detail::rocksdb_format::current;

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
  explicit rocksdb_engine(const std::string& path, rocksdb_options options = {})
      : options_(checked(std::move(options))), path_(path), lock_(path, options_.create_if_missing) {
    if (options_.file_system) env_ = rocksdb::NewCompositeEnv(options_.file_system);
    open();
  }

  rocksdb_engine(const rocksdb_engine&) = delete;
  rocksdb_engine& operator=(const rocksdb_engine&) = delete;

  ~rocksdb_engine() {
    writer_.reset(); // writes what is queued
    close_db();      // (the directory's lock goes after: with lock_)
  }

  /// The persistence IDs its live actors hold (one actor per ID).
  detail::live_ids& live_ids() noexcept { return live_ids_; }

  /// The store's directory.
  const std::string& path() const noexcept { return path_; }

  /// What the latest failed operation reported (RocksDB's message, the
  /// persistence ID or table concerned); empty if none failed. With several
  /// failures at once, one of them.
  std::string last_failure() const { return failures_.get(); }

  /// What a salvage (`rocksdb_options::salvage`) found and left out, a line
  /// each: RocksDB's reports of the damaged WAL records (file, bytes,
  /// reason); for each persistence ID the numbers of its dropped events;
  /// the count of dropped records of each table. Empty when the store was
  /// not damaged, or not opened with `salvage`.
  const std::vector<std::string>& salvaged() const noexcept { return salvaged_; }

  /// The format version the store had when it was opened (`format_version`
  /// for a new store), and how many records its migration to
  /// `format_version` rewrote (0 if it needed none).
  std::uint32_t opened_format() const noexcept { return opened_format_; }
  std::uint64_t migrated_records() const noexcept { return migrated_; }

  /// The database, for tests and tools (not while a failed write's reopen
  /// is failing: then there is none). Never a `DeleteRange` on a table's
  /// column family: its memtable hints would corrupt the memtable.
  rocksdb::DB& db() noexcept { return *db_; }
  rocksdb::ColumnFamilyHandle* journal_cf() const noexcept { return layout_.journal; }
  rocksdb::ColumnFamilyHandle* snapshots_cf() const noexcept { return layout_.snapshots; }
  rocksdb::ColumnFamilyHandle* meta_cf() const noexcept { return layout_.meta; }
  /// The column family of table `t` (null if `t` is not this store's).
  rocksdb::ColumnFamilyHandle* column_family(table t) const noexcept { return layout_.table_cf(t); }

  // -- tables -----------------------------------------------------------------

  /// The table named `name`: its column family, created on first use (a
  /// blocking call, once). Throws `invalid_argument` for an empty name or
  /// one of the store's own column families, `storage_failure` if RocksDB
  /// cannot create it.
  table open_table(std::string_view name) {
    if (name.empty() || detail::rocksdb_layout::reserved(name))
      throw error(troupe::errc::invalid_argument, "'" + std::string(name) + "' cannot name a table");
    std::lock_guard g(tables_mutex_);
    if (auto t = registry_.find(name)) return *t;
    auto r = read_db();
    if (!r.db) throw error(r.ec, "cannot create table " + std::string(name) + ": " + last_failure());
    rocksdb::ColumnFamilyHandle* h = nullptr;
    auto st = r.db->CreateColumnFamily(table_options(name), std::string(name), &h);
    if (!st.ok())
      throw error(detail::status_code(st, errc::corrupt_store),
                  "cannot create table " + std::string(name) + " in " + path_ + ": " + st.ToString());
    table t;
    try {
      t = registry_.add(name);
    } catch (...) {
      r.db->DestroyColumnFamilyHandle(h);
      throw;
    }
    layout_.tables[detail::table_registry::slot_of(t)].store(h, std::memory_order_release);
    table_count_.fetch_add(1, std::memory_order_release);
    return t;
  }

  /// Values of `t` whose time `f` gives has passed are dropped in the
  /// table's compactions (`journal::set_expiry`).
  void set_expiry(table t, expiry_fn f) {
    if (!is_table(t)) return;
    expiries_->set(registry_.name(t), std::move(f));
  }

  /// Compacts table `t`, dropping what has expired by now.
  std::error_code drop_expired(table t) {
    if (!is_table(t)) return troupe::errc::invalid_argument;
    // The floor first, durably: nothing is dropped past it.
    if (auto ec = writer_->advance_floor()) return ec;
    auto r = read_db();
    if (!r.db) return r.ec;
    rocksdb::CompactRangeOptions o;
    o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    auto st = r.db->CompactRange(o, layout_.table_cf(t), nullptr, nullptr);
    if (!st.ok()) return read_failed(st, "compacting table " + std::string(registry_.name(t)));
    return {};
  }

  /// The expiry floor (`journal::expired_through`), kept in `meta`.
  std::int64_t expired_through() const noexcept { return expiries_->floor(); }

  /// The table named `name` if the store has it (its column family
  /// exists), without creating it.
  std::optional<table> find_table(std::string_view name) {
    std::lock_guard g(tables_mutex_);
    return registry_.find(name);
  }

  // -- journal ----------------------------------------------------------------

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
  void submit(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
              troupe::detail::unique_function<void(std::error_code)> done) {
    for (auto& w : tables)
      if (!is_table(w.table)) return done(troupe::errc::invalid_argument);
    writer_->submit({std::move(pid), std::move(events), std::move(tables), {}, std::move(done)});
  }

  /// Applies `tables` with the next group commit, without a callback: the
  /// writer puts them in the group's batch before its requests (so before
  /// any write requested after this call). Lost if that write fails, or
  /// if the store is closing. Throws `invalid_argument` for a table not of
  /// this store.
  void write_later(std::vector<table_write> tables) {
    for (auto& w : tables)
      if (!is_table(w.table)) throw error(troupe::errc::invalid_argument, "write_later: not a table of this store");
    writer_->later(std::move(tables));
  }

  /// Blocks until every write requested before, and everything
  /// `write_later` queued before, is durable (or failed).
  std::error_code flush_writes() {
    return writer_->run({}, [](rocksdb::WriteBatch&, sequence_nr) { return std::error_code{}; });
  }

  /// Blocking form of `submit` (through the same writer thread).
  std::error_code write(std::string_view pid, const std::vector<event_record>& events,
                        const std::vector<table_write>& tables = {}) {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    submit(std::string(pid), events, tables, [&p](std::error_code ec) { p.set_value(ec); });
    return f.get();
  }

  // -- reads of tables ---------------------------------------------------------

  /// The value of `key` in table `t` (empty if none).
  std::error_code get(table t, std::string_view key, std::optional<std::string>& out) {
    out.reset();
    if (!is_table(t)) return troupe::errc::invalid_argument;
    auto r = read_db();
    if (!r.db) return r.ec;
    auto* cf = layout_.table_cf(t);
    std::string v;
    auto st = r.db->Get(rocksdb::ReadOptions{}, cf, rocksdb::Slice(key.data(), key.size()), &v);
    if (st.IsNotFound()) return {};
    if (!st.ok()) return read_failed(st, "a key of table " + std::string(registry_.name(t)));
    out = std::move(v);
    return {};
  }

  /// As `get`, from the memtables and the block cache only: false when the
  /// read would need I/O (or a reopen holds the database, or the read
  /// failed: `get` tells). Tables' indexes are not partitioned for it.
  bool try_get(table t, std::string_view key, std::optional<std::string>& out) {
    out.reset();
    if (!is_table(t)) return false;
    std::shared_lock l(db_mutex_, std::try_to_lock);
    if (!l.owns_lock() || !db_) return false;
    rocksdb::ReadOptions o;
    o.read_tier = rocksdb::kBlockCacheTier;
    std::string v;
    auto st = db_->Get(o, layout_.table_cf(t), rocksdb::Slice(key.data(), key.size()), &v);
    if (st.IsNotFound()) return true;
    if (!st.ok()) return false;
    out = std::move(v);
    return true;
  }

  /// Calls `f(key, value)` (string views) for the keys of table `t` that
  /// start with `prefix`, in key order, until it returns false.
  template <class F>
  std::error_code scan(table t, std::string_view prefix, F&& f) {
    return scan_from(t, prefix, prefix, std::forward<F>(f));
  }

  /// As `scan`, from the first key at or after `from`.
  template <class F>
  std::error_code scan_from(table t, std::string_view prefix, std::string_view from, F&& f) {
    if (!is_table(t)) return troupe::errc::invalid_argument;
    auto r = read_db();
    if (!r.db) return r.ec;
    auto* cf = layout_.table_cf(t);
    // Bounded at the prefix's end: a prefix whose keys were all deleted is
    // not read past (the iterator would skip every deletion that follows,
    // other prefixes' included, to find the next live key).
    const auto end = detail::prefix_end(prefix);
    const rocksdb::Slice upper(end);
    rocksdb::ReadOptions ro;
    if (!end.empty()) ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(r.db->NewIterator(ro, cf));
    const auto start = std::max(prefix, from);
    for (it->Seek(rocksdb::Slice(start.data(), start.size())); it->Valid(); it->Next()) {
      auto key = it->key().ToStringView();
      if (!key.starts_with(prefix)) break;
      if (!f(key, it->value().ToStringView())) break;
    }
    if (!it->status().ok()) return read_failed(it->status(), "table " + std::string(registry_.name(t)));
    return {};
  }

  // -- reads of the journal ------------------------------------------------------

  /// Calls `f(const event_record&)` for the events with `from <= seq <= to`,
  /// in order, at most `max` of them, iterating (memory stays bounded).
  /// `errc::corrupt_record` names the persistence ID and sequence number.
  template <class F>
  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max, F&& f) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    if (from > to || max == 0) return {};
    const auto prefix = detail::id_prefix(pid);
    // Bounded at the range's end, or the ID's: never read past into the
    // deletions of the IDs that follow.
    const auto end = to == max_sequence_nr ? detail::prefix_end(prefix) : detail::seq_key(prefix, to + 1);
    rocksdb::ReadOptions ro;
    // A replay reads its range once, front to back: do not evict hotter
    // blocks for it, and read ahead in large steps.
    ro.fill_cache = false;
    ro.readahead_size = 2 << 20;
    rocksdb::Slice upper(end);
    if (!end.empty()) ro.iterate_upper_bound = &upper;
    auto r = read_db();
    if (!r.db) return r.ec;
    std::unique_ptr<rocksdb::Iterator> it(r.db->NewIterator(ro, journal_cf()));
    std::uint64_t n = 0;
    event_record e;
    sequence_nr last = from - 1;
    for (it->Seek(detail::seq_key(prefix, from)); it->Valid() && n < max; it->Next(), ++n) {
      auto key = it->key().ToStringView();
      if (!detail::has_prefix(key, prefix)) break;
      auto seq = detail::seq_of_key(key);
      if (seq > to) break;
      if (!detail::decode_event(it->value().ToStringView(), seq, e)) {
        failures_.set("event " + std::to_string(seq) + " of " + std::string(pid) + " in " + path_ +
                      " does not decode (bad checksum or layout)");
        return errc::corrupt_record;
      }
      f(e);
      last = seq;
    }
    if (!it->status().ok())
      return read_failed(it->status(), "the events of " + std::string(pid) + " after sequence number " +
                                           std::to_string(last));
    return {};
  }

  /// The highest sequence number ever written for `pid` (0 if none). It
  /// never decreases, also when events are deleted: it is the larger of the
  /// last event's number and the watermark `delete_up_to` leaves in `meta`.
  /// Throws `troupe::error` if the store cannot say.
  sequence_nr highest_sequence_nr(std::string_view pid) {
    detail::check_pid(pid);
    auto r = read_db();
    if (!r.db) throw error(r.ec, last_failure());
    return layout_.read_highest(detail::id_prefix(pid));
  }

  /// Deletes the events with `seq <= to` (a range delete; the highest
  /// sequence number stays).
  std::error_code delete_up_to(std::string_view pid, sequence_nr to) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    auto prefix = detail::id_prefix(pid);
    return writer_->run(std::string(pid), [this, prefix, to](rocksdb::WriteBatch& b, sequence_nr known) -> std::error_code {
      // The watermark with the deletion: the highest number it removes, so
      // that the highest survives even when no event is left. Events of
      // this group's batch are not in the database yet: the writer knows
      // them (numbers are contiguous, so the last one up to `to` is the
      // smaller of the two).
      sequence_nr removed = 0, watermark = 0;
      try {
        removed = std::max(layout_.last_seq(prefix, to), std::min(to, known));
        watermark = layout_.read_watermark(prefix);
      } catch (const error& e) {
        return e.code();
      }
      if (removed > watermark) {
        std::string h;
        troupe::detail::put_u64(h, removed);
        b.Put(meta_cf(), detail::rocksdb_layout::highest_key(prefix), h);
      }
      b.DeleteRange(journal_cf(), detail::seq_key(prefix, 0),
                    detail::seq_key(prefix, to == max_sequence_nr ? to : to + 1));
      if (to == max_sequence_nr) b.Delete(journal_cf(), detail::seq_key(prefix, to));
      return {};
    });
  }

  // -- snapshots --------------------------------------------------------------

  /// Saves a snapshot; one at the same sequence number is overwritten.
  /// `invalid_argument` for metadata over `max_metadata_bytes`. A snapshot
  /// given without a write time (`metadata.written_ms`) gets the time of
  /// this call.
  std::error_code save_snapshot(std::string_view pid, const snapshot_record& s);

  /// The latest snapshot matching `c`, if any. A snapshot that cannot be
  /// decoded yields `errc::corrupt_record` with only `out->seq` set (the
  /// caller may fall back to an older one with a lower `max_seq`).
  std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c, std::optional<snapshot_record>& out);

  std::error_code delete_snapshot(std::string_view pid, sequence_nr seq) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    auto key = detail::seq_key(detail::id_prefix(pid), seq);
    return writer_->run(std::string(pid), [this, key](rocksdb::WriteBatch& b, sequence_nr) {
      b.Delete(snapshots_cf(), key);
      return std::error_code{};
    });
  }

  std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c);

  // -- statistics -------------------------------------------------------------

  /// Group-commit writes made, and events they carried (their ratio is the mean batch).
  std::uint64_t batches_written() const noexcept { return writer_->batches_written(); }
  std::uint64_t events_written() const noexcept { return writer_->events_written(); }
  /// RocksDB records (puts and deletes, events and table changes) written
  /// by those group commits.
  std::uint64_t records_written() const noexcept { return writer_->records_written(); }
  /// Persistence IDs the writer has in memory now (at most
  /// `rocksdb_options::id_cache` between groups). Approximate while writes
  /// run; for tests and monitoring.
  std::size_t cached_ids() const noexcept { return writer_->cached_ids(); }
  /// How the writer thread spent its time since the store was opened: `busy` near the wall time means
  /// that a group always waits while one is written (docs/performance.md).
  persistence::writer_times writer_times() const noexcept { return writer_->times(); }
  /// RocksDB's compactions of the store's files since it was opened (and
  /// across its reopens after failures): how many, including moves of a
  /// file to the next level that read and write nothing, and the bytes
  /// they read and wrote.
  compaction_totals compactions() const noexcept { return compactions_->totals(); }

private:
  /// Level 1 of every column family at half of `write_buffers` (at least
  /// 4 MiB), in files of a quarter of that (RocksDB's sizes when it is 0).
  /// The memtables share `write_buffers`, so level 0 is compacted at about
  /// 20 MB, and each flush of the journal spans its lowest to its highest
  /// persistence ID: every compaction from level 0 rewrites all of level 1,
  /// whose size caps the cost. RocksDB's default (256 MiB in 64 MiB files,
  /// for a 64 MiB memtable per column family) was one file that grew with
  /// the history. Small files let a compaction into level 2 take one
  /// narrow file (recent orders) and the few below it.
  rocksdb::ColumnFamilyOptions sized_levels() const;

  /// The journal's memtable inserts with a hint per persistence ID (an ID's
  /// events are appended after its previous one); a write-path setting only.
  rocksdb::ColumnFamilyOptions own_options(std::string_view name) const;

  /// Tables insert with a hint per owner, for keys that start with a
  /// length-prefixed name (per first byte for keys of other shapes), and drop what
  /// has expired when they are compacted (`set_expiry`).
  rocksdb::ColumnFamilyOptions table_options(std::string_view name) const;

  rocksdb::WriteOptions write_options() const {
    rocksdb::WriteOptions wo;
    wo.sync = options_.durability == durability::sync;
    wo.disableWAL = options_.durability == durability::none;
    return wo;
  }

  /// Opens RocksDB with the store's own column families and `tables`
  /// (registered now at the first open, already at a reopen).
  rocksdb::Status open_db(const std::vector<std::string>& tables, bool first);

  void close_db() noexcept {
    if (!db_) return;
    for (auto& t : layout_.tables)
      if (auto* h = t.exchange(nullptr)) db_->DestroyColumnFamilyHandle(h);
    for (auto* h : own_handles_) db_->DestroyColumnFamilyHandle(h);
    own_handles_.clear();
    db_->Close();
    db_.reset();
    layout_.db = nullptr;
    layout_.journal = layout_.snapshots = layout_.meta = nullptr;
  }

  /// On the writer thread, when RocksDB cannot resume after a failed write
  /// (a failure during its own recovery, the disk still full, leaves it
  /// stopped for good): closes and opens the database again, which replays
  /// the WAL, so everything acknowledged is there. Reads wait meanwhile; if
  /// the open fails, reads as well as writes try it again (with the same
  /// backoff), and fail with its code (`storage_full` for a full disk) until
  /// it succeeds.
  rocksdb::Status reopen() {
    std::unique_lock l(db_mutex_);
    close_db();
    background_->reset();
    return open_db(registry_.names(), false);
  }

  /// Shared access to the database for a read: null, with the failed
  /// reopen's code, when it is closed after a failed reopen (a read asks
  /// the writer to try again first, as a write would).
  struct read_access {
    std::shared_lock<std::shared_mutex> lock;
    rocksdb::DB* db;
    std::error_code ec; // when db is null: why
  };
  read_access read_db() {
    {
      read_access r{std::shared_lock(db_mutex_), db_.get(), {}};
      if (r.db) return r;
    }
    // Closed: ask the writer thread for a reopen (its backoff decides; it
    // alone reopens, so its caches are dropped with the database). Not
    // from the writer thread itself, which is the one to reopen.
    std::error_code tried;
    if (writer_ && !writer_->on_writer_thread()) tried = writer_->reopen_if_closed();
    read_access r{std::shared_lock(db_mutex_), db_.get(), {}};
    if (!r.db) {
      r.ec = writer_ ? writer_->closed_error() : std::error_code(errc::storage_failure);
      if (!r.ec) r.ec = tried ? tried : std::error_code(errc::storage_failure);
    }
    return r;
  }

  /// Whether `t` is one of this store's tables (a registered table's slot).
  bool is_table(table t) const noexcept {
    return detail::table_registry::slot_of(t) < table_count_.load(std::memory_order_acquire);
  }

  rocksdb::DBOptions db_options() const {
    rocksdb::DBOptions o;
    if (env_) o.env = env_.get();
    // Damage before the WAL's end is no crash's doing: refuse it rather than
    // recover to the point before it, unless the operator asked for that.
    o.wal_recovery_mode = options_.salvage ? rocksdb::WALRecoveryMode::kPointInTimeRecovery
                                           : rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
    // A salvage keeps the damaged WAL until its markers are durable.
    o.avoid_flush_during_recovery = options_.salvage;
    o.db_write_buffer_size = options_.write_buffers;
    return o;
  }

  [[noreturn]] void fail_open(const rocksdb::Status& st, const std::string& doing) const {
    auto code = detail::status_code(st, errc::corrupt_store);
    std::string what = "cannot open store " + path_ + ": " + doing + ": " + st.ToString();
    if (logger_)
      for (auto& d : logger_->damage()) what += "; " + d;
    if (code == errc::corrupt_store && !options_.salvage)
      what += ". Nothing was changed; rocksdb_options::salvage opens it without the damaged records";
    else if (code == errc::corrupt_store)
      what += ". A salvage cannot open it either (a table file holds writes past the damage): restore it from a "
              "backup";
    throw error(code, what);
  }

  void open();

  /// Before RocksDB opens the store: damage inside a WAL file that RocksDB
  /// would take for a torn tail (see `detail::damage_before_end`) refuses
  /// the open, the store unchanged.
  void refuse_damaged_wal() const;

  /// Reads the expiry floor from `meta`, or starts it (at the first open).
  void settle_expiry_floor();


  /// Records a failed read: what RocksDB said, and of what.
  std::error_code read_failed(const rocksdb::Status& st, const std::string& of) {
    failures_.set("reading " + of + " from " + path_ + ": " + st.ToString());
    return detail::status_code(st);
  }

  static rocksdb_options checked(rocksdb_options o) {
    if (o.id_cache == 0) throw error(troupe::errc::invalid_argument, "rocksdb_options::id_cache must be at least 1");
    return o;
  }

  rocksdb_options options_;
  std::string path_;
  /// Held from before anything reads the store until it is destroyed,
  /// across reopens (RocksDB's own LOCK is not: see store_lock.hpp).
  detail::store_lock lock_;
  std::unique_ptr<rocksdb::Env> env_; // over options_.file_system
  std::shared_ptr<detail::store_logger> logger_;
  std::shared_ptr<detail::compaction_counter> compactions_ = std::make_shared<detail::compaction_counter>();
  std::shared_ptr<detail::background_errors> background_ = std::make_shared<detail::background_errors>();
  detail::failure_note failures_;
  detail::live_ids live_ids_;
  std::vector<std::string> salvaged_;
  std::uint32_t opened_format_ = 0;
  std::uint64_t migrated_ = 0;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> own_handles_; // journal, snapshots, meta (and default)
  std::shared_mutex db_mutex_;                           // reads share it; a reopen has it alone
  std::atomic<std::size_t> table_count_{0};
  detail::rocksdb_layout layout_;
  detail::table_registry registry_;
  std::mutex tables_mutex_; // open_table
  std::shared_ptr<detail::expiries> expiries_ = std::make_shared<detail::expiries>();
  // Every column family's files share one block cache, which also holds
  // their indexes and filters (see make_table_factory).
  std::shared_ptr<rocksdb::Cache> block_cache_ = rocksdb::NewLRUCache(options_.block_cache);
  std::shared_ptr<rocksdb::TableFactory> table_factory_ = make_table_factory(block_cache_, true);
  std::shared_ptr<rocksdb::TableFactory> tables_factory_ = make_table_factory(block_cache_, false);

  static std::shared_ptr<rocksdb::TableFactory> make_table_factory(std::shared_ptr<rocksdb::Cache> cache,
                                                                   bool partitioned);
  std::optional<detail::group_writer> writer_;
};

} // namespace troupe::persistence::detail

#include <troupe/rocksdb/detail/impl/engine.hpp>
