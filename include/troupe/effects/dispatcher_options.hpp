#pragma once

/// \file
/// Settings of a dispatcher: its name, concurrency, and how long finished
/// outbox records are kept.

#include <troupe/delivery/policy.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace troupe::effects {

/// How long finished outbox records are kept. The store drops them once
/// their time has passed and their owner has confirmed their outcome (as
/// it compacts: no sweep of the dispatcher's, nothing of them in memory).
struct retention_policy {
  /// Completed records may go this long after they finished; failed ones
  /// after `failed`. Unknown ones are kept until an operator resolves
  /// them.
  std::chrono::milliseconds completed{std::chrono::hours(24)};
  std::chrono::milliseconds failed{std::chrono::hours(24 * 7)};
};

struct dispatcher_options {
  /// The dispatcher's persistence ID and name on the delivery transport.
  std::string name = "troupe.effects";
  /// Attempts running at once, at most.
  std::size_t max_in_flight = 64;
  /// How often due retries are looked for.
  std::chrono::milliseconds tick{50};
  /// Pending records held in memory at most: the dispatcher pages through
  /// the outbox's pending ones (a backlog stays on disk until there is
  /// room).
  std::size_t window = 4096;
  retention_policy retention;
  /// For the outcomes delivered to owners (`wait_when_full` is forced on:
  /// the dispatcher waits rather than drop an outcome).
  delivery::delivery_options delivery;
};

} // namespace troupe::effects
