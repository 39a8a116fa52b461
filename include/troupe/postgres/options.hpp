#pragma once

/// \file
/// `troupe::persistence::postgres_options`: the settings of a `postgres_store`.

#include <troupe/persistence/records.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace troupe::persistence {

struct postgres_options {
  /// libpq's connection string (`host=... port=... dbname=... user=...`,
  /// or a `postgresql://` URI); empty: libpq's environment (`PGHOST`, ...).
  std::string conninfo;
  /// The schema that holds the store's tables (created on first open):
  /// several stores share one database under different schemas.
  std::string schema = "troupe";
  /// `sync`: a write is acknowledged once its commit is durable on the
  /// server (`synchronous_commit` on); `async` and `none`: once the server
  /// has it (`synchronous_commit` off: a server crash may lose the last
  /// commits, never half of one).
  persistence::durability durability = persistence::durability::sync;
  /// This store's name in the claims of persistence IDs (`troupe_ids.owner`),
  /// for operators; empty: the host name, the process ID and a random part.
  std::string owner;
  /// The most writes one commit carries (the writer groups what is queued).
  std::size_t max_group = 256;
  /// How long the writer tries to learn the outcome of a commit whose
  /// answer was lost (the connection dropped after COMMIT was sent) before
  /// it fails the group's writes with `storage_failure` (outcome unknown).
  std::chrono::milliseconds resolve_for{30'000};
  /// The longest the engine waits for one answer of the server, or for a
  /// connection (a server that hangs, a network that holds every packet):
  /// past it the connection is cut and the statement has failed
  /// (`storage_failure`; a commit's outcome is then resolved, as for a lost
  /// answer). Also libpq's `connect_timeout` (in whole seconds, at least 2)
  /// unless the connection string names one.
  std::chrono::milliseconds io_timeout{30'000};
  /// A lost connection is opened again before the next statement; after a
  /// failed attempt none is made for `reconnect_backoff`, then for twice as
  /// long after each further failure, up to `max_reconnect_backoff`. Writes
  /// and reads meanwhile fail at once with `storage_failure`, naming the
  /// server's last answer; the first success ends the backoff.
  std::chrono::milliseconds reconnect_backoff{50};
  std::chrono::milliseconds max_reconnect_backoff{2'000};
  /// For fault tests: called after each COMMIT is sent, before its answer
  /// is read; returning true cuts the connection there.
  std::function<bool()> cut_before_commit_answer;
};

} // namespace troupe::persistence
