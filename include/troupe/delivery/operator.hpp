#pragma once

/// \file
/// Operator messages, handled by every reliable actor, and the counters
/// they report.

#include <troupe/delivery/delivery_id.hpp>

#include <cstddef>
#include <cstdint>

namespace troupe::delivery {

/// Operator messages, handled by every reliable actor. `ask` them:
/// - `list_dead_letters{}` → `std::vector<dead_letter>`;
/// - `requeue{id}` → `bool` (false: no such dead letter): the delivery is
///   pending again, with a fresh count of attempts and a fresh horizon, and
///   sent at once. Refused (`errc::requeue_refused`) when the receiver may
///   have forgotten it — its dedup retention (known to the transport) is
///   shorter than the dead letter's age plus the sender's horizon — unless
///   `force` (the operator accepts that it may be processed again);
/// - `delivery_status{}` → `delivery_stats`.
struct list_dead_letters {};
struct requeue {
  delivery_id id;
  bool force = false;
};
struct delivery_status {};

/// Counters of one reliable actor since it (re)started.
struct delivery_stats {
  /// Deliveries recorded and not yet confirmed or given up.
  std::size_t unconfirmed = 0;
  std::uint64_t sent = 0, resent = 0, confirmed = 0, dead_lettered = 0;
  /// Deliveries received and processed (first arrivals), and duplicates
  /// answered from the dedup marks.
  std::uint64_t processed = 0, duplicates = 0;
  /// Deliveries received whose message type this actor does not accept or
  /// whose payload does not parse (not acknowledged).
  std::uint64_t rejected = 0;
  /// Receiver: handler runs that failed, and deliveries rejected after
  /// `max_handler_failures` of them (each answered `delivery_rejected`).
  std::uint64_t handler_failures = 0, poison_rejected = 0;
  /// Sender: deliveries their receivers rejected.
  std::uint64_t refused = 0;
  /// Receiver: copies not processed because their mark may have expired
  /// (see `acknowledgement::expired`; each a dead letter at its sender).
  std::uint64_t expired = 0;
};

} // namespace troupe::delivery
