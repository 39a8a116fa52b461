#pragma once

/// \file
/// The concepts that say which messages an actor accepts and what an ask of
/// it returns.

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <troupe/hooks.hpp>
#include <troupe/reply_promise.hpp>

#include <asio/awaitable.hpp>

#include <type_traits>
#include <utility>

namespace troupe {

/// A list of message types: an actor that reads messages with
/// `context::receive` (the awaitable mailbox) instead of handlers declares
/// the ones it takes as `using receives = troupe::messages<A, B>;`.
template <class... Ms>
struct messages {};

namespace detail {

template <class A, class M>
concept handles_directly = requires(A& actor, M&& msg) { actor.handle(std::move(msg)); } ||
                           requires(A& actor, M&& msg) { actor.troupe_handle(std::move(msg)); };

template <class M>
using reply_of_t = typename reply_of<M>::type;

/// Instantiated only for a `handle(M, reply_promise<R>)` that does not
/// match what `M` names: says what to write.
template <class M, class R>
struct reply_promise_diagnosis {
  static_assert(requires { typename reply_of<M>::type; },
                "troupe: a handler handle(M, troupe::reply_promise<R>) needs M to name its reply type: declare "
                "`using reply_type = R` in M (or specialize troupe::reply_of<M>): an asker must know R without the "
                "actor's class");
  static_assert(!requires { typename reply_of<M>::type; },
                "troupe: the promise of handle(M, troupe::reply_promise<R>) must be "
                "reply_promise<typename M::reply_type> (troupe::reply_of<M>::type)");
  static constexpr bool value = false;
};

/// Converts to the `reply_promise<R>` of any handler that takes one: only
/// a handler whose second parameter is a promise deduces through it.
template <class M>
struct promise_probe {
  template <class R>
    requires reply_promise_diagnosis<M, R>::value
  operator reply_promise<R>() const; // declared only: used in unevaluated operands
};

template <class A, class M>
concept handles_later_as_declared = requires { typename reply_of<M>::type; } &&
                                    requires(A& actor, M&& msg, reply_promise<reply_of_t<M>>&& p) {
                                      actor.handle(std::move(msg), std::move(p));
                                    };

/// A `handle(M, reply_promise<R>)` that does not match `M`'s reply type (or
/// `M` names none): a hard error saying what to write.
template <class A, class M>
concept promise_handler_misdeclared = requires(A& actor, M&& msg) { actor.handle(std::move(msg), promise_probe<M>{}); };

/// `A::handle(M, reply_promise<R>)`, with `R` the reply type `M` names.
template <class A, class M>
concept handles_later =
    !handles_directly<A, M> && (handles_later_as_declared<A, M> || promise_handler_misdeclared<A, M>);

template <class M, class List>
inline constexpr bool listed_in = false;
template <class M, class... Ms>
inline constexpr bool listed_in<M, messages<Ms...>> = (std::is_same_v<M, Ms> || ...);

/// `M` is in `A::receives`.
template <class A, class M>
concept receives_listed = requires { typename A::receives; } && listed_in<M, typename A::receives>;

} // namespace detail

/// `A` is an actor type that has a `handle` member accepting a message of
/// type `M` (by value, by `const&` or by `&&`), or a library base's
/// `troupe_handle` for it (see `troupe/hooks.hpp`); or a `handle(M,
/// reply_promise<R>)` that answers later (`R` is `reply_of<M>::type`); or
/// lists `M` in `A::receives` (taken by `context::receive` only).
///
/// `actor_ref<A>::tell(m)` and `ask(m)` are constrained on it, so a message
/// the actor does not handle is rejected at compile time with a diagnostic
/// naming `troupe::handles<A, M>`: the actor and the message type.
template <class A, class M>
concept handles = detail::handles_directly<A, M> || detail::handles_later<A, M> || detail::receives_listed<A, M>;

/// `A` answers an ask of `M`: a handler returns the reply, or answers later
/// through a `reply_promise`.
template <class A, class M>
concept answers = detail::handles_directly<A, M> || detail::handles_later<A, M>;

namespace detail {

template <class X>
struct awaitable_traits {
  static constexpr bool is_awaitable = false;
  using value_type = X;
};

template <class T, class Executor>
struct awaitable_traits<asio::awaitable<T, Executor>> {
  static constexpr bool is_awaitable = true;
  using value_type = T;
};

template <class A, class M>
using raw_handler_result_t = decltype(invoke_handle(std::declval<A&>(), std::declval<M&&>()));

} // namespace detail

/// `A::handle(M)` is a coroutine (returns an `asio::awaitable`, for example
/// `troupe::task<R>`), so it may `co_await`; the actor processes no other
/// message until it has finished.
template <class A, class M>
concept coroutine_handler =
    detail::handles_directly<A, M> && detail::awaitable_traits<detail::raw_handler_result_t<A, M>>::is_awaitable;

/// `A::handle(M)` is a coroutine that lets other messages in while it waits:
/// `M` is listed in `using reentrant = troupe::messages<...>;` (opt-in, never
/// the default). Its steps run as turns of the actor, between other
/// messages, so the actor's state may change across each `co_await`.
template <class A, class M>
concept reentrant_handler = coroutine_handler<A, M> && requires { typename A::reentrant; } &&
                            detail::listed_in<M, typename A::reentrant>;

namespace detail {
template <class A, class M>
struct reply_type_impl {
  using type = void;
};
template <class A, class M>
  requires handles_directly<A, M>
struct reply_type_impl<A, M> {
  using type = std::decay_t<typename awaitable_traits<raw_handler_result_t<A, M>>::value_type>;
};
template <class A, class M>
  requires handles_later<A, M>
struct reply_type_impl<A, M> {
  using type = reply_of_t<M>;
};
} // namespace detail

/// The reply of an ask of `M` to an actor of type `A`: the handler's return
/// type, or what its awaitable produces for a coroutine handler, or the
/// `reply_of<M>` of a handler that answers later.
template <class A, class M>
  requires answers<A, M>
using reply_type_t = typename detail::reply_type_impl<A, M>::type;

/// `Ref` (an `actor_ref`, `entity_ref` or `typed_ref`) can be asked `M`.
template <class Ref, class M>
concept askable = requires { typename Ref::template reply_to<M>; };

} // namespace troupe
