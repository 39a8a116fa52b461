#pragma once

// One libpq connection: statements with binary parameters and results,
// prepared once per connection, and the mapping of PostgreSQL's errors to
// the persistence layer's codes.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/detail/bytes.hpp>

#include <libpq-fe.h>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace troupe::persistence::detail::pg {

/// A statement's parameters, all sent in binary: text as its bytes, bytea
/// as is, integers big-endian (`int8`, `int4`).
class params {
public:
  params& text(std::string_view s) { return add(std::string(s)); }
  params& bytes(std::string_view s) { return add(std::string(s)); }
  params& i64(std::int64_t v) {
    std::string b;
    troupe::detail::put_be<8>(b, static_cast<std::uint64_t>(v));
    return add(std::move(b));
  }
  params& i32(std::int32_t v) {
    std::string b;
    troupe::detail::put_be<4>(b, static_cast<std::uint32_t>(v));
    return add(std::move(b));
  }

  /// A one-dimensional array (`array_param`).
  params& array(class array_param&& a);

  int size() const noexcept { return static_cast<int>(values_.size()); }
  const char* const* values() {
    ptrs_.clear();
    for (auto& v : values_) ptrs_.push_back(v.data());
    return ptrs_.data();
  }
  const int* lengths() {
    lengths_.clear();
    for (auto& v : values_) lengths_.push_back(static_cast<int>(v.size()));
    return lengths_.data();
  }
  const int* formats() {
    formats_.assign(values_.size(), 1);
    return formats_.data();
  }

private:
  params& add(std::string v) {
    values_.push_back(std::move(v));
    return *this;
  }
  std::vector<std::string> values_;
  std::vector<const char*> ptrs_;
  std::vector<int> lengths_, formats_;
};

/// A one-dimensional array without nulls, written element by element in
/// PostgreSQL's binary array format, for a statement over arrays (`unnest`).
class array_param {
public:
  static constexpr std::uint32_t bytea = 17, int8 = 20, int4 = 23;

  explicit array_param(std::uint32_t element_oid) {
    troupe::detail::put_be<4>(b_, 1); // dimensions
    troupe::detail::put_be<4>(b_, 0); // no nulls
    troupe::detail::put_be<4>(b_, element_oid);
    troupe::detail::put_be<4>(b_, 0); // the length, set by `take`
    troupe::detail::put_be<4>(b_, 1); // lower bound
  }
  array_param& bytes(std::string_view v) {
    troupe::detail::put_be<4>(b_, static_cast<std::uint32_t>(v.size()));
    b_ += v;
    ++n_;
    return *this;
  }
  array_param& i64(std::int64_t v) {
    troupe::detail::put_be<4>(b_, 8);
    troupe::detail::put_be<8>(b_, static_cast<std::uint64_t>(v));
    ++n_;
    return *this;
  }
  array_param& i32(std::int32_t v) {
    troupe::detail::put_be<4>(b_, 4);
    troupe::detail::put_be<4>(b_, static_cast<std::uint32_t>(v));
    ++n_;
    return *this;
  }
  std::uint32_t size() const noexcept { return n_; }
  std::string take() && {
    for (int i = 0; i < 4; ++i) b_[12 + i] = static_cast<char>((n_ >> (24 - 8 * i)) & 0xff);
    return std::move(b_);
  }

private:
  std::string b_;
  std::uint32_t n_ = 0;
};

inline params& params::array(array_param&& a) { return add(std::move(a).take()); }

struct result_deleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};

/// A statement's result (binary columns).
class result {
public:
  result() = default;
  explicit result(PGresult* r) : r_(r) {}
  /// A failure the client saw (no answer came), with what it was.
  explicit result(std::string failure) : failure_(std::move(failure)) {}

