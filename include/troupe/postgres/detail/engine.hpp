#pragma once

// The PostgreSQL engine behind `troupe::persistence::postgres_store`
// (troupe/postgres/store.hpp, which says what it does). Only the store's
// implementation includes it (once, in a separately compiled build), so a
// user's file never parses libpq.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/persistence/detail/live_ids.hpp>
#include <troupe/persistence/detail/table_registry.hpp>
#include <troupe/postgres/options.hpp>
#include <troupe/postgres/stats.hpp>
#include <troupe/postgres/detail/connection.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>

#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace troupe::persistence::detail {

class postgres_engine {
public:
  /// The version of the schema this store writes (`troupe_meta`).
  static constexpr int schema_version = 1;

  /// Connects, and creates the schema and its tables where they do not
  /// exist yet. Throws `troupe::error` (`storage_failure`, naming the
  /// server's message) when it cannot, and `store_format_too_new` for a
  /// schema a newer troupe wrote.
  explicit postgres_engine(postgres_options o)
      : options_(with_defaults(std::move(o))), owner_(options_.owner.empty() ? default_owner() : options_.owner),
        reader_(settings()), writer_conn_(settings()) {
    create_schema();
    writer_ = std::thread([this] { run_writer(); });
  }

  postgres_engine(const postgres_engine&) = delete;
  postgres_engine& operator=(const postgres_engine&) = delete;

  /// Completes what is queued, then closes the connections.
  ~postgres_engine() {
    {
      std::lock_guard g(queue_mutex_);
      stopping_ = true;
    }
    queue_changed_.notify_all();
    writer_.join();
  }

  /// Drops `schema` and everything in it (for tests and tools).
  static void drop_schema(const std::string& conninfo, const std::string& schema) {
    detail::pg::connection c(conninfo, schema, true);
    auto r = c.exec("DROP SCHEMA IF EXISTS " + c.identifier(schema) + " CASCADE");
    if (!r.ok()) throw error(errc::storage_failure, "dropping schema " + schema + ": " + r.message());
  }

  /// The persistence IDs its live actors hold (one actor per ID).
  detail::live_ids& live_ids() noexcept { return live_ids_; }

  /// This store's name in its claims.
  const std::string& owner() const noexcept { return owner_; }

  // -- claims -------------------------------------------------------------------

