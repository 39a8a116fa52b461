#pragma once

// What an actor system reports of its actors and workers when a metrics
// snapshot is taken (see docs/operations.md for the list).

#include <troupe/detail/cell_base.hpp>

#include <algorithm>
#include <string>

namespace troupe::detail {

TROUPE_DECL void system_state::collect_core_metrics(metrics_snapshot& s) const {
  s.add_gauge("troupe_actors_live", "Actors spawned and not yet stopped", static_cast<double>(live_count()));
  {
    std::lock_guard g(types_lock);
    for (const auto& t : types) {
      const metric_labels type{{"type", t->name}};
      const auto spawned = t->spawned.load(std::memory_order_relaxed);
      const auto stopped = t->stopped.load(std::memory_order_relaxed);
      s.add_counter("troupe_actors_spawned_total", "Actors started, by type (an entity's each activation)",
                    static_cast<double>(spawned), type);
      s.add_counter("troupe_actors_stopped_total", "Actors stopped, by type", static_cast<double>(stopped), type);
      s.add_gauge("troupe_actors_live_by_type", "Actors spawned and not yet stopped, by type",
                  static_cast<double>(spawned >= stopped ? spawned - stopped : 0), type);
      s.add_counter("troupe_actor_restarts_total", "Restarts after a handler failed, by type",
                    static_cast<double>(t->restarts.load(std::memory_order_relaxed)), type);
    }
  }
  std::uint64_t messages = outside_handled.load(std::memory_order_relaxed), turns = 0;
  for (std::uint32_t i = 0; i < queues.count(); ++i) {
    const auto& q = queues[i];
    messages += q.messages();
    turns += q.turns_total();
    s.add_counter("troupe_worker_busy_seconds_total", "Time each worker thread spent running actors' turns",
                  static_cast<double>(q.busy_ns()) / 1e9, {{"worker", std::to_string(i)}});
  }
  s.add_counter("troupe_messages_processed_total", "Messages taken from mailboxes by actors' turns",
                static_cast<double>(messages));
  s.add_counter("troupe_turns_total", "Turns run by the workers", static_cast<double>(turns));
  s.add_counter("troupe_dead_letters_total", "Messages never handled because their actor had stopped",
                static_cast<double>(dead_letters.load(std::memory_order_relaxed)));
  s.add_gauge("troupe_worker_threads", "Worker threads of the actor system", static_cast<double>(queues.count()));
  // The mailboxes, read one list at a time under its lock (a moment's
  // look: pushes and turns go on meanwhile).
  std::uint64_t sum = 0;
  std::uint32_t most = 0;
  for (const auto& sh : shards) {
    std::lock_guard g(sh.lock);
    for (const cell_base* c = sh.first; c; c = c->reg_next) {
      const auto q = c->queued();
      sum += q;
      most = std::max(most, q);
    }
  }
  s.add_gauge("troupe_mailbox_depth_sum", "Messages live actors took from their mailboxes and have not handled yet, as of their last take", static_cast<double>(sum));
  s.add_gauge("troupe_mailbox_depth_max", "The most one live actor took from its mailbox and has not handled yet, as of its last take", static_cast<double>(most));
}

} // namespace troupe::detail
