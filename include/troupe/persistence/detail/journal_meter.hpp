#pragma once

// What a journal counts of its writes, for the metrics of the actor system
// it serves (see `set_journal`): their latency from request to durable, the
// events they carried, and their failures by error code.

#include <troupe/metrics.hpp>
#include <troupe/detail/spinlock.hpp>

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <system_error>

namespace troupe::persistence::detail {

class journal_meter {
public:
  void record(std::chrono::steady_clock::duration took, std::size_t events, std::error_code ec) {
    latency_.observe(std::chrono::duration<double>(took).count());
    writes_.add();
    events_.add(events);
    if (!ec) return;
    std::lock_guard g(lock_);
    for (auto& e : errors_)
      if (e.code == ec) {
        ++e.count;
        return;
      }
    errors_.push_back({ec, ec.message(), 1});
  }

  void record_recovery(std::uint64_t events, std::chrono::steady_clock::duration took) noexcept {
    recoveries_.observe(std::chrono::duration<double>(took).count());
    recovered_events_.add(events);
  }

  void report(metrics_snapshot& s) const {
    s.add("troupe_recovery_seconds", "Recoveries of persistent actors (claim, snapshot, replay), by duration",
          metric_type::histogram, recoveries_.sample());
    s.add_counter("troupe_recovery_events_total",
                  "Events replayed by recoveries (events/s: its rate over troupe_recovery_seconds_sum's)",
                  static_cast<double>(recovered_events_.value()));
    s.add("troupe_persist_latency_seconds", "Journal writes, from their request to durable (or failed)",
          metric_type::histogram, latency_.sample());
    s.add_counter("troupe_persist_writes_total", "Journal writes requested and completed",
                  static_cast<double>(writes_.value()));
    s.add_counter("troupe_persist_events_total", "Events the completed journal writes carried",
                  static_cast<double>(events_.value()));
    std::lock_guard g(lock_);
    for (const auto& e : errors_)
      s.add_counter(
          "troupe_store_errors_total", "Journal writes that failed, by error", static_cast<double>(e.count),
          {{"category", e.code.category().name()}, {"code", std::to_string(e.code.value())}, {"message", e.message}});
  }

private:
  struct error_count {
    std::error_code code;
    std::string message;
    std::uint64_t count;
  };
  histogram latency_{histogram::seconds_buckets()};
  counter writes_, events_;
  histogram recoveries_{histogram::seconds_buckets()};
  counter recovered_events_;
  mutable troupe::detail::spinlock lock_;
  std::list<error_count> errors_; // (few: the codes a store reports)
};

} // namespace troupe::persistence::detail
