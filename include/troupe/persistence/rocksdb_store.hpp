#pragma once

/// \file
/// `troupe::persistence::rocksdb_store`: the journal and snapshot store on
/// RocksDB, with one writer thread that group-commits every actor's writes.
/// The layout is the public contract in docs/storage.md.

#include <troupe/error.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>

#include <pthread.h>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
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

/// A RocksDB database holding the journal, the snapshots and (for the
/// delivery and effects layers) the `deliveries`, `dedup` and `outbox`
/// column families. One per actor system; thread-safe.
///
/// Writes of events go through one writer thread: it takes every request
/// queued meanwhile, checks each one's sequence numbers, and commits them
/// with one `WriteBatch` and one write (group commit), so RocksDB never
/// blocks an actor's thread and a synchronous write is shared by all the
/// actors that persisted at the same time.
class rocksdb_store {
public:
  /// The on-disk format this code writes; a store of a higher one is refused.
  static constexpr std::uint32_t format_version = 1;

  static constexpr const char* column_families[] = {"default",    "journal", "snapshots", "meta",
                                                    "deliveries", "dedup",   "outbox"};

  /// Opens (or creates) the store at `path`. Throws `troupe::error`:
  /// `store_locked` when another process has it open,
  /// `store_format_too_new` for a newer format, `storage_failure` otherwise.
  explicit rocksdb_store(const std::string& path, rocksdb_options options = {}) : options_(options) {
    if (options_.id_cache == 0) throw error(errc::invalid_argument, "rocksdb_options::id_cache must be at least 1");
    rocksdb::DBOptions db_options;
    db_options.create_if_missing = options.create_if_missing;
    db_options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (auto* name : column_families) {
      rocksdb::ColumnFamilyOptions cf;
      // Each ID's events are appended after its previous one: the memtable
      // remembers, per ID, where it inserted last, instead of searching the
      // skiplist from the top for every event.
      if (std::string_view(name) == "journal") cf.memtable_insert_with_hint_prefix_extractor = id_prefix_extractor();
      // The same for the tables whose keys start with their owner's ID
      // (an actor's deliveries, a receiver's dedup marks): a group's writes
      // land next to that owner's previous ones.
      if (std::string_view(name) == "deliveries" || std::string_view(name) == "dedup")
        cf.memtable_insert_with_hint_prefix_extractor = owner_prefix_extractor();
      cfs.emplace_back(name, cf);
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    auto st = rocksdb::DB::Open(db_options, path, cfs, &handles, &db);
    if (!st.ok()) {
      if (st.IsIOError() && st.ToString().find("lock") != std::string::npos)
        throw error(errc::store_locked, "cannot open store " + path + ": locked by another process (" +
                                            st.ToString() + ")");
      throw error(errc::storage_failure, "cannot open store " + path + ": " + st.ToString());
    }
    db_.reset(db);
    handles_ = handles;
    try {
      check_format(path);
    } catch (...) {
      for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
      db_.reset();
      throw;
    }
    writer_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "troupe-writer"); // in top, perf, gdb
      write_loop();
    });
  }

  rocksdb_store(const rocksdb_store&) = delete;
  rocksdb_store& operator=(const rocksdb_store&) = delete;

  ~rocksdb_store() {
    {
      std::lock_guard g(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    writer_.join();
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
  }

  rocksdb::DB& db() noexcept { return *db_; }
  rocksdb::ColumnFamilyHandle* journal_cf() const noexcept { return handles_[1]; }
  rocksdb::ColumnFamilyHandle* snapshots_cf() const noexcept { return handles_[2]; }
  rocksdb::ColumnFamilyHandle* meta_cf() const noexcept { return handles_[3]; }

  // -- journal ----------------------------------------------------------------

  /// Appends `events` atomically (all or none), completing with
  /// `void(std::error_code)` once they are durable as the store's durability
  /// mode promises. The sequence numbers must continue the ID's highest one
  /// without a gap (`errc::sequence_mismatch` otherwise; nothing written).
  template <class Token>
  auto async_write(std::string pid, std::vector<event_record> events, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler, std::string pid, std::vector<event_record> events) {
          submit(std::move(pid), std::move(events),
                 [h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))](std::error_code ec) mutable {
                   h.dispatch(ec);
                 });
        },
        token, std::move(pid), std::move(events));
  }

  /// `async_write` with a plain callback, which runs on the writer thread
  /// (or at once, with `storage_failure`, when the store is closing): it
  /// must not block.
  void submit(std::string pid, std::vector<event_record> events,
              troupe::detail::unique_function<void(std::error_code)> done) {
    submit(std::move(pid), std::move(events), {}, std::move(done));
  }

  /// As `submit`, also applying `tables` in the same atomic write. With no
  /// events, the persistence ID may be empty.
  void submit(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
              troupe::detail::unique_function<void(std::error_code)> done) {
    {
      std::lock_guard g(mutex_);
      if (!stopping_) {
        queue_.push_back({std::move(pid), std::move(events), std::move(tables), {}, std::move(done)});
        wake_.notify_one();
        return;
      }
    }
    done(errc::storage_failure);
  }

  /// Applies `tables` with the next group commit, without a callback: the
  /// writer puts them in the group's batch before its requests (so before
  /// any write requested after this call). Lost if that write fails, or
  /// if the store is closing.
  void write_later(std::vector<table_write> tables) {
    std::lock_guard g(mutex_);
    if (stopping_) return;
    for (auto& w : tables) later_.push_back(std::move(w));
    wake_.notify_one();
  }

  /// Blocks until every write requested before, and everything
  /// `write_later` queued before, is durable (or failed).
  std::error_code flush_writes() {
    return through_writer({}, [](rocksdb::WriteBatch&) { return std::error_code{}; });
  }

  /// Blocking form of `async_write` (through the same writer thread).
  std::error_code write(std::string_view pid, const std::vector<event_record>& events) {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    submit(std::string(pid), events, [&p](std::error_code ec) { p.set_value(ec); });
    return f.get();
  }

  /// Blocking form of `submit` with table changes.
  std::error_code write(std::string_view pid, const std::vector<event_record>& events,
                        const std::vector<table_write>& tables) {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    submit(std::string(pid), events, tables, [&p](std::error_code ec) { p.set_value(ec); });
    return f.get();
  }

  // -- tables -----------------------------------------------------------------

  rocksdb::ColumnFamilyHandle* table_cf(table t) const noexcept { return handles_[4 + static_cast<std::size_t>(t)]; }

  /// The value of `key` in table `t` (empty if none).
  std::error_code get(table t, std::string_view key, std::optional<std::string>& out) {
    out.reset();
    std::string v;
    auto st = db_->Get(rocksdb::ReadOptions{}, table_cf(t), rocksdb::Slice(key.data(), key.size()), &v);
    if (st.IsNotFound()) return {};
    if (!st.ok()) return errc::storage_failure;
    out = std::move(v);
    return {};
  }

  /// Calls `f(key, value)` (string views) for the keys of table `t` that
  /// start with `prefix`, in key order, until it returns false.
  template <class F>
  std::error_code scan(table t, std::string_view prefix, F&& f) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}, table_cf(t)));
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size())); it->Valid(); it->Next()) {
      auto key = it->key().ToStringView();
      if (!key.starts_with(prefix)) break;
      if (!f(key, it->value().ToStringView())) break;
    }
    return it->status().ok() ? std::error_code{} : std::error_code(errc::storage_failure);
  }

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
  sequence_nr highest_sequence_nr(std::string_view pid) { return read_highest(detail::id_prefix(pid)); }

  /// Deletes the events with `seq <= to` (a range delete; the highest
  /// sequence number stays).
  std::error_code delete_up_to(std::string_view pid, sequence_nr to) {
    auto prefix = detail::id_prefix(pid);
    return through_writer(std::string(pid), [this, prefix, to](rocksdb::WriteBatch& b) -> std::error_code {
      // The watermark with the deletion: the highest number it removes, so
      // that the highest survives even when no event is left.
      sequence_nr removed = 0, watermark = 0;
      try {
        removed = last_seq(prefix, to);
        watermark = read_watermark(prefix);
      } catch (const error& e) {
        return e.code();
      }
      if (removed > watermark) {
        std::string h;
        detail::put_u64(h, removed);
        b.Put(meta_cf(), highest_key(prefix), h);
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
    return through_writer(std::string(pid), [this, key, value = detail::encode_snapshot(s)](rocksdb::WriteBatch& b) {
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
    return through_writer(std::string(pid), [this, key](rocksdb::WriteBatch& b) {
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
    return through_writer(std::string(pid), [this, doomed = std::move(doomed)](rocksdb::WriteBatch& b) {
      for (auto& key : doomed) b.Delete(snapshots_cf(), key);
      return std::error_code{};
    });
  }

  // -- statistics -------------------------------------------------------------

  /// Group-commit writes made, and events they carried (their ratio is the
  /// mean batch).
  std::uint64_t batches_written() const noexcept { return batches_.load(std::memory_order_relaxed); }
  std::uint64_t events_written() const noexcept { return events_.load(std::memory_order_relaxed); }
  /// RocksDB records (puts and deletes, events and table changes) written
  /// by those group commits.
  std::uint64_t records_written() const noexcept { return records_.load(std::memory_order_relaxed); }
  /// Persistence IDs the writer has in memory now (at most
  /// `rocksdb_options::id_cache` between groups). Approximate while writes
  /// run; for tests and monitoring.
  std::size_t cached_ids() const noexcept { return cached_ids_.load(std::memory_order_relaxed); }

private:
  struct request {
    std::string pid;
    std::vector<event_record> events;
    std::vector<table_write> tables;
    /// Other operations, added to the group's batch on the writer thread
    /// (all of them, or none with an error).
    troupe::detail::unique_function<std::error_code(rocksdb::WriteBatch&)> extra;
    troupe::detail::unique_function<void(std::error_code)> done;
  };

  /// Every write goes through the writer thread (one RocksDB writer: its
  /// group commit, and no write ever on an actor's thread). Blocks until
  /// `extra`'s operations are durable.
  template <class F>
  std::error_code through_writer(std::string pid, F extra) {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    {
      std::lock_guard g(mutex_);
      if (stopping_) return errc::storage_failure;
      queue_.push_back({std::move(pid), {}, {}, std::move(extra), [&p](std::error_code ec) { p.set_value(ec); }});
      wake_.notify_one();
    }
    return f.get();
  }

  static std::string highest_key(const std::string& prefix) { return "h" + prefix; }

  /// A key's `id` part (its u16 length and the ID's bytes), for the
  /// memtable's insert hints. Sequence number 0 (never an event: the start
  /// of `delete_up_to`'s range deletion) is outside the domain: RocksDB 7.8
  /// keeps one hint per prefix for both the point and the range-deletion
  /// memtables, and a hint from one used in the other corrupts the skiplist.
  class id_prefix_transform final : public rocksdb::SliceTransform {
  public:
    const char* Name() const override { return "troupe.id_prefix"; }
    rocksdb::Slice Transform(const rocksdb::Slice& key) const override { return {key.data(), length(key)}; }
    bool InDomain(const rocksdb::Slice& key) const override {
      if (key.size() < 2 || key.size() != length(key) + 8) return false;
      return detail::seq_of_key(key.ToStringView()) != 0;
    }

  private:
    static std::size_t length(const rocksdb::Slice& key) {
      return 2 + (static_cast<std::size_t>(static_cast<unsigned char>(key[0])) << 8 |
                  static_cast<unsigned char>(key[1]));
    }
  };

  /// A table key's owner part (a u16 length and the owner's ID), for the
  /// memtable's insert hints; keys no longer than that are outside the
  /// domain. These tables have no range deletions.
  class owner_prefix_transform final : public rocksdb::SliceTransform {
  public:
    const char* Name() const override { return "troupe.owner_prefix"; }
    rocksdb::Slice Transform(const rocksdb::Slice& key) const override { return {key.data(), length(key)}; }
    bool InDomain(const rocksdb::Slice& key) const override { return key.size() >= 2 && key.size() > length(key); }

  private:
    static std::size_t length(const rocksdb::Slice& key) {
      return 2 + (static_cast<std::size_t>(static_cast<unsigned char>(key[0])) << 8 |
                  static_cast<unsigned char>(key[1]));
    }
  };

  static std::shared_ptr<const rocksdb::SliceTransform> owner_prefix_extractor() {
    static const auto instance = std::make_shared<const owner_prefix_transform>();
    return instance;
  }

  static std::shared_ptr<const rocksdb::SliceTransform> id_prefix_extractor() {
    static const auto instance = std::make_shared<const id_prefix_transform>();
    return instance;
  }

  rocksdb::WriteOptions write_options() const {
    rocksdb::WriteOptions wo;
    wo.sync = options_.durability == durability::sync;
    wo.disableWAL = options_.durability == durability::none;
    return wo;
  }

  void check_format(const std::string& path) {
    std::string v;
    auto st = db_->Get(rocksdb::ReadOptions{}, meta_cf(), "format", &v);
    if (st.IsNotFound()) {
      std::string f;
      detail::put_u32(f, format_version);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      if (!db_->Put(wo, meta_cf(), "format", f).ok())
        throw error(errc::storage_failure, "cannot write the format version of " + path);
      return;
    }
    if (!st.ok() || v.size() != 4) throw error(errc::storage_failure, "cannot read the format version of " + path);
    auto found = detail::get_be(v, 0, 4);
    if (found > format_version) {
      throw error(errc::store_format_too_new, "store " + path + " has format version " + std::to_string(found) +
                                                  "; this troupe reads up to " + std::to_string(format_version));
    }
  }

  void write_loop() {
    std::vector<request> work;
    std::vector<table_write> later;
    for (;;) {
      {
        std::unique_lock l(mutex_);
        wake_.wait(l, [&] { return stopping_ || !queue_.empty() || !later_.empty(); });
        if (queue_.empty() && later_.empty()) return; // stopping, nothing left
        work.swap(queue_);
        later.swap(later_);
      }
      commit_group(work, later);
      work.clear();
      later.clear();
      if (ids_.size() > options_.id_cache) evict_ids();
      cached_ids_.store(ids_.size(), std::memory_order_relaxed);
    }
  }

  /// What the writer knows of one persistence ID.
  struct id_entry {
    std::string prefix; // detail::id_prefix
    sequence_nr highest = 0;
    std::uint64_t used = 0; // the group that last wrote it
  };

  /// Drops the least recently written IDs, down to 90% of the cache, so
  /// that eviction runs once per tenth of the cache's turnover. Between
  /// groups only: every write of a dropped ID is committed, so reading its
  /// highest back from the store gives the same number.
  void evict_ids() {
    const std::size_t keep = std::max<std::size_t>(1, options_.id_cache - options_.id_cache / 10);
    std::vector<std::uint64_t> ages;
    ages.reserve(ids_.size());
    for (auto& [pid, e] : ids_) ages.push_back(e.used);
    auto cut = ages.begin() + static_cast<std::ptrdiff_t>(ids_.size() - keep);
    std::nth_element(ages.begin(), cut, ages.end());
    const auto oldest_kept = *cut;
    std::size_t excess = ids_.size() - keep;
    for (auto it = ids_.begin(); it != ids_.end() && excess > 0;) {
      if (it->second.used < oldest_kept) {
        it = ids_.erase(it);
        --excess;
      } else {
        ++it;
      }
    }
    // Ties at the cut: drop enough of them too.
    for (auto it = ids_.begin(); it != ids_.end() && excess > 0;) {
      if (it->second.used == oldest_kept) {
        it = ids_.erase(it);
        --excess;
      } else {
        ++it;
      }
    }
  }

  /// One write for every valid request of the group, after the writes
  /// `write_later` queued for it.
  void commit_group(std::vector<request>& group, const std::vector<table_write>& later) {
    ++groups_;
    // In key order: consecutive memtable inserts then land next to each
    // other. Requests of one ID keep their relative order (stable sort).
    order_.clear();
    for (auto& r : group) order_.push_back(&r);
    if (order_.size() > 1)
      std::stable_sort(order_.begin(), order_.end(), [](const request* a, const request* b) {
        return a->pid.size() != b->pid.size() ? a->pid.size() < b->pid.size() : a->pid < b->pid;
      });
    batch_.Clear();
    accepted_.clear();
    for (auto& w : later) put_table(w);
    std::uint64_t events = 0;
    for (auto* r : order_) {
      id_entry* id = nullptr;
      if (!r->events.empty() || (!r->extra && r->tables.empty())) {
        try {
          id = &entry(r->pid);
        } catch (const error& e) {
          r->done(e.code());
          continue;
        }
        bool valid = true;
        for (std::size_t i = 0; i < r->events.size(); ++i)
          if (r->events[i].seq != id->highest + 1 + i) valid = false;
        if (!valid) {
          r->done(errc::sequence_mismatch);
          continue;
        }
        for (auto& e : r->events)
          if (e.manifest.size() > 0xFFFF) valid = false;
        if (!valid) {
          r->done(errc::invalid_argument);
          continue;
        }
      }
      // Validated: from here on, the request's operations all go in.
      if (r->extra) {
        if (auto ec = r->extra(batch_)) {
          r->done(ec);
          continue;
        }
      } else if (r->events.empty() && r->tables.empty()) {
        r->done({});
        continue;
      }
      for (auto& w : r->tables) put_table(w);
      for (auto& e : r->events) put_event(id->prefix, e);
      accepted_.push_back({r, id, id ? id->highest : 0});
      if (!r->events.empty()) id->highest = r->events.back().seq;
      events += r->events.size();
    }
    if (accepted_.empty() && later.empty()) return;
    auto wo = write_options();
    auto st = db_->Write(wo, &batch_);
    std::error_code ec;
    if (st.ok()) {
      batches_.fetch_add(1, std::memory_order_relaxed);
      events_.fetch_add(events, std::memory_order_relaxed);
      records_.fetch_add(batch_.Count(), std::memory_order_relaxed);
    } else {
      ec = errc::storage_failure;
      // Nothing was written: roll the highest numbers back (in reverse, so
      // an ID with several requests gets the first one's).
      for (auto a = accepted_.rbegin(); a != accepted_.rend(); ++a)
        if (a->id) a->id->highest = a->highest_before;
    }
    for (auto& a : accepted_) a.r->done(ec);
  }

  void put_table(const table_write& w) {
    if (w.value)
      batch_.Put(table_cf(w.table), w.key, *w.value);
    else
      batch_.Delete(table_cf(w.table), w.key);
  }

  /// Adds one event to the batch, without building its key or value in a
  /// string of its own: RocksDB concatenates the parts.
  void put_event(const std::string& prefix, const event_record& e) {
    char seq[8];
    for (int i = 0; i < 8; ++i) seq[i] = static_cast<char>(e.seq >> (56 - 8 * i));
    char header[10];
    detail::event_header(e, header);
    const rocksdb::Slice key[2] = {prefix, {seq, 8}};
    const rocksdb::Slice value[3] = {{header, 10}, e.manifest, e.payload};
    batch_.Put(journal_cf(), rocksdb::SliceParts(key, 2), rocksdb::SliceParts(value, 3));
  }

  id_entry& entry(const std::string& pid) {
    auto it = ids_.find(pid);
    if (it == ids_.end()) {
      id_entry e;
      e.prefix = detail::id_prefix(pid);
      e.highest = read_highest(e.prefix);
      it = ids_.emplace(pid, std::move(e)).first;
    }
    it->second.used = groups_;
    return it->second;
  }

  sequence_nr read_highest(const std::string& prefix) {
    return std::max(last_seq(prefix, max_sequence_nr), read_watermark(prefix));
  }

  /// The number of the last event of the ID with `seq <= at_most` (0 if none).
  sequence_nr last_seq(const std::string& prefix, sequence_nr at_most) {
    rocksdb::ReadOptions ro;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, journal_cf()));
    it->SeekForPrev(detail::seq_key(prefix, at_most));
    if (it->Valid() && detail::has_prefix(it->key().ToStringView(), prefix)) return detail::seq_of_key(it->key().ToStringView());
    if (!it->status().ok()) throw error(errc::storage_failure, "cannot read the journal: " + it->status().ToString());
    return 0;
  }

  /// The highest number a deletion removed (0 if none).
  sequence_nr read_watermark(const std::string& prefix) {
    std::string v;
    auto st = db_->Get(rocksdb::ReadOptions{}, meta_cf(), highest_key(prefix), &v);
    if (st.IsNotFound()) return 0;
    if (!st.ok() || v.size() != 8) throw error(errc::storage_failure, "cannot read highest sequence number: " + st.ToString());
    return detail::get_be(v, 0, 8);
  }

  rocksdb_options options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<request> queue_;
  std::vector<table_write> later_; // write_later's, for the next group
  bool stopping_ = false;
  std::thread writer_;

  // Writer thread only (kept across groups to reuse their memory).
  struct accepted_request {
    request* r;
    id_entry* id;
    sequence_nr highest_before;
  };
  std::unordered_map<std::string, id_entry> ids_;
  std::uint64_t groups_ = 0; // groups committed, the clock of `id_entry::used`
  std::vector<request*> order_;
  std::vector<accepted_request> accepted_;
  rocksdb::WriteBatch batch_;

  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> events_{0};
  std::atomic<std::uint64_t> records_{0};
  std::atomic<std::size_t> cached_ids_{0};
};

} // namespace troupe::persistence
