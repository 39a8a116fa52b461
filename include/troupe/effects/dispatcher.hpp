#pragma once

/// \file
/// `troupe::effects::dispatcher`: executes the outbox's pending effects
/// through adapters, resolves unknown outcomes, retries, and reports each
/// outcome to the effect's owner by reliable delivery. See docs/effects.md.

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/detail/compile_mode.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/effects/adapter.hpp>
#include <troupe/effects/dispatcher_options.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/operator.hpp>
#include <troupe/effects/detail/attempt.hpp>
#include <troupe/effects/detail/claims.hpp>
#include <troupe/effects/detail/confirmations.hpp>
#include <troupe/effects/detail/decide.hpp>
#include <troupe/effects/detail/outbox.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/detail/clock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace troupe::effects {

class dispatcher;

namespace detail {

/// Told to the dispatcher by an owner once an effect's intent is durable.
struct enqueued {
  record rec;
};
struct tick {};
struct results_ready {};
/// Told when confirmations of outcomes wait to be marked in the outbox.
struct mark_confirmed {};
/// Told when the pending records in memory run low: the next page.
struct refill {};

struct dispatcher_state {};

/// The dispatcher effect owners of a system notify (`spawn_dispatcher`).
struct dispatcher_slot {
  actor_ref<dispatcher> ref;
};

} // namespace detail

/// Executes effects from the outbox. One per actor system is the usual
/// setup (`spawn_dispatcher`); several in one system never run the same
/// operation ID at once.
///
/// An effect is *claimed* before each attempt and released once its result
/// is durable. Attempts run concurrently (`max_in_flight`), off the
/// mailbox; their results are written in batches: the outbox record's new
/// state and, for an outcome, its delivery to the owner, atomically. The
/// operator API (`operator.hpp`) is asked of it.
class dispatcher : public delivery::reliable_actor<dispatcher, detail::dispatcher_state> {
  using base = delivery::reliable_actor<dispatcher, detail::dispatcher_state>;

public:
  using events = persistence::event_types<>;

  /// The smallest `delivery.max_message_bytes` a dispatcher takes: an
  /// outcome whose result and reason were left out still fits.
  static constexpr std::size_t min_message_bytes = 8192;

  TROUPE_DECL dispatcher(context<dispatcher> ctx, effects::adapters a, dispatcher_options o = {});

  TROUPE_DECL ~dispatcher();

  /// Reads the first page of pending records (the index of pending
  /// records is built first in a store written without one); in-doubt
  /// effects are resolved before anything else is executed.
  TROUPE_DECL task<> on_recovery_completed();

  // -- messages ------------------------------------------------------------------

  TROUPE_DECL void handle(detail::enqueued e);

  TROUPE_DECL void handle(detail::tick);

  TROUPE_DECL task<> handle(detail::refill);

  TROUPE_DECL task<> handle(detail::results_ready);

  /// The owner confirmed an outcome this dispatcher reported: its record
  /// may go once its retention has passed (the store drops it then). The
  /// confirmations that arrived meanwhile are read and marked together,
  /// with one visit to the store's thread (one each, in turn, kept every
  /// effect behind a read of the store). Gathered ones outlive a restart.
  TROUPE_DECL void handle(delivery::confirmed c);

  TROUPE_DECL task<> handle(detail::mark_confirmed);

  // -- the operator API ------------------------------------------------------------

  /// From the store: the operator's path, not a hot one.
  TROUPE_DECL task<std::vector<effect_info>> handle(list_effects q);

  TROUPE_DECL task<bool> handle(requeue_effect q);

  TROUPE_DECL task<bool> handle(resolve_effect q);

  /// Counts what the outbox holds (from the store: the operator's path).
  TROUPE_DECL task<dispatcher_stats> handle(effects_status);

private:
  struct slot {
    detail::record rec;
    bool running = false;
  };

  TROUPE_DECL static delivery::delivery_options delivery_options_of(const dispatcher_options& o);

  const detail::erased_adapter* adapter_of(std::string_view type) const { return shared_->adapters.find(type); }

  TROUPE_DECL void add_open(detail::record r);

  /// The ID of the delivery that tells an effect's owner its state.
  TROUPE_DECL static delivery::delivery_id outcome_id(const std::string& id, std::uint32_t round, effect_status status);

  /// The record of `id` in the store, or none.
  TROUPE_DECL task<std::optional<detail::record>> read_record(const std::string& id);

  /// On the journal's thread: `f(record&)` for every record of the outbox.
  template <class F>
  void scan_records(F&& f);

  /// On the journal's thread, once per store: the pending records of a
  /// store written before the pending index are indexed, with the key that
  /// says so, in one atomic write.
  TROUPE_DECL void index_pending();

  /// Pages in pending records while fewer than half the window are held.
  TROUPE_DECL void maybe_refill();

  /// The next page of pending records, from the index, after the last one
  /// read (from its start again once it reached the end with some left
  /// out). Records read in the first pass after a start may have been cut
  /// short: in doubt where they can be asked, and resolved first.
  TROUPE_DECL task<> refill();

  /// Starts what is due, the in-doubt effects found at start first.
  TROUPE_DECL void kick();

  /// Delivers `u` to the owner; joins the open batch. A result or reason
  /// too large for a delivery (`max_message_bytes`) is left out of it,
  /// with a reason that says so (the outbox record keeps them): the owner
  /// still learns the status.
  TROUPE_DECL task<> report(const std::string& owner, const effect_updated& u);

  /// Writes `r` and reports its state to its owner, atomically.
  TROUPE_DECL task<> write_with_update(detail::record& r);

  /// A batch that could not be written: its results are handled again
  /// after a tick (their claims stay held meanwhile).
  TROUPE_DECL void retry_later(std::vector<detail::result> batch);

  /// Once durable: the in-memory view follows the store.
  TROUPE_DECL void settle(detail::plan p);

  dispatcher_options options_;
  std::shared_ptr<detail::shared_part> shared_;
  std::unordered_map<std::string, slot> open_;         // pending
  std::set<std::pair<std::int64_t, std::string>> due_; // pending, not running, by due time
  std::unordered_set<std::string> first_;              // in doubt at start: resolved first
  std::vector<delivery::delivery_id> confirming_;      // confirmed outcomes, not yet marked
  actor_ref<dispatcher> self_;
  std::string cursor_;      // the pending index's last key read (empty: from its start)
  bool more_ = true;        // pending records may wait in the outbox, not in memory
  bool first_pass_ = false; // the first pass through the pending index since the start
  bool refilling_ = false;  // a refill is told
  std::size_t in_flight_ = 0;
  dispatcher_stats stats_;
};

/// Spawns a dispatcher in `sys`; the first one spawned is the one effect
/// owners of `sys` notify. Needs a journal and a delivery transport set on
/// `sys`.
TROUPE_DECL actor_ref<dispatcher> spawn_dispatcher(actor_system& sys, adapters a, dispatcher_options o = {});

} // namespace troupe::effects

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/effects/impl/dispatcher.ipp>
#endif
