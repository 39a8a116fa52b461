#pragma once

/// \file
/// The concepts that say which messages an actor accepts and what an ask of
/// it returns.

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <troupe/hooks.hpp>

#include <asio/awaitable.hpp>

#include <type_traits>
#include <utility>

namespace troupe {

/// `A` is an actor type that has a `handle` member accepting a message of
/// type `M` (by value, by `const&` or by `&&`), or a library base's
/// `troupe_handle` for it (see `troupe/hooks.hpp`).
///
/// `actor_ref<A>::tell(m)` and `ask(m)` are constrained on it, so a message
/// the actor does not handle is rejected at compile time with a diagnostic
/// naming `troupe::handles<A, M>`: the actor and the message type.
template <class A, class M>
concept handles = requires(A& actor, M&& msg) { actor.handle(std::move(msg)); } ||
                  requires(A& actor, M&& msg) { actor.troupe_handle(std::move(msg)); };

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
concept coroutine_handler = handles<A, M> && detail::awaitable_traits<detail::raw_handler_result_t<A, M>>::is_awaitable;

/// The reply of an ask of `M` to an actor of type `A`: the handler's return
/// type, or what its awaitable produces for a coroutine handler.
template <class A, class M>
  requires handles<A, M>
using reply_type_t = std::decay_t<typename detail::awaitable_traits<detail::raw_handler_result_t<A, M>>::value_type>;

} // namespace troupe
