#pragma once

/// \file
/// Actor identity and the notification a watcher receives when an actor stops.

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe {

/// Identifies an actor within its system; unique for the system's lifetime.
using actor_id = std::uint64_t;

/// Why an actor stopped.
enum class exit_reason : std::uint8_t {
  /// `stop()` was called, by the actor itself or through a reference.
  normal = 1,
  /// A handler (or the constructor, or `on_start`) threw and the supervision
  /// policy decided to stop, or the restarts ran out.
  failure,
  /// The actor system shut down.
  system_shutdown,
  /// An entity was passivated: idle, or its region held too many (see
  /// `troupe::entity_options`). Its next message activates it again.
  passivated,
};

/// Human-readable name of an exit reason.
constexpr std::string_view to_string(exit_reason r) noexcept {
  switch (r) {
  case exit_reason::normal: return "normal";
  case exit_reason::failure: return "failure";
  case exit_reason::system_shutdown: return "system shutdown";
  case exit_reason::passivated: return "passivated";
  }
  return "unknown";
}

/// Sent to every watcher of an actor once it has stopped (see
/// `context<T>::watch`), and the result of `actor_ref<T>::when_stopped`.
/// A watcher handles it like any message: `void handle(troupe::down d)`.
struct down {
  /// The actor that stopped.
  actor_id id = 0;
  exit_reason reason = exit_reason::normal;
  /// For `failure`: the message of the exception that caused it.
  std::string what;
};

} // namespace troupe
