#pragma once

/// \file
/// `troupe::persistence::journal`: the store-independent view of a journal
/// and snapshot store that persistent actors use, and its adapter for any
/// store.

#include <troupe/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/unique_function.hpp>

#include <pthread.h>

#include <asio/post.hpp>
#include <asio/thread_pool.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace troupe::persistence {

namespace detail {

/// One thread for blocking work, named for `top` and `perf`. Destruction
/// waits for the queued work and for every `post` still returning (a post
/// signals the pool's condition variable after the work may already have
/// run and released the last owner).
class blocking_thread {
public:
  explicit blocking_thread(const char* name) {
    post([name] { pthread_setname_np(pthread_self(), name); });
  }
  blocking_thread(const blocking_thread&) = delete;
  blocking_thread& operator=(const blocking_thread&) = delete;

  ~blocking_thread() {
    pool_.join();
    while (posting_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

  template <class F>
  void post(F&& f) {
    posting_.fetch_add(1, std::memory_order_relaxed);
    asio::post(pool_, std::forward<F>(f));
    posting_.fetch_sub(1, std::memory_order_release);
  }

  asio::thread_pool& pool() noexcept { return pool_; }

private:
  asio::thread_pool pool_{1};
  std::atomic<int> posting_{0};
};

} // namespace detail

/// A journal and snapshot store as persistent actors see it. Thread-safe.
///
/// Every call but `write` and `run_blocking` may block on storage: a
/// persistent actor makes them inside `run_blocking`, never on an actor
/// thread.
class journal {
public:
  virtual ~journal() = default;

  /// Appends `events` and applies `tables`, atomically; `done` runs once
  /// they are durable (or the write failed), on any thread, possibly before
  /// `write` returns. With no events, `pid` may be empty.
  virtual void write(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
                     troupe::detail::unique_function<void(std::error_code)> done) = 0;

  void write(std::string pid, std::vector<event_record> events,
             troupe::detail::unique_function<void(std::error_code)> done) {
    write(std::move(pid), std::move(events), {}, std::move(done));
  }

  /// Applies `tables` with a later write, without telling anyone when:
  /// for bookkeeping whose loss in a crash is harmless (a delivery's
  /// confirmation: the delivery is sent again and answered from the
  /// receiver's dedup mark). Applied before any write requested after this
  /// call; lost if the write that carries it fails. By default, a write of
  /// its own.
  virtual void write_later(std::vector<table_write> tables) {
    write({}, {}, std::move(tables), [](std::error_code) {});
  }

  /// The value of `key` in table `t` (empty if none).
  virtual std::error_code get(table t, std::string_view key, std::optional<std::string>& out) = 0;

  /// Calls `f(key, value)` for the keys of table `t` that start with
  /// `prefix`, in key order, until it returns false.
  virtual std::error_code scan(table t, std::string_view prefix,
                               const std::function<bool(std::string_view, std::string_view)>& f) = 0;

  /// Runs `f` on a thread where blocking storage calls are allowed (never an
  /// actor's thread).
  virtual void run_blocking(troupe::detail::unique_function<void()> f) = 0;

  /// A second thread, where a recovery decodes and applies events while
  /// `run_blocking`'s thread reads the next ones; null: both on one thread.
  virtual detail::blocking_thread* applier() noexcept { return nullptr; }

  /// Streams the events with `from <= seq <= to` to `f`, in order, at most
  /// `max` of them.
  virtual std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                                 const std::function<void(const event_record&)>& f) = 0;

  /// The highest sequence number ever written for `pid` (0 if none).
  virtual sequence_nr highest_sequence_nr(std::string_view pid) = 0;

  /// Deletes the events with `seq <= to`; the highest sequence number stays.
  virtual std::error_code delete_up_to(std::string_view pid, sequence_nr to) = 0;

  /// Saves a snapshot; one at the same sequence number is overwritten.
  virtual std::error_code save_snapshot(std::string_view pid, const snapshot_record& s) = 0;

  /// The latest snapshot matching `c` in `out` (empty if none). A snapshot
  /// that cannot be decoded gives `errc::corrupt_record` with only `out->seq`
  /// set, so that the caller can look for an older one.
  virtual std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                        std::optional<snapshot_record>& out) = 0;

  /// Deletes the snapshots matching `c`.
  virtual std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c) = 0;
};

/// Adapts a store with the `memory_store` / `rocksdb_store` interface, and
/// owns one thread for the blocking calls of recoveries and snapshots.
///
/// \code
/// auto store = std::make_shared<rocksdb_store>("data");
/// auto j = std::make_shared<journal_of<rocksdb_store>>(store);
/// \endcode
template <class Store>
class journal_of final : public journal {
public:
  /// Shares ownership of the store.
  explicit journal_of(std::shared_ptr<Store> s) : owner_(std::move(s)), store_(*owner_) {}
  /// Borrows the store, which must outlive the adapter.
  explicit journal_of(Store& s) : store_(s) {}

  using journal::write;

  void write(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
             troupe::detail::unique_function<void(std::error_code)> done) override {
    if constexpr (requires { store_.submit(std::move(pid), std::move(events), std::move(tables), std::move(done)); }) {
      store_.submit(std::move(pid), std::move(events), std::move(tables), std::move(done));
    } else {
      done(store_.write(pid, events, tables));
    }
  }

  void write_later(std::vector<table_write> tables) override {
    if constexpr (requires { store_.write_later(std::move(tables)); })
      store_.write_later(std::move(tables));
    else
      journal::write_later(std::move(tables));
  }

  std::error_code get(table t, std::string_view key, std::optional<std::string>& out) override {
    return store_.get(t, key, out);
  }

  std::error_code scan(table t, std::string_view prefix,
                       const std::function<bool(std::string_view, std::string_view)>& f) override {
    return store_.scan(t, prefix, f);
  }

  void run_blocking(troupe::detail::unique_function<void()> f) override { blocking_.post(std::move(f)); }

  detail::blocking_thread* applier() noexcept override { return &applier_; }

  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                         const std::function<void(const event_record&)>& f) override {
    return store_.replay(pid, from, to, max, f);
  }

  sequence_nr highest_sequence_nr(std::string_view pid) override { return store_.highest_sequence_nr(pid); }

  std::error_code delete_up_to(std::string_view pid, sequence_nr to) override { return store_.delete_up_to(pid, to); }

  std::error_code save_snapshot(std::string_view pid, const snapshot_record& s) override {
    return store_.save_snapshot(pid, s);
  }

  std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                std::optional<snapshot_record>& out) override {
    return store_.load_snapshot(pid, c, out);
  }

  std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c) override {
    return store_.delete_snapshots(pid, c);
  }

  Store& store() noexcept { return store_; }

private:
  std::shared_ptr<Store> owner_;
  Store& store_;
  // The reading thread waits for the applier: it goes first.
  detail::blocking_thread applier_{"troupe-replay"};
  detail::blocking_thread blocking_{"troupe-journal"};
};

} // namespace troupe::persistence
