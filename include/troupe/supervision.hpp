#pragma once

/// \file
/// What happens when a handler throws.

#include <chrono>
#include <cstdint>

namespace troupe {

/// The decision applied when an exception escapes a handler, the actor's
/// constructor (during a restart) or `on_start`.
///
/// In every case the ask that caused the failure (if any) completes with an
/// `troupe::error` of code `errc::handler_failed` whose `what()` carries the
/// exception's message (unless a `reply_promise` answered it before the
/// throw: the first answer wins), and the message is not retried.
///
/// The default is `restart`: up to 3 restarts within 10 seconds, with a
/// backoff from 10 ms doubling up to 1 s; a failure past that stops the actor
/// with `exit_reason::failure`.
struct supervision {
  enum class directive : std::uint8_t {
    /// Destroy the instance and construct a fresh one from the spawn
    /// arguments after a backoff; messages wait meanwhile.
    restart,
    /// Keep the instance and its state, drop the failing message, go on.
    resume,
    /// Stop the actor: watchers receive `down` with `exit_reason::failure`.
    stop,
  };

  directive on_failure = directive::restart;
  /// Restarts allowed within `window`; one more failure stops the actor.
  std::uint32_t max_restarts = 3;
  std::chrono::milliseconds window{10'000};
  /// Delay before the first restart in a window; doubled for each further
  /// restart, capped at `max_backoff`.
  std::chrono::milliseconds min_backoff{10};
  std::chrono::milliseconds max_backoff{1'000};

  static supervision restart(std::uint32_t max_restarts = 3,
                             std::chrono::milliseconds window = std::chrono::seconds(10),
                             std::chrono::milliseconds min_backoff = std::chrono::milliseconds(10),
                             std::chrono::milliseconds max_backoff = std::chrono::seconds(1)) {
    return {directive::restart, max_restarts, window, min_backoff, max_backoff};
  }
  static supervision resume() { return {directive::resume}; }
  static supervision stop() { return {directive::stop}; }
};

} // namespace troupe
