#pragma once

/// \file
/// `troupe::persistence::persistent_actor`: an actor whose state is rebuilt
/// from its journal of events.

#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/type_name.hpp>

#include <asio/async_result.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <cstdint>
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
} && requires(const E& e, const boost::json::value& v) {
  boost::json::value_from(e);
  boost::json::value_to<E>(v);
};

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

/// Names the journal of one persistent actor.
struct persistence_id {
  std::string value;
};

/// Settings of one persistent actor.
struct persistence_options {
  /// Largest serialized event accepted; a larger one is rejected with
  /// `errc::event_too_large` and nothing is written.
  std::size_t max_event_bytes = 1 << 20;
};

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
/// Recovery runs as the actor's `on_start` (so every command waits for it):
/// the journal is replayed through `apply`, then `Derived::on_recovery_completed()`
/// runs if it exists — the place to resume pending work, never during replay.
/// A record that cannot be read fails recovery with an error naming the
/// persistence ID, the sequence number and the manifest; the actor does not
/// start (its supervisor decides), and the journal is not touched.
template <class Derived, class State>
class persistent_actor {
public:
  persistent_actor(persistence_id id, std::shared_ptr<journal> j, persistence_options options = {})
      : id_(std::move(id.value)), journal_(std::move(j)), options_(options) {
    if (id_.empty()) throw error(errc::invalid_argument, "persistence ID must not be empty");
  }

  const State& state() const noexcept { return state_; }
  /// The persistence ID (the journal's name).
  const std::string& pid() const noexcept { return id_; }
  /// The sequence number of the last event applied.
  sequence_nr last_sequence_nr() const noexcept { return seq_; }

  /// Writes `events` atomically, then applies them in order. Throws
  /// `troupe::error`: `event_too_large` or a serialization failure (nothing
  /// written, state unchanged, the actor continues if the handler catches it),
  /// `storage_failure` (the handler fails: its supervisor stops or restarts
  /// the actor, which then recovers from what is durable).
  template <event... E>
  task<> persist_all(E... events) {
    std::vector<event_record> records;
    records.reserve(sizeof...(E));
    sequence_nr next = seq_;
    (records.push_back(encode(++next, events)), ...);
    auto [ec] = co_await async_write(std::move(records));
    if (ec)
      throw error(ec == errc::sequence_mismatch ? errc::sequence_mismatch : errc::storage_failure,
                  "persisting to " + id_ + " failed: " + ec.message());
    (Derived::apply(state_, events), ...);
    seq_ = next;
  }

  template <event E>
  task<> persist(E e) {
    return persist_all(std::move(e));
  }

  /// Recovery; a `Derived` that needs start-up work puts it in
  /// `on_recovery_completed` (an `on_start` of its own would hide this one).
  task<> on_start() {
    recover();
    if constexpr (requires(Derived& d) { d.on_recovery_completed(); }) static_cast<Derived&>(*this).on_recovery_completed();
    co_return;
  }

private:
  template <class E>
  event_record encode(sequence_nr seq, const E& e) const {
    std::string payload;
    try {
      payload = boost::json::serialize(boost::json::value_from(e));
    } catch (const std::exception& ex) {
      throw error(errc::invalid_argument, "cannot serialize " + std::string(E::manifest) + " for " + id_ + ": " + ex.what());
    }
    if (payload.size() > options_.max_event_bytes)
      throw error(errc::event_too_large, std::string(E::manifest) + " for " + id_ + " has " +
                                             std::to_string(payload.size()) + " bytes; the limit is " +
                                             std::to_string(options_.max_event_bytes));
    return {seq, std::string(E::manifest), version_of<E>(), std::move(payload)};
  }

  auto async_write(std::vector<event_record> records) {
    constexpr auto token = asio::experimental::as_tuple(asio::use_awaitable);
    return asio::async_initiate<decltype(token), void(std::error_code)>(
        [this](auto handler, std::vector<event_record> records) {
          journal_->write(id_, std::move(records),
                          [h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))](
                              std::error_code ec) mutable { h.post(ec); });
        },
        token, std::move(records));
  }

  void recover() {
    using list = typename Derived::events;
    sequence_nr expected = seq_ + 1;
    auto ec = journal_->replay(id_, expected, max_sequence_nr, UINT64_MAX, [&](const event_record& r) {
      if (r.seq != expected)
        throw error(errc::corrupt_record, "recovery of " + id_ + " found sequence number " + std::to_string(r.seq) +
                                              " where " + std::to_string(expected) + " was expected");
      if (!dispatch(list{}, r))
        throw error(errc::corrupt_record, "recovery of " + id_ + " failed at sequence number " + std::to_string(r.seq) +
                                              ": unknown event manifest '" + r.manifest + "' version " +
                                              std::to_string(r.version));
      seq_ = r.seq;
      ++expected;
    });
    if (ec)
      throw error(ec == errc::corrupt_record ? errc::corrupt_record : errc::storage_failure,
                  "recovery of " + id_ + " failed after sequence number " + std::to_string(seq_) + ": " +
                      ec.message());
    // Events may have been deleted below a snapshot; numbering continues
    // after the highest ever written, never reusing one.
    auto highest = journal_->highest_sequence_nr(id_);
    if (highest > seq_) seq_ = highest;
  }

  template <class... E>
  bool dispatch(event_types<E...>, const event_record& r) {
    return (try_apply<E>(r) || ...);
  }

  template <class E>
  bool try_apply(const event_record& r) {
    if (r.manifest != E::manifest || r.version != version_of<E>()) return false;
    std::optional<E> e;
    try {
      e.emplace(boost::json::value_to<E>(boost::json::parse(r.payload)));
    } catch (const std::exception& ex) {
      throw error(errc::corrupt_record, "recovery of " + id_ + " failed at sequence number " + std::to_string(r.seq) +
                                            ": cannot parse " + r.manifest + ": " + ex.what());
    }
    Derived::apply(state_, *e);
    return true;
  }

  std::string id_;
  std::shared_ptr<journal> journal_;
  persistence_options options_;
  State state_{};
  sequence_nr seq_ = 0;
};

} // namespace troupe::persistence
