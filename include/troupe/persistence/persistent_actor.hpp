#pragma once

/// \file
/// `troupe::persistence::persistent_actor`: an actor whose state is rebuilt
/// from its journal of events, and `set_journal`, which gives an actor
/// system its journal.

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/hooks.hpp>
#include <troupe/task.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/event.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/persistence/options.hpp>
#include <troupe/persistence/persistence_id.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/work_index.hpp>
#include <troupe/persistence/detail/recovery.hpp>
#include <troupe/persistence/detail/snapshots.hpp>
#include <troupe/detail/maybe_await.hpp>
#include <troupe/detail/type_name.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace troupe::persistence {

namespace detail {
/// Keeps the journal's metrics in its system's snapshots while it is the
/// system's journal (an extension: gone before the system's registry).
struct journal_metrics_link {
  metrics_registry::collector_handle handle;
};
} // namespace detail

/// Makes `j` the journal of every persistent actor of `sys` spawned with a
/// context and no explicit journal, and reports its metrics with the
/// system's (`actor_system::metrics()`). It lives until `sys` is
/// destroyed, after all its actors have stopped.
inline void set_journal(actor_system& sys, std::shared_ptr<journal> j) {
  if (!j) throw error(troupe::errc::invalid_argument, "set_journal: the journal is null");
  auto link = std::make_shared<detail::journal_metrics_link>();
  link->handle = sys.metric_registry().add_collector(
      [w = std::weak_ptr<journal>(j)](metrics_snapshot& s) {
        if (auto jj = w.lock()) jj->report_metrics(s);
      });
  sys.set_extension<journal>(std::move(j));
  sys.set_extension<detail::journal_metrics_link>(std::move(link)); // (the one before it, if any, goes)
}

/// Base of an event-sourced actor `Derived` with state `State`.
///
/// `Derived` declares `using events = event_types<E1, E2, ...>;` and, for
/// each event, `static void apply(State&, const E&)`. `apply` is pure: it
/// changes the state and nothing else — no I/O, no messages, no timers —
/// because it runs again, for every event, each time the actor recovers:
/// recovery rebuilds state only, it never repeats a side effect. It is
/// static and sees only the state and the event, so there is nothing else
/// it could reach.
///
/// Handlers change the state only through `co_await persist(e)`: it returns
/// once `e` is durable in the journal *and* applied. Side effects follow the
/// persist of their intent, never precede it. (With GCC 12, pass an event
/// holding strings or containers as a named variable, not as a temporary
/// aggregate inside the `co_await`: see docs/core.md.)
///
/// Recovery runs as the actor's `on_start` (so every command waits for it),
/// on the journal's blocking thread, not an actor thread: the latest
/// readable snapshot (an unreadable one falls back to an older one, or to
/// the whole journal), then the events after it through `apply`, then
/// `Derived::on_recovery_completed()` if it exists — the place to resume
/// pending work, never during replay. A record that cannot be read fails
/// recovery with an error naming the persistence ID, the sequence number and
/// the manifest, as do events missing from the journal; the actor does not
/// start (its supervisor decides), and nothing in the store is touched.
///
/// Construct it from a `troupe::context<Derived>` and a `persistence_id`
/// (the journal is the system's, see `set_journal`; `using
/// persistent_actor::persistent_actor;` lets
/// `spawn<Derived>(persistence_id{...})` find it), or from a
/// `persistence_id` and an explicit journal.
template <class Derived, class State>
class persistent_actor {
public:
  /// As an entity (`actor_system::entities`), it is activated with its
  /// key as persistence ID.
  using entity_key = persistence_id;

  // -- construction -------------------------------------------------------------

  /// The journal of the actor's system. Throws `invalid_argument` if it has
  /// none.
  persistent_actor(context<Derived> ctx, persistence_id id, persistence_options options = {})
      : persistent_actor(std::move(id), journal_of_system(ctx.system()), options) {
    ctx_.emplace(std::move(ctx));
  }

  persistent_actor(context<Derived> ctx, persistence_id id, std::shared_ptr<journal> j,
                   persistence_options options = {})
      : persistent_actor(std::move(id), std::move(j), options) {
    ctx_.emplace(std::move(ctx));
  }

  /// Spawned, the actor holds its persistence ID: at most one live actor
  /// per ID per store — another one's construction throws `already_running`
  /// (its spawn fails) until the first has stopped; restarts keep the ID.
  persistent_actor(persistence_id id, std::shared_ptr<journal> j, persistence_options options = {})
      : id_(std::move(id.value)), journal_(std::move(j)), options_(options) {
    if (id_.empty()) throw error(troupe::errc::invalid_argument, "persistence ID must not be empty");
    if (!journal_) throw error(troupe::errc::invalid_argument, "persistent actor " + id_ + ": the journal is null");
    if (auto* cell = troupe::detail::constructing_cell) hold_id(*cell);
    if (options_.snapshots.every != 0) {
      if (options_.snapshots.keep == 0)
        throw error(troupe::errc::invalid_argument,
                    "persistent actor " + id_ + ": snapshot_policy.keep must be at least 1");
      if constexpr (!snapshottable)
        throw error(troupe::errc::invalid_argument, "persistent actor " + id_ + ": snapshots need a JSON-convertible " +
                                                        std::string(troupe::detail::type_name<State>()));
    }
  }

