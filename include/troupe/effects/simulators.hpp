#pragma once

/// \file
/// Test kit: reference simulators of external systems — an idempotent
/// payment gateway and an e-mail service — with seeded fault injection,
/// and adapters for them. Each keeps its own records (in memory, or in a
/// RocksDB database of its own, as a real provider has its own database),
/// so that charges and e-mails can be counted across crashes of the actor
/// system.

#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/effects/adapter.hpp>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>

namespace troupe::effects::testkit {

/// Probabilities of faults, each drawn per request, seeded.
struct gateway_faults {
  /// A 5xx before anything happens.
  double fail_before = 0;
  /// Performed, then the response is lost (the connection drops).
  double lose_response = 0;
  /// No answer in time: performed or not, half and half.
  double timeout = 0;
  /// Answers after `slow_latency` (still in time).
  double slow = 0;
  /// A payment declined for good (the gateway remembers it under the key).
  double decline = 0;
  /// A query gets no answer.
  double query_unavailable = 0;
  std::chrono::milliseconds slow_latency{5};
};

struct simulator_options {
  std::uint64_t seed = 1;
  gateway_faults faults;
  /// The system dedups by key (idempotency key, message ID): a repeated
  /// request returns the first answer and performs nothing. Off, every
  /// request performs the operation again (to test that troupe does not
  /// rely on it).
  bool honours_keys = true;
  /// A directory for the simulator's own RocksDB database; empty: memory.
  std::string path;
  /// Each record fsynced before the answer (survives power loss); off, it
  /// survives a crash of the process (`kill -9`), which is what the crash
  /// tests need, at a fraction of the cost.
  bool sync = true;
};

namespace detail {

/// Per-key records, in memory and optionally in a RocksDB database
/// (synchronous writes: what the provider says it did, it did).
class ledger {
public:
  struct entry {
    std::string status; // "charged", "declined", "sent"
    std::string ref;    // payment ID
    std::uint64_t performed = 0;
  };

  explicit ledger(const std::string& path, bool sync = true) : sync_(sync) {
    if (path.empty()) return;
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    auto st = rocksdb::DB::Open(o, path, &db);
    if (!st.ok()) throw error(errc::storage_failure, "simulator database " + path + ": " + st.ToString());
    db_.reset(db);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions{}));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto v = boost::json::parse(it->value().ToString()).as_object();
      entries_[it->key().ToString()] = {boost::json::value_to<std::string>(v.at("status")),
                                        boost::json::value_to<std::string>(v.at("ref")),
                                        boost::json::value_to<std::uint64_t>(v.at("performed"))};
    }
  }

  const entry* find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  void put(const std::string& key, entry e) {
    if (db_) {
      rocksdb::WriteOptions w;
      w.sync = sync_;
      boost::json::object v{{"status", e.status}, {"ref", e.ref}, {"performed", e.performed}};
      auto st = db_->Put(w, key, boost::json::serialize(v));
      if (!st.ok()) throw error(errc::storage_failure, "simulator database: " + st.ToString());
    }
    entries_[key] = std::move(e);
  }

  const std::map<std::string, entry>& all() const noexcept { return entries_; }

private:
  bool sync_ = true;
  std::unique_ptr<rocksdb::DB> db_;
  std::map<std::string, entry> entries_;
};

} // namespace detail

/// A payment gateway that dedups by idempotency key and can be queried by
/// it, with faults drawn from a seeded generator. Thread-safe.
class payment_gateway {
public:
  enum class reply { charged, declined, server_error, no_response };
  struct answer {
    payment_gateway::reply what = reply::no_response;
    std::string payment_id;
    /// How long the answer takes (the adapter waits that long, or gives up
    /// at its timeout).
    std::chrono::milliseconds latency{0};
  };
  enum class found { charged, declined, not_found, unavailable };
  struct lookup {
    payment_gateway::found what = found::unavailable;
    std::string payment_id;
  };

  static constexpr std::chrono::milliseconds never{std::chrono::hours(1)};

  explicit payment_gateway(simulator_options o = {}) : options_(std::move(o)), rng_(options_.seed), ledger_(options_.path, options_.sync) {}

