#pragma once

/// \file
/// `troupe::persistence::rocksdb_store`: the journal, the snapshot store and
/// the tables of the layers above, on RocksDB, with one writer thread that
/// group-commits every actor's writes. The layout is the public contract in
/// docs/storage.md.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/persistence/detail/group_writer.hpp>
#include <troupe/persistence/detail/memtable_hints.hpp>
#include <troupe/persistence/detail/rocksdb_layout.hpp>
#include <troupe/persistence/detail/table_registry.hpp>
#include <troupe/detail/bytes.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence {

/// Settings of a `rocksdb_store`.
struct rocksdb_options {
  /// What an acknowledged write survives (see `durability`).
  persistence::durability durability = durability::sync;
  /// Create the directory and the database if missing.
  bool create_if_missing = true;
  /// Persistence IDs whose key prefix and highest sequence number the
  /// writer keeps in memory (about 100 bytes each). Beyond it, the least
  /// recently written are dropped and read again (one seek) at their next
  /// write: a store with millions of IDs (one per order) stays bounded.
  std::size_t id_cache = 100'000;
};

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
  /// The on-disk format this code writes; a store of a higher one is refused.
  static constexpr std::uint32_t format_version = 1;

  /// Opens (or creates) the store at `path`, with every table it already
  /// has. Throws `troupe::error`: `store_locked` when another process has it
  /// open, `store_format_too_new` for a newer format, `storage_failure`
  /// otherwise.
  explicit rocksdb_store(const std::string& path, rocksdb_options options = {}) : options_(options) {
    if (options_.id_cache == 0)
      throw error(troupe::errc::invalid_argument, "rocksdb_options::id_cache must be at least 1");
    rocksdb::DBOptions db_options;
    db_options.create_if_missing = options.create_if_missing;
    db_options.create_missing_column_families = true;
    // What the store has (nothing, if it is new): every column family must
    // be opened.
    std::vector<std::string> existing;
    (void)rocksdb::DB::ListColumnFamilies(db_options, path, &existing);
    std::vector<std::string> names(std::begin(detail::rocksdb_layout::own_column_families),
                                   std::end(detail::rocksdb_layout::own_column_families));
    std::vector<std::string> tables;
    for (auto& n : existing)
      if (!detail::rocksdb_layout::reserved(n)) tables.push_back(n);
    std::sort(tables.begin(), tables.end());
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (auto& n : names) cfs.emplace_back(n, own_options(n));
    for (auto& n : tables) cfs.emplace_back(n, table_options());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    auto st = rocksdb::DB::Open(db_options, path, cfs, &handles, &db);
    if (!st.ok()) {
      if (st.IsIOError() && st.ToString().find("lock") != std::string::npos)
        throw error(errc::store_locked,
                    "cannot open store " + path + ": locked by another process (" + st.ToString() + ")");
      throw error(errc::storage_failure, "cannot open store " + path + ": " + st.ToString());
    }
    db_.reset(db);
    handles_ = handles;
    layout_.db = db;
    layout_.journal = handles_[1];
    layout_.snapshots = handles_[2];
    layout_.meta = handles_[3];
    for (std::size_t i = 0; i < tables.size(); ++i) {
      auto t = registry_.add(tables[i]);
      layout_.tables[detail::table_registry::slot_of(t)].store(handles_[names.size() + i], std::memory_order_release);
    }
    try {
      check_format(path);
    } catch (...) {
      close_handles();
      throw;
    }
    writer_.emplace(layout_, write_options(), options_.id_cache);
  }

  rocksdb_store(const rocksdb_store&) = delete;
  rocksdb_store& operator=(const rocksdb_store&) = delete;

  ~rocksdb_store() {
    writer_.reset(); // writes what is queued
    close_handles();
  }

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
    rocksdb::ColumnFamilyHandle* h = nullptr;
    auto st = db_->CreateColumnFamily(table_options(), std::string(name), &h);
    if (!st.ok()) throw error(errc::storage_failure, "cannot create table " + std::string(name) + ": " + st.ToString());
    table t;
    try {
      t = registry_.add(name);
    } catch (...) {
      db_->DestroyColumnFamilyHandle(h);
      throw;
    }
    layout_.tables[detail::table_registry::slot_of(t)].store(h, std::memory_order_release);
    return t;
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
      if (!layout_.table_cf(w.table)) return done(troupe::errc::invalid_argument);
    writer_->submit({std::move(pid), std::move(events), std::move(tables), {}, std::move(done)});
  }

  /// Applies `tables` with the next group commit, without a callback: the
  /// writer puts them in the group's batch before its requests (so before
  /// any write requested after this call). Lost if that write fails, or
  /// if the store is closing. Throws `invalid_argument` for a table not of
  /// this store.
  void write_later(std::vector<table_write> tables) {
    for (auto& w : tables)
      if (!layout_.table_cf(w.table))
        throw error(troupe::errc::invalid_argument, "write_later: not a table of this store");
    writer_->later(std::move(tables));
  }

  /// Blocks until every write requested before, and everything
  /// `write_later` queued before, is durable (or failed).
  std::error_code flush_writes() {
    return writer_->run({}, [](rocksdb::WriteBatch&) { return std::error_code{}; });
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
    auto* cf = layout_.table_cf(t);
    if (!cf) return troupe::errc::invalid_argument;
    std::string v;
    auto st = db_->Get(rocksdb::ReadOptions{}, cf, rocksdb::Slice(key.data(), key.size()), &v);
    if (st.IsNotFound()) return {};
    if (!st.ok()) return errc::storage_failure;
    out = std::move(v);
    return {};
  }

  /// Calls `f(key, value)` (string views) for the keys of table `t` that
  /// start with `prefix`, in key order, until it returns false.
  template <class F>
  std::error_code scan(table t, std::string_view prefix, F&& f) {
    auto* cf = layout_.table_cf(t);
    if (!cf) return troupe::errc::invalid_argument;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}, cf));
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
      auto key = it->key().ToStringView();
      if (!key.starts_with(prefix)) break;
      if (!f(key, it->value().ToStringView())) break;
    }
    return it->status().ok() ? std::error_code{} : std::error_code(errc::storage_failure);
  }

  // -- reads of the journal ------------------------------------------------------

  /// Calls `f(const event_record&)` for the events with `from <= seq <= to`,
  /// in order, at most `max` of them, iterating (memory stays bounded).
  /// `errc::corrupt_record` names the persistence ID and sequence number.
  template <class F>
  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max, F&& f) {
    if (from > to || max == 0) return {};
    const auto prefix = detail::id_prefix(pid);
    const auto end = detail::seq_key(prefix, to == max_sequence_nr ? to : to + 1);
    rocksdb::ReadOptions ro;
    // A replay reads its range once, front to back: do not evict hotter
    // blocks for it, and read ahead in large steps.
    ro.fill_cache = false;
    ro.readahead_size = 2 << 20;
    rocksdb::Slice upper(end);
    if (to != max_sequence_nr) ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, journal_cf()));
    std::uint64_t n = 0;
    event_record e;
    for (it->Seek(detail::seq_key(prefix, from)); it->Valid() && n < max; it->Next(), ++n) {
      auto key = it->key().ToStringView();
      if (!detail::has_prefix(key, prefix)) break;
      auto seq = detail::seq_of_key(key);
      if (seq > to) break;
      if (!detail::decode_event(it->value().ToStringView(), seq, e)) return errc::corrupt_record;
      f(e);
    }
    if (!it->status().ok()) return errc::storage_failure;
    return {};
  }

  /// The highest sequence number ever written for `pid` (0 if none). It
  /// never decreases, also when events are deleted: it is the larger of the
  /// last event's number and the watermark `delete_up_to` leaves in `meta`.
  sequence_nr highest_sequence_nr(std::string_view pid) { return layout_.read_highest(detail::id_prefix(pid)); }

  /// Deletes the events with `seq <= to` (a range delete; the highest
  /// sequence number stays).
  std::error_code delete_up_to(std::string_view pid, sequence_nr to) {
    auto prefix = detail::id_prefix(pid);
    return writer_->run(std::string(pid), [this, prefix, to](rocksdb::WriteBatch& b) -> std::error_code {
      // The watermark with the deletion: the highest number it removes, so
      // that the highest survives even when no event is left.
      sequence_nr removed = 0, watermark = 0;
      try {
        removed = layout_.last_seq(prefix, to);
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
  std::error_code save_snapshot(std::string_view pid, const snapshot_record& s) {
    auto key = detail::seq_key(detail::id_prefix(pid), s.seq);
    return writer_->run(std::string(pid), [this, key, value = detail::encode_snapshot(s)](rocksdb::WriteBatch& b) {
      b.Put(snapshots_cf(), key, value);
      return std::error_code{};
    });
  }

  /// The latest snapshot matching `c`, if any. A snapshot that cannot be
  /// decoded yields `errc::corrupt_record` with only `out->seq` set (the
  /// caller may fall back to an older one with a lower `max_seq`).
  std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c, std::optional<snapshot_record>& out) {
    out.reset();
    const auto prefix = detail::id_prefix(pid);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}, snapshots_cf()));
    snapshot_record s;
    for (it->SeekForPrev(detail::seq_key(prefix, c.max_seq)); it->Valid(); it->Prev()) {
      auto key = it->key().ToStringView();
      if (!detail::has_prefix(key, prefix)) break;
      auto seq = detail::seq_of_key(key);
      if (seq < c.min_seq) break;
      if (!detail::decode_snapshot(it->value().ToStringView(), seq, s)) {
        out.emplace().seq = seq;
        return errc::corrupt_record;
      }
      if (c.matches(s)) {
        out = std::move(s);
        return {};
      }
    }
    if (!it->status().ok()) return errc::storage_failure;
    return {};
  }

  std::error_code delete_snapshot(std::string_view pid, sequence_nr seq) {
    auto key = detail::seq_key(detail::id_prefix(pid), seq);
    return writer_->run(std::string(pid), [this, key](rocksdb::WriteBatch& b) {
      b.Delete(snapshots_cf(), key);
      return std::error_code{};
    });
  }

  std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c) {
    const auto prefix = detail::id_prefix(pid);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}, snapshots_cf()));
    std::vector<std::string> doomed;
    snapshot_record s;
    for (it->Seek(detail::seq_key(prefix, c.min_seq)); it->Valid(); it->Next()) {
      auto key = it->key().ToStringView();
      if (!detail::has_prefix(key, prefix)) break;
      auto seq = detail::seq_of_key(key);
      if (seq > c.max_seq) break;
      if (!detail::decode_snapshot(it->value().ToStringView(), seq, s) || c.matches(s)) doomed.emplace_back(key);
    }
    if (!it->status().ok()) return errc::storage_failure;
    if (doomed.empty()) return {};
    return writer_->run(std::string(pid), [this, doomed = std::move(doomed)](rocksdb::WriteBatch& b) {
      for (auto& key : doomed) b.Delete(snapshots_cf(), key);
      return std::error_code{};
    });
  }

  // -- statistics -------------------------------------------------------------

  /// Group-commit writes made, and events they carried (their ratio is the
  /// mean batch).
  std::uint64_t batches_written() const noexcept { return writer_->batches_written(); }
  std::uint64_t events_written() const noexcept { return writer_->events_written(); }
  /// RocksDB records (puts and deletes, events and table changes) written
  /// by those group commits.
  std::uint64_t records_written() const noexcept { return writer_->records_written(); }
  /// Persistence IDs the writer has in memory now (at most
  /// `rocksdb_options::id_cache` between groups). Approximate while writes
  /// run; for tests and monitoring.
  std::size_t cached_ids() const noexcept { return writer_->cached_ids(); }