  // -- state ------------------------------------------------------------------

  const State& state() const noexcept { return state_; }
  /// The persistence ID (the journal's name).
  const std::string& pid() const noexcept { return id_; }
  /// The sequence number of the last event applied.
  sequence_nr last_sequence_nr() const noexcept { return seq_; }
  /// The sequence number of the snapshot recovery started from (0: none).
  sequence_nr recovered_from_snapshot() const noexcept { return recovered_snapshot_; }

  // -- persisting --------------------------------------------------------------

  /// Writes `events` atomically, then applies them in order. Throws
  /// `troupe::error`: `event_too_large`, `write_rejected` or a
  /// serialization failure (`invalid_argument`): nothing written, state
  /// unchanged, the actor continues if the handler catches it;
  /// `storage_failure` (the handler fails: its supervisor stops or restarts
  /// the actor, which then recovers from what is durable; an instance whose
  /// write failed refuses every later persist, also when the handler
  /// caught the error).
  template <event... E>
  task<> persist_all(E... events) {
    return persist_all_with({}, std::move(events)...);
  }

  template <event E>
  task<> persist(E e) {
    return persist_all(std::move(e));
  }

  /// As `persist_all`, each event with the entries of `metadata` (its
  /// `written_ms` is the store's: leave it 0). `invalid_argument` when they
  /// exceed `max_metadata_bytes` (nothing written). Replays return them
  /// (`journal::replay`); `apply` does not see them.
  template <event... E>
  task<> persist_all_tagged(record_metadata metadata, E... events) {
    return persist_impl({}, std::move(metadata), std::move(events)...);
  }

  template <event E>
  task<> persist_tagged(record_metadata metadata, E e) {
    return persist_impl({}, std::move(metadata), std::move(e));
  }

  /// Recovery; a `Derived` that needs start-up work puts it in
  /// `on_recovery_completed` (an `on_start` of its own would hide this one).
  task<> on_start() {
    co_await recover_state();
    co_await recovery_completed();
  }

  /// Told by `resume` to an entity with work in the index: its recovery,
  /// which runs first, and `on_recovery_completed` are all it takes here.
  void troupe_handle(resumed) noexcept {}

protected:
  // -- for the layers above --------------------------------------------------

  /// As `persist_all`, with changes to tables of the journal in the same
  /// atomic write (what a layer above records with the events: it is
  /// durable exactly when they are).
  template <event... E>
  task<> persist_all_with(std::vector<table_write> tables, E... events) {
    return persist_impl(std::move(tables), {}, std::move(events)...);
  }

  /// Begins a batch: until `commit_batch`, persists are applied at once (the
  /// handler sees its own events) and written later, all in one atomic
  /// write, and `after_commit` actions wait for that write.
  void begin_batch() {
    if (batch_) throw error(troupe::errc::invalid_argument, "persistent actor " + id_ + ": a batch is already open");
    batch_.emplace();
    batch_->start = seq_;
  }

private:
  /// Every event gets a copy of `metadata`, then what the options' hook adds.
  template <event... E>
  task<> persist_impl(std::vector<table_write> tables, record_metadata metadata, E... events) {
    refuse_if_failed();
    std::vector<event_record> records;
    records.reserve(sizeof...(E));
    sequence_nr next = seq_;
    (records.push_back(encode(++next, events, metadata)), ...);
    if (batch_) {
      // Inside a batch: applied now, written by commit_batch.
      for (auto& r : records) batch_->records.push_back(std::move(r));
      for (auto& t : tables) batch_->tables.push_back(std::move(t));
      (troupe::detail::invoke_apply<Derived>(state_, events), ...);
      seq_ = next;
      co_return;
    }
    co_await write_or_throw(std::move(records), std::move(tables));
    (troupe::detail::invoke_apply<Derived>(state_, events), ...);
    const auto before = seq_;
    seq_ = next;
    snapshot_if_due(before);
  }

protected:
  bool in_batch() const noexcept { return batch_.has_value(); }

  /// Whether this instance refuses further persists (a write of its events
  /// failed, or a batch with events was aborted): it must restart.
  bool persisting_refused() const noexcept { return failed_; }

