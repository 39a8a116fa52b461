#pragma once

/// \file
/// Settings of an actor system and of one spawned actor.

#include <troupe/timeout.hpp>
#include <troupe/supervision.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace troupe {

/// Settings of an `actor_system`, fixed when it is constructed.
struct system_config {
  /// Worker threads; 0 means `std::thread::hardware_concurrency()`.
  std::size_t threads = 0;
  /// Messages an actor processes per turn before it yields its thread to
  /// other actors (fairness). Higher favours throughput, lower latency.
  /// It also tells a flood: a turn that holds an actor it woke and makes
  /// more pushes than this plus 16 (4096 at most; counting from the turn's
  /// start its wake-ups and the pushes it makes while holding one) lets an
  /// idle worker take the actors it woke, to run in parallel with it.
  std::uint32_t throughput = 256;
  /// Work waiting behind a busy worker thread moves to an idle one only when
  /// it would keep the busy one at least this long (the actors waiting,
  /// times that thread's recent time per turn). Moving an actor to another
  /// core costs it its cache, and each message it then exchanges with those
  /// left behind crosses cores: for short turns that costs more than the
  /// second core gains. Work behind one long turn (within a millisecond or
  /// two, the monitor's looks), or behind an actor that floods another with
  /// messages (at once), is shared whatever this says. Zero shares
  /// whatever waits; a negative value counts as zero.
  std::chrono::microseconds share_threshold{100};
  /// Timeout of an ask that is given none. `troupe::no_timeout` (the
  /// default): such an ask waits until it is answered or the actor stops;
  /// either way it never waits past the actor's stop, because a stopping
  /// actor fails its pending asks with `errc::actor_stopped`. Must be
  /// positive (`actor_system` refuses zero or negative: an ask whose
  /// timeout has passed fails at once, see `timeout.hpp`).
  std::chrono::nanoseconds ask_timeout = no_timeout;
  /// How long `shutdown()` waits for actors to finish their current handler
  /// (coroutine handlers may be suspended) before it stops the threads anyway.
  std::chrono::milliseconds shutdown_timeout{10'000};
  /// Keeps the counts that cost something on every message (messages
  /// handled, mailbox depths: see docs/operations.md). Off, those read
  /// zero; the rest of `actor_system::metrics()` is kept either way.
  bool metrics = true;
};

/// Settings of one actor, given to `actor_system::spawn`.
struct spawn_options {
  /// 0 (the default) is an unbounded mailbox. Otherwise at most this many
  /// messages wait: `tell` then fails with `errc::mailbox_full` and
  /// `co_await ref.send(m)` waits for room.
  std::uint32_t mailbox_capacity = 0;
  /// What happens when a handler throws (default: restart, see
  /// `troupe::supervision`).
  troupe::supervision supervision{};
};

} // namespace troupe
