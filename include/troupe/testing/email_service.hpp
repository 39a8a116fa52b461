#pragma once

/// \file
/// `troupe::testing::email_service`: a reference simulator of an e-mail
/// service (it dedups by message ID unless told not to), with seeded
/// faults; its adapter for the dispatcher; and the `email` request. It
/// keeps its own records (in memory, or in a RocksDB database of its own),
/// so that e-mails can be counted across crashes of the actor system.

#include <troupe/effects/adapter.hpp>
#include <troupe/testing/simulator_options.hpp>
#include <troupe/testing/detail/ledger.hpp>

#include <boost/describe/class.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>

namespace troupe::testing {

/// An e-mail service that dedups by message ID (unless told not to) and can
/// fail before sending or lose its response after sending. Thread-safe.
class email_service {
public:
  enum class reply { sent, server_error, no_response };

  explicit email_service(simulator_options o = {})
      : options_(std::move(o)), rng_(options_.seed), ledger_(options_.path, options_.sync, options_.write_ahead_log) {}

  reply send(const std::string& message_id, const std::string& to) {
    std::lock_guard g(m_);
    ++requests_;
    const auto& f = options_.faults;
    const double roll = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (roll < f.fail_before) return reply::server_error;
    const auto known = ledger_.find(message_id);
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
    const auto e = ledger_.find(id);
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

/// An e-mail request (`effect_type` "email").
struct email {
  static constexpr std::string_view effect_type = "email";
  std::string to;
  std::string subject;
};
BOOST_DESCRIBE_STRUCT(email, (), (to, subject))

/// The e-mail service's adapter: the operation ID is the message ID, which
/// the service dedups, so an unknown outcome is resolved by sending again.
class email_adapter {
public:
  static constexpr bool honours_idempotency_keys = true;

  explicit email_adapter(std::shared_ptr<email_service> s) : service_(std::move(s)) {}

  effects::outcome execute(const effects::operation& op) {
    const auto e = op.request_as<email>();
    switch (service_->send(op.id, e.to)) {
    case email_service::reply::sent: return effects::outcome::completed(op.id);
    case email_service::reply::server_error: return effects::outcome::unknown("the mail service answered 503");
    case email_service::reply::no_response: break;
    }
    return effects::outcome::unknown("the connection dropped before the answer");
  }

private:
  std::shared_ptr<email_service> service_;
};

} // namespace troupe::testing
