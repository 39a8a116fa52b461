#pragma once

// One libpq connection: statements with binary parameters and results,
// prepared once per connection, and the mapping of PostgreSQL's errors to
// the persistence layer's codes.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/detail/bytes.hpp>

#include <libpq-fe.h>

#include <sys/socket.h>

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

struct result_deleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};

/// A statement's result (binary columns).
class result {
public:
  result() = default;
  explicit result(PGresult* r) : r_(r) {}

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
};

/// The persistence code of a failed statement: a full disk, a unique key
/// taken, or a storage failure (what the server said is in `message`).
inline std::error_code code_of(const result& r) {
  const auto s = r.sqlstate();
  if (s == "53100") return errc::storage_full;  // disk_full
  if (s == "23505") return errc::key_exists;    // unique_violation (the caller may say more)
  return errc::storage_failure;
}

/// One connection. Not thread-safe: one user at a time.
class connection {
public:
  /// Connects with `conninfo` (libpq's keywords or a URI) and sets the
  /// session up: `search_path` to `schema`, and `synchronous_commit` off
  /// unless `sync`. Throws `troupe::error` (`storage_failure`) naming the
  /// server's message.
  connection(std::string conninfo, std::string schema, bool sync)
      : conninfo_(std::move(conninfo)), schema_(std::move(schema)), sync_(sync) {
    open();
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() {
    if (c_) PQfinish(c_);
  }

  /// Runs `sql` (one or more statements, no parameters).
  result exec(const std::string& sql) {
    ensure();
    return result(PQexec(c_, sql.c_str()));
  }

  /// Runs one statement with binary parameters and results.
  result exec(const std::string& sql, params& p) {
    ensure();
    return result(PQexecParams(c_, sql.c_str(), p.size(), nullptr, p.values(), p.lengths(), p.formats(), 1));
  }

  /// Runs the statement prepared under `name` (prepared from `sql` on
  /// first use on this connection).
  result run(const std::string& name, const std::string& sql, params& p) {
    ensure();
    if (!prepared_.contains(name)) {
      result r(PQprepare(c_, name.c_str(), sql.c_str(), p.size(), nullptr));
      if (!r.ok()) return r;
      prepared_.insert(name);
    }
    return result(PQexecPrepared(c_, name.c_str(), p.size(), p.values(), p.lengths(), p.formats(), 1));
  }

  /// Prepares `sql` as `name` on this connection, once.
  result prepare(const std::string& name, const std::string& sql, int params) {
    ensure();
    if (prepared_.contains(name)) return result(PQmakeEmptyPGresult(c_, PGRES_COMMAND_OK));
    result r(PQprepare(c_, name.c_str(), sql.c_str(), params, nullptr));
    if (r.ok()) prepared_.insert(name);
    return r;
  }

  // -- pipeline mode: statements sent without waiting for each answer ---------

  bool enter_pipeline() {
    ensure();
    return PQenterPipelineMode(c_) == 1;
  }
  /// Queues the prepared statement `name` (binary parameters and results).
  bool queue(const std::string& name, params& p) {
    return PQsendQueryPrepared(c_, name.c_str(), p.size(), p.values(), p.lengths(), p.formats(), 1) == 1;
  }
  /// Ends the pipeline's batch: the server runs what was queued.
  bool sync() { return PQpipelineSync(c_) == 1; }
  /// The next queued statement's answer (in order; an aborted one's is
  /// `PGRES_PIPELINE_ABORTED`, not ok).
  result answer() {
    PGresult* first = PQgetResult(c_);
    // A statement's results end with a null (the sync's with none).
    if (first && PQresultStatus(first) != PGRES_PIPELINE_SYNC)
      while (PGresult* more = PQgetResult(c_)) PQclear(more);
    return result(first);
  }
  /// Reads up to the sync's answer, and leaves pipeline mode.
  bool leave_pipeline() {
    for (int i = 0; i < 1'000'000; ++i) {
      PGresult* r = PQgetResult(c_);
      if (!r) {
        if (broken()) return false;
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
    ensure();
    return PQsendQuery(c_, sql.c_str()) == 1;
  }
  /// The answer to what `send` sent (the first result; the rest read).
  result finish() {
    result first;
    bool got = false;
    while (PGresult* r = PQgetResult(c_)) {
      if (!got) {
        first = result(r);
        got = true;
      } else {
        PQclear(r);
      }
    }
    return first;
  }

  /// Cuts the connection's socket (for fault tests: what was sent may or
  /// may not have reached the server; no answer arrives).
  void cut() noexcept {
    if (c_) ::shutdown(PQsocket(c_), SHUT_RDWR);
  }

  bool broken() const noexcept { return !c_ || PQstatus(c_) != CONNECTION_OK; }

  /// Closes the connection (in a state nothing else can use, say): the
  /// next statement opens it again.
  void drop() noexcept {
    if (c_) PQfinish(c_);
    c_ = nullptr;
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

private:
  void open() {
    c_ = PQconnectdb(conninfo_.c_str());
    if (!c_ || PQstatus(c_) != CONNECTION_OK) {
      std::string m = c_ ? PQerrorMessage(c_) : "out of memory";
      if (c_) PQfinish(c_);
      c_ = nullptr;
      while (!m.empty() && m.back() == '\n') m.pop_back();
      throw error(errc::storage_failure, "connecting to PostgreSQL: " + m);
    }
    // The server's notices and warnings are not the application's stderr.
    PQsetNoticeProcessor(c_, [](void*, const char*) {}, nullptr);
    prepared_.clear();
    std::string setup = "SET client_min_messages = warning; SET search_path = " + identifier(schema_) + ";";
    if (!sync_) setup += " SET synchronous_commit = off;";
    result r(PQexec(c_, setup.c_str()));
    if (!r.ok()) throw error(errc::storage_failure, "setting up a PostgreSQL session: " + r.message());
  }

  /// A connection the server or the network dropped is opened again before
  /// its next statement (what was in flight failed with it).
  void ensure() {
    if (!broken()) return;
    if (c_) PQfinish(c_);
    c_ = nullptr;
    open();
  }

  std::string conninfo_, schema_;
  bool sync_;
  PGconn* c_ = nullptr;
  std::set<std::string> prepared_;
};

} // namespace troupe::persistence::detail::pg
