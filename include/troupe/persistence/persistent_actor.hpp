#pragma once

/// \file
/// `troupe::persistence::persistent_actor`: an actor whose state is rebuilt
/// from its journal of events.

#include <troupe/error.hpp>
#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/task.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/replay_pipeline.hpp>
#include <troupe/detail/json_text.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/type_name.hpp>

#include <asio/async_result.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::persistence {

/// An event type: JSON-convertible through Boost.JSON's `tag_invoke` hook
/// (`value_from_tag` / `value_to_tag`), with a stable `manifest` name and,
/// optionally, a `version` (default 1).
///
/// \code
/// struct payment_requested {
///   static constexpr std::string_view manifest = "order.payment-requested";
///   long amount;
///   std::string operation_id;
/// };
/// void tag_invoke(boost::json::value_from_tag, boost::json::value&, const payment_requested&);
/// payment_requested tag_invoke(boost::json::value_to_tag<payment_requested>, const boost::json::value&);
/// \endcode
template <class E>
concept event = requires {
  { E::manifest } -> std::convertible_to<std::string_view>;
} && boost::json::has_value_from<E>::value && boost::json::has_value_to<E>::value;

/// The event types a persistent actor can replay.
template <event... E>
struct event_types {};

template <class E>
constexpr std::uint32_t version_of() {
  if constexpr (requires { E::version; })
    return E::version;
  else
    return 1;
}

/// Schema evolution. An event type that replaced an older one declares it
/// and how to turn it into the new one; the older type may declare its own
/// predecessor, and so on. Recovery reads a record of any version in the
/// chain and applies it as the current type (the journal is never rewritten).
///
/// \code
/// struct item_added_v1 {                                 // as once written
///   static constexpr std::string_view manifest = "cart.item-added";
///   std::string sku;
/// };
/// struct item_added {                                     // the current type
///   static constexpr std::string_view manifest = "cart.item-added";
///   static constexpr std::uint32_t version = 2;
///   using previous = item_added_v1;
///   static item_added upcast(item_added_v1 old) { return {std::move(old.sku), 1}; }
///   std::string sku;
///   int quantity;
/// };
/// \endcode
template <class E>
concept upcastable = requires { typename E::previous; } && event<typename E::previous> &&
                     requires(typename E::previous p) {
                       { E::upcast(std::move(p)) } -> std::same_as<E>;
                     };

/// Names the journal of one persistent actor.
struct persistence_id {
  std::string value;
};

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

/// Makes `j` the journal of every persistent actor of `sys` spawned with a
/// context and no explicit journal. It lives until `sys` is destroyed,
/// after all its actors have stopped.
inline void attach(actor_system& sys, std::shared_ptr<journal> j) {
  if (!j) throw error(errc::invalid_argument, "attach: the journal is null");
  sys.set_extension<journal>(std::move(j));
}

/// Base of an event-sourced actor `Derived` with state `State`.
///
/// `Derived` declares `using events = event_types<E1, E2, ...>;` and, for
/// each event, `static void apply(State&, const E&)`. `apply` is pure: it
/// changes the state and nothing else — no I/O, no messages, no timers —
/// because it runs again, for every event, each time the actor recovers
/// (DESIGN §1.1: recovery rebuilds state only, it never repeats a side
/// effect). It is static and sees only the state and the event, so there is
/// nothing else it could reach.
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
/// (the journal is the one `attach`ed to the system; `using
/// persistent_actor::persistent_actor;` lets `spawn<Derived>(persistence_id{...})`
/// find it), or from a `persistence_id` and an explicit journal.
template <class Derived, class State>
class persistent_actor {
public:
  /// The journal attached to the actor's system. Throws `invalid_argument`
  /// if none is.
  persistent_actor(context<Derived> ctx, persistence_id id, persistence_options options = {})
      : persistent_actor(std::move(id), journal_of_system(ctx.system()), options) {
    ctx_.emplace(std::move(ctx));
  }

