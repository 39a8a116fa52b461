#pragma once

/// \file
/// `troupe::testing::payment_gateway`: a reference simulator of a payment
/// gateway (it dedups by idempotency key unless told not to, and can be
/// queried by it), with seeded faults; its adapter for the dispatcher; and
/// the `charge` request. It keeps its own records (in memory, or in a
/// RocksDB database of its own), so that charges can be counted across
/// crashes of the actor system.

#include <troupe/task.hpp>
#include <troupe/effects/adapter.hpp>
#include <troupe/testing/simulator_options.hpp>
#include <troupe/testing/detail/ledger.hpp>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <boost/describe/class.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>

namespace troupe::testing {

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

  explicit payment_gateway(simulator_options o = {})
      : options_(std::move(o)), rng_(options_.seed), ledger_(options_.path, options_.sync, options_.write_ahead_log) {}

  answer charge(const std::string& key, long amount) {
    std::lock_guard g(m_);
    ++requests_;
    const auto& f = options_.faults;
    // One roll picks at most one fault: consecutive ranges of [0, 1).
    const double roll = draw();
    const double decline_end = f.fail_before + f.decline, timeout_end = decline_end + f.timeout,
                 lose_end = timeout_end + f.lose_response, slow_end = lose_end + f.slow;
    if (roll < f.fail_before) return {reply::server_error, {}, {}};
    const auto known = options_.honours_keys ? ledger_.find(key) : std::nullopt;
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
      auto e = ledger_.find(key).value_or(detail::ledger::entry{});
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
    const auto e = ledger_.find(key);
    if (!e) return {found::not_found, {}};
    if (e->status == "declined") return {found::declined, {}};
    return {found::charged, e->ref};
  }

  /// Times money moved under `key` (more than 1: a double charge).
  std::uint64_t charges(const std::string& key) const {
    std::lock_guard g(m_);
    const auto e = ledger_.find(key);
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

/// A payment request (`effect_type` "payment").
struct charge {
  static constexpr std::string_view effect_type = "payment";
  long amount = 0;
};
BOOST_DESCRIBE_STRUCT(charge, (), (amount))

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
  explicit payment_adapter(std::shared_ptr<payment_gateway> g,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(100))
      : gateway_(std::move(g)), timeout_(timeout) {}

  task<effects::outcome> execute(const effects::operation& op) {
    const auto c = op.request_as<charge>();
    const auto a = gateway_->charge(op.id, c.amount);
    co_await detail::wait_for(std::min(a.latency, timeout_));
    if (a.latency > timeout_)
      co_return effects::outcome::unknown("no answer within " + std::to_string(timeout_.count()) + " ms");
    switch (a.what) {
    case payment_gateway::reply::charged: co_return effects::outcome::completed(a.payment_id);
    case payment_gateway::reply::declined: co_return effects::outcome::failed("declined", true);
    case payment_gateway::reply::server_error: co_return effects::outcome::unknown("the gateway answered 503");
    case payment_gateway::reply::no_response: break;
    }
    co_return effects::outcome::unknown("the connection dropped before the answer");
  }

  task<effects::query_result> query(const std::string& id) {
    const auto l = gateway_->query(id);
    switch (l.what) {
    case payment_gateway::found::charged: co_return effects::query_result::completed(l.payment_id);
    case payment_gateway::found::declined: co_return effects::query_result::failed("declined");
    case payment_gateway::found::not_found: co_return effects::query_result::not_found();
    case payment_gateway::found::unavailable: break;
    }
    co_return effects::query_result::unknown("the gateway did not answer the query");
  }

private:
  std::shared_ptr<payment_gateway> gateway_;
  std::chrono::milliseconds timeout_;
};

} // namespace troupe::testing
