#pragma once

/// \file
/// Protocols and references typed by them: `troupe::protocol<R(M)...>`,
/// `troupe::typed_ref<P>`, `troupe::implements<T, P>`.

#include <troupe/timeout.hpp>
#include <troupe/actor_ref.hpp>
#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/ask.hpp>
#include <troupe/detail/cell.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/system_state.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <concepts>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>

namespace troupe {

/// A protocol: the messages an actor accepts and the reply of each, as
/// function types `R(M)` — `void(add)` for a message whose handler returns
/// nothing (tell it, or ask it to learn when it was handled), `int(total)`
/// for an ask that replies with an `int`. Declared without any actor class,
/// so modules (and actors that reference each other) need only the message
/// types:
///
/// \code
/// using counter_protocol = troupe::protocol<void(add), int(total)>;
/// troupe::typed_ref<counter_protocol> c = sys.spawn<counter>();   // checked: counter implements it
/// c.tell(add{2});
/// int n = co_await c.ask(total{});
/// \endcode
template <class... Sigs>
struct protocol {};

namespace detail {

template <class Sig>
struct signature_parts;
template <class R, class M>
struct signature_parts<R(M)> {
  using reply = R;
  using message = M;
};

template <class P, class M>
inline constexpr bool in_protocol_v = false;
template <class M, class... Sigs>
inline constexpr bool in_protocol_v<protocol<Sigs...>, M> =
    (std::is_same_v<typename signature_parts<Sigs>::message, M> || ...);

template <class P, class M>
struct reply_in;
template <class M, class... Sigs>
struct reply_in<protocol<Sigs...>, M> {
  template <class...>
  struct pick;
  template <class Sig, class... Rest>
  struct pick<Sig, Rest...> {
    using type = std::conditional_t<std::is_same_v<typename signature_parts<Sig>::message, M>,
                                    typename signature_parts<Sig>::reply, typename pick<Rest...>::type>;
  };
  template <class Sig>
  struct pick<Sig> {
    using type = typename signature_parts<Sig>::reply;
  };
  using type = typename pick<Sigs...>::type;
};

/// `T` handles the message of `Sig` with exactly its reply type.
template <class T, class Sig>
concept implements_signature =
    answers<T, typename signature_parts<Sig>::message> &&
    std::same_as<reply_type_t<T, typename signature_parts<Sig>::message>, typename signature_parts<Sig>::reply>;

/// Names, in its diagnostic, the signature `T` fails.
template <class T, class Sig>
constexpr bool check_signature() {
  using M = typename signature_parts<Sig>::message;
  static_assert(answers<T, M>,
                "troupe: the actor class does not implement the protocol: it has no handler for one of its messages "
                "(see the message type in check_signature<Actor, Reply(Message)>)");
  if constexpr (answers<T, M>)
    static_assert(std::same_as<reply_type_t<T, M>, typename signature_parts<Sig>::reply>,
                  "troupe: the actor class does not implement the protocol: its reply to one of the messages is of "
                  "another type (see check_signature<Actor, Reply(Message)>)");
  return true;
}
template <class T, class... Sigs>
constexpr bool check_protocol(protocol<Sigs...>*) {
  return (check_signature<T, Sigs>() && ...);
}

template <class T, class P>
inline constexpr bool implements_v = false;
template <class T, class... Sigs>
inline constexpr bool implements_v<T, protocol<Sigs...>> = (implements_signature<T, Sigs> && ...);

/// A completion that runs where the operation completes: the erased form of
/// an ask's handler behind a protocol.
template <class R>
using reply_fn = unique_function<typename ask_signature<R>::type>;

/// One message's entry of a protocol's table: how to tell and ask it to an
/// actor whose concrete type the reference does not know.
template <class Sig>
struct protocol_slot {
  using M = typename signature_parts<Sig>::message;
  using R = typename signature_parts<Sig>::reply;
  std::error_code (*tell)(cell_base*, M&&);
  /// `asker`: the system whose threads the caller's handler needs (null:
  /// none), on whose list the ask is until done.
  void (*ask)(cell_base*, M&&, std::chrono::nanoseconds, reply_fn<R>&&, system_state* asker);
};

template <class P>
struct protocol_table;
template <class... Sigs>
struct protocol_table<protocol<Sigs...>> : protocol_slot<Sigs>... {};

template <class T, class Sig>
constexpr protocol_slot<Sig> slot_for() {
  using M = typename signature_parts<Sig>::message;
  return {[](cell_base* c, M&& m) -> std::error_code {
            auto* t = static_cast<cell<T>*>(c);
            return t->enqueue(t->template make_tell<M>(std::move(m)));
          },
          [](cell_base* c, M&& m, std::chrono::nanoseconds timeout, reply_fn<typename signature_parts<Sig>::reply>&& k,
             system_state* asker) {
            auto* t = static_cast<cell<T>*>(c);
            initiate_ask_for<T>(
                t->sys(), asker, std::move(k), std::move(m), timeout, [t] { return t->closed(); },
                [t](auto* e) { t->enqueue_ask(e); });
          }};
}

/// The table of protocol `P` for actors of type `T`: one per pair, static.
template <class T, class P>
struct table_of;
template <class T, class... Sigs>
struct table_of<T, protocol<Sigs...>> {
  static constexpr protocol_table<protocol<Sigs...>> value{slot_for<T, Sigs>()...};
};

/// The caller's completion handler of an ask behind a protocol, completed
/// from where the reply is made. The ask is listed with the caller's system
/// (when it is another): that system cancels it if it goes first.
template <class Handler>
struct relayed_reply {
  explicit relayed_reply(Handler&& h) : handler(std::move(h)) {}
  stored_handler<Handler> handler;
};

} // namespace detail

/// `M` is one of the messages of protocol `P`.
template <class P, class M>
concept in_protocol = detail::in_protocol_v<P, M>;

/// The actor type `T` implements protocol `P`: for every `R(M)` of `P`, `T`
/// handles `M` and its reply type is exactly `R`.
template <class T, class P>
concept implements = detail::implements_v<T, P>;

/// The reply of an ask of `M` through protocol `P`.
template <class P, class M>
  requires in_protocol<P, M>
using protocol_reply_t = typename detail::reply_in<P, M>::type;

/// A reference to an actor of any class that implements protocol `P`.
///
/// Copyable, cheap and thread-safe like `actor_ref<T>` (two pointers), and
/// made from one: `typed_ref<P> r = sys.spawn<counter>();` compiles only if
/// `counter` implements `P` (the diagnostic says which message it lacks).
/// `tell`, `ask` and `send`-less messaging accept only the protocol's
/// messages (the diagnostic names `troupe::in_protocol`). A tell costs one
/// indirect call more than through `actor_ref<T>`; an ask, one allocation
/// more (its completion is relayed). Usable in messages: two actors that
/// talk to each other name each other's protocol, never each other's class.
template <class P>
class typed_ref {
public:
  using protocol_type = P;
  /// The reply of an ask of `M` through this reference.
  template <class M>
  using reply_to = protocol_reply_t<P, M>;

