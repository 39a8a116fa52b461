#pragma once

/// \file
/// `troupe::testing::faulty_transport`: a transport for tests that drops,
/// duplicates, reorders and delays messages and acknowledgements with given
/// probabilities, from a seed.

#include <troupe/delivery/transport.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <utility>

namespace troupe::testing {

using delivery::acknowledgement;
using delivery::endpoint;
using delivery::message;
using delivery::transport;

/// What happens to each message (or acknowledgement), drawn independently.
struct fault_rates {
  /// Lost.
  double drop = 0;
  /// Sent twice (the copy after a random delay up to `max_delay`).
  double duplicate = 0;
  /// Held back up to `reorder_window`, so later ones overtake it.
  double reorder = 0;
  /// Delayed by a random time up to `max_delay`.
  double delay = 0;
  std::chrono::milliseconds reorder_window{5};
  std::chrono::milliseconds max_delay{50};
};

/// Counts of what a `faulty_transport` did.
struct fault_counts {
  std::uint64_t sent = 0, dropped = 0, duplicated = 0, reordered = 0, delayed = 0;
};

/// Wraps another transport and injects faults, separately for messages and
/// for acknowledgements. Deterministic for one seed as far as the draws go
/// (thread scheduling still varies). Delayed sends run on `executor`.
///
/// \code
/// auto net = std::make_shared<troupe::testing::faulty_transport>(
///     std::make_shared<troupe::delivery::local_transport>(), sys.get_executor(), seed);
/// net->set_message_faults({.drop = 0.2, .duplicate = 0.1, .reorder = 0.1});
/// net->set_ack_faults({.drop = 0.2});
/// troupe::delivery::set_transport(sys, net);
/// \endcode
class faulty_transport final : public transport, public std::enable_shared_from_this<faulty_transport> {
public:
  faulty_transport(std::shared_ptr<transport> inner, asio::any_io_executor executor, std::uint64_t seed)
      : inner_(std::move(inner)), executor_(std::move(executor)), rng_(seed) {
    if (!inner_) throw error(troupe::errc::invalid_argument, "faulty_transport: the inner transport is null");
  }

  void set_message_faults(const fault_rates& r) {
    check(r);
    std::lock_guard g(mutex_);
    messages_ = r;
  }

  void set_ack_faults(const fault_rates& r) {
    check(r);
    std::lock_guard g(mutex_);
    acks_ = r;
  }

  /// Stops injecting faults (what is already delayed still arrives).
  void heal() {
    std::lock_guard g(mutex_);
    messages_ = acks_ = fault_rates{};
  }

  fault_counts message_counts() const {
    std::lock_guard g(mutex_);
    return message_counts_;
  }

  fault_counts ack_counts() const {
    std::lock_guard g(mutex_);
    return ack_counts_;
  }

  void bind(const std::string& name, std::shared_ptr<endpoint> e) override { inner_->bind(name, std::move(e)); }
  void unbind(const std::string& name, const endpoint* e) override { inner_->unbind(name, e); }
  void route(const std::string& prefix, std::function<void(message)> to) override {
    inner_->route(prefix, std::move(to));
  }
  void send(message m) override {
    pass(std::move(m), &faulty_transport::messages_, &faulty_transport::message_counts_);
  }
  void send(acknowledgement a) override {
    pass(std::move(a), &faulty_transport::acks_, &faulty_transport::ack_counts_);
  }

private:
  using ms = std::chrono::milliseconds;

  static void check(const fault_rates& r) {
    for (double p : {r.drop, r.duplicate, r.reorder, r.delay})
      if (!(p >= 0 && p <= 1))
        throw error(troupe::errc::invalid_argument, "faulty_transport: a probability is outside [0, 1]");
    if (r.reorder_window.count() < 1 || r.max_delay.count() < 1)
      throw error(troupe::errc::invalid_argument,
                  "faulty_transport: reorder_window and max_delay must be at least 1 ms");
  }

  template <class T>
  void pass(T item, fault_rates faulty_transport::*rates, fault_counts faulty_transport::*counts) {
    bool drop, duplicate;
    ms first{0}, second{0};
    {
      std::lock_guard g(mutex_);
      const fault_rates& r = this->*rates;
      fault_counts& c = this->*counts;
      ++c.sent;
      drop = chance(r.drop);
      duplicate = !drop && chance(r.duplicate);
      if (drop) {
        ++c.dropped;
      } else {
        if (chance(r.reorder)) {
          ++c.reordered;
          first = pick(r.reorder_window);
        } else if (chance(r.delay)) {
          ++c.delayed;
          first = pick(r.max_delay);
        }
        if (duplicate) {
          ++c.duplicated;
          second = pick(r.max_delay);
        }
      }
    }
    if (drop) return;
    if (duplicate) later(T(item), second);
    if (first.count() == 0)
      inner_->send(std::move(item));
    else
      later(std::move(item), first);
  }

  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  ms pick(ms upto) { return ms(std::uniform_int_distribution<ms::rep>(1, upto.count())(rng_)); }

  template <class T>
  void later(T item, ms delay) {
    auto timer = std::make_shared<asio::steady_timer>(executor_, delay);
    timer->async_wait([self = shared_from_this(), timer, item = std::move(item)](std::error_code ec) mutable {
      if (!ec) self->inner_->send(std::move(item));
    });
  }

  std::shared_ptr<transport> inner_;
  asio::any_io_executor executor_;
  mutable std::mutex mutex_;
  std::mt19937_64 rng_;
  fault_rates messages_, acks_;
  fault_counts message_counts_, ack_counts_;
};

} // namespace troupe::testing