  bool ok() const noexcept {
    const auto s = r_ ? PQresultStatus(r_.get()) : PGRES_FATAL_ERROR;
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
  }
  /// The SQLSTATE of a failed statement ("" if none was reported).
  std::string sqlstate() const {
    const char* s = r_ ? PQresultErrorField(r_.get(), PG_DIAG_SQLSTATE) : nullptr;
    return s ? s : "";
  }
  std::string message() const {
    if (!failure_.empty()) return failure_;
    const char* m = r_ ? PQresultErrorMessage(r_.get()) : nullptr;
    std::string s = m && *m ? m : "no result (connection lost)";
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  int rows() const noexcept { return r_ ? PQntuples(r_.get()) : 0; }
  /// Rows a command changed (`INSERT`, `UPDATE`, `DELETE`).
  long affected() const noexcept {
    const char* n = r_ ? PQcmdTuples(r_.get()) : nullptr;
    return n && *n ? std::strtol(n, nullptr, 10) : 0;
  }
  PGresult* raw() const noexcept { return r_.get(); }
  bool null(int row, int col) const noexcept { return PQgetisnull(r_.get(), row, col) != 0; }
  std::string_view bytes(int row, int col) const noexcept {
    return {PQgetvalue(r_.get(), row, col), static_cast<std::size_t>(PQgetlength(r_.get(), row, col))};
  }
  std::int64_t i64(int row, int col) const noexcept {
    return static_cast<std::int64_t>(troupe::detail::get_be(bytes(row, col), 0, 8));
  }
  std::int32_t i32(int row, int col) const noexcept {
    return static_cast<std::int32_t>(troupe::detail::get_be(bytes(row, col), 0, 4));
  }

private:
  std::unique_ptr<PGresult, result_deleter> r_;
  std::string failure_;
};

/// The persistence code of a failed statement: a full disk, a unique key
/// taken, or a storage failure (what the server said is in `message`).
inline std::error_code code_of(const result& r) {
  const auto s = r.sqlstate();
  if (s == "53100") return errc::storage_full;  // disk_full
  if (s == "23505") return errc::key_exists;    // unique_violation (the caller may say more)
  return errc::storage_failure;
}

/// How a connection reaches its server and how long it waits for it.
struct connection_settings {
  /// libpq's connection string (keywords or a URI).
  std::string conninfo;
  /// `search_path` of the session.
  std::string schema;
  /// `synchronous_commit` on (else off).
  bool sync = true;
  /// The longest wait for one answer of the server (or for a connection):
  /// past it the connection is cut and what was in flight has failed.
  std::chrono::milliseconds io_timeout{30'000};
  /// After a failed attempt to connect, none is made for this long, then
  /// twice as long after each further failure, up to `max_backoff`:
  /// statements meanwhile fail at once, naming the last failure.
  std::chrono::milliseconds backoff{50};
  std::chrono::milliseconds max_backoff{2'000};
};

/// One connection. Not thread-safe: one user at a time. Every wait for the
/// server is bounded by `io_timeout`; a lost connection is opened again
/// before the next statement, no sooner than its backoff allows.
class connection {
public:
  /// Connects and sets the session up: `search_path` to the schema, and
  /// `synchronous_commit` off unless `sync`. Throws `troupe::error`
  /// (`storage_failure`) naming the server's message.
  explicit connection(connection_settings s) : s_(std::move(s)) { open(); }
  connection(std::string conninfo, std::string schema, bool sync)
      : connection(connection_settings{std::move(conninfo), std::move(schema), sync}) {}
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() {
    if (c_) PQfinish(c_);
  }

  /// Runs `sql` (one or more statements, no parameters): the last answer,
  /// or the first failure.
  result exec(const std::string& sql) {
    ensure(opens(sql));
    if (!PQsendQuery(c_, sql.c_str()) || !flush()) return not_sent();
    return collect();
  }

  /// Runs one statement with binary parameters and results.
  result exec(const std::string& sql, params& p) {
    ensure(opens(sql));
    if (!PQsendQueryParams(c_, sql.c_str(), p.size(), nullptr, p.values(), p.lengths(), p.formats(), 1) || !flush())
      return not_sent();
    return collect();
  }

  /// Runs the statement prepared under `name` (prepared from `sql` on
  /// first use on this connection).
  result run(const std::string& name, const std::string& sql, params& p) {
    auto r = prepare(name, sql, p.size());
    if (!r.ok()) return r;
    if (!PQsendQueryPrepared(c_, name.c_str(), p.size(), p.values(), p.lengths(), p.formats(), 1) || !flush())
      return not_sent();
    return collect();
  }

  /// Prepares `sql` as `name` on this connection, once.
  result prepare(const std::string& name, const std::string& sql, int params) {
    ensure();
    if (prepared_.contains(name)) return result(PQmakeEmptyPGresult(c_, PGRES_COMMAND_OK));
    if (!PQsendPrepare(c_, name.c_str(), sql.c_str(), params, nullptr) || !flush()) return not_sent();
    auto r = collect();
    if (r.ok()) prepared_.insert(name);
    return r;
  }

  // -- pipeline mode: statements sent without waiting for each answer ---------

  bool enter_pipeline() {
    ensure();
    return PQenterPipelineMode(c_) == 1;
  }
  /// Queues the prepared statement `name` (binary parameters and results;
  /// libpq sends what it holds as the socket takes it, never waiting).
  bool queue(const std::string& name, params& p) {
    return PQsendQueryPrepared(c_, name.c_str(), p.size(), p.values(), p.lengths(), p.formats(), 1) == 1;
  }
  /// Ends the pipeline's batch, and sends it: the server runs what was queued.
  bool sync() { return PQpipelineSync(c_) == 1 && flush(); }
  /// The next queued statement's answer (in order; an aborted one's is
  /// `PGRES_PIPELINE_ABORTED`, not ok).
  result answer() {
    PGresult* first = next();
    if (!first) return lost();
    // A statement's results end with a null (the sync's with none).
    if (PQresultStatus(first) != PGRES_PIPELINE_SYNC)
      while (PGresult* more = next()) PQclear(more);
    return result(first);
  }
  /// Reads up to the sync's answer, and leaves pipeline mode.
  bool leave_pipeline() {
    for (int i = 0; i < 1'000'000; ++i) {
      PGresult* r = next();
      if (!r) {
        if (broken() || timed_out_) return false;
        continue;
      }
      const auto st = PQresultStatus(r);
      PQclear(r);
      if (st == PGRES_PIPELINE_SYNC) break;
    }
    return PQexitPipelineMode(c_) == 1;
  }

  /// Sends `sql` without waiting for its answer (`finish` reads it).
  bool send(const std::string& sql) {
    ensure(opens(sql));
    return PQsendQuery(c_, sql.c_str()) == 1 && flush();
  }
  /// The answer to what `send` sent (the first result; the rest read).
  result finish() {
    result first;
    bool got = false;
    while (PGresult* r = next()) {
      if (!got) {
        first = result(r);
        got = true;
      } else {
        PQclear(r);
      }
    }
    if (!got) return lost();
    return first;
  }

  /// Cuts the connection's socket (for fault tests: what was sent may or
  /// may not have reached the server; no answer arrives).
  void cut() noexcept {
    if (c_) ::shutdown(PQsocket(c_), SHUT_RDWR);
  }

  bool broken() const noexcept { return !c_ || timed_out_ || PQstatus(c_) != CONNECTION_OK; }

  /// Closes the connection (in a state nothing else can use, say), and
  /// abandons its transaction if one was open (the server rolls it back):
  /// the next statement opens a new connection.
  void drop() noexcept {
    if (c_) PQfinish(c_);
    c_ = nullptr;
    in_transaction_ = false;
    lost_transaction_ = false;
  }

  /// Why the connection failed: the time limit that passed, or libpq's
  /// message.
  std::string failure() const {
    if (timed_out_)
      return "no answer from the PostgreSQL server within " + std::to_string(s_.io_timeout.count()) +
             " ms (the connection was cut)";
    std::string m = c_ ? PQerrorMessage(c_) : "no connection";
    while (!m.empty() && m.back() == '\n') m.pop_back();
    return m;
  }

  /// Whether statements are refused because the connection of a
  /// transaction was lost (until one that begins or rolls back).
  bool lost_transaction() const noexcept { return lost_transaction_; }
  /// Ends a user's work with the connection: a transaction whose
  /// connection was lost is abandoned (the next statement, whatever it is,
  /// goes over a new connection).
  void end_use() noexcept {
    if (lost_transaction_) drop();
  }

  /// The identifier `s` quoted for SQL.
  std::string identifier(std::string_view s) {
    ensure();
    char* q = PQescapeIdentifier(c_, s.data(), s.size());
    if (!q) throw error(errc::storage_failure, std::string("PostgreSQL: ") + PQerrorMessage(c_));
    std::string out(q);
    PQfreemem(q);
    return out;
  }

  /// Attempts to connect so far (the first one included).
  std::uint64_t connects() const noexcept { return connects_; }

private:
  using clock = std::chrono::steady_clock;

  void open() {
    ++connects_;
    timed_out_ = false;
    // The connect's own timeout (whole seconds, at least 2 in libpq) unless
    // the connection string names one: its keywords come after, and win.
    const auto secs = std::max<long long>(
        2, (std::chrono::ceil<std::chrono::seconds>(s_.io_timeout)).count());
    const std::string timeout = std::to_string(secs);
    const char* keys[] = {"connect_timeout", "dbname", nullptr};
    const char* values[] = {timeout.c_str(), s_.conninfo.c_str(), nullptr};
    c_ = PQconnectdbParams(keys, values, 1);
    if (!c_ || PQstatus(c_) != CONNECTION_OK) {
      std::string m = c_ ? PQerrorMessage(c_) : "out of memory";
      if (c_) PQfinish(c_);
      c_ = nullptr;
      while (!m.empty() && m.back() == '\n') m.pop_back();
      throw error(errc::storage_failure, "connecting to PostgreSQL: " + m);
    }
    // The server's notices and warnings are not the application's stderr.
    PQsetNoticeProcessor(c_, [](void*, const char*) {}, nullptr);
    // Sends never wait on the socket: `flush` waits, bounded.
    if (PQsetnonblocking(c_, 1) != 0) {
      std::string m = PQerrorMessage(c_);
      PQfinish(c_);
      c_ = nullptr;
      throw error(errc::storage_failure, "setting up a PostgreSQL connection: " + m);
    }
    prepared_.clear();
    std::string setup = "SET client_min_messages = warning; SET search_path = " + identifier(s_.schema) + ";";
    if (!s_.sync) setup += " SET synchronous_commit = off;";
    // Every statement is prepared, and each is a lookup or a range by a
    // primary key, which a generic plan serves. Custom plans (PostgreSQL's
    // first five executions of each) are planned from statistics that a
    // table just written does not have yet: a replay's first pages were
    // planned as a scan of the whole journal and a sort, 26 ms each
    // against 0.3 ms (100,000 events).
    if (PQserverVersion(c_) >= 120000) setup += " SET plan_cache_mode = force_generic_plan;";
    auto r = exec(setup);
    if (!r.ok()) throw error(errc::storage_failure, "setting up a PostgreSQL session: " + r.message());
  }

  /// Whether `sql` begins a new transaction, or ends one by rolling it
  /// back: the statements that may run on a new connection after a
  /// transaction's was lost.
  static bool opens(const std::string& sql) noexcept {
    const std::string_view v(sql);
    return v.starts_with("BEGIN") || v == "ROLLBACK" || v.starts_with("ROLLBACK;");
  }

  /// A connection the server or the network dropped (or that timed out)
  /// is opened again before its next statement (what was in flight failed
  /// with it), unless the last attempt failed less than its backoff ago.
  /// Never in the middle of a transaction: once the connection of a
  /// session inside a transaction block is lost, the transaction is gone
  /// (the server rolls it back), and a statement of it run on a new
  /// connection would run outside any transaction (a COMMIT there would
  /// even succeed, committing nothing). So every statement fails until one
  /// that `opens` (a BEGIN, a ROLLBACK) or a `drop`.
  void ensure(bool opening = false) {
    if (c_ && PQstatus(c_) == CONNECTION_OK && !timed_out_) {
      // (Busy: a statement's answers are being read; the status is the one
      // before it, already recorded.)
      switch (PQtransactionStatus(c_)) {
      case PQTRANS_INTRANS:
      case PQTRANS_INERROR: in_transaction_ = true; break;
      case PQTRANS_IDLE: in_transaction_ = false; break;
      default: break;
      }
    }
    if (c_ && !timed_out_ && PQstatus(c_) == CONNECTION_OK && !PQisBusy(c_)) {
      // An idle connection the server closed meanwhile (it restarted, or
      // ended the session) has its end waiting on the socket: read it now,
      // so that the statement goes over a new connection instead of failing.
      // (The server's last words and the end of the stream may come in
      // two reads: read while there is something, a few times at most.)
      for (int i = 0; i < 4 && PQstatus(c_) == CONNECTION_OK; ++i) {
        pollfd p{PQsocket(c_), POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0 || !PQconsumeInput(c_)) break;
      }
    }
    if (!broken()) {
      lost_transaction_ = false;
      return;
    }
    if (in_transaction_) {
      lost_transaction_ = true;
      in_transaction_ = false;
    }
    if (lost_transaction_ && !opening)
      throw error(errc::storage_failure,
                  "the connection to PostgreSQL was lost inside a transaction: none of it committed (" + failure() + ")");
    lost_transaction_ = false;
    if (c_) PQfinish(c_);
    c_ = nullptr;
    const auto now = clock::now();
    if (now < next_attempt_) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_attempt_ - now).count();
      throw error(errc::storage_failure,
                  last_failure_ + " (the next attempt to connect in " + std::to_string(wait) + " ms)");
    }
    try {
      open();
      wait_ = {};
    } catch (const error& e) {
      last_failure_ = e.what();
      wait_ = wait_.count() == 0 ? s_.backoff : std::min(wait_ * 2, s_.max_backoff);
      next_attempt_ = clock::now() + wait_;
      throw;
    }
  }