  /// Claims `pid` for this store: from now on only this store's writes of
  /// it commit (another store's get `errc::fenced`) until another store
  /// claims it. A recovering actor's store claims before it reads, so that
  /// nothing the previous writer commits later can be missed.
  std::error_code claim(std::string_view pid) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(reader_mutex_);
    return guarded(reader_, [&](auto& c) -> std::error_code {
      detail::pg::params p;
      p.bytes(pid).i64(enc(0)).text(owner_);
      auto r = c.run("claim", claim_sql, p);
      if (!r.ok()) return fail(r, "claiming " + std::string(pid));
      std::lock_guard h(held_mutex_);
      raise_held(std::string(pid), r.i64(0, 0));
      return {};
    });
  }

  /// The epoch of this store's claim of `pid` (0: it holds none).
  std::int64_t epoch(std::string_view pid) const {
    std::lock_guard h(held_mutex_);
    auto it = held_.find(pid);
    return it == held_.end() ? 0 : it->second;
  }

  // -- tables -----------------------------------------------------------------

  /// The table named `name`, created on first use (a SQL table of its own).
  /// Throws `invalid_argument` for an empty name, `storage_failure` when
  /// the server refuses.
  table open_table(std::string_view name) {
    std::lock_guard g(tables_mutex_);
    if (auto t = tables_.find(name)) return *t;
    const auto id = table_id(name, /*create=*/true);
    auto t = tables_.add(name);
    sql_names_[detail::table_registry::slot_of(t)] = "troupe_t" + std::to_string(*id);
    return t;
  }

  /// The table named `name` if it exists in the database, without creating it.
  std::optional<table> find_table(std::string_view name) {
    std::lock_guard g(tables_mutex_);
    if (auto t = tables_.find(name)) return t;
    const auto id = table_id(name, /*create=*/false);
    if (!id) return std::nullopt;
    auto t = tables_.add(name);
    sql_names_[detail::table_registry::slot_of(t)] = "troupe_t" + std::to_string(*id);
    return t;
  }

  /// Values of `t` whose time `f` gives has passed are deleted by
  /// `drop_expired`.
  void set_expiry(table t, expiry_fn f) {
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return;
    std::lock_guard g(expiry_mutex_);
    expiry_[slot] = std::move(f);
  }

  std::int64_t expired_through() const noexcept {
    std::lock_guard g(expiry_mutex_);
    return expired_through_;
  }

  /// Deletes the values of `t` that have expired by now, each only if it
  /// still holds the value found expired (one written since stays), in one
  /// transaction with the expiry floor, which is kept in the store and never
  /// decreases. Blocking.
  std::error_code drop_expired(table t) {
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    expiry_fn f;
    {
      std::lock_guard g(expiry_mutex_);
      f = expiry_[slot];
    }
    if (!f) return {};
    const auto now = troupe::detail::now_ms();
    std::vector<std::pair<std::string, std::string>> gone;
    if (auto ec = scan(t, {}, [&](std::string_view k, std::string_view v) {
          const auto e = f(k, v);
          if (e && *e <= now) gone.emplace_back(k, v);
          return true;
        }))
      return ec;
    std::lock_guard g(reader_mutex_);
    if (auto ec = guarded(reader_, [&](auto& c) -> std::error_code {
          const auto& n = sql_names_[slot];
          auto b = c.exec("BEGIN");
          if (!b.ok()) return fail(b, "deleting expired values");
          detail::pg::params floor;
          floor.text(std::to_string(now));
          auto r = c.run("expired_through",
                         "INSERT INTO troupe_meta VALUES ('expired_through', $1) ON CONFLICT (key) DO UPDATE "
                         "SET value = GREATEST(troupe_meta.value::bigint, EXCLUDED.value::bigint)::text",
                         floor);
          for (std::size_t i = 0; r.ok() && i < gone.size(); ++i) {
            detail::pg::params p;
            p.bytes(gone[i].first).bytes(gone[i].second);
            r = c.run("expire_" + n, "DELETE FROM " + n + " WHERE key = $1 AND value = $2", p);
          }
          if (r.ok()) {
            // Raised before COMMIT is sent: a commit whose answer is lost
            // may have dropped the values, and the floor must cover them
            // (a floor too high only makes the layers more careful).
            {
              std::lock_guard e(expiry_mutex_);
              expired_through_ = std::max(expired_through_, now);
            }
            r = c.exec("COMMIT");
          }
          if (!r.ok()) {
            const auto ec = fail(r, "deleting expired values");
            (void)c.exec("ROLLBACK");
            return ec;
          }
          return {};
        }))
      return ec;
    std::lock_guard e(expiry_mutex_);
    expired_through_ = std::max(expired_through_, now);
    return {};
  }

  // -- journal ----------------------------------------------------------------

  /// Appends `events` and applies `tables`, atomically, then calls
  /// `done(error_code)` on the writer thread. Sequence numbers must
  /// continue the ID's highest one without a gap (`sequence_mismatch`); a
  /// write of an ID another store claimed later fails with `fenced`.
  void submit(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
              troupe::detail::unique_function<void(std::error_code)> done) {
    if (auto ec = validate(pid, events, tables)) return done(ec);
    {
      std::lock_guard g(queue_mutex_);
      if (!stopping_) {
        queue_.push_back(pending{std::move(pid), std::move(events), std::move(tables), std::move(done)});
        queue_changed_.notify_one();
        return;
      }
    }
    done(errc::storage_failure);
  }

  /// `submit`, waiting for its outcome.
  std::error_code write(std::string_view pid, const std::vector<event_record>& events,
                        const std::vector<table_write>& tables = {}) {
    std::mutex m;
    std::condition_variable cv;
    std::optional<std::error_code> out;
    submit(std::string(pid), events, tables, [&](std::error_code ec) {
      std::lock_guard g(m);
      out = ec;
      cv.notify_one();
    });
    std::unique_lock l(m);
    cv.wait(l, [&] { return out.has_value(); });
    return *out;
  }

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
  std::error_code get(table t, std::string_view key, std::optional<std::string>& out) {
    out.reset();
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    std::lock_guard g(reader_mutex_);
    return guarded(reader_, [&](auto& c) -> std::error_code {
      const auto& n = sql_names_[slot];
      detail::pg::params p;
      p.bytes(key);
      auto r = c.run("get_" + n, "SELECT value FROM " + n + " WHERE key = $1", p);
      if (!r.ok()) return fail(r, "reading a table");
      if (r.rows() == 1) out = std::string(r.bytes(0, 0));
      return {};
    });
  }

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
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    const auto& n = sql_names_[slot];
    std::string at(std::max(prefix, from));
    bool first = true;
    for (;;) {
      std::vector<std::pair<std::string, std::string>> page;
      {
        std::lock_guard g(reader_mutex_);
        if (auto ec = guarded(reader_, [&](auto& c) -> std::error_code {
              detail::pg::params p;
              p.bytes(at).i64(page_size);
              auto r = first ? c.run("scan0_" + n,
                                     "SELECT key, value FROM " + n + " WHERE key >= $1 ORDER BY key LIMIT $2", p)
                             : c.run("scan_" + n,
                                     "SELECT key, value FROM " + n + " WHERE key > $1 ORDER BY key LIMIT $2", p);
              if (!r.ok()) return fail(r, "scanning a table");
              for (int i = 0; i < r.rows(); ++i) page.emplace_back(r.bytes(i, 0), r.bytes(i, 1));
              return {};
            }))
          return ec;
      }
      first = false;
      for (auto& [k, v] : page) {
        if (!k.starts_with(prefix)) return {};
        if (!f(std::string_view(k), std::string_view(v))) return {};
      }
      if (page.size() < static_cast<std::size_t>(page_size)) return {};
      at = page.back().first;
    }
  }

  /// Calls `f(const event_record&)` for the events with `from <= seq <= to`,
  /// in order, at most `max` of them.
  template <class F>
  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max, F&& f) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::uint64_t passed = 0;
    while (from <= to && passed < max) {
      std::vector<event_record> page;
      {
        std::lock_guard g(reader_mutex_);
        if (auto ec = guarded(reader_, [&](auto& c) -> std::error_code {
              detail::pg::params p;
              const auto limit = std::min<std::uint64_t>(page_size, max - passed);
              p.bytes(pid).i64(enc(from)).i64(enc(to)).i64(static_cast<std::int64_t>(limit));
              auto r = c.run("replay", replay_sql, p);
              if (!r.ok()) return fail(r, "replaying " + std::string(pid));
              for (int i = 0; i < r.rows(); ++i) {
                event_record e;
                e.seq = dec(r.i64(i, 0));
                e.manifest = r.bytes(i, 1);
                e.version = static_cast<std::uint32_t>(r.i32(i, 2));
                e.payload = r.bytes(i, 3);
                if (!detail::decode_entries(r.bytes(i, 4), e.metadata)) return errc::corrupt_record;
                e.metadata.written_ms = r.i64(i, 5);
                page.push_back(std::move(e));
              }
              return {};
            }))
          return ec;
      }
      if (page.empty()) break;
      for (auto& e : page) f(e);
      passed += page.size();
      if (page.back().seq == max_sequence_nr) break;
      from = page.back().seq + 1;
    }
    return {};
  }

  /// The highest sequence number ever written for `pid` (0 if none); it
  /// never decreases, also when events are deleted. Throws
  /// `invalid_argument` for an invalid ID, `storage_failure` when the
  /// server cannot answer.
  sequence_nr highest_sequence_nr(std::string_view pid) {
    detail::check_pid(pid);
    std::lock_guard g(reader_mutex_);
    sequence_nr out = 0;
    auto ec = guarded(reader_, [&](auto& c) -> std::error_code {
      detail::pg::params p;
      p.bytes(pid);
      auto r = c.run("highest", "SELECT highest FROM troupe_ids WHERE persistence_id = $1", p);
      if (!r.ok()) return fail(r, "reading the highest sequence number of " + std::string(pid));
      if (r.rows() == 1) out = dec(r.i64(0, 0));
      return {};
    });
    if (ec) throw error(ec, last_failure());
    return out;
  }

  /// Deletes the events with `seq <= to`.
  std::error_code delete_up_to(std::string_view pid, sequence_nr to) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(reader_mutex_);
    return guarded(reader_, [&](auto& c) -> std::error_code {
      detail::pg::params p;
      p.bytes(pid).i64(enc(to));
      auto r = c.run("delete_events", "DELETE FROM troupe_journal WHERE persistence_id = $1 AND seq_nr <= $2", p);
      return r.ok() ? std::error_code{} : fail(r, "deleting events of " + std::string(pid));
    });
  }

  // -- snapshots --------------------------------------------------------------

  /// Saves a snapshot; one at the same sequence number is overwritten.
  std::error_code save_snapshot(std::string_view pid, const snapshot_record& s) {
    if (!detail::valid_pid(pid) || !detail::valid_metadata(s.metadata)) return troupe::errc::invalid_argument;
    std::lock_guard g(reader_mutex_);
    return guarded(reader_, [&](auto& c) -> std::error_code {
      detail::pg::params p;
      p.bytes(pid)
          .i64(enc(s.seq))
          .i64(s.timestamp_ms)
          .i32(static_cast<std::int32_t>(s.version))
          .bytes(s.payload)
          .bytes(detail::encode_entries(s.metadata))
          .i64(s.metadata.written_ms == 0 ? troupe::detail::now_ms() : s.metadata.written_ms);
      auto r = c.run("save_snapshot",
                     "INSERT INTO troupe_snapshots VALUES ($1, $2, $3, $4, $5, $6, $7) "
                     "ON CONFLICT (persistence_id, seq_nr) DO UPDATE SET timestamp_ms = EXCLUDED.timestamp_ms, "
                     "version = EXCLUDED.version, payload = EXCLUDED.payload, entries = EXCLUDED.entries, "
                     "written_ms = EXCLUDED.written_ms",
                     p);
      return r.ok() ? std::error_code{} : fail(r, "saving a snapshot of " + std::string(pid));
    });
  }

  /// The latest snapshot matching `c`, if any.
  std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c, std::optional<snapshot_record>& out) {
    out.reset();
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(reader_mutex_);
    return guarded(reader_, [&](auto& conn) -> std::error_code {
      auto p = criteria(pid, c);
      auto r = conn.run("load_snapshot",
                        "SELECT seq_nr, timestamp_ms, version, payload, entries, written_ms FROM troupe_snapshots "
                        "WHERE persistence_id = $1 AND seq_nr BETWEEN $2 AND $3 AND timestamp_ms BETWEEN $4 AND $5 "
                        "ORDER BY seq_nr DESC LIMIT 1",
                        p);
      if (!r.ok()) return fail(r, "loading a snapshot of " + std::string(pid));
      if (r.rows() == 0) return {};
      snapshot_record s;
      s.seq = dec(r.i64(0, 0));
      s.timestamp_ms = r.i64(0, 1);
      s.version = static_cast<std::uint32_t>(r.i32(0, 2));
      s.payload = r.bytes(0, 3);
      if (!detail::decode_entries(r.bytes(0, 4), s.metadata)) return errc::corrupt_record;
      s.metadata.written_ms = r.i64(0, 5);
      out = std::move(s);
      return {};
    });
  }

  std::error_code delete_snapshot(std::string_view pid, sequence_nr seq) {
    return delete_snapshots(pid, snapshot_criteria{.max_seq = seq, .min_seq = seq});
  }

  std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(reader_mutex_);
    return guarded(reader_, [&](auto& conn) -> std::error_code {
      auto p = criteria(pid, c);
      auto r = conn.run("delete_snapshots",
                        "DELETE FROM troupe_snapshots WHERE persistence_id = $1 AND seq_nr BETWEEN $2 AND $3 "
                        "AND timestamp_ms BETWEEN $4 AND $5",
                        p);
      return r.ok() ? std::error_code{} : fail(r, "deleting snapshots of " + std::string(pid));
    });
  }

  /// What the server said at the last failure (empty if none).
  std::string last_failure() const {
    std::lock_guard g(failure_mutex_);
    return last_failure_;
  }

  using writer_counts = postgres_writer_counts;
  writer_counts counts() const {
    std::lock_guard g(queue_mutex_);
    return counts_;
  }

