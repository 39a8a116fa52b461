#pragma once

// The writer thread of a RocksDB store: it takes every request queued
// meanwhile, checks each one's sequence numbers, and commits them with one
// WriteBatch and one write (group commit). See docs/storage.md.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/rocksdb/stats.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/rocksdb/detail/expiry.hpp>
#include <troupe/rocksdb/detail/layout.hpp>
#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/detail/bytes.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/unique_function.hpp>

#include <pthread.h>
#include <time.h>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace troupe::persistence::detail {

class group_writer {
public:
  /// One write: events of one ID and table changes, or other operations
  /// (`extra`) added to the group's batch on the writer thread (all of
  /// them, or none with an error).
  struct request {
    std::string pid;
    std::vector<event_record> events;
    std::vector<table_write> tables;
    /// Given the batch, and the highest number of `pid` the writer knows,
    /// with the events this group put in the batch before it (0 when it
    /// knows none: then the database has it).
    troupe::detail::unique_function<std::error_code(rocksdb::WriteBatch&, sequence_nr)> extra;
    troupe::detail::unique_function<void(std::error_code)> done;
  };

  /// `reopen` closes and opens the database again (on this thread), after
  /// a failed write.
  /// `expiry`: the store's expiries, whose floor the writer advances (at
  /// most once a second, durably, while a table has an expiry); none for a
  /// store without them.
  group_writer(const rocksdb_layout& layout, rocksdb::WriteOptions options, std::size_t id_cache,
               failure_note& failures, troupe::detail::unique_function<rocksdb::Status()> reopen,
               std::shared_ptr<const background_errors> background = nullptr, expiries* expiry = nullptr)
      : layout_(layout), write_options_(options), id_cache_(id_cache), failures_(failures),
        reopen_(std::move(reopen)), background_(std::move(background)), expiry_(expiry) {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "troupe-writer"); // in top, perf, gdb
      loop();
    });
  }

  group_writer(const group_writer&) = delete;
  group_writer& operator=(const group_writer&) = delete;

  /// Writes what is queued, then stops the thread.
  ~group_writer() {
    {
      std::lock_guard g(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  /// Queues `r`; `r.done` runs on the writer thread, or here with
  /// `storage_failure` when the writer is stopping.
  void submit(request r) {
    {
      std::lock_guard g(mutex_);
      if (!stopping_) {
        queue_.push_back(std::move(r));
        wake_.notify_one();
        return;
      }
    }
    r.done(errc::storage_failure);
  }

  /// Table changes for the next group's batch, before its requests; lost
  /// when the writer is stopping.
  void later(std::vector<table_write> tables) {
    std::lock_guard g(mutex_);
    if (stopping_) return;
    for (auto& w : tables) later_.push_back(std::move(w));
    wake_.notify_one();
  }

  /// The code of the last failed reopen while it leaves the database
  /// closed; none otherwise.
  std::error_code closed_error() const noexcept {
    const int v = closed_.load(std::memory_order_acquire);
    return v ? std::error_code(v, persistence::error_category()) : std::error_code{};
  }
  bool on_writer_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

  /// Asks for a reopen of a database that a failed reopen left closed, with
  /// the backoff of a write (at most one attempt per interval: an empty
  /// request, which writes nothing); blocks until it was tried or declined.
  /// Not on the writer thread.
  std::error_code reopen_if_closed() {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    submit({{}, {}, {}, {}, [&p](std::error_code ec) { p.set_value(ec); }});
    return f.get();
  }

  /// Blocking: the expiry floor advanced to now, durably (before a
  /// compaction that drops what has expired by now).
  std::error_code advance_floor() {
    return run({}, [this](rocksdb::WriteBatch&, sequence_nr) {
      force_floor_ = true;
      return std::error_code{};
    });
  }

  /// The key of the expiry floor in `meta`.
  static constexpr std::string_view floor_key = "expiry_floor";

  /// Queues `extra` and blocks until its operations are durable (or failed).
  template <class F>
  std::error_code run(std::string pid, F extra) {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    submit({std::move(pid), {}, {}, std::move(extra), [&p](std::error_code ec) { p.set_value(ec); }});
    return f.get();
  }

  std::uint64_t batches_written() const noexcept { return batches_.load(std::memory_order_relaxed); }
  std::uint64_t events_written() const noexcept { return events_.load(std::memory_order_relaxed); }
  std::uint64_t records_written() const noexcept { return records_.load(std::memory_order_relaxed); }
  std::size_t cached_ids() const noexcept { return cached_ids_.load(std::memory_order_relaxed); }
  /// Read in the reverse of the order they grow (sequentially consistent),
  /// so that `writing <= busy` holds in every reading; `writing_cpu <=
  /// writing` holds as far as the thread's CPU clock and the steady clock
  /// agree (the CPU time is read inside the write's wall time).
  writer_times times() const noexcept {
    writer_times t;
    t.writing_cpu = std::chrono::nanoseconds(writing_cpu_ns_.load());
    t.writing = std::chrono::nanoseconds(writing_ns_.load());
    t.busy = std::chrono::nanoseconds(busy_ns_.load());
    return t;
  }

private:
  void loop() {
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
      counted_ = std::chrono::steady_clock::now();
      commit_group(work, later);
      work.clear();
      later.clear();
      if (ids_.size() > id_cache_) evict_ids();
      cached_ids_.store(ids_.size(), std::memory_order_relaxed);
      count_busy(std::chrono::steady_clock::now());
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
    const std::size_t keep = std::max<std::size_t>(1, id_cache_ - id_cache_ / 10);
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
    if (auto ec = recover()) {
      for (auto& r : group) r.done(ec);
      return;
    }
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
    created_.clear();
    for (auto& w : later) put_table(w);
    std::uint64_t events = 0;
    std::int64_t now = 0; // the group's write time, read once
    for (auto* r : order_) {
      id_entry* id = nullptr;
      if (!r->events.empty()) {
        bool valid = true;
        for (auto& e : r->events)
          if (e.manifest.size() > max_manifest || !valid_metadata(e.metadata)) valid = false;
        if (!valid) {
          r->done(troupe::errc::invalid_argument);
          continue;
        }
        try {
          id = &entry(r->pid);
        } catch (const error& e) {
          failures_.set(e.what());
          r->done(e.code());
          continue;
        }
        // (No number follows the largest one.)
        if (id->highest > max_sequence_nr - r->events.size()) valid = false;
        for (std::size_t i = 0; i < r->events.size() && valid; ++i)
          if (r->events[i].seq != id->highest + 1 + i) valid = false;
        if (!valid) {
          r->done(errc::sequence_mismatch);
          continue;
        }
      }
      // Keys it may only create: absent from the store and from this group
      // so far (one writer per store: no second writer can also create one).
      if (auto ec = check_new_keys(*r)) {
        r->done(ec);
        continue;
      }
      // Validated: from here on, the request's operations all go in.
      if (r->extra) {
        sequence_nr known = 0;
        if (!r->pid.empty())
          if (auto it = ids_.find(r->pid); it != ids_.end()) known = it->second.highest;
        if (auto ec = r->extra(batch_, known)) {
          r->done(ec);
          continue;
        }
      } else if (r->events.empty() && r->tables.empty()) {
        r->done({});
        continue;
      }
      for (auto& w : r->tables) put_table(w);
      if (!r->events.empty() && now == 0) now = troupe::detail::now_ms();
      for (auto& e : r->events) put_event(id->prefix, e, now);
      accepted_.push_back({r, id, id ? id->highest : 0});
      if (!r->events.empty()) id->highest = r->events.back().seq;
      events += r->events.size();
    }
    if (accepted_.empty() && later.empty()) return;
    // The expiry floor, while a table has an expiry: forced (before a
    // compaction), or at most once a second after a group written anyway;
    // a synced write of its own (so in every durability mode), after the
    // group's.
    std::int64_t floor = 0;
    if (expiry_ && expiry_->any() &&
        (force_floor_ || (!accepted_.empty() && std::chrono::steady_clock::now() >= next_floor_))) {
      next_floor_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      floor = std::max(troupe::detail::now_ms(), expiry_->floor());
    }
    force_floor_ = false;
    auto wo = write_options_;
    const auto start = std::chrono::steady_clock::now();
    const auto cpu_start = thread_cpu_ns();
    auto st = layout_.db->Write(wo, &batch_);
    const auto cpu = thread_cpu_ns() - cpu_start;
    const auto end = std::chrono::steady_clock::now();
    // Before the completions: a writer woken by one sees its write counted.
    count_busy(end);
    writing_ns_.fetch_add(ns(end - start));
    writing_cpu_ns_.fetch_add(cpu);
    std::error_code ec;
    if (!st.ok()) failed_ = true;
    if (st.ok() && floor) {
      rocksdb::WriteBatch b;
      b.Put(layout_.meta, floor_key, floor_value(floor));
      rocksdb::WriteOptions synced;
      synced.sync = true;
      // Durable: compactions may use it (if this fails, the group is
      // written all the same; only the floor stays where it was).
      if (layout_.db->Write(synced, &b).ok()) expiry_->set_floor(floor);
    }
    if (st.ok()) {
      batches_.fetch_add(1, std::memory_order_relaxed);
      events_.fetch_add(events, std::memory_order_relaxed);
      records_.fetch_add(batch_.Count(), std::memory_order_relaxed);
    } else {
      ec = write_code(st, background_ && background_->no_space());
      failures_.set("writing to the store failed, nothing of the write was acknowledged: " + st.ToString());
      // Nothing was written: roll the highest numbers back (in reverse, so
      // an ID with several requests gets the first one's).
      for (auto a = accepted_.rbegin(); a != accepted_.rend(); ++a)
        if (a->id) a->id->highest = a->highest_before;
    }
    for (auto& a : accepted_) a.r->done(ec);
  }

  /// After a failed write RocksDB refuses every write (its background
  /// error) until resumed: the store is reopened.
  /// What the writer knew of sequence numbers is read again: a write that
  /// failed may still be in the WAL (synced or not), and is then part of the
  /// journal. While the cause lasts (the disk still full) the attempt fails,
  /// at most once per interval (from `retry_interval`, doubling after each
  /// failed attempt up to `max_retry_interval`: each open writes to the
  /// store's log and flushes what it recovered); in between, writes fail
  /// as it did.
  std::error_code recover() {
    if (!failed_) return {};
    const auto now = std::chrono::steady_clock::now();
    // Throttled only while reopening keeps failing: a fresh failure (after
    // a reopen that worked) is recovered from at once.
    if (last_error_ && now - last_attempt_ < interval_) return last_error_;
    last_attempt_ = now;
    ids_.clear();
    // Not `DB::Resume()`: RocksDB 7.8 resumes without replacing a WAL whose
    // first append failed, and the next write to it aborts the process (an
    // assertion in its file writer). A reopen replaces every file writer.
    auto st = reopen_();
    if (st.ok()) {
      failed_ = false;
      last_error_ = {};
      interval_ = retry_interval;
      closed_.store(0, std::memory_order_release);
      return {};
    }
    interval_ = std::min(interval_ * 2, max_retry_interval);
    last_error_ = write_code(st, background_ && background_->no_space());
    closed_.store(last_error_.value(), std::memory_order_release);
    failures_.set("the store stopped after a failed write, and reopening it failed: " + st.ToString());
    return last_error_;
  }

  /// `key_exists` if a key `r` may only create is in the store or was put
  /// by this group before it; otherwise those keys count as this group's.
  std::error_code check_new_keys(const request& r) {
    bool any = false;
    for (auto& w : r.tables) {
      if (!w.only_new) continue;
      any = true;
      auto* cf = layout_.table_cf(w.table);
      if (!cf) return troupe::errc::invalid_argument;
      if (created_.contains(new_key(cf, w.key))) return errc::key_exists;
      std::string v;
      auto st = layout_.db->Get(rocksdb::ReadOptions{}, cf, w.key, &v);
      if (st.ok()) return errc::key_exists;
      if (!st.IsNotFound()) {
        failures_.set("checking a key the write may only create: " + st.ToString());
        return status_code(st);
      }
    }
    if (any)
      for (auto& w : r.tables)
        if (w.only_new) created_.insert(new_key(layout_.table_cf(w.table), w.key));
    return {};
  }
  static std::string new_key(rocksdb::ColumnFamilyHandle* cf, const std::string& key) {
    return std::to_string(cf->GetID()) + '\0' + key;
  }

  static constexpr std::chrono::milliseconds retry_interval{50}, max_retry_interval{1000};

  static std::string floor_value(std::int64_t f) {
    char v[8];
    troupe::detail::store_be<8>(v, static_cast<std::uint64_t>(f));
    return std::string(v, 8);
  }

  static std::uint64_t ns(std::chrono::steady_clock::duration d) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }

  /// Adds the group's time since it was last counted to `busy`.
  void count_busy(std::chrono::steady_clock::time_point now) {
    busy_ns_.fetch_add(ns(now - counted_));
    counted_ = now;
  }

  /// This thread's CPU time (a system call, twice per group).
  static std::uint64_t thread_cpu_ns() noexcept {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
  }

  void put_table(const table_write& w) {
    if (w.value)
      batch_.Put(layout_.table_cf(w.table), w.key, *w.value);
    else
      batch_.Delete(layout_.table_cf(w.table), w.key);
  }

  /// Adds one event to the batch, without building its key or value in a
  /// string of its own: RocksDB concatenates the parts.
  /// An event given without a write time gets `now`.
  void put_event(const std::string& prefix, const event_record& e, std::int64_t now) {
    char seq[8];
    troupe::detail::store_be<8>(seq, e.seq);
    const std::string entries = encode_entries(e.metadata);
    char header[event_header_size];
    detail::event_header(e, e.metadata.written_ms != 0 ? e.metadata.written_ms : now, entries, header);
    const rocksdb::Slice key[2] = {prefix, {seq, 8}};
    const rocksdb::Slice value[4] = {{header, event_header_size}, e.manifest, entries, e.payload};
    batch_.Put(layout_.journal, rocksdb::SliceParts(key, 2), rocksdb::SliceParts(value, 4));
  }

  id_entry& entry(const std::string& pid) {
    auto it = ids_.find(pid);
    if (it == ids_.end()) {
      id_entry e;
      e.prefix = detail::id_prefix(pid);
      e.highest = layout_.read_highest(e.prefix);
      it = ids_.emplace(pid, std::move(e)).first;
    }
    it->second.used = groups_;
    return it->second;
  }

  const rocksdb_layout& layout_;
  const rocksdb::WriteOptions write_options_;
  const std::size_t id_cache_;
  failure_note& failures_;
  troupe::detail::unique_function<rocksdb::Status()> reopen_;
  std::shared_ptr<const background_errors> background_;
  std::atomic<int> closed_{0}; // a failed reopen's code while the database is closed
  expiries* const expiry_;
  bool force_floor_ = false; // writer thread: this group advances the floor
  std::chrono::steady_clock::time_point next_floor_{};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<request> queue_;
  std::vector<table_write> later_; // for the next group
  bool stopping_ = false;
  std::thread thread_;

  // Writer thread only (kept across groups to reuse their memory).
  struct accepted_request {
    request* r;
    id_entry* id;
    sequence_nr highest_before;
  };
  std::unordered_map<std::string, id_entry> ids_;
  std::uint64_t groups_ = 0; // groups committed, the clock of `id_entry::used`
  bool failed_ = false;      // a write failed: recover() before the next
  std::chrono::steady_clock::time_point last_attempt_{};
  std::error_code last_error_;
  std::chrono::milliseconds interval_ = retry_interval;
  std::vector<request*> order_;
  std::vector<accepted_request> accepted_;
  std::unordered_set<std::string> created_; // keys created in this group (check_new_keys)
  rocksdb::WriteBatch batch_;

  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> events_{0};
  std::atomic<std::uint64_t> records_{0};
  std::atomic<std::size_t> cached_ids_{0};
  std::chrono::steady_clock::time_point counted_{}; // writer thread: `busy` counts up to here
  std::atomic<std::uint64_t> busy_ns_{0};
  std::atomic<std::uint64_t> writing_ns_{0};
  std::atomic<std::uint64_t> writing_cpu_ns_{0};
};

} // namespace troupe::persistence::detail
