#pragma once

/// \file
/// `troupe::persistence::postgres_store`: the journal, the snapshot store
/// and the tables of the layers above, in PostgreSQL, shared by several
/// processes. Each persistence ID has one writer at a time: a store claims
/// an ID (`claim`, or implicitly with its first events) and every later
/// write of it checks the claim in its own transaction, so a store whose
/// claim a newer one replaced gets `errc::fenced` and commits nothing.
/// One writer thread groups the writes that queue while a commit is under
/// way into the next commit (each write atomic on its own). The schema is
/// in docs/storage.md.
///
/// This header does not include libpq's: the engine is behind the store
/// (`detail::postgres_engine`). Header-only, it is defined at the end of
/// this header; with `TROUPE_SEPARATE_COMPILATION`, once, in the file that
/// includes `<troupe/postgres/impl/src.hpp>` (docs/building.md).

#include <troupe/detail/compile_mode.hpp>
#include <troupe/detail/function_ref.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>
#include <troupe/error.hpp>
#include <troupe/metrics.hpp>
#include <troupe/persistence/detail/live_ids.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/postgres/options.hpp>
#include <troupe/postgres/stats.hpp>

#include <asio/async_result.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::persistence {

namespace detail {
class postgres_engine;
}

/// A PostgreSQL schema holding the journal, the snapshots, the claims and
/// one SQL table for each table a layer above opens. Thread-safe; several
/// stores, in one process or many, may share one schema.
class postgres_store {
public:
  /// The version of the schema this store writes (`troupe_meta`).
  static constexpr int schema_version = 1;

  /// Connects, and creates the schema and its tables where they do not
  /// exist yet. Throws `troupe::error` (`storage_failure`, naming the
  /// server's message) when it cannot, and `store_format_too_new` for a
  /// schema a newer troupe wrote.
  TROUPE_DECL explicit postgres_store(postgres_options o);
  /// Completes what is queued, then closes the connections.
  TROUPE_DECL ~postgres_store();
  postgres_store(const postgres_store&) = delete;
  postgres_store& operator=(const postgres_store&) = delete;

  /// Drops `schema` and everything in it (for tests and tools).
  TROUPE_DECL static void drop_schema(const std::string& conninfo, const std::string& schema);

  /// The persistence IDs its live actors hold (one actor per ID).
  TROUPE_DECL detail::live_ids& live_ids() noexcept;
  /// This store's name in its claims.
  TROUPE_DECL const std::string& owner() const noexcept;

  // -- claims -------------------------------------------------------------------

  /// Claims `pid` for this store: from now on only this store's writes of
  /// it commit (another store's get `errc::fenced`) until another store
  /// claims it. A recovering actor's store claims before it reads, so that
  /// nothing the previous writer commits later can be missed.
  TROUPE_DECL std::error_code claim(std::string_view pid);
  /// The epoch of this store's claim of `pid` (0: it holds none).
  TROUPE_DECL std::int64_t epoch(std::string_view pid) const;

  // -- tables -----------------------------------------------------------------

  /// The table named `name`, created on first use (a SQL table of its own).
  /// Throws `invalid_argument` for an empty name, `storage_failure` when
  /// the server refuses.
  TROUPE_DECL table open_table(std::string_view name);
  /// The table named `name` if it exists in the database, without creating it.
  TROUPE_DECL std::optional<table> find_table(std::string_view name);
  /// Values of `t` whose time `f` gives has passed are deleted by
  /// `drop_expired`.
  TROUPE_DECL void set_expiry(table t, expiry_fn f);
  /// The expiry floor (`journal::expired_through`).
  TROUPE_DECL std::int64_t expired_through() const noexcept;
  /// Deletes the values of `t` that have expired by now, each only if it
  /// still holds the value found expired (one written since stays), in one
  /// transaction with the expiry floor, which is kept in the store and never
  /// decreases. Blocking.
  TROUPE_DECL std::error_code drop_expired(table t);

  // -- journal ----------------------------------------------------------------