  answer charge(const std::string& key, long amount) {
    std::lock_guard g(m_);
    ++requests_;
    const auto& f = options_.faults;
    // One roll picks at most one fault: consecutive ranges of [0, 1).
    const double roll = draw();
    const double decline_end = f.fail_before + f.decline, timeout_end = decline_end + f.timeout,
                 lose_end = timeout_end + f.lose_response, slow_end = lose_end + f.slow;
    if (roll < f.fail_before) return {reply::server_error, {}, {}};
    const auto* known = options_.honours_keys ? ledger_.find(key) : nullptr;
    bool perform = true;
    answer a{reply::charged, {}, {}};
    if (known) {
      perform = false; // the first answer again
      a.what = known->status == "declined" ? reply::declined : reply::charged;
      a.payment_id = known->ref;
    } else if (roll < decline_end) {
      ledger_.put(key, {"declined", {}, 0});
      return {reply::declined, {}, {}};
    }
    if (roll >= decline_end && roll < timeout_end) {
      a.latency = never;
      if (draw() < 0.5) perform = false; // it never got through
      a.what = reply::no_response;
    } else if (roll >= timeout_end && roll < lose_end) {
      a.what = reply::no_response;
    } else if (roll >= lose_end && roll < slow_end) {
      a.latency = f.slow_latency;
    }
    if (perform) {
      auto e = ledger_.find(key) ? *ledger_.find(key) : detail::ledger::entry{};
      e.status = "charged";
      if (e.ref.empty()) e.ref = "pay_" + std::to_string(++payments_) + "_" + std::to_string(amount);
      ++e.performed;
      ledger_.put(key, e);
      if (a.what == reply::charged) a.payment_id = e.ref;
    }
    return a;
  }

  lookup query(const std::string& key) {
    std::lock_guard g(m_);
    ++queries_;
    if (draw() < options_.faults.query_unavailable) return {found::unavailable, {}};
    const auto* e = ledger_.find(key);
    if (!e) return {found::not_found, {}};
    if (e->status == "declined") return {found::declined, {}};
    return {found::charged, e->ref};
  }

  /// Times money moved under `key` (more than 1: a double charge).
  std::uint64_t charges(const std::string& key) const {
    std::lock_guard g(m_);
    const auto* e = ledger_.find(key);
    return e ? e->performed : 0;
  }

  /// Every key and the times money moved under it.
  std::map<std::string, std::uint64_t> all_charges() const {
    std::lock_guard g(m_);
    std::map<std::string, std::uint64_t> out;
    for (auto& [k, e] : ledger_.all())
      if (e.performed) out[k] = e.performed;
    return out;
  }

  std::uint64_t requests() const {
    std::lock_guard g(m_);
    return requests_;
  }
  std::uint64_t queries() const {
    std::lock_guard g(m_);
    return queries_;
  }

  void set_faults(gateway_faults f) {
    std::lock_guard g(m_);
    options_.faults = f;
  }
  void heal() { set_faults({}); }

private:
  double draw() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  mutable std::mutex m_;
  simulator_options options_;
  std::mt19937_64 rng_;
  detail::ledger ledger_;
  std::uint64_t requests_ = 0, queries_ = 0, payments_ = 0;
};

/// An e-mail service that dedups by message ID (unless told not to) and can
/// fail before sending or lose its response after sending. Thread-safe.
class email_service {
public:
  enum class reply { sent, server_error, no_response };

  explicit email_service(simulator_options o = {}) : options_(std::move(o)), rng_(options_.seed), ledger_(options_.path, options_.sync) {}

  reply send(const std::string& message_id, const std::string& to) {
    std::lock_guard g(m_);
    ++requests_;
    const auto& f = options_.faults;
    const double roll = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (roll < f.fail_before) return reply::server_error;
    const auto* known = ledger_.find(message_id);
    if (!known || !options_.honours_keys) {
      auto e = known ? *known : detail::ledger::entry{"sent", to, 0};
      ++e.performed;
      ledger_.put(message_id, e);
    }
    if (roll < f.fail_before + f.lose_response + f.timeout) return reply::no_response;
    return reply::sent;
  }

  /// Times the recipient got message `id` (more than 1: a duplicate).
  std::uint64_t deliveries(const std::string& id) const {
    std::lock_guard g(m_);
    const auto* e = ledger_.find(id);
    return e ? e->performed : 0;
  }

