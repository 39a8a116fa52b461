#pragma once

/// \file
/// `troupe::persistence::journal`: the store-independent view of a journal,
/// a snapshot store and the tables next to them, as persistent actors and
/// the layers above use it; its asynchronous operations; and
/// `journal_of<Store>`, its adapter for any store.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/journal_meter.hpp>
#include <troupe/persistence/detail/live_ids.hpp>
#include <troupe/persistence/blocking_thread.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/system_state.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe::persistence {

/// A journal and snapshot store, with the tables of the layers above, as
/// persistent actors see it. Thread-safe.
///
/// `write` and `write_later` never block. Every other call may block on
/// storage, so from an actor make it through `async_run`, which runs it on
/// the journal's blocking thread and resumes the actor afterwards; a write
/// is awaited with `async_write`. Both are Asio initiating functions: one
/// `co_await` in a coroutine handler, or any other completion token.
class journal {
public:
  virtual ~journal() = default;

  /// Adds this journal's metrics to `s`: its writes' latency, events and
  /// failures, and what its store reports of itself. `set_journal` makes
  /// the actor system's snapshots call it. By default nothing.
  virtual void report_metrics(metrics_snapshot& s) const { (void)s; }

  /// Counts a recovery that replayed `events` in `took` (for the metrics).
  virtual void count_recovery(std::uint64_t events, std::chrono::steady_clock::duration took) noexcept {
    (void)events, (void)took;
  }

  // -- tables -------------------------------------------------------------------

  /// The table named `name`, created if the store has none of that name
  /// (which may block, once). The name is stable: it is the table's name in
  /// the store (a RocksDB column family, say). Throws `invalid_argument` for
  /// an empty name or one the store reserves for itself.
  virtual table open_table(std::string_view name) = 0;

  /// The table named `name` if the store has it, without creating it (a
  /// layer reading an older layout of its own, say).
  virtual std::optional<table> find_table(std::string_view name) = 0;

  /// Lets the store drop the values of table `t` whose time `f` gives has
  /// passed, whenever it rewrites them (RocksDB: in its compactions), and
  /// at `drop_expired`: a table of records that outlive their use then
  /// shrinks as fast as they expire, with no sweep of its own, also while
  /// their owners are not live. Until dropped they stay readable. A later
  /// call replaces `f`. By default the store keeps every value.
  virtual void set_expiry(table t, expiry_fn f) {
    (void)t;
    (void)f;
  }

  /// Blocking: drops the values of `t` that have expired by now (RocksDB:
  /// compacts the table). For tests and operators; the store drops them
  /// by itself as it goes.
  virtual std::error_code drop_expired(table t) {
    (void)t;
    return {};
  }

  /// The store's expiry floor: every value an expiry let it drop had its
  /// expiry at or before this time (ms since the epoch). It never
  /// decreases, also across restarts (it is durable before anything is
  /// dropped under it), whatever the wall clock does. `min()`: the store
  /// drops nothing.
  virtual std::int64_t expired_through() const noexcept { return std::numeric_limits<std::int64_t>::min(); }

  // -- writes (never block) ----------------------------------------------------

  /// Appends `events` and applies `tables`, atomically; `done` runs once
  /// they are durable (or the write failed), on any thread, possibly before
  /// `write` returns. With no events, `pid` may be empty.
  virtual void write(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
                     troupe::detail::unique_function<void(std::error_code)> done) = 0;

  /// Applies `tables` with a later write, without telling anyone when: for
  /// bookkeeping whose loss in a crash is harmless to the layer that makes
  /// it. Applied before any write requested after this call; lost if the
  /// write that carries it fails. Reads do not see it until it is applied:
  /// never decide from a read what a queued `write_later` may change. By
  /// default, a write of its own.
  virtual void write_later(std::vector<table_write> tables) {
    write({}, {}, std::move(tables), [](std::error_code) {});
  }

  // -- reads and maintenance (may block) -------------------------------------

  /// The value of `key` in table `t` (empty if none).
  virtual std::error_code get(table t, std::string_view key, std::optional<std::string>& out) = 0;

  /// As `get`, if the store can answer at once from memory (RocksDB's
  /// memtables and block cache), without I/O or waiting for the store's
  /// lock: then true, with `out` set. False when only `get` can tell (on
  /// the blocking thread, through `async_run`), and for a read that failed:
  /// `get` reports it. By default false. An actor may call it in a handler
  /// (RocksDB takes its own mutex briefly after a flush or a compaction).
  virtual bool try_get(table t, std::string_view key, std::optional<std::string>& out) {
    (void)t, (void)key;
    out.reset();
    return false;
  }

