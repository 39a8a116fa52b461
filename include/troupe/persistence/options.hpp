#pragma once

/// \file
/// Settings of one persistent actor: the event size limit and when it saves
/// snapshots.

#include <cstddef>
#include <cstdint>

namespace troupe::persistence {

/// When a persistent actor saves snapshots of its state.
struct snapshot_policy {
  /// A snapshot after every `every` events (0: never). The state must then
  /// be JSON-convertible through Boost.JSON like an event.
  std::uint64_t every = 0;
  /// Snapshots kept; older ones are deleted after a new one is saved.
  std::size_t keep = 2;
  /// Also delete the events up to the oldest kept snapshot (recovery never
  /// needs them; an unreadable newer snapshot can still fall back to it).
  bool delete_events = false;
};

/// Settings of one persistent actor.
struct persistence_options {
  /// Largest serialized event accepted; a larger one is rejected with
  /// `errc::event_too_large` and nothing is written.
  std::size_t max_event_bytes = 1 << 20;
  persistence::snapshot_policy snapshots;
};

} // namespace troupe::persistence
