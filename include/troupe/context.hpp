#pragma once

/// \file
/// `troupe::context<T>`: what an actor can do to itself — its own reference,
/// timers, stopping, watching other actors.

#include <troupe/actor_ref.hpp>
#include <troupe/concepts.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/cell.hpp>

#include <chrono>
#include <cstdint>

namespace troupe {

class actor_system;

/// Identifies a timer started with `context<T>::schedule_once` or
/// `schedule_every`.
struct timer_id {
  std::uint64_t value = 0;
  friend bool operator==(timer_id, timer_id) = default;
};

/// The actor's view of itself, handed to its constructor when the
/// constructor accepts it as first parameter:
///
/// \code
/// class ticker {
/// public:
///   explicit ticker(troupe::context<ticker> ctx) : ctx_(ctx) {
///     ctx_.schedule_every(std::chrono::seconds(1), tick{});
///   }
///   void handle(tick) { if (++n_ == 10) ctx_.stop(); }
/// private:
///   troupe::context<ticker> ctx_;
///   int n_ = 0;
/// };
/// \endcode
///
/// A context is a small value, valid for as long as the actor runs (also
/// across restarts). Its members may be called only from the actor's own
/// handlers, constructor and `on_start` / `on_stop` — except `self()`,
/// `id()` and `system()`, which are thread-safe.
template <class T>
class context {
public:
  using executor_type = asio::thread_pool::executor_type;

  explicit context(detail::cell<T>* c) noexcept : cell_(c) {}

  /// A reference to this actor.
  actor_ref<T> self() const noexcept { return actor_ref<T>(cell_); }
  actor_id id() const noexcept { return cell_->id(); }
  /// The system the actor runs in (to spawn further actors).
  actor_system& system() const noexcept { return *cell_->sys().owner; }
  /// The executor the actor's handlers run on.
  executor_type get_executor() const noexcept { return cell_->executor(); }

  /// Delivers `msg` to this actor once, after `delay`. Like any message it is
  /// handled in turn, never concurrently with another handler. Every timer
  /// is cancelled when the actor stops or restarts (the fresh instance
  /// starts its own).
  template <class M, class Rep, class Period>
    requires handles<T, M> && std::copy_constructible<M>
  timer_id schedule_once(std::chrono::duration<Rep, Period> delay, M msg) {
    return {cell_->add_timer(std::chrono::duration_cast<std::chrono::nanoseconds>(delay), std::chrono::nanoseconds{0},
                             std::move(msg))};
  }

  /// Delivers a copy of `msg` to this actor every `period` (the first after
  /// one period), at a fixed rate, until cancelled or the actor stops.
  template <class M, class Rep, class Period>
    requires handles<T, M> && std::copy_constructible<M>
  timer_id schedule_every(std::chrono::duration<Rep, Period> period, M msg) {
    auto p = std::chrono::duration_cast<std::chrono::nanoseconds>(period);
    if (p.count() <= 0) throw error(errc::invalid_argument, "schedule_every: the period must be positive");
    return {cell_->add_timer(p, p, std::move(msg))};
  }

  /// Cancels a timer: no message of it is handled afterwards, even one
  /// already queued. False if the timer had already fired (one-shot) or was
  /// cancelled.
  bool cancel(timer_id id) noexcept { return cell_->cancel_timer(id.value); }

  /// Stops this actor once the current handler returns.
  void stop() noexcept { cell_->request_stop(exit_reason::normal); }

  /// Sends this actor a `troupe::down` when `other` stops (at once if it
  /// already has). This actor must handle `troupe::down`. Watching an actor
  /// already watched changes nothing. The watch ends with the `down`, with
  /// `unwatch`, or when this actor stops (the watched actor then forgets
  /// it); it survives this actor's restarts.
  template <class W>
  void watch(const actor_ref<W>& other) {
    cell_->watch(other.cell_.get());
  }

  /// Ends the watch of `other`: no `down` of it is handled afterwards, even
  /// one already queued.
  template <class W>
  void unwatch(const actor_ref<W>& other) noexcept {
    cell_->unwatch(other.cell_.get());
  }

private:
  detail::cell<T>* cell_;
};

} // namespace troupe