  typed_ref() = default;

  /// From a reference to an actor of a class that implements `P`; for any
  /// other class a compile error says which message lacks a handler or
  /// replies with another type.
  template <class T>
  typed_ref(const actor_ref<T>& r) // NOLINT: implicit, as a derived-to-base conversion
      : cell_(r ? detail::cell_of(r) : nullptr), table_(table<T>()) {}

  explicit operator bool() const noexcept { return static_cast<bool>(cell_); }
  actor_id id() const noexcept { return cell_->id(); }
  friend bool operator==(const typed_ref& a, const typed_ref& b) noexcept { return a.cell_.get() == b.cell_.get(); }

  /// As `actor_ref<T>::tell`.
  template <class M>
    requires in_protocol<P, std::decay_t<M>>
  std::error_code tell(M&& msg) const {
    using message = std::decay_t<M>;
    detail::check_message<message>();
    return slot<message>().tell(cell_.get(), message(std::forward<M>(msg)));
  }

  /// As `actor_ref<T>::ask`: completes with `protocol_reply_t<P, M>`.
  template <class M, class Token = asio::use_awaitable_t<>>
    requires in_protocol<P, std::decay_t<M>> && (!detail::is_duration<std::decay_t<Token>>) &&
             (!detail::is_time_point<std::decay_t<Token>>)
  auto ask(M&& msg, Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), cell_->sys().config.ask_timeout, std::forward<Token>(token));
  }

  /// With a timeout (`timeout.hpp`).
  template <class M, class Rep, class Period, class Token = asio::use_awaitable_t<>>
    requires in_protocol<P, std::decay_t<M>>
  auto ask(M&& msg, std::chrono::duration<Rep, Period> timeout, Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), detail::timeout_of(timeout), std::forward<Token>(token));
  }

  /// With a deadline on the steady clock.
  template <class M, class Duration, class Token = asio::use_awaitable_t<>>
    requires in_protocol<P, std::decay_t<M>>
  auto ask(M&& msg, std::chrono::time_point<std::chrono::steady_clock, Duration> deadline,
           Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), detail::timeout_until(deadline), std::forward<Token>(token));
  }

  /// As `actor_ref<T>::stop`.
  void stop() const { cell_->request_stop(exit_reason::normal); }

private:
  template <class M, class Token>
  auto ask_within(M&& msg, std::chrono::nanoseconds timeout, Token&& token) const {
    using message = std::decay_t<M>;
    using reply = protocol_reply_t<P, message>;
    detail::check_ask<message, reply>();
    return asio::async_initiate<Token, typename detail::ask_signature<reply>::type>(
        [](auto handler, const detail::protocol_slot<reply(message)>* s, detail::cell_base* c, message m,
           std::chrono::nanoseconds t) {
          auto* asker = detail::system_of(asio::get_associated_executor(handler), c->sys());
          auto relay = std::make_shared<detail::relayed_reply<decltype(handler)>>(std::move(handler));
          s->ask(
              c, std::move(m), t,
              detail::reply_fn<reply>([relay](std::exception_ptr ep, auto&&... r) {
                relay->handler.defer(std::move(ep), std::move(r)...);
              }),
              asker);
        },
        token, &slot<message>(), cell_.get(), message(std::forward<M>(msg)), timeout);
  }

public:
  /// As `actor_ref<T>::when_stopped`.
  template <class Token = asio::use_awaitable_t<>>
  auto when_stopped(Token&& token = Token{}) const {
    return detail::when_stopped(cell_.get(), std::forward<Token>(token));
  }

private:
  template <class T>
  static const detail::protocol_table<P>* table() {
    static_assert(detail::check_protocol<T>(static_cast<P*>(nullptr)));
    if constexpr (implements<T, P>)
      return &detail::table_of<T, P>::value;
    else
      return nullptr;
  }

  template <class M>
  const detail::protocol_slot<protocol_reply_t<P, M>(M)>& slot() const noexcept {
    return *table_;
  }

  detail::cell_ptr<detail::cell_base> cell_;
  const detail::protocol_table<P>* table_ = nullptr;
};

} // namespace troupe