  /// Calls `f(key, value)` for the keys of table `t` that start with
  /// `prefix`, in key order, until it returns false.
  virtual std::error_code scan(table t, std::string_view prefix,
                               const std::function<bool(std::string_view, std::string_view)>& f) = 0;

  /// As `scan`, from the first key at or after `from` (paging: a scan that
  /// stopped goes on after its last key). By default a `scan` that skips
  /// the keys before `from`.
  virtual std::error_code scan_from(table t, std::string_view prefix, std::string_view from,
                                    const std::function<bool(std::string_view, std::string_view)>& f) {
    return scan(t, prefix, [&](std::string_view k, std::string_view v) { return k < from || f(k, v); });
  }

  /// Streams the events with `from <= seq <= to` to `f`, in order, at most
  /// `max` of them.
  virtual std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                                 const std::function<void(const event_record&)>& f) = 0;

  /// The highest sequence number ever written for `pid` (0 if none).
  virtual sequence_nr highest_sequence_nr(std::string_view pid) = 0;

  /// Makes this journal the one writer of `pid`: a store shared by several
  /// processes fences the journal that claimed it before (its writes of
  /// `pid` fail with `errc::fenced` from now on). Every recovery claims its
  /// ID before it reads, so nothing the previous writer could still commit
  /// is missed. A store of one process has nothing to do.
  virtual std::error_code claim(std::string_view pid) {
    (void)pid;
    return {};
  }

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

  /// What the store reported with its latest failure (its own message, what
  /// it was doing), for the message of an error whose code was passed on;
  /// empty if nothing failed or the store says nothing more.
  virtual std::string last_failure() const { return {}; }

  /// The persistence IDs the live actors of this journal's store hold (at
  /// most one actor per ID). A journal over a store shares the store's; by
  /// default, the journal's own.
  virtual detail::live_ids& live_ids() noexcept { return own_live_ids_; }

private:
  detail::live_ids own_live_ids_;

public:

  // -- threads -----------------------------------------------------------------

  /// Runs `f` on a thread where blocking storage calls are allowed (never an
  /// actor's thread), in the order posted.
  virtual void run_blocking(troupe::detail::unique_function<void()> f) = 0;

  /// A second thread, where a recovery decodes and applies events while
  /// `run_blocking`'s thread reads the next ones; null: both on one thread.
  virtual blocking_thread* applier() noexcept { return nullptr; }

  // -- asynchronous operations -------------------------------------------------

  /// `write` as an initiating function, with signature
  /// `void(std::error_code)`; the handler runs on its associated executor
  /// (never inside this call).
  ///
  /// \code
  /// auto [ec] = co_await j.async_write(pid, std::move(events), {}, asio::experimental::as_tuple(asio::use_awaitable));
  /// \endcode
  template <class Token = asio::use_awaitable_t<>>
  auto async_write(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
                   Token&& token = Token{}) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler, std::string pid, std::vector<event_record> events, std::vector<table_write> tables) {
          // (The guard is declared first: it goes after the handler.)
          troupe::detail::completion_guard g(handler);
          write(std::move(pid), std::move(events), std::move(tables),
                [g = std::move(g), h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))](
                    std::error_code ec) mutable { h.post(ec); });
        },
        token, std::move(pid), std::move(events), std::move(tables));
  }

  /// Runs `f()` on the blocking thread (`run_blocking`) and completes with
  /// what it returned or threw: signature `void(std::exception_ptr, R)`, or
  /// `void(std::exception_ptr)` for a `void` `f`. With `use_awaitable` (the
  /// default) `co_await j.async_run(f)` is `f()`'s value, or throws what it
  /// threw. `f` must not refer to anything that can die before it has run.
  ///
  /// \code
  /// std::optional<std::string> v = co_await j.async_run([&] {
  ///   std::optional<std::string> out;
  ///   if (auto ec = j.get(t, key, out)) throw troupe::error(ec, "reading " + key);
  ///   return out;
  /// });
  /// \endcode
  template <class F, class Token = asio::use_awaitable_t<>>
    requires std::is_invocable_v<F&>
  auto async_run(F f, Token&& token = Token{}) {
    using R = std::invoke_result_t<F&>;
    if constexpr (std::is_void_v<R>) {
      return asio::async_initiate<Token, void(std::exception_ptr)>(
          [this](auto handler, F f) {
            troupe::detail::completion_guard g(handler);
            run_blocking([g = std::move(g), f = std::move(f),
                          h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))]() mutable {
              std::exception_ptr ep;
              try {
                f();
              } catch (...) {
                ep = std::current_exception();
              }
              h.post(ep);
            });
          },
          token, std::move(f));
    } else {
      static_assert(std::is_default_constructible_v<R>, "troupe: async_run's result must be default-constructible");
      return asio::async_initiate<Token, void(std::exception_ptr, R)>(
          [this](auto handler, F f) {
            troupe::detail::completion_guard g(handler);
            run_blocking([g = std::move(g), f = std::move(f),
                          h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))]() mutable {
              std::exception_ptr ep;
              R r{};
              try {
                r = f();
              } catch (...) {
                ep = std::current_exception();
              }
              h.post(ep, std::move(r));
            });
          },
          token, std::move(f));
    }
  }
};

