#pragma once

/// \file
/// Entities: actors addressed by a key rather than spawned, activated by
/// their first message and passivated when idle — `entity_ref<T>`,
/// `entity_region<T>`, `entity_options`. Regions are made with
/// `actor_system::entities<T>`.

#include <troupe/timeout.hpp>
#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/detail/ask.hpp>
#include <troupe/detail/envelope.hpp>
#include <troupe/detail/region.hpp>

#include <asio/async_result.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace troupe {

/// A reference to the entity of type `T` named `key`, whether it is live or
/// not. Copyable, thread-safe, and valid for as long as anybody holds it:
/// obtaining one activates nothing.
///
/// A message to an entity with no live activation activates it: a fresh
/// instance is constructed (from its key and the region's arguments), runs
/// its `on_start` — a persistent actor recovers — and then handles the
/// message. Messages to one entity are handled in the order sent by one
/// sender, also across its passivations: what was queued when it
/// passivated, and what arrived while it did, goes to its next activation
/// in that order. At most one activation of a key is live at a time.
///
/// The entity may decline a passivation: `bool can_passivate()` (a member
/// it may define; a library base such as a reliable actor declines while it
/// has unconfirmed deliveries) is asked in its own turn before each; while
/// a reentrant handler of it is under way, or it awaits the reply to an
/// ask's `then`, it always declines. Its
/// timers (`schedule_once`, `schedule_every`) end with each activation,
/// like everything else it holds in memory: what must outlive a
/// passivation is persisted, or the entity declines to passivate while it
/// is pending.
///
/// References to the activation itself (`context<T>::self()`) stop
/// working when it passivates: give others the `entity_ref`.
///
/// \code
/// auto orders = sys.entities<order>(troupe::entity_options{.idle_timeout = 30s});
/// orders.get("order-42").tell(place_order{});       // activates order-42
/// auto s = co_await sys.entity<order>("order-42").ask(order_status{});
/// \endcode
template <class T>
class entity_ref {
public:
  using actor_type = T;
  /// The reply of an ask of `M` through this reference.
  template <class M>
  using reply_to = reply_type_t<T, M>;

  /// An empty reference (only `operator bool`, comparison and assignment).
  entity_ref() = default;

  explicit operator bool() const noexcept { return static_cast<bool>(region_); }
  const std::string& key() const noexcept { return key_; }

  friend bool operator==(const entity_ref& a, const entity_ref& b) noexcept {
    return a.region_ == b.region_ && a.key_ == b.key_;
  }

  /// Enqueues `msg` for the entity, activating it if it is not live.
  /// Empty on success; `errc::system_shutdown` once its system shuts down.
  /// An activation that fails (its constructor throws, say) drops the
  /// messages waiting for it: asks among them fail with its exception.
  template <class M>
    requires handles<T, std::decay_t<M>>
  std::error_code tell(M&& msg) const {
    detail::check_message<std::decay_t<M>>();
    return region_->deliver(key_, new detail::tell_envelope<T, std::decay_t<M>>(std::forward<M>(msg)));
  }

  /// As `actor_ref<T>::ask`, activating the entity if it is not live; the
  /// timeout (the system's default if none is given) counts the activation.
  template <class M, class Token = asio::use_awaitable_t<>>
    requires answers<T, std::decay_t<M>> && (!detail::is_duration<std::decay_t<Token>>) &&
             (!detail::is_time_point<std::decay_t<Token>>)
  auto ask(M&& msg, Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), region_->sys().config.ask_timeout, std::forward<Token>(token));
  }

  /// With a timeout: one that has passed fails at once and activates
  /// nothing (`timeout.hpp`).
  template <class M, class Rep, class Period, class Token = asio::use_awaitable_t<>>
    requires answers<T, std::decay_t<M>>
  auto ask(M&& msg, std::chrono::duration<Rep, Period> timeout, Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), detail::timeout_of(timeout), std::forward<Token>(token));
  }

  /// With a deadline on the steady clock.
  template <class M, class Duration, class Token = asio::use_awaitable_t<>>
    requires answers<T, std::decay_t<M>>
  auto ask(M&& msg, std::chrono::time_point<std::chrono::steady_clock, Duration> deadline,
           Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), detail::timeout_until(deadline), std::forward<Token>(token));
  }

private:
  template <class>
  friend class entity_region;

  entity_ref(std::shared_ptr<detail::region<T>> r, std::string key) : region_(std::move(r)), key_(std::move(key)) {}

  template <class M, class Token>
  auto ask_within(M&& msg, std::chrono::nanoseconds timeout, Token&& token) const {
    using reply = reply_type_t<T, std::decay_t<M>>;
    detail::check_ask<std::decay_t<M>, reply>();
    return asio::async_initiate<Token, typename detail::ask_signature<reply>::type>(
        ask_initiation{region_.get(), &key_}, token, std::forward<M>(msg), timeout);
  }

  struct ask_initiation {
    detail::region<T>* r;
    const std::string* key;
    template <class Handler, class M>
    void operator()(Handler&& h, M&& msg, std::chrono::nanoseconds timeout) const {
      auto& s = r->sys();
      detail::initiate_ask<T>(
          s, std::forward<Handler>(h), std::forward<M>(msg), timeout,
          [&s] { return s.shutting_down.load(std::memory_order_seq_cst); },
          [r = r, key = key](auto* e) { r->deliver_ask(*key, e); });
    }
  };

  std::shared_ptr<detail::region<T>> region_;
  std::string key_;
};

/// The entities of one type in one actor system (made by
/// `actor_system::entities<T>`). Copyable, thread-safe; a handle to the
/// region the system keeps.
template <class T>
class entity_region {
public:
  entity_region() = default;

  /// The entity named `key` (activated by its first message).
  entity_ref<T> get(std::string key) const { return entity_ref<T>(region_, std::move(key)); }

  /// Live activations and what the region has done so far.
  entity_stats stats() const { return region_->stats(); }

  const entity_options& options() const noexcept { return region_->options(); }

private:
  friend class actor_system;
  explicit entity_region(std::shared_ptr<detail::region<T>> r) : region_(std::move(r)) {}

  std::shared_ptr<detail::region<T>> region_;
};

} // namespace troupe