  persistent_actor(context<Derived> ctx, persistence_id id, std::shared_ptr<journal> j,
                   persistence_options options = {})
      : persistent_actor(std::move(id), std::move(j), options) {
    ctx_.emplace(std::move(ctx));
  }

  persistent_actor(persistence_id id, std::shared_ptr<journal> j, persistence_options options = {})
      : id_(std::move(id.value)), journal_(std::move(j)), options_(options) {
    if (id_.empty()) throw error(errc::invalid_argument, "persistence ID must not be empty");
    if (!journal_) throw error(errc::invalid_argument, "persistent actor " + id_ + ": the journal is null");
    if (options_.snapshots.every != 0) {
      if (options_.snapshots.keep == 0)
        throw error(errc::invalid_argument, "persistent actor " + id_ + ": snapshot_policy.keep must be at least 1");
      if constexpr (!snapshottable)
        throw error(errc::invalid_argument, "persistent actor " + id_ + ": snapshots need a JSON-convertible " +
                                                std::string(troupe::detail::type_name<State>()));
    }
  }

  const State& state() const noexcept { return state_; }
  /// The persistence ID (the journal's name).
  const std::string& pid() const noexcept { return id_; }
  /// The sequence number of the last event applied.
  sequence_nr last_sequence_nr() const noexcept { return seq_; }
  /// The sequence number of the snapshot recovery started from (0: none).
  sequence_nr recovered_from_snapshot() const noexcept { return recovered_snapshot_; }

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

  /// Recovery; a `Derived` that needs start-up work puts it in
  /// `on_recovery_completed` (an `on_start` of its own would hide this one).
  task<> on_start() {
    co_await recover_state();
    co_await recovery_completed();
  }

protected:
  /// As `persist_all`, with changes to the delivery and effects tables in
  /// the same atomic write (for those layers: an intent to deliver, a dedup
  /// mark, an outbox entry is durable exactly when its event is).
  template <event... E>
  task<> persist_all_with(std::vector<table_write> tables, E... events) {
    if (failed_)
      throw error(errc::storage_failure, "persisting to " + id_ +
                                             " refused: an earlier write failed; the actor must restart and recover");
    std::vector<event_record> records;
    records.reserve(sizeof...(E));
    sequence_nr next = seq_;
    (records.push_back(encode(++next, events)), ...);
    if (unit_) {
      // Inside a unit: applied now, written by commit_unit.
      for (auto& r : records) unit_->records.push_back(std::move(r));
      for (auto& t : tables) unit_->tables.push_back(std::move(t));
      (apply_event(state_, events), ...);
      seq_ = next;
      co_return;
    }
    co_await write_or_throw(std::move(records), std::move(tables));
    (apply_event(state_, events), ...);
    const auto before = seq_;
    seq_ = next;
    snapshot_if_due(before);
  }

  /// Begins a unit of work: until `commit_unit`, persists are applied at
  /// once (the handler sees its own events) and written later, all in one
  /// atomic write. Used by the delivery layer, whose handler's events, dedup
  /// mark and outgoing deliveries must be durable together or not at all.
  void begin_unit() {
    if (unit_) throw error(errc::invalid_argument, "persistent actor " + id_ + ": a unit of work is already open");
    unit_.emplace();
    unit_->start = seq_;
  }

  bool in_unit() const noexcept { return unit_.has_value(); }

  /// Writes the unit's events and table changes, with `tables`, atomically.
  /// On failure the instance refuses further persists (its state holds
  /// events that are not durable): it must restart and recover.
  task<> commit_unit(std::vector<table_write> tables) {
    if (!unit_) throw error(errc::invalid_argument, "persistent actor " + id_ + ": no unit of work is open");
    auto u = std::move(*unit_);
    unit_.reset();
    for (auto& t : tables) u.tables.push_back(std::move(t));
    if (failed_)
      throw error(errc::storage_failure, "persisting to " + id_ +
                                             " refused: an earlier write failed; the actor must restart and recover");
    if (u.records.empty() && u.tables.empty()) co_return;
    const bool had_events = !u.records.empty();
    try {
      co_await write_or_throw(std::move(u.records), std::move(u.tables));
    } catch (...) {
      if (had_events) failed_ = true;
      throw;
    }
    snapshot_if_due(u.start);
  }