private:
  struct pending {
    std::string pid;
    std::vector<event_record> events;
    std::vector<table_write> tables;
    troupe::detail::unique_function<void(std::error_code)> done;
    std::error_code result{};
    std::int64_t claimed = 0; // the epoch this write's claim took, if it claimed
    bool retry = false;       // it failed as a deadlock's or a serialization's victim
  };
  static constexpr int max_attempts = 5;

  static constexpr int page_size = 256;

  // Sequence numbers are unsigned 64-bit; PostgreSQL's bigint is signed:
  // flipping the top bit keeps their order.
  static std::int64_t enc(sequence_nr s) noexcept { return static_cast<std::int64_t>(s ^ (1ULL << 63)); }
  static sequence_nr dec(std::int64_t v) noexcept { return static_cast<sequence_nr>(v) ^ (1ULL << 63); }

  static constexpr const char* claim_sql =
      "INSERT INTO troupe_ids (persistence_id, highest, epoch, owner) VALUES ($1, $2, 1, $3) "
      "ON CONFLICT (persistence_id) DO UPDATE SET epoch = troupe_ids.epoch + 1, owner = EXCLUDED.owner "
      "RETURNING epoch";
  static constexpr const char* replay_sql =
      "SELECT seq_nr, manifest, version, payload, entries, written_ms FROM troupe_journal "
      "WHERE persistence_id = $1 AND seq_nr BETWEEN $2 AND $3 ORDER BY seq_nr LIMIT $4";

  bool sync() const noexcept { return options_.durability == durability::sync; }

  detail::pg::connection_settings settings() const {
    return {options_.conninfo, options_.schema, sync(), options_.io_timeout, options_.reconnect_backoff,
            options_.max_reconnect_backoff};
  }

  static postgres_options with_defaults(postgres_options o) {
    o.max_group = std::max<std::size_t>(o.max_group, 1); // (0 would never take a write)
    o.io_timeout = std::max(o.io_timeout, std::chrono::milliseconds(1));
    return o;
  }

  static std::string default_owner() {
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    std::random_device rd;
    const auto r = (std::uint64_t{rd()} << 32) | rd();
    char tail[32];
    std::snprintf(tail, sizeof tail, "%016llx", static_cast<unsigned long long>(r));
    return std::string(host) + ":" + std::to_string(::getpid()) + ":" + tail;
  }

  std::error_code fail(const detail::pg::result& r, const std::string& what) const {
    std::lock_guard g(failure_mutex_);
    last_failure_ = what + ": " + r.message();
    return detail::pg::code_of(r);
  }

  /// Runs `f(connection)`, turning a lost connection that cannot be opened
  /// again (thrown) into `storage_failure`.
  template <class F>
  std::error_code guarded(detail::pg::connection& c, F&& f) const {
    // Each use is whole (a transaction ends within it): one whose
    // connection was lost leaves nothing that refuses the next use.
    detail::pg::use_scope use{c};
    try {
      return f(c);
    } catch (const std::exception& e) {
      std::lock_guard g(failure_mutex_);
      last_failure_ = e.what();
      return errc::storage_failure;
    }
  }

  detail::pg::params criteria(std::string_view pid, const snapshot_criteria& c) const {
    detail::pg::params p;
    p.bytes(pid).i64(enc(c.min_seq)).i64(enc(c.max_seq)).i64(c.min_timestamp_ms).i64(c.max_timestamp_ms);
    return p;
  }

  void create_schema() {
    std::lock_guard g(reader_mutex_);
    auto& c = reader_;
    detail::pg::use_scope use{c};
    const auto schema = c.identifier(options_.schema);
    // One process creates at a time (CREATE ... IF NOT EXISTS races with
    // itself on the catalog).
    const std::string sql =
        "BEGIN; SELECT pg_advisory_xact_lock(7404171);"
        "CREATE SCHEMA IF NOT EXISTS " + schema + ";"
        "CREATE TABLE IF NOT EXISTS troupe_meta (key text PRIMARY KEY, value text NOT NULL);"
        "INSERT INTO troupe_meta VALUES ('schema_version', '" + std::to_string(schema_version) + "') "
        "ON CONFLICT (key) DO NOTHING;"
        "CREATE TABLE IF NOT EXISTS troupe_ids (persistence_id bytea PRIMARY KEY, highest bigint NOT NULL, "
        "epoch bigint NOT NULL, owner text NOT NULL);"
        "CREATE TABLE IF NOT EXISTS troupe_journal (persistence_id bytea NOT NULL, seq_nr bigint NOT NULL, "
        "manifest bytea NOT NULL, version integer NOT NULL, payload bytea NOT NULL, entries bytea NOT NULL, "
        "written_ms bigint NOT NULL, PRIMARY KEY (persistence_id, seq_nr));"
        "CREATE TABLE IF NOT EXISTS troupe_snapshots (persistence_id bytea NOT NULL, seq_nr bigint NOT NULL, "
        "timestamp_ms bigint NOT NULL, version integer NOT NULL, payload bytea NOT NULL, entries bytea NOT NULL, "
        "written_ms bigint NOT NULL, PRIMARY KEY (persistence_id, seq_nr));"
        "CREATE TABLE IF NOT EXISTS troupe_tables (name bytea PRIMARY KEY, id serial UNIQUE);"
        "COMMIT;";
    auto r = c.exec(sql);
    if (!r.ok()) {
      (void)c.exec("ROLLBACK");
      throw error(errc::storage_failure, "creating the PostgreSQL schema " + options_.schema + ": " + r.message());
    }
    auto v = c.exec("SELECT value FROM troupe_meta WHERE key = 'schema_version'");
    if (!v.ok() || v.rows() != 1) throw error(errc::storage_failure, "reading the schema version: " + v.message());
    const auto version = std::stoi(std::string(v.bytes(0, 0)));
    auto floor = c.exec("SELECT value FROM troupe_meta WHERE key = 'expired_through'");
    if (!floor.ok()) throw error(errc::storage_failure, "reading the expiry floor: " + floor.message());
    if (floor.rows() == 1) expired_through_ = std::stoll(std::string(floor.bytes(0, 0)));
    if (version > schema_version)
      throw error(errc::store_format_too_new, "schema " + options_.schema + " has version " + std::to_string(version) +
                                                  "; this troupe reads up to " + std::to_string(schema_version));
  }

  /// The number of table `name`'s SQL table; created (with the table) if
  /// `create`, else none when it does not exist.
  std::optional<std::int32_t> table_id(std::string_view name, bool create) {
    if (name.empty()) throw error(troupe::errc::invalid_argument, "a table name must not be empty");
    std::lock_guard g(reader_mutex_);
    auto& c = reader_;
    detail::pg::use_scope use{c}; // (a transaction below, whose connection may be lost)
    detail::pg::params p;
    p.bytes(name);
    auto r = c.exec("SELECT id FROM troupe_tables WHERE name = $1", p);
    if (!r.ok()) throw error(errc::storage_failure, "reading the table list: " + r.message());
    if (r.rows() == 1) return r.i32(0, 0);
    if (!create) return std::nullopt;
    auto b = c.exec("BEGIN; SELECT pg_advisory_xact_lock(7404171)");
    if (!b.ok()) {
      // (Cancelled, timed out: the transaction is aborted, and the
      // connection unusable until it ends.)
      (void)c.exec("ROLLBACK");
      throw error(errc::storage_failure, "creating table " + std::string(name) + ": " + b.message());
    }
    detail::pg::params q;
    q.bytes(name);
    auto ins = c.exec(
        "WITH n AS (INSERT INTO troupe_tables (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id) "
        "SELECT id FROM n UNION ALL SELECT id FROM troupe_tables WHERE name = $1",
        q);
    if (!ins.ok() || ins.rows() < 1) {
      (void)c.exec("ROLLBACK");
      throw error(errc::storage_failure, "creating table " + std::string(name) + ": " + ins.message());
    }
    const auto id = ins.i32(0, 0);
    auto t = c.exec("CREATE TABLE IF NOT EXISTS troupe_t" + std::to_string(id) +
                    " (key bytea PRIMARY KEY, value bytea NOT NULL); COMMIT");
    if (!t.ok()) {
      (void)c.exec("ROLLBACK");
      throw error(errc::storage_failure, "creating table " + std::string(name) + ": " + t.message());
    }
    return id;
  }

  std::error_code validate(std::string_view pid, const std::vector<event_record>& events,
                           const std::vector<table_write>& tables) const {
    if (!events.empty() && !detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    for (auto& e : events)
      if (e.manifest.size() > detail::max_manifest || !detail::valid_metadata(e.metadata))
        return troupe::errc::invalid_argument;
    for (std::size_t i = 1; i < events.size(); ++i)
      if (events[i].seq != events[0].seq + i) return errc::sequence_mismatch;
    if (!events.empty() && (events[0].seq == 0 || events.back().seq < events[0].seq)) return errc::sequence_mismatch;
    for (auto& w : tables)
      if (tables_.slot(w.table) == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    return {};
  }

  // -- the writer thread --------------------------------------------------------

  void run_writer() {
    std::vector<pending> group;
    for (;;) {
      {
        std::unique_lock l(queue_mutex_);
        queue_changed_.wait(l, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return; // stopping, and nothing left
        while (!queue_.empty() && group.size() < options_.max_group) {
          group.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      commit(group);
      {
        std::lock_guard g(queue_mutex_);
        ++counts_.commits;
        counts_.writes += group.size();
      }
      for (auto& w : group) w.done(w.result);
      group.clear();
    }
  }

  /// One transaction for the group, a savepoint per write: a write that
  /// fails is rolled back alone; the commit acknowledges the others. A
  /// commit whose answer is lost (the connection dropped after COMMIT was
  /// sent) is not retried: its outcome is asked of the server by the
  /// transaction's ID (`resolve`), and the group's writes complete with it.
  void commit(std::vector<pending>& group) {
    auto& c = writer_conn_;
    std::int64_t txid = 0;
    bool commit_sent = false;
    // A group chosen as a deadlock's victim (two stores writing the same
    // rows in other orders) is rolled back whole and runs again after a
    // short random pause: the other store's transaction goes on meanwhile.
    bool victim = false;
    std::error_code ec;
    for (int attempt = 1;; ++attempt) {
      victim = false;
      ec = guarded(c, [&](auto& conn) -> std::error_code {
        auto b = conn.exec("BEGIN; SELECT txid_current()");
        if (!b.ok() || b.rows() != 1) return fail(b, "beginning a transaction");
        txid = std::stoll(std::string(b.bytes(0, 0)));
        for (auto& w : group) w.claimed = 0;
        if (pipelined(conn, group, victim)) return send_commit(conn, commit_sent);
        if (victim) return errc::storage_failure;
        // One of them failed (or the pipeline did): again, one at a time.
        for (auto& w : group) w.claimed = 0;
        auto again = conn.exec("ROLLBACK; BEGIN; SELECT txid_current()");
        if (!again.ok() || again.rows() != 1) return fail(again, "beginning a transaction");
        txid = std::stoll(std::string(again.bytes(0, 0)));
        {
          std::lock_guard g(queue_mutex_);
          ++counts_.one_at_a_time;
        }
        for (auto& w : group) {
          auto s = conn.exec("SAVEPOINT w");
          if (!s.ok()) return fail(s, "a savepoint");
          w.retry = false;
          w.result = apply(conn, w);
          if (w.retry) {
            victim = true;
            return errc::storage_failure;
          }
          auto e = conn.exec(w.result ? "ROLLBACK TO SAVEPOINT w" : "RELEASE SAVEPOINT w");
          if (!e.ok()) return fail(e, "ending a savepoint");
        }
        return send_commit(conn, commit_sent);
      });
      if (!victim || attempt == max_attempts) break;
      try {
        if (!c.broken()) (void)c.exec("ROLLBACK");
      } catch (...) {
      }
      for (auto& w : group) w.result = {};
      std::uniform_int_distribution<int> pause(1, 20 * attempt);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause(backoff_rng_)));
      std::lock_guard g(queue_mutex_);
      ++counts_.deadlock_retries;
    }
    if (ec && commit_sent) {
      // Committed or not: the server knows.
      if (auto committed = resolve(txid)) {
        std::lock_guard g(queue_mutex_);
        ++counts_.resolved;
        if (*committed) ec = {};
      } else {
        std::lock_guard g(failure_mutex_);
        last_failure_ = "the outcome of transaction " + std::to_string(txid) +
                        " is unknown (its commit's answer was lost, and the server could not say): " + last_failure_;
      }
    }
    if (ec) {
      try {
        if (!c.broken()) (void)c.exec("ROLLBACK");
      } catch (...) {
      }
      for (auto& w : group)
        if (!w.result) w.result = ec;
      return;
    }
    std::lock_guard h(held_mutex_);
    for (auto& w : group)
      if (!w.result && w.claimed) raise_held(w.pid, w.claimed);
  }

  /// Sends COMMIT and reads its answer; `sent` tells whether it went out
  /// (an answer lost after that leaves the outcome to `resolve`).
  std::error_code send_commit(detail::pg::connection& conn, bool& sent) {
    sent = false;
    if (!conn.send("COMMIT")) return fail(detail::pg::result{}, "sending COMMIT");
    sent = true;
    if (options_.cut_before_commit_answer && options_.cut_before_commit_answer()) conn.cut();
    auto e = conn.finish();
    if (e.ok()) return {};
    if (!conn.broken()) sent = false; // refused, and so rolled back: known
    return fail(e, "committing");
  }

  /// Whether transaction `txid` committed (true) or aborted (false), asked
  /// of the server on a new connection, again while it is still in progress
  /// or the server cannot be reached, for `resolve_for`; none when it could
  /// not say by then.
  std::optional<bool> resolve(std::int64_t txid) {
    // (The transaction's session is gone: asked on a new one.)
    writer_conn_.drop();
    const auto until = std::chrono::steady_clock::now() + options_.resolve_for;
    auto pause = std::chrono::milliseconds(2);
    for (;;) {
      try {
        auto r = writer_conn_.exec("SELECT txid_status(" + std::to_string(txid) + ")");
        if (r.ok() && r.rows() == 1) {
          if (r.null(0, 0)) return std::nullopt; // too old to know
          const auto status = std::string(r.bytes(0, 0));
          if (status == "committed") return true;
          if (status == "aborted") return false;
        } else if (!r.ok()) {
          (void)fail(r, "asking for the outcome of a commit");
        }
      } catch (const std::exception& e) {
        std::lock_guard g(failure_mutex_);
        last_failure_ = e.what();
      }
      if (std::chrono::steady_clock::now() + pause > until) return std::nullopt;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }

  /// What a statement's answer must show for its write to go on.
  enum class expect : std::uint8_t {
    nothing,
    advanced,  // one row updated (else: fenced or a sequence mismatch, `why_not` says)
    claimed,   // one row returned, the epoch (else: a sequence mismatch)
    held,      // one row (else: fenced)
    created,   // one row inserted (else: key_exists)
  };
  struct statement {
    const char* name; // prepared under this name (a table's own: `name` + the table)
    std::string table;
    detail::pg::params params;
    expect check = expect::nothing;
  };

  // The statements, by name: (SQL with `%t` for a table's name, parameters).
  static std::pair<std::string, int> sql_of(std::string_view name, const std::string& table) {
    auto with = [&](std::string s) {
      for (auto at = s.find("%t"); at != std::string::npos; at = s.find("%t")) s.replace(at, 2, table);
      return s;
    };
    if (name == "advance")
      return {"UPDATE troupe_ids SET highest = $2 WHERE persistence_id = $1 AND epoch = $3 AND highest = $4", 4};
    if (name == "claim_first")
      return {"INSERT INTO troupe_ids AS i (persistence_id, highest, epoch, owner) VALUES ($1, $2, 1, $3) "
              "ON CONFLICT (persistence_id) DO UPDATE SET epoch = i.epoch + 1, owner = EXCLUDED.owner, "
              "highest = EXCLUDED.highest WHERE i.highest = $4 RETURNING epoch",
              4};
    if (name == "claim_next")
      return {"UPDATE troupe_ids SET epoch = epoch + 1, owner = $3, highest = $2 "
              "WHERE persistence_id = $1 AND highest = $4 RETURNING epoch",
              4};
    if (name == "append") return {"INSERT INTO troupe_journal VALUES ($1, $2, $3, $4, $5, $6, $7)", 7};
    // A group's advances and appends, each as one statement over arrays.
    if (name == "advance_all")
      return {"UPDATE troupe_ids AS i SET highest = u.last "
              "FROM unnest($1::bytea[], $2::int8[], $3::int8[], $4::int8[]) AS u(pid, last, epoch, prev) "
              "WHERE i.persistence_id = u.pid AND i.epoch = u.epoch AND i.highest = u.prev",
              4};
    if (name == "append_all")
      return {"INSERT INTO troupe_journal "
              "SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int4[], $5::bytea[], $6::bytea[], $7::int8[])",
              7};
    if (name == "hold") return {"SELECT 1 FROM troupe_ids WHERE persistence_id = $1 AND epoch = $2 FOR SHARE", 2};
    if (name == "del_") return {with("DELETE FROM %t WHERE key = $1"), 1};
    if (name == "new_") return {with("INSERT INTO %t VALUES ($1, $2) ON CONFLICT (key) DO NOTHING"), 2};
    return {with("INSERT INTO %t VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"), 2}; // put_
  }

  /// The statements of write `w`, in order (`held`: this store's epoch of
  /// its ID, 0 for none); its events' only if `with_events`.
  std::vector<statement> plan(const pending& w, std::int64_t held, bool with_events = true) const {
    std::vector<statement> out;
    if (!w.events.empty()) {
      const auto first = w.events.front().seq;
      const auto last = w.events.back().seq;
      if (held) {
        statement s{"advance", {}, {}, expect::advanced};
        s.params.bytes(w.pid).i64(enc(last)).i64(held).i64(enc(first - 1));
        out.push_back(std::move(s));
      } else {
        // Its first write here claims the ID, if it continues the ID's events.
        statement s{first == 1 ? "claim_first" : "claim_next", {}, {}, expect::claimed};
        s.params.bytes(w.pid).i64(enc(last)).text(owner_).i64(enc(first - 1));
        out.push_back(std::move(s));
      }
      const auto now = troupe::detail::now_ms();
      for (std::size_t i = 0; with_events && i < w.events.size(); ++i) {
        const auto& e = w.events[i];
        statement s{"append", {}, {}, expect::nothing};
        s.params.bytes(w.pid)
            .i64(enc(e.seq))
            .bytes(e.manifest)
            .i32(static_cast<std::int32_t>(e.version))
            .bytes(e.payload)
            .bytes(detail::encode_entries(e.metadata))
            .i64(e.metadata.written_ms == 0 ? now : e.metadata.written_ms);
        out.push_back(std::move(s));
      }
    } else if (held) {
      // Table changes of an ID this store holds: only while it holds it.
      statement s{"hold", {}, {}, expect::held};
      s.params.bytes(w.pid).i64(held);
      out.push_back(std::move(s));
    }
    for (auto& t : w.tables) {
      const auto& n = sql_names_[detail::table_registry::slot_of(t.table)];
      statement s{!t.value ? "del_" : t.only_new ? "new_" : "put_", n, {}, t.only_new ? expect::created : expect::nothing};
      s.params.bytes(t.key);
      if (t.value) s.params.bytes(*t.value);
      out.push_back(std::move(s));
    }
    return out;
  }

  /// With `held_mutex_`: this store now holds `pid` at `epoch`, unless it
  /// holds a newer claim already (its own `claim` may commit before an
  /// earlier write's claim is recorded: epochs only grow).
  void raise_held(const std::string& pid, std::int64_t epoch) {
    auto& h = held_[pid];
    h = std::max(h, epoch);
  }

  std::int64_t held_epoch(const std::string& pid) const {
    if (pid.empty()) return 0;
    std::lock_guard h(held_mutex_);
    auto it = held_.find(pid);
    return it == held_.end() ? 0 : it->second;
  }

  /// Prepares `s` on `c` (once per connection).
  detail::pg::result prepare(detail::pg::connection& c, const statement& s) {
    auto [sql, n] = sql_of(s.name, s.table);
    return c.prepare(std::string(s.name) + s.table, sql, n);
  }

  /// Whether answer `r` to `s` lets the write go on; `w.claimed` takes a claim's epoch.
  static bool passes(const statement& s, const detail::pg::result& r, pending& w) {
    if (!r.ok()) return false;
    switch (s.check) {
    case expect::nothing: return true;
    case expect::advanced: return r.affected() == 1;
    case expect::claimed:
      if (r.rows() != 1) return false;
      w.claimed = r.i64(0, 0);
      return true;
    case expect::held: return r.rows() == 1;
    case expect::created: return r.affected() == 1;
    }
    return false;
  }

  /// One write's statements, one at a time, in the open transaction: the
  /// first that fails says why.
  std::error_code apply(detail::pg::connection& c, pending& w) {
    const auto held = held_epoch(w.pid);
    for (auto& s : plan(w, held)) {
      if (auto p = prepare(c, s); !p.ok()) return fail(p, "preparing a statement");
      auto r = c.run(std::string(s.name) + s.table, {}, s.params);
      if (passes(s, r, w)) continue;
      if (!r.ok()) {
        const auto state = r.sqlstate();
        w.retry = state == "40P01" || state == "40001"; // deadlock_detected, serialization_failure
        const auto ec = fail(r, "writing " + (w.pid.empty() ? std::string("tables") : w.pid));
        return std::string_view(s.name) == "append" && ec == errc::key_exists ? make_error_code(errc::sequence_mismatch)
                                                                              : ec;
      }
      switch (s.check) {
      case expect::advanced: return why_not(c, w.pid, held);
      case expect::claimed: return errc::sequence_mismatch; // no row and not the first event, or another highest
      case expect::held: return errc::fenced;
      case expect::created: return errc::key_exists;
      case expect::nothing: break;
      }
      return errc::storage_failure;
    }
    return {};
  }

  /// The group's statements sent at once (libpq's pipeline mode) inside the
  /// open transaction, their answers read after: true when every write
  /// passed (nothing failed; `COMMIT` may follow); false when one did not
  /// (the caller rolls back and runs the group one statement at a time,
  /// which finds out which and why), with `victim` set when the server
  /// chose the transaction as a deadlock's victim. Throws when the
  /// connection fails.
  ///
  /// The group's advances (writes of IDs this store holds) go as one
  /// UPDATE and its events as one INSERT, over arrays: two statements
  /// whatever the group's size, where one per write and one per event
  /// cost the server most of a commit's time once its sync is cheap. A
  /// check that fails in either fails the group as any other, and the
  /// group then runs one write at a time (`apply`), which says whose
  /// write failed and why. The other statements (claims, holds, table
  /// writes) keep their order.
  bool pipelined(detail::pg::connection& c, std::vector<pending>& group, bool& victim) {
    struct one {
      statement s;
      std::size_t write;
    };
    std::vector<one> others;
    using A = detail::pg::array_param;
    A adv_pid(A::bytea), adv_last(A::int8), adv_epoch(A::int8), adv_prev(A::int8);
    A ev_pid(A::bytea), ev_seq(A::int8), ev_manifest(A::bytea), ev_version(A::int4), ev_payload(A::bytea),
        ev_entries(A::bytea), ev_written(A::int8);
    for (std::size_t i = 0; i < group.size(); ++i) {
      auto& w = group[i];
      const auto held = held_epoch(w.pid);
      for (auto& s : plan(w, held, /*with_events=*/false)) { // (the events go below)
        if (std::string_view(s.name) == "advance") {
          adv_pid.bytes(w.pid);
          adv_last.i64(enc(w.events.back().seq));
          adv_epoch.i64(held);
          adv_prev.i64(enc(w.events.front().seq - 1));
        } else {
          others.push_back({std::move(s), i});
        }
      }
      const auto now = troupe::detail::now_ms();
      for (auto& e : w.events) {
        ev_pid.bytes(w.pid);
        ev_seq.i64(enc(e.seq));
        ev_manifest.bytes(e.manifest);
        ev_version.i32(static_cast<std::int32_t>(e.version));
        ev_payload.bytes(e.payload);
        ev_entries.bytes(detail::encode_entries(e.metadata));
        ev_written.i64(e.metadata.written_ms == 0 ? now : e.metadata.written_ms);
      }
    }
    const auto advanced = adv_pid.size(), appended = ev_pid.size();
    std::optional<statement> advances, appends;
    if (advanced) {
      advances.emplace(statement{"advance_all", {}, {}, expect::nothing});
      advances->params.array(std::move(adv_pid))
          .array(std::move(adv_last))
          .array(std::move(adv_epoch))
          .array(std::move(adv_prev));
    }
    if (appended) {
      appends.emplace(statement{"append_all", {}, {}, expect::nothing});
      appends->params.array(std::move(ev_pid))
          .array(std::move(ev_seq))
          .array(std::move(ev_manifest))
          .array(std::move(ev_version))
          .array(std::move(ev_payload))
          .array(std::move(ev_entries))
          .array(std::move(ev_written));
    }
    for (auto* s : {advances ? &*advances : nullptr, appends ? &*appends : nullptr})
      if (s)
        if (auto p = prepare(c, *s); !p.ok()) return false;
    for (auto& o : others)
      if (auto p = prepare(c, o.s); !p.ok()) return false;
    if (!c.enter_pipeline()) return false;
    auto send = [&](statement& s) { return c.queue(std::string(s.name) + s.table, s.params); };
    bool sent = !advances || send(*advances);
    for (std::size_t i = 0; sent && i < others.size(); ++i) sent = send(others[i].s);
    if (sent && appends) sent = send(*appends);
    if (!sent || !c.sync()) {
      // (Not a check that failed: the group fails, saying why.)
      const auto why = c.failure();
      c.drop();
      throw error(errc::storage_failure, "sending a group's statements: " + why);
    }
    bool all = true;
    auto answered = [&](const detail::pg::result& r, bool pass) {
      if (pass) return;
      all = false;
      const auto state = r.sqlstate();
      if (state == "40P01" || state == "40001") victim = true; // deadlock_detected, serialization_failure
    };
    if (advances) {
      auto r = c.answer();
      answered(r, r.ok() && r.affected() == static_cast<long>(advanced));
    }
    for (auto& o : others) {
      auto r = c.answer();
      answered(r, passes(o.s, r, group[o.write]));
    }
    if (appends) {
      auto r = c.answer();
      answered(r, r.ok() && r.affected() == static_cast<long>(appended));
    }
    if (!c.leave_pipeline()) {
      c.drop();
      return false;
    }
    return all;
  }

  /// Why an update of `pid` under `held` changed nothing: a newer claim
  /// (fenced), or a sequence number that does not continue.
  std::error_code why_not(detail::pg::connection& c, const std::string& pid, std::int64_t held) {
    detail::pg::params p;
    p.bytes(pid);
    auto r = c.run("epoch_of", "SELECT epoch FROM troupe_ids WHERE persistence_id = $1", p);
    if (!r.ok()) return fail(r, "writing " + pid);
    if (r.rows() == 1 && r.i64(0, 0) != held) return errc::fenced;
    return errc::sequence_mismatch;
  }

  postgres_options options_;
  std::string owner_;

  mutable std::mutex failure_mutex_;
  mutable std::string last_failure_;

  mutable std::mutex held_mutex_;
  std::map<std::string, std::int64_t, std::less<>> held_; // the IDs this store claimed, by epoch

  std::mutex tables_mutex_;
  detail::table_registry tables_;
  std::array<std::string, detail::table_registry::capacity> sql_names_;

  mutable std::mutex expiry_mutex_;
  std::array<expiry_fn, detail::table_registry::capacity> expiry_;
  std::int64_t expired_through_ = std::numeric_limits<std::int64_t>::min();

  detail::live_ids live_ids_;

  std::mutex reader_mutex_;
  detail::pg::connection reader_;
  detail::pg::connection writer_conn_;

  mutable std::mutex queue_mutex_;
  std::condition_variable queue_changed_;
  std::deque<pending> queue_;
  bool stopping_ = false;
  writer_counts counts_;
  std::minstd_rand backoff_rng_{std::random_device{}()};
  std::thread writer_;
};

} // namespace troupe::persistence::detail