  /// Writes the batch's events and table changes, with `tables`,
  /// atomically, then runs its `after_commit` actions in order. On failure
  /// it runs their `if_not` parts instead, and the instance refuses further
  /// persists if the batch held events (its state holds events that are not
  /// durable): it must restart and recover.
  task<> commit_batch(std::vector<table_write> tables = {}) {
    if (!batch_) throw error(troupe::errc::invalid_argument, "persistent actor " + id_ + ": no batch is open");
    auto b = std::move(*batch_);
    batch_.reset();
    for (auto& t : tables) b.tables.push_back(std::move(t));
    try {
      refuse_if_failed();
      if (!b.records.empty() || !b.tables.empty()) {
        const bool had_events = !b.records.empty();
        try {
          co_await write_or_throw(std::move(b.records), std::move(b.tables));
        } catch (...) {
          if (had_events) failed_ = true;
          throw;
        }
      }
    } catch (...) {
      for (auto& a : b.actions) a(false);
      throw;
    }
    for (auto& a : b.actions) a(true);
    snapshot_if_due(b.start);
  }

  /// Drops an open batch, running its actions' `if_not` parts. Its events
  /// were applied to the state and are not durable, so the instance refuses
  /// further persists (it must restart).
  void abort_batch() noexcept {
    if (!batch_) return;
    if (!batch_->records.empty()) failed_ = true;
    auto b = std::move(*batch_);
    batch_.reset();
    for (auto& a : b.actions) a(false);
  }

  /// Runs `then()` once what the handler persisted so far is durable: now,
  /// outside a batch; after the batch's write inside one — or, if that
  /// write fails or the batch is aborted, `if_not()` instead. (Outside a
  /// batch nothing is kept: `then` runs before this returns.)
  template <class Then, class IfNot = void (*)()>
  void after_commit(Then&& then, IfNot&& if_not = [] {}) {
    if (!batch_) {
      std::forward<Then>(then)();
      return;
    }
    batch_->actions.emplace_back(
        [then = std::forward<Then>(then), if_not = std::forward<IfNot>(if_not)](bool durable) mutable {
          if (durable)
            then();
          else
            if_not();
        });
  }

  /// `after_commit` with one action: `f(true)` once what the handler
  /// persisted so far is durable, `f(false)` if the batch's write fails or
  /// the batch is aborted (outside a batch, `f(true)` before this returns).
  template <class F>
    requires std::invocable<F&, bool>
  void after_batch(F&& f) {
    if (!batch_) {
      f(true);
      return;
    }
    batch_->actions.emplace_back(std::forward<F>(f));
  }

  /// Recovery: state and sequence number from the latest readable snapshot
  /// and the journal, on the journal's blocking thread.
  task<> recover_state() {
    auto r = co_await journal_->async_run(
        [this] { return detail::recovery<Derived, State>(*journal_, id_, &options_).run(); });
    state_ = std::move(r.state);
    seq_ = r.seq;
    recovered_snapshot_ = r.snapshot;
  }

  /// Recovers the state again from the store, in the running instance (no
  /// restart): for a layer above whose batch failed after persisting, so
  /// that the instance holds only durable events and persists again. Its
  /// other members are kept; `on_recovery_completed` is not called again.
  /// Outside a batch only.
  task<> recover_in_place() {
    if (batch_)
      throw error(troupe::errc::invalid_argument, "persistent actor " + id_ + ": recovery with a batch open");
    co_await recover_state();
    failed_ = false;
  }

  /// Calls `Derived::on_recovery_completed()` if there is one (a plain
  /// function or a coroutine, which is awaited).
  task<> recovery_completed() {
    if constexpr (requires(Derived& d) { d.on_recovery_completed(); }) {
      auto& self = static_cast<Derived&>(*this);
      auto hook = troupe::detail::call_or_await([&self] { return self.on_recovery_completed(); });
      co_await std::move(hook);
    }
  }

  /// The journal this actor writes to: its blocking calls through
  /// `storage().async_run(...)`.
  journal& storage() noexcept { return *journal_; }
  const std::shared_ptr<journal>& storage_ptr() const noexcept { return journal_; }

  /// The actor's context, when it was constructed with one (throws
  /// `invalid_argument` otherwise).
  context<Derived>& actor_context() {
    if (!ctx_)
      throw error(troupe::errc::invalid_argument, "persistent actor " + id_ + " was constructed without a context");
    return *ctx_;
  }

private:
  static constexpr bool snapshottable = json_convertible<State>;

  static std::shared_ptr<journal> journal_of_system(actor_system& sys) {
    auto j = sys.extension<journal>();
    if (!j)
      throw error(troupe::errc::invalid_argument,
                  "the actor system has no journal: call troupe::persistence::set_journal(system, journal) "
                  "before spawning " +
                      std::string(troupe::detail::type_name<Derived>()));
    return j;
  }

