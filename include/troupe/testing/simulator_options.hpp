#pragma once

/// \file
/// Settings of the simulators of external systems (`payment_gateway`,
/// `email_service`): seeded faults, dedup by key, where they keep their
/// records.

#include <chrono>
#include <cstdint>
#include <string>

namespace troupe::testing {

/// Probabilities of faults, each drawn per request, seeded.
struct gateway_faults {
  /// A 5xx before anything happens.
  double fail_before = 0;
  /// Performed, then the response is lost (the connection drops).
  double lose_response = 0;
  /// No answer in time: performed or not, half and half.
  double timeout = 0;
  /// Answers after `slow_latency` (still in time).
  double slow = 0;
  /// A payment declined for good (the gateway remembers it under the key).
  double decline = 0;
  /// A query gets no answer.
  double query_unavailable = 0;
  std::chrono::milliseconds slow_latency{5};
};

struct simulator_options {
  std::uint64_t seed = 1;
  gateway_faults faults;
  /// The system dedups by key (idempotency key, message ID): a repeated
  /// request returns the first answer and performs nothing. Off, every
  /// request performs the operation again (to test that troupe does not
  /// rely on it).
  bool honours_keys = true;
  /// A directory for the simulator's own RocksDB database; empty: memory.
  std::string path;
  /// Each record fsynced before the answer (survives power loss); off, it
  /// survives a crash of the process (`kill -9`), which is what the crash
  /// tests need, at a fraction of the cost.
  bool sync = true;
  /// Off, records skip the database's write-ahead log (and `sync` has no
  /// effect): they live in its memory tables until flushed to its files,
  /// and a crash of the process loses what was not flushed. Only for
  /// benchmarks, where the simulator stands in for a system on another
  /// machine and should cost this one little.
  bool write_ahead_log = true;
};

} // namespace troupe::testing