  /// Drops an open unit. Its events were applied to the state and are not
  /// durable, so the instance refuses further persists (it must restart).
  void abort_unit() noexcept {
    if (unit_ && !unit_->records.empty()) failed_ = true;
    unit_.reset();
  }

  /// Calls `Derived::on_recovery_completed()` if there is one (a plain
  /// function or a coroutine, which is awaited).
  task<> recovery_completed() {
    if constexpr (requires(Derived& d) { d.on_recovery_completed(); }) {
      auto& self = static_cast<Derived&>(*this);
      if constexpr (troupe::detail::awaitable_traits<decltype(self.on_recovery_completed())>::is_awaitable)
        co_await self.on_recovery_completed();
      else
        self.on_recovery_completed();
    }
  }

  /// Applies `e` through `Derived::apply`, or through `Derived::troupe_apply`
  /// when no `apply` accepts it: the hook through which a library base class
  /// (such as `effects::effectful_actor`) applies its own events, listed in
  /// `Derived::troupe_events`.
  template <class E>
  static void apply_event(State& s, const E& e) {
    if constexpr (requires { Derived::apply(s, e); })
      Derived::apply(s, e);
    else
      Derived::troupe_apply(s, e);
  }

  /// Recovery: state and sequence number from the latest readable snapshot
  /// and the journal, on the journal's thread.
  task<> recover_state() {
    auto work = [this] { recover(); };
    co_await on_journal_thread(work);
  }

  /// Runs `f` on the journal's blocking thread (where storage calls may
  /// block) while the actor waits; rethrows what `f` throws.
  template <class F>
  task<> on_journal_thread(F& f) {
    co_await asio::async_initiate<decltype(asio::use_awaitable), void(std::exception_ptr)>(
        [this, &f](auto handler) {
          journal_->run_blocking(
              [&f, h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))]() mutable {
                std::exception_ptr ep;
                try {
                  f();
                } catch (...) {
                  ep = std::current_exception();
                }
                h.post(ep);
              });
        },
        asio::use_awaitable);
  }

  /// The journal this actor writes to.
  journal& storage() noexcept { return *journal_; }
  const std::shared_ptr<journal>& storage_ptr() const noexcept { return journal_; }

  /// The actor's context, when it was constructed with one (throws
  /// `invalid_argument` otherwise).
  context<Derived>& actor_context() {
    if (!ctx_) throw error(errc::invalid_argument, "persistent actor " + id_ + " was constructed without a context");
    return *ctx_;
  }