/// Adapts a store with the `memory_store` / `rocksdb_store` interface, and
/// owns one thread for the blocking calls of recoveries and snapshots (and
/// a second one that applies the events a recovery reads).
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

  table open_table(std::string_view name) override { return store_.open_table(name); }
  std::optional<table> find_table(std::string_view name) override { return store_.find_table(name); }

  void set_expiry(table t, expiry_fn f) override {
    if constexpr (requires { store_.set_expiry(t, std::move(f)); }) store_.set_expiry(t, std::move(f));
  }

  std::error_code drop_expired(table t) override {
    if constexpr (requires { store_.drop_expired(t); })
      return store_.drop_expired(t);
    else
      return {};
  }

  std::int64_t expired_through() const noexcept override {
    if constexpr (requires { store_.expired_through(); })
      return store_.expired_through();
    else
      return std::numeric_limits<std::int64_t>::min();
  }

  void write(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
             troupe::detail::unique_function<void(std::error_code)> done) override {
    // Timed from here to its completion (the meter shared: a completion
    // may come from the store's thread after this adapter has gone).
    troupe::detail::unique_function<void(std::error_code)> timed =
        [meter = meter_, started = std::chrono::steady_clock::now(), n = events.size(),
         done = std::move(done)](std::error_code ec) mutable {
          meter->record(std::chrono::steady_clock::now() - started, n, ec);
          done(ec);
        };
    if constexpr (requires { store_.submit(std::move(pid), std::move(events), std::move(tables), std::move(timed)); }) {
      store_.submit(std::move(pid), std::move(events), std::move(tables), std::move(timed));
    } else {
      auto ec = store_.write(pid, events, tables);
      timed(ec);
    }
  }

  void count_recovery(std::uint64_t events, std::chrono::steady_clock::duration took) noexcept override {
    meter_->record_recovery(events, took);
  }

  void report_metrics(metrics_snapshot& s) const override {
    meter_->report(s);
    if constexpr (requires { store_.report_metrics(s); }) store_.report_metrics(s);
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

  bool try_get(table t, std::string_view key, std::optional<std::string>& out) override {
    if constexpr (requires { store_.try_get(t, key, out); })
      return store_.try_get(t, key, out);
    else
      return journal::try_get(t, key, out);
  }

  std::error_code scan(table t, std::string_view prefix,
                       const std::function<bool(std::string_view, std::string_view)>& f) override {
    return store_.scan(t, prefix, f);
  }

  std::error_code scan_from(table t, std::string_view prefix, std::string_view from,
                            const std::function<bool(std::string_view, std::string_view)>& f) override {
    if constexpr (requires { store_.scan_from(t, prefix, from, f); })
      return store_.scan_from(t, prefix, from, f);
    else
      return journal::scan_from(t, prefix, from, f);
  }

  void run_blocking(troupe::detail::unique_function<void()> f) override { blocking_.post(std::move(f)); }

  blocking_thread* applier() noexcept override { return &applier_; }

  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                         const std::function<void(const event_record&)>& f) override {
    return store_.replay(pid, from, to, max, f);
  }

  sequence_nr highest_sequence_nr(std::string_view pid) override { return store_.highest_sequence_nr(pid); }

  std::error_code claim(std::string_view pid) override {
    if constexpr (requires { store_.claim(pid); })
      return store_.claim(pid);
    else
      return {};
  }

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

  detail::live_ids& live_ids() noexcept override {
    if constexpr (requires { store_.live_ids(); })
      return store_.live_ids();
    else
      return journal::live_ids();
  }

  std::string last_failure() const override {
    if constexpr (requires { store_.last_failure(); })
      return store_.last_failure();
    else
      return {};
  }

  Store& store() noexcept { return store_; }

private:
  std::shared_ptr<Store> owner_;
  Store& store_;
  std::shared_ptr<detail::journal_meter> meter_ = std::make_shared<detail::journal_meter>();
  // The reading thread waits for the applier: it goes first.
  blocking_thread applier_{"troupe-replay"};
  blocking_thread blocking_{"troupe-journal"};
};

} // namespace troupe::persistence
