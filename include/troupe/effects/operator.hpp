#pragma once

/// \file
/// The operator API: messages to ask a dispatcher, and what it reports.

#include <troupe/effects/effect_info.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::effects {

/// → `std::vector<effect_info>`: the failed and unknown effects (and the
/// pending ones with `pending`).
struct list_effects {
  bool pending = false;
};
/// → `bool` (false: no failed or unknown effect has that ID): the effect is
/// pending again (a new round, attempts counted from zero) and runs at
/// once. An unknown one is first queried if its adapter can; otherwise it
/// is executed again with the same key — the operator's decision.
struct requeue_effect {
  std::string id;
};
/// → `bool` (false: no unknown effect has that ID): an operator, having
/// checked the external system, says what an unknown effect came to.
struct resolve_effect {
  std::string id;
  bool completed = false;
  /// The result (JSON text) if completed, the reason if not.
  std::string detail;
};
/// → `dispatcher_stats` (it reads the whole outbox: for operators).
struct effects_status {};

struct dispatcher_stats {
  /// In the outbox now (pending: also those not yet in memory), and
  /// running now.
  std::size_t pending = 0, running = 0, failed = 0, unknown = 0;
  /// Since the dispatcher (re)started.
  std::uint64_t executed = 0, queried = 0, completed = 0, write_retries = 0;
};

} // namespace troupe::effects
