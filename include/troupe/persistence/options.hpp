#pragma once

/// \file
/// Settings of one persistent actor: the event size limit, when it saves
/// snapshots, and the metadata of its events.

#include <troupe/persistence/records.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace troupe::persistence {

/// When a persistent actor saves snapshots of its state.
struct snapshot_policy {
  /// A snapshot after every `every` events (0: never). The state must then
  /// be JSON-convertible through Boost.JSON like an event.
  std::uint64_t every = 0;
  /// Snapshots kept; older ones are deleted after a new one is saved.
  std::size_t keep = 2;
  /// Also delete the events up to the oldest kept snapshot, once the new
  /// snapshot has been read back from the store and decoded. This makes the
  /// snapshots load-bearing: from then on the state's JSON is the only copy
  /// of what those events said, so every later release must still read it
  /// (a renamed field makes the actor unrecoverable, `snapshot_unreadable`).
  /// Off by default: snapshots then only shorten recoveries, and an
  /// unreadable one falls back to the events.
  bool delete_events = false;
};

/// How far a recovery has come (`persistence_options::on_recovery_progress`).
struct recovery_progress {
  std::string_view pid;
  /// Events read from the journal so far (after the snapshot it started
  /// from), and the highest sequence number there is.
  std::uint64_t events_read = 0;
  sequence_nr highest = 0;
  /// The snapshot it started from (0: none).
  sequence_nr snapshot = 0;
  std::chrono::steady_clock::duration elapsed{};
  /// The last call: every event is applied.
  bool done = false;
};

/// Settings of one persistent actor.
struct persistence_options {
  /// Largest serialized event accepted; a larger one is rejected with
  /// `errc::event_too_large` and nothing is written.
  std::size_t max_event_bytes = 1 << 20;
  persistence::snapshot_policy snapshots;
  /// Called for every event the actor persists, with the event's metadata
  /// (the entries the persist gave, if any) before it is written: a tracing
  /// hook adds its context here (a trace ID from the handler's thread, the
  /// causing message). Runs on the actor's turn; must not block. A throw
  /// fails the persist (nothing written).
  std::function<void(std::string_view pid, std::string_view manifest, record_metadata&)> event_metadata{};
  /// Called while the actor recovers, every `recovery_progress_every`
  /// events read and once at the end, on the journal's thread (it must not
  /// block): for a long journal's progress in a log. Recovery streams the
  /// journal, so its memory does not grow with the journal's length.
  std::function<void(const recovery_progress&)> on_recovery_progress{};
  std::uint64_t recovery_progress_every = 100'000;
};

} // namespace troupe::persistence