  /// Appends `events` and applies `tables`, atomically, then calls
  /// `done(error_code)` on the writer thread. Sequence numbers must
  /// continue the ID's highest one without a gap (`sequence_mismatch`); a
  /// write of an ID another store claimed later fails with `fenced`.
  TROUPE_DECL void submit(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
                          troupe::detail::unique_function<void(std::error_code)> done);
  /// `submit`, waiting for its outcome.
  TROUPE_DECL std::error_code write(std::string_view pid, const std::vector<event_record>& events,
                                    const std::vector<table_write>& tables = {});

  /// As `write`, completing with `void(std::error_code)` on the handler's
  /// executor.
  template <class Token>
  auto async_write(std::string pid, std::vector<event_record> events, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler, std::string pid, std::vector<event_record> events) {
          troupe::detail::stored_handler<decltype(handler)> h(std::move(handler));
          submit(std::move(pid), std::move(events), {},
                 [h = std::move(h)](std::error_code ec) mutable { h.post(ec); });
        },
        token, std::move(pid), std::move(events));
  }

  /// The value of `key` in table `t` (empty if none).
  TROUPE_DECL std::error_code get(table t, std::string_view key, std::optional<std::string>& out);

  /// Calls `f(key, value)` for the keys of table `t` that start with
  /// `prefix`, in key order, until it returns false.
  template <class F>
  std::error_code scan(table t, std::string_view prefix, F&& f) {
    return scan_from(t, prefix, prefix, std::forward<F>(f));
  }
  /// As `scan`, from the first key at or after `from`. Reads in pages, and
  /// calls `f` between them without holding the connection (it may use
  /// the store).
  template <class F>
  std::error_code scan_from(table t, std::string_view prefix, std::string_view from, F&& f) {
    return scan_keys(t, prefix, from, troupe::detail::function_ref<bool(std::string_view, std::string_view)>(f));
  }

  /// Calls `f(const event_record&)` for the events with `from <= seq <= to`,
  /// in order, at most `max` of them.
  template <class F>
  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max, F&& f) {
    return replay_events(pid, from, to, max, troupe::detail::function_ref<void(event_record&)>(f));
  }

  /// The highest sequence number ever written for `pid` (0 if none); it
  /// never decreases, also when events are deleted. Throws
  /// `invalid_argument` for an invalid ID, `storage_failure` when the
  /// server cannot answer.
  TROUPE_DECL sequence_nr highest_sequence_nr(std::string_view pid);
  /// Deletes the events with `seq <= to`.
  TROUPE_DECL std::error_code delete_up_to(std::string_view pid, sequence_nr to);

  // -- snapshots --------------------------------------------------------------

  /// Saves a snapshot; one at the same sequence number is overwritten.
  TROUPE_DECL std::error_code save_snapshot(std::string_view pid, const snapshot_record& s);
  /// The latest snapshot matching `c`, if any.
  TROUPE_DECL std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                            std::optional<snapshot_record>& out);
  TROUPE_DECL std::error_code delete_snapshot(std::string_view pid, sequence_nr seq);
  TROUPE_DECL std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c);

  /// What the server said at the last failure (empty if none).
  TROUPE_DECL std::string last_failure() const;

  /// Commits so far, and the writes they carried (group commit's measure).
  using writer_counts = postgres_writer_counts;
  TROUPE_DECL writer_counts counts() const;
  /// Adds `counts()` to a metrics snapshot (`journal_of` does, for the
  /// actor system whose journal it is).
  TROUPE_DECL void report_metrics(metrics_snapshot& s) const;

private:
  TROUPE_DECL std::error_code scan_keys(table t, std::string_view prefix, std::string_view from,
                                        troupe::detail::function_ref<bool(std::string_view, std::string_view)> f);
  TROUPE_DECL std::error_code replay_events(std::string_view pid, sequence_nr from, sequence_nr to,
                                            std::uint64_t max, troupe::detail::function_ref<void(event_record&)> f);

  std::unique_ptr<detail::postgres_engine> engine_;
};

} // namespace troupe::persistence

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/postgres/impl/store.ipp>
#else
// The adapter's virtual functions are compiled once too.
#include <troupe/persistence/journal.hpp>
namespace troupe::persistence {
extern template class journal_of<postgres_store>;
}
#endif