private:
  static constexpr bool snapshottable = boost::json::has_value_from<State>::value && boost::json::has_value_to<State>::value;

  static std::shared_ptr<journal> journal_of_system(actor_system& sys) {
    auto j = sys.extension<journal>();
    if (!j)
      throw error(errc::invalid_argument,
                  "no journal attached to the actor system: call troupe::persistence::attach(system, journal) "
                  "before spawning " + std::string(troupe::detail::type_name<Derived>()));
    return j;
  }

  template <class E>
  event_record encode(sequence_nr seq, const E& e) const {
    std::string payload;
    try {
      payload = troupe::detail::to_json_text(e);
    } catch (const std::exception& ex) {
      throw error(errc::invalid_argument, "cannot serialize " + std::string(E::manifest) + " for " + id_ + ": " + ex.what());
    }
    if (payload.size() > options_.max_event_bytes)
      throw error(errc::event_too_large, std::string(E::manifest) + " for " + id_ + " has " +
                                             std::to_string(payload.size()) + " bytes; the limit is " +
                                             std::to_string(options_.max_event_bytes));
    return {seq, std::string(E::manifest), version_of<E>(), std::move(payload)};
  }

  task<> write_or_throw(std::vector<event_record> records, std::vector<table_write> tables) {
    auto [ec] = co_await async_write(std::move(records), std::move(tables));
    if (ec) {
      const auto code = ec == errc::write_rejected    ? errc::write_rejected
                        : ec == errc::sequence_mismatch ? errc::sequence_mismatch
                                                        : errc::storage_failure;
      // Whether a failed write reached the disk is unknown: this instance
      // writes nothing more, even if the handler catches the error.
      if (code == errc::storage_failure) failed_ = true;
      throw error(code, "persisting to " + id_ + " failed: " + ec.message());
    }
  }

  void snapshot_if_due(sequence_nr before) {
    if (const auto every = options_.snapshots.every; every != 0 && before / every != seq_ / every) save_snapshot();
  }

  auto async_write(std::vector<event_record> records, std::vector<table_write> tables) {
    constexpr auto token = asio::experimental::as_tuple(asio::use_awaitable);
    return asio::async_initiate<decltype(token), void(std::error_code)>(
        [this](auto handler, std::vector<event_record> records, std::vector<table_write> tables) {
          journal_->write(id_, std::move(records), std::move(tables),
                          [h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))](
                              std::error_code ec) mutable { h.post(ec); });
        },
        token, std::move(records), std::move(tables));
  }

  /// Serializes the state here, saves it on the blocking thread, then
  /// applies the retention policy. The actor does not wait: a snapshot only
  /// shortens recoveries, and one that fails to save leaves the journal,
  /// which is complete, to do the work.
  void save_snapshot() {
    if constexpr (snapshottable) {
      snapshot_record s;
      s.seq = seq_;
      s.timestamp_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      try {
        s.payload = troupe::detail::to_json_text(state_);
      } catch (const std::exception&) {
        return;
      }
      // The journal outlives its blocking thread's work (it joins it).
      journal_->run_blocking([j = journal_.get(), pid = id_, policy = options_.snapshots, s = std::move(s)] {
        if (j->save_snapshot(pid, s)) return;
        // The oldest snapshot to keep: walk down `keep` of them.
        snapshot_criteria c;
        std::optional<snapshot_record> found;
        sequence_nr oldest_kept = 0;
        for (std::size_t i = 0; i < policy.keep; ++i) {
          auto ec = j->load_snapshot(pid, c, found);
          if (!found) return; // fewer than `keep`
          if (ec && ec != errc::corrupt_record) return;
          oldest_kept = found->seq;
          if (oldest_kept == 0) return;
          c.max_seq = oldest_kept - 1;
        }
        if (oldest_kept == 0) return;
        // Events first: at every moment, the journal starts right after a
        // snapshot that is still there.
        if (policy.delete_events && j->delete_up_to(pid, oldest_kept)) return;
        snapshot_criteria older;
        older.max_seq = oldest_kept - 1;
        j->delete_snapshots(pid, older);
      });
    }
  }

  std::string recovery_error(sequence_nr seq, std::string_view manifest, const std::string& what) const {
    return "recovery of " + id_ + " failed at sequence number " + std::to_string(seq) +
           (manifest.empty() ? std::string() : " (" + std::string(manifest) + ")") + ": " + what;
  }

  /// Runs on the journal's blocking thread while the actor waits in on_start.
  void recover() {
    state_ = State{};
    seq_ = 0;
    recovered_snapshot_ = 0;
    if constexpr (snapshottable) load_latest_snapshot();

    using list = typename Derived::events;
    json_reader reader;
    auto apply_record = [&](const event_record& r) {
      if (!dispatch(list{}, r, reader) && !dispatch(typename library_events<Derived>::type{}, r, reader))
        throw error(errc::corrupt_record, recovery_error(r.seq, r.manifest,
                                                         "unknown event manifest '" + r.manifest + "' version " +
                                                             std::to_string(r.version)));
      seq_ = r.seq;
    };
    // This thread reads; the journal's applier thread decodes and applies.
    detail::replay_pipeline<decltype(apply_record)> pipeline(journal_->applier(), apply_record);
    sequence_nr expected = seq_ + 1;
    auto ec = journal_->replay(id_, expected, max_sequence_nr, UINT64_MAX, [&](const event_record& r) {
      if (r.seq != expected)
        throw error(errc::events_missing, recovery_error(r.seq, r.manifest,
                                                         "events " + std::to_string(expected) + " to " +
                                                             std::to_string(r.seq - 1) + " are missing"));
      pipeline.push(r);
      ++expected;
    });
    if (ec) {
      pipeline.abandon();
      throw error(ec == errc::corrupt_record ? errc::corrupt_record : errc::storage_failure,
                  recovery_error(expected, {}, "cannot read the journal: " + ec.message()));
    }
    pipeline.finish();
    // Every number up to the highest was written, atomically with the
    // highest itself: anything short of it is a loss, not a gap to skip.
    auto highest = journal_->highest_sequence_nr(id_);
    if (highest > seq_)
      throw error(errc::events_missing,
                  recovery_error(seq_ + 1, {}, "events " + std::to_string(seq_ + 1) + " to " + std::to_string(highest) +
                                                   " are missing (deleted, and no readable snapshot covers them)"));
  }

  /// The newest snapshot that can be read and decoded; older ones when it
  /// cannot; none when the store cannot say which failed (then the whole
  /// journal is replayed, and fails if its start was deleted).
  void load_latest_snapshot() {
    snapshot_criteria c;
    std::optional<snapshot_record> s;
    for (;;) {
      auto ec = journal_->load_snapshot(id_, c, s);
      if (!s) return;
      if (!ec) {
        try {
          state_ = troupe::detail::from_json_text<State>(s->payload);
          seq_ = recovered_snapshot_ = s->seq;
          return;
        } catch (const std::exception&) {
          state_ = State{};
        }
      }
      if (s->seq == 0) return;
      c.max_seq = s->seq - 1;
    }
  }

  /// Recovery's JSON parsing: one parser for all events. The values use the
  /// default storage, never a buffer of this function: an event may hold
  /// JSON values (a `boost::json::object` member), which share it.
  struct json_reader {
    boost::json::parser parser;

    template <class E>
    E read(std::string_view text) {
      parser.reset();
      parser.write(text);
      return boost::json::value_to<E>(parser.release());
    }
  };

  /// The events of a library base class (`Derived::troupe_events`).
  template <class X>
  struct library_events {
    using type = event_types<>;
  };
  template <class X>
    requires requires { typename X::troupe_events; }
  struct library_events<X> {
    using type = typename X::troupe_events;
  };

  template <class... E>
  bool dispatch(event_types<E...>, const event_record& r, json_reader& reader) {
    return (try_apply<E>(r, reader) || ...);
  }

  template <class E>
  bool try_apply(const event_record& r, json_reader& reader) {
    std::optional<E> e = decode<E>(r, reader);
    if (!e) return false;
    apply_event(state_, *e);
    return true;
  }

  /// `r` as an `E`, from its own version or, through `E::upcast`, from an
  /// older one in its chain; empty when `r` is none of them.
  template <class E>
  std::optional<E> decode(const event_record& r, json_reader& reader) {
    if (r.manifest == E::manifest && r.version == version_of<E>()) {
      try {
        return reader.template read<E>(r.payload);
      } catch (const std::exception& ex) {
        throw error(errc::corrupt_record,
                    recovery_error(r.seq, r.manifest, "cannot parse version " + std::to_string(r.version) + ": " + ex.what()));
      }
    }
    if constexpr (upcastable<E>) {
      if (auto old = decode<typename E::previous>(r, reader)) return E::upcast(std::move(*old));
    }
    return std::nullopt;
  }

  std::string id_;
  std::shared_ptr<journal> journal_;
  persistence_options options_;
  std::optional<context<Derived>> ctx_;
  State state_{};
  sequence_nr seq_ = 0;
  sequence_nr recovered_snapshot_ = 0;
  bool failed_ = false;
  struct unit {
    sequence_nr start = 0;
    std::vector<event_record> records;
    std::vector<table_write> tables;
  };
  std::optional<unit> unit_;
};

} // namespace troupe::persistence

namespace troupe {
using persistence::persistence_id;
using persistence::persistent_actor;
} // namespace troupe