  /// The next result, waiting for the server no longer than `io_timeout`:
  /// past it the connection is cut (and the wait ends with none).
  PGresult* next() {
    if (timed_out_) return nullptr;
    const auto until = clock::now() + s_.io_timeout;
    while (PQisBusy(c_)) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        cut();
        return nullptr;
      }
      pollfd p{PQsocket(c_), POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1'000'000)));
      if (n < 0 && errno != EINTR) break;
      if (n > 0 && !PQconsumeInput(c_)) break; // lost: PQgetResult says so
    }
    return PQgetResult(c_);
  }

  /// The answers to one query: the last, or the first failure.
  result collect() {
    PGresult* last = nullptr;
    while (PGresult* r = next()) {
      const auto st = PQresultStatus(r);
      if (last && PQresultStatus(last) == PGRES_FATAL_ERROR) {
        PQclear(r); // (the server runs nothing after a failure)
        continue;
      }
      PQclear(last);
      last = r;
      if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) break;
    }
    if (!last) return lost();
    if (timed_out_ && PQresultStatus(last) != PGRES_FATAL_ERROR) {
      PQclear(last);
      return lost();
    }
    return result(last);
  }

  /// What a statement that could not be sent ends with.
  result not_sent() { return timed_out_ ? lost() : result(PQmakeEmptyPGresult(c_, PGRES_FATAL_ERROR)); }

  /// Sends what libpq holds for the server (the connection does not block:
  /// a statement larger than the socket's buffers goes as the server reads
  /// it), waiting no longer than `io_timeout`: past it the connection is
  /// cut. Reads what the server sends meanwhile (it may answer, or warn,
  /// before it reads the rest), as libpq asks.
  bool flush() {
    const auto until = clock::now() + s_.io_timeout;
    for (;;) {
      const int f = PQflush(c_);
      if (f == 0) return true;
      if (f < 0) return false;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        cut();
        return false;
      }
      pollfd p{PQsocket(c_), POLLIN | POLLOUT, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1'000'000)));
      if (n < 0 && errno != EINTR) return false;
      if (n > 0 && (p.revents & POLLIN) && !PQconsumeInput(c_)) return false;
    }
  }

  /// What a wait that ended with no answer ends with.
  result lost() {
    if (timed_out_) return result(failure());
    return c_ ? result(PQmakeEmptyPGresult(c_, PGRES_FATAL_ERROR)) : result();
  }

  connection_settings s_;
  PGconn* c_ = nullptr;
  bool timed_out_ = false;
  /// The session was inside a transaction block when last seen alive.
  bool in_transaction_ = false;
  /// Its connection was lost so: statements fail until one that `opens`.
  bool lost_transaction_ = false;
  std::set<std::string> prepared_;
  std::uint64_t connects_ = 0;
  std::chrono::milliseconds wait_{0};
  clock::time_point next_attempt_{};
  std::string last_failure_;
};

/// Ends a use of a connection (`connection::end_use`) as it goes out of
/// scope: a transaction whose connection was lost within the use is
/// abandoned with it, however the use ended.
struct use_scope {
  connection& c;
  explicit use_scope(connection& of) noexcept : c(of) {}
  use_scope(const use_scope&) = delete;
  use_scope& operator=(const use_scope&) = delete;
  ~use_scope() { c.end_use(); }
};

} // namespace troupe::persistence::detail::pg