private:
  /// The journal's memtable inserts with a hint per persistence ID (an ID's
  /// events are appended after its previous one); a write-path setting only.
  static rocksdb::ColumnFamilyOptions own_options(std::string_view name) {
    rocksdb::ColumnFamilyOptions cf;
    if (name == "journal") cf.memtable_insert_with_hint_prefix_extractor = detail::id_prefix_extractor();
    return cf;
  }

  /// Tables insert with a hint per owner, for keys that start with a
  /// length-prefixed name (keys of other shapes get none).
  static rocksdb::ColumnFamilyOptions table_options() {
    rocksdb::ColumnFamilyOptions cf;
    cf.memtable_insert_with_hint_prefix_extractor = detail::owner_prefix_extractor();
    return cf;
  }

  rocksdb::WriteOptions write_options() const {
    rocksdb::WriteOptions wo;
    wo.sync = options_.durability == durability::sync;
    wo.disableWAL = options_.durability == durability::none;
    return wo;
  }

  void close_handles() noexcept {
    for (auto& t : layout_.tables)
      if (auto* h = t.exchange(nullptr)) {
        if (std::find(handles_.begin(), handles_.end(), h) == handles_.end()) db_->DestroyColumnFamilyHandle(h);
      }
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
    handles_.clear();
    db_->Close();
    db_.reset();
  }

  void check_format(const std::string& path) {
    std::string v;
    auto st = db_->Get(rocksdb::ReadOptions{}, meta_cf(), "format", &v);
    if (st.IsNotFound()) {
      std::string f;
      troupe::detail::put_u32(f, format_version);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      if (!db_->Put(wo, meta_cf(), "format", f).ok())
        throw error(errc::storage_failure, "cannot write the format version of " + path);
      return;
    }
    if (!st.ok() || v.size() != 4) throw error(errc::storage_failure, "cannot read the format version of " + path);
    auto found = troupe::detail::get_be(v, 0, 4);
    if (found > format_version) {
      throw error(errc::store_format_too_new, "store " + path + " has format version " + std::to_string(found) +
                                                  "; this troupe reads up to " + std::to_string(format_version));
    }
  }

  rocksdb_options options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_; // opened with the store
  detail::rocksdb_layout layout_;
  detail::table_registry registry_;
  std::mutex tables_mutex_; // open_table
  std::optional<detail::group_writer> writer_;
};

} // namespace troupe::persistence
