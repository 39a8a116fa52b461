#pragma once

/// \file
/// How a layer extends an actor: the `troupe_*` hooks.
///
/// A library base class between an actor and troupe's own machinery (such
/// as `delivery::reliable_actor` or `effects::effectful_actor`) has messages,
/// events and accepted deliveries of its own. The derived class's own
/// `handle` and `apply` overloads would hide the base's, and its own
/// `events` and `accepts` lists would replace them. So a base uses these
/// names instead, which the layers look up whenever the derived class has
/// no match of its own:
///
/// | hook | declared by the base as | used by |
/// |---|---|---|
/// | `troupe_handle(M)` | member function | the core: a message no `handle` accepts (`troupe::handles`, tell, ask) |
/// | `troupe_apply(State&, const E&)` | static member function | persistence: an event no `apply` accepts |
/// | `troupe_events` | `persistence::event_types<...>` | persistence: event types replayed besides `events` |
/// | `troupe_accepts` | `delivery::accepts<...>` | delivery: message types received besides `accepts` |
///
/// The user's class needs no `using` declaration for any of them. A base
/// that is itself extended (an effectful actor is a reliable actor) brings
/// its base's `troupe_handle` overloads into scope with
/// `using base::troupe_handle;`, and joins its base's lists into its own.

#include <type_traits>
#include <utility>

namespace troupe::detail {

/// Calls `actor.handle(msg)`, or `actor.troupe_handle(msg)` when there is no
/// such `handle`.
template <class A, class M>
decltype(auto) invoke_handle(A& actor, M&& msg) {
  if constexpr (requires { actor.handle(std::forward<M>(msg)); })
    return actor.handle(std::forward<M>(msg));
  else
    return actor.troupe_handle(std::forward<M>(msg));
}

/// Applies `e` through `A::apply`, or `A::troupe_apply` when no `apply`
/// accepts it.
template <class A, class State, class E>
void invoke_apply(State& s, const E& e) {
  if constexpr (requires { A::apply(s, e); })
    A::apply(s, e);
  else
    A::troupe_apply(s, e);
}

/// `X::troupe_events`, or `Default`.
template <class X, class Default>
struct troupe_events_or {
  using type = Default;
};
template <class X, class Default>
  requires requires { typename X::troupe_events; }
struct troupe_events_or<X, Default> {
  using type = typename X::troupe_events;
};

/// `X::accepts`, or `Default`.
template <class X, class Default>
struct accepts_or {
  using type = Default;
};
template <class X, class Default>
  requires requires { typename X::accepts; }
struct accepts_or<X, Default> {
  using type = typename X::accepts;
};

/// `X::troupe_accepts`, or `Default`.
template <class X, class Default>
struct troupe_accepts_or {
  using type = Default;
};
template <class X, class Default>
  requires requires { typename X::troupe_accepts; }
struct troupe_accepts_or<X, Default> {
  using type = typename X::troupe_accepts;
};

} // namespace troupe::detail
