#pragma once

/// \file
/// Settings of a dispatcher: its name, concurrency, and how long finished
/// outbox records are kept.

#include <troupe/delivery/policy.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace troupe::effects {

/// How long finished outbox records are kept, and how they are removed.
struct retention_policy {
  /// Completed records are removed after this; failed ones after
  /// `failed`. Unknown ones are kept until an operator resolves them.
  std::chrono::milliseconds completed{std::chrono::hours(24)};
  std::chrono::milliseconds failed{std::chrono::hours(24 * 7)};
  /// How often, and how many in one write: a full batch is followed at
  /// once by the next (after what waits in the mailbox), so the sweep
  /// keeps up with any rate of effects.
  std::chrono::milliseconds sweep_interval{std::chrono::minutes(1)};
  std::size_t sweep_batch = 10'000;
};

struct dispatcher_options {
  /// The dispatcher's persistence ID and name on the delivery transport.
  std::string name = "troupe.effects";
  /// Attempts running at once, at most.
  std::size_t max_in_flight = 64;
  /// How often due retries are looked for.
  std::chrono::milliseconds tick{50};
  retention_policy retention;
  /// For the outcomes delivered to owners (`wait_when_full` is forced on:
  /// the dispatcher waits rather than drop an outcome).
  delivery::delivery_options delivery;
};

} // namespace troupe::effects
