#pragma once

// Making an ask: its envelope, its asker's registration and its timer, for
// whatever it is addressed to (an actor, an entity).

#include <troupe/detail/envelope.hpp>
#include <troupe/detail/post_counter.hpp>
#include <troupe/detail/system_state.hpp>
#include <troupe/detail/turn.hpp>
#include <troupe/detail/type_name.hpp>
#include <troupe/error.hpp>
#include <troupe/timeout.hpp>

#include <asio/associated_executor.hpp>

#include <chrono>
#include <optional>
#include <type_traits>
#include <utility>

namespace troupe::detail {

/// Messages and replies move between threads inside `noexcept` code: their
/// move may not throw.
template <class M>
inline constexpr bool movable_message = std::is_nothrow_move_constructible_v<M>;

/// What every message type sent must be.
template <class M>
constexpr void check_message() {
  static_assert(movable_message<M>,
                "troupe: a message type must be nothrow move constructible (it is moved in noexcept code)");
}

/// What the message and the reply type `R` of an ask must be.
template <class M, class R>
constexpr void check_ask() {
  check_message<M>();
  static_assert(std::is_void_v<R> || movable_message<R>,
                "troupe: the reply type of an ask must be nothrow move constructible (it is moved in noexcept code)");
  static_assert(std::is_void_v<R> || std::is_default_constructible_v<R>,
                "troupe: the reply type of an ask must be default-constructible (it is passed with the error when "
                "the ask fails)");
}

/// Makes the ask envelope of `msg` to an actor of type `T` in the system
/// `s`, lists it with `asker` (the system whose threads the handler needs,
/// when it is not `s`; null for none), fails it at once if `timeout` has
/// passed (`timeout_of`), arms its timeout unless `closed()` or unlimited,
/// and hands it to `enqueue` (which queues it, or completes it with an
/// error: `cell::enqueue_ask`).
template <class T, class M, class Handler, class Closed, class Enqueue>
void initiate_ask_for(system_state& s, system_state* asker, Handler&& h, M&& msg, std::chrono::nanoseconds timeout,
                      Closed&& closed, Enqueue&& enqueue) {
  using envelope = ask_envelope<T, std::decay_t<M>, std::decay_t<Handler>>;
  if (asker == &s) asker = nullptr;
  // A named message is copied: the envelope owns its message.
  auto* e = new envelope(std::forward<Handler>(h), std::decay_t<M>(std::forward<M>(msg)), asker);
  if (!e->list_with_asker()) {
    e->dispose();
    return;
  }
  // The timer is made on the system's pool: from outside its turns, counted
  // in its posts until queued (a shutdown that closed every inbox waits for
  // the count before it destroys the pool; one that has not yet, is seen
  // closed here).
  if (expired(timeout)) {
    // Its deadline passed before it was sent: it fails at once (posted: an
    // initiating function never completes inline), and nothing is sent (no
    // slot of a bounded mailbox, no activation of an entity).
    e->complete(error_ptr(errc::timeout, "ask of " + std::string(type_name<std::decay_t<M>>()) + " to " +
                                             std::string(type_name<T>()) +
                                             ": its timeout had passed before it was sent (troupe::no_timeout waits "
                                             "for ever)"));
    e->dispose();
    return;
  }
  std::optional<post_counter::guard> counted;
  if (!unlimited(timeout)) {
    if (!this_turn.in_turn || this_turn.sys != &s) counted.emplace(s.posts);
    if (!closed()) e->arm(s.executor(), timeout);
  }
  enqueue(e);
}

/// As `initiate_ask_for`, the asker being the system whose threads run the
/// handler's associated executor (asked from another system's threads:
/// that system must know, to cancel the ask if it goes first).
template <class T, class M, class Handler, class Closed, class Enqueue>
void initiate_ask(system_state& s, Handler&& h, M&& msg, std::chrono::nanoseconds timeout, Closed&& closed,
                  Enqueue&& enqueue) {
  auto* asker = system_of(asio::get_associated_executor(h), s);
  initiate_ask_for<T>(s, asker, std::forward<Handler>(h), std::forward<M>(msg), timeout, std::forward<Closed>(closed),
                      std::forward<Enqueue>(enqueue));
}

} // namespace troupe::detail
