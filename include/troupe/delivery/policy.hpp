#pragma once

/// \file
/// How a sender redelivers (`redelivery_policy`) and how long a receiver
/// remembers what it processed (`dedup_policy`).

#include <chrono>
#include <string>
#include <cstddef>
#include <cstdint>

namespace troupe::delivery {

/// How a sender redelivers what is not confirmed.
struct redelivery_policy {
  /// Wait after the first attempt; doubles after each further one, up to
  /// `max_backoff`, each wait varied by ±`jitter` (a fraction).
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30'000};
  double jitter = 0.2;
  /// Redeliveries sent per timer tick at most (the tick is half the initial
  /// backoff, between 1 ms and 1 s).
  std::size_t burst = 1000;
  /// A `redelivery_warning` after this many attempts (0: never).
  std::uint32_t warn_after = 5;
  /// Attempts before the delivery becomes a dead letter (0: never). The
  /// horizon below bounds it too.
  std::uint32_t max_attempts = 100;
  /// Deliveries recorded and not yet confirmed, at most; past it `deliver`
  /// throws `errc::delivery_backlog_full`, or waits if `wait_when_full`.
  std::size_t max_unconfirmed = 10'000;
  bool wait_when_full = false;

  /// How long after it was first recorded (the durable time in its
  /// record, wall clock) a delivery may still be sent: past it, it becomes a
  /// dead letter and is never sent again — whatever the jitter, the timer's
  /// delays, restarts of the sender (its attempts start again at 1, its
  /// record's time does not) or how late a restart finds it. The library's
  /// own deliveries (effect outcomes) have none: they are redelivered at
  /// `max_backoff` until confirmed. `max_backoff` × `max_attempts`
  /// (`max()` when `max_attempts` is 0).
  std::chrono::milliseconds horizon() const noexcept {
    if (max_attempts == 0) return std::chrono::milliseconds::max();
    return max_backoff * max_attempts;
  }

  friend bool operator==(const redelivery_policy&, const redelivery_policy&) = default;
};

/// How long a receiver remembers the delivery IDs it processed.
struct dedup_policy {
  /// Dedup marks older than this may be removed (the store drops them as
  /// it compacts, whether their receiver is live or not); a delivery
  /// arriving after its mark was removed is processed again. Must be at
  /// least the redelivery horizon of every sender (checked for the senders
  /// of the same transport). `max()`: forever.
  std::chrono::milliseconds retention{std::chrono::hours(24)};
  /// Marks a live receiver keeps in memory, the most recent ones (a
  /// duplicate of one is answered without reading the store). The store's
  /// table is the index: memory does not grow with the marks kept.
  std::size_t cached_marks = 256;

  friend bool operator==(const dedup_policy&, const dedup_policy&) = default;
};

struct delivery_options {
  redelivery_policy redelivery;
  dedup_policy dedup;
  /// The largest message `deliver` accepts (its JSON text, in bytes): a
  /// larger one throws `errc::message_too_large` and nothing is recorded.
  std::size_t max_message_bytes = 1 << 20;
  /// A receiver whose handler failed on one delivery this many times
  /// rejects it (0: never): it records the rejection durably, answers every
  /// copy with it, and the sender gets `delivery_rejected` and stops
  /// redelivering. Until then a failure is counted durably and the
  /// delivery waits for its next copy; the receiver goes on with others.
  /// A handler that fails *after* persisting events leaves them unwritten
  /// in the instance's state, which must restart each time: the default
  /// fits the default supervision (3 restarts within 10 s).
  std::uint32_t max_handler_failures = 3;

  friend bool operator==(const delivery_options&, const delivery_options&) = default;
};

namespace detail {
/// What `delivery::entities<T>` was given: the options of every activation
/// of `T` (an extension of the actor system, one per `T`).
template <class T>
struct entity_policy {
  std::string prefix;
  delivery_options options;
};
} // namespace detail

} // namespace troupe::delivery