  /// Holds the ID for this actor (from its first instance until it has
  /// stopped: the release runs after its last instance is gone).
  void hold_id(troupe::detail::cell_base& cell) {
    auto& ids = journal_->live_ids();
    const auto owner = cell.id();
    auto held = ids.hold(id_, owner);
    if (held.other)
      throw error(errc::already_running, "persistence ID " + id_ + " is already in use by a live actor (actor " +
                                             std::to_string(held.other) +
                                             ") of this store: at most one actor per ID, until it has stopped");
    if (!held.fresh) return; // a restart: the first instance registered the release
    auto release = [j = journal_, pid = id_, owner](const down&) { j->live_ids().release(pid, owner); };
    try {
      if (auto d = cell.add_watcher(std::move(release))) ids.release(id_, owner);
    } catch (...) {
      ids.release(id_, owner);
      throw;
    }
  }

  void refuse_if_failed() const {
    if (failed_)
      throw error(failed_code_ == errc::storage_full || failed_code_ == errc::fenced ? failed_code_
                                                                                     : errc::storage_failure,
                  failed_code_ == errc::fenced
                      ? "persisting to " + id_ + " refused: another journal claimed the ID; this actor stops"
                      : "persisting to " + id_ + " refused: an earlier write failed; the actor must restart and recover");
  }

  template <class E>
  event_record encode(sequence_nr seq, const E& e, const record_metadata& metadata) const {
    std::string payload;
    try {
      payload = to_json_text(e);
    } catch (const std::exception& ex) {
      throw error(troupe::errc::invalid_argument,
                  "cannot serialize " + std::string(E::manifest) + " for " + id_ + ": " + ex.what());
    }
    if (payload.size() > options_.max_event_bytes)
      throw error(errc::event_too_large, std::string(E::manifest) + " for " + id_ + " has " +
                                             std::to_string(payload.size()) + " bytes; the limit is " +
                                             std::to_string(options_.max_event_bytes));
    event_record r{seq, std::string(E::manifest), version_of<E>(), std::move(payload)};
    r.metadata = metadata;
    if (options_.event_metadata) options_.event_metadata(id_, E::manifest, r.metadata);
    if (r.metadata.entries_bytes() > max_metadata_bytes)
      throw error(troupe::errc::invalid_argument, "the metadata of " + std::string(E::manifest) + " for " + id_ +
                                                      " has " + std::to_string(r.metadata.entries_bytes()) +
                                                      " bytes; the limit is " + std::to_string(max_metadata_bytes));
    return r;
  }

  task<> write_or_throw(std::vector<event_record> records, std::vector<table_write> tables) {
    auto [ec] = co_await journal_->async_write(id_, std::move(records), std::move(tables),
                                               asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) {
      const auto code = ec == errc::write_rejected      ? errc::write_rejected
                        : ec == errc::sequence_mismatch ? errc::sequence_mismatch
                        : ec == errc::storage_full      ? errc::storage_full
                        : ec == errc::key_exists        ? errc::key_exists
                        : ec == errc::fenced            ? errc::fenced
                                                        : errc::storage_failure;
      // Whether a failed write reached the disk is unknown: this instance
      // writes nothing more, even if the handler catches the error.
      if (code == errc::storage_failure || code == errc::storage_full || code == errc::fenced) {
        failed_ = true;
        failed_code_ = code; // a later refusal says why (a full disk stays storage_full)
      }
      // Another journal (another process) claimed the ID since this
      // instance recovered: it is no longer the ID's writer, and stops
      // (after this handler) rather than fight for it.
      if (code == errc::fenced && ctx_) ctx_->stop();
      auto what = "persisting to " + id_ + " failed: " + ec.message();
      if (code == errc::storage_failure || code == errc::storage_full)
        if (auto more = journal_->last_failure(); !more.empty()) what += " (" + more + ")";
      throw error(code, what);
    }
  }

  void snapshot_if_due(sequence_nr before) {
    if constexpr (snapshottable) {
      if (const auto every = options_.snapshots.every; every != 0 && before / every != seq_ / every)
        detail::save_snapshot(*journal_, id_, seq_, state_, options_.snapshots);
    }
  }

  struct batch {
    sequence_nr start = 0;
    std::vector<event_record> records;
    std::vector<table_write> tables;
    /// `after_commit`'s: called with whether the batch became durable.
    std::vector<troupe::detail::unique_function<void(bool)>> actions;
  };

  std::string id_;
  std::shared_ptr<journal> journal_;
  persistence_options options_;
  std::optional<context<Derived>> ctx_;
  State state_{};
  sequence_nr seq_ = 0;
  sequence_nr recovered_snapshot_ = 0;
  bool failed_ = false;
  errc failed_code_ = errc::storage_failure;
  std::optional<batch> batch_;
};

} // namespace troupe::persistence

namespace troupe {
using persistence::persistent_actor;
} // namespace troupe