  std::map<std::string, std::uint64_t> all_deliveries() const {
    std::lock_guard g(m_);
    std::map<std::string, std::uint64_t> out;
    for (auto& [k, e] : ledger_.all()) out[k] = e.performed;
    return out;
  }

  std::uint64_t requests() const {
    std::lock_guard g(m_);
    return requests_;
  }

  void set_faults(gateway_faults f) {
    std::lock_guard g(m_);
    options_.faults = f;
  }
  void heal() { set_faults({}); }

private:
  mutable std::mutex m_;
  simulator_options options_;
  std::mt19937_64 rng_;
  detail::ledger ledger_;
  std::uint64_t requests_ = 0;
};

/// A payment request (`effect_type` "payment").
struct charge {
  static constexpr std::string_view effect_type = "payment";
  long amount = 0;
};
inline void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const charge& c) { v = {{"amount", c.amount}}; }
inline charge tag_invoke(boost::json::value_to_tag<charge>, const boost::json::value& v) {
  return {boost::json::value_to<long>(v.at("amount"))};
}

/// An e-mail request (`effect_type` "email").
struct email {
  static constexpr std::string_view effect_type = "email";
  std::string to;
  std::string subject;
};
inline void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const email& e) {
  v = {{"to", e.to}, {"subject", e.subject}};
}
inline email tag_invoke(boost::json::value_to_tag<email>, const boost::json::value& v) {
  return {boost::json::value_to<std::string>(v.at("to")), boost::json::value_to<std::string>(v.at("subject"))};
}

namespace detail {
/// Waits `d` on the coroutine's executor.
inline task<> wait_for(std::chrono::milliseconds d) {
  if (d.count() <= 0) co_return;
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(asio::use_awaitable);
}
} // namespace detail

/// The gateway's adapter: the operation ID is the idempotency key; a 5xx,
/// a lost response or no answer within `timeout` is `unknown`; a decline is
/// a permanent failure. It can query, and does not count on the gateway's
/// dedup (`honours_idempotency_keys` is not declared): an unknown outcome
/// is resolved by asking.
class payment_adapter {
public:
  explicit payment_adapter(std::shared_ptr<payment_gateway> g, std::chrono::milliseconds timeout = std::chrono::milliseconds(100))
      : gateway_(std::move(g)), timeout_(timeout) {}

  task<outcome> execute(const operation& op) {
    const auto c = op.request_as<charge>();
    const auto a = gateway_->charge(op.id, c.amount);
    co_await detail::wait_for(std::min(a.latency, timeout_));
    if (a.latency > timeout_) co_return outcome::unknown("no answer within " + std::to_string(timeout_.count()) + " ms");
    switch (a.what) {
    case payment_gateway::reply::charged: co_return outcome::completed(a.payment_id);
    case payment_gateway::reply::declined: co_return outcome::failed("declined", true);
    case payment_gateway::reply::server_error: co_return outcome::unknown("the gateway answered 503");
    case payment_gateway::reply::no_response: break;
    }
    co_return outcome::unknown("the connection dropped before the answer");
  }

  task<query_result> query(const std::string& id) {
    const auto l = gateway_->query(id);
    switch (l.what) {
    case payment_gateway::found::charged: co_return query_result::completed(l.payment_id);
    case payment_gateway::found::declined: co_return query_result::failed("declined");
    case payment_gateway::found::not_found: co_return query_result::not_found();
    case payment_gateway::found::unavailable: break;
    }
    co_return query_result::unknown("the gateway did not answer the query");
  }

private:
  std::shared_ptr<payment_gateway> gateway_;
  std::chrono::milliseconds timeout_;
};

/// The e-mail service's adapter: the operation ID is the message ID, which
/// the service dedups, so an unknown outcome is resolved by sending again.
class email_adapter {
public:
  static constexpr bool honours_idempotency_keys = true;

  explicit email_adapter(std::shared_ptr<email_service> s) : service_(std::move(s)) {}

  outcome execute(const operation& op) {
    const auto e = op.request_as<email>();
    switch (service_->send(op.id, e.to)) {
    case email_service::reply::sent: return outcome::completed(op.id);
    case email_service::reply::server_error: return outcome::unknown("the mail service answered 503");
    case email_service::reply::no_response: break;
    }
    return outcome::unknown("the connection dropped before the answer");
  }

private:
  std::shared_ptr<email_service> service_;
};

} // namespace troupe::effects::testkit
