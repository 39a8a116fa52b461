#pragma once

/// \file
/// What an event type is: JSON-convertible, with a stable manifest name and
/// a version, and how an event type that replaced an older one reads it
/// (upcasting).

#include <troupe/persistence/json.hpp>

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace troupe::persistence {

/// An event type: JSON-convertible through Boost.JSON (described with
/// Boost.Describe, or with `tag_invoke`), with a stable `manifest` name and,
/// optionally, a `version` (default 1).
///
/// \code
/// struct payment_requested {
///   static constexpr std::string_view manifest = "order.payment-requested";
///   long amount;
///   std::string operation_id;
/// };
/// BOOST_DESCRIBE_STRUCT(payment_requested, (), (amount, operation_id))
/// \endcode
template <class E>
concept event = requires {
  { E::manifest } -> std::convertible_to<std::string_view>;
} && json_convertible<E>;

/// The event types a persistent actor can replay.
template <event... E>
struct event_types {};

/// `E::version`, or 1.
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
concept upcastable =
    requires { typename E::previous; } && event<typename E::previous> && requires(typename E::previous p) {
      { E::upcast(std::move(p)) } -> std::same_as<E>;
    };

/// The version of a state type in its snapshots: `S::version` (a static
/// member), or 1.
template <class S>
constexpr std::uint32_t state_version_of() {
  if constexpr (requires { S::version; }) {
    if constexpr (!std::is_member_object_pointer_v<decltype(&S::version)>)
      return S::version;
    else
      return 1; // a data member named `version` is the state's own
  } else {
    return 1;
  }
}

/// Schema evolution of a snapshotted state, as for events: a state type
/// that replaced an older one declares a `version`, the older type as
/// `previous`, and how to turn it into the new one. Recovery reads a
/// snapshot of any version in the chain; one of a version outside it is
/// unreadable (recovery falls back to an older snapshot, or to the events).
///
/// \code
/// struct cart_v1 { std::vector<std::string> skus; };      // as once snapshotted
/// struct cart {
///   static constexpr std::uint32_t version = 2;
///   using previous = cart_v1;
///   static cart upcast(cart_v1 old);
///   std::map<std::string, int> quantities;
/// };
/// \endcode
template <class S>
concept state_upcastable =
    requires { typename S::previous; } && json_convertible<typename S::previous> && requires(typename S::previous p) {
      { S::upcast(std::move(p)) } -> std::same_as<S>;
    };

} // namespace troupe::persistence
