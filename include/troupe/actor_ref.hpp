#pragma once

/// \file
/// `troupe::actor_ref<T>`: the typed handle through which actors are sent
/// messages.

#include <troupe/timeout.hpp>
#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/ask.hpp>
#include <troupe/detail/cell.hpp>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <optional>
#include <system_error>
#include <type_traits>

namespace troupe {

template <class T>
class actor_ref;

namespace detail {
/// Completes with `c`'s final `down` once it has stopped (at once if it
/// has): `when_stopped` of every kind of reference.
template <class Token>
auto when_stopped(cell_base* c, Token&& token) {
  return asio::async_initiate<Token, void(down)>(
      [](auto handler, cell_base* c) {
        auto h = std::make_shared<stored_handler<decltype(handler)>>(std::move(handler));
        if (auto d = c->add_watcher([h](const down& d) { h->defer(d); })) h->post(*d);
      },
      token, c);
}

/// The cell behind a reference (tests and diagnostics).
template <class T>
cell_base* cell_of(const actor_ref<T>& r) noexcept;
} // namespace detail

/// A reference to an actor of type `T`.
///
/// Copyable and cheap (one pointer; copying touches a reference count), and
/// thread-safe: any thread may tell, ask or stop through the same reference.
/// A reference keeps the actor's bookkeeping alive, not the actor: once the
/// actor has stopped, tells fail with `errc::actor_stopped` (and count as
/// dead letters) and asks fail at once with the same code.
///
/// Only messages `T` handles are accepted: `tell`, `ask` and `send` are
/// constrained on `troupe::handles<T, M>`, so a wrong message is a compile
/// error naming both types.
///
/// \code
/// auto c = sys.spawn<counter>();
/// c.tell(add{2});                                   // fire and forget
/// int v = co_await c.ask(total{});                  // in a coroutine
/// int w = c.ask(total{}, asio::use_future).get();   // from a plain thread
/// \endcode
template <class T>
class actor_ref {
public:
  using actor_type = T;
  /// The reply of an ask of `M` through this reference.
  template <class M>
  using reply_to = reply_type_t<T, M>;

  /// An empty reference; every operation on it is a precondition violation
  /// except `operator bool`, comparison and assignment.
  actor_ref() = default;

  explicit operator bool() const noexcept { return static_cast<bool>(cell_); }
  /// The actor's id (unique within its system).
  actor_id id() const noexcept { return cell_->id(); }

  friend bool operator==(const actor_ref& a, const actor_ref& b) noexcept { return a.cell_.get() == b.cell_.get(); }

  // -- messaging --------------------------------------------------------------

  /// Enqueues `msg` and returns at once. Messages from one sender are
  /// processed in the order sent. The result is empty on success,
  /// `errc::actor_stopped` if the actor has stopped (the message counts as a
  /// dead letter) or `errc::mailbox_full` for a full bounded mailbox.
  template <class M>
    requires handles<T, std::decay_t<M>>
  std::error_code tell(M&& msg) const {
    detail::check_message<std::decay_t<M>>();
    return cell_->enqueue(cell_->template make_tell<std::decay_t<M>>(std::forward<M>(msg)));
  }

  /// Sends `msg` and completes with the handler's result: an Asio initiating
  /// function with signature `void(std::exception_ptr, R)` (or
  /// `void(std::exception_ptr)` when the handler returns `void`), where `R`
  /// is `reply_type_t<T, M>`. Any completion token works: `use_awaitable`
  /// (the default; failures are thrown), `use_future`,
  /// `experimental::deferred`, `experimental::as_tuple(...)`, callbacks.
  ///
  /// Failures are `troupe::error` exceptions (a `std::system_error` with a
  /// `troupe::errc` code): `actor_stopped` at once if the actor has stopped
  /// or stops before answering, `timeout` after the system's default ask
  /// timeout (none unless configured), `handler_failed` with the handler's
  /// exception message, `mailbox_full`. A reply arriving after the timeout is
  /// dropped. The handler is invoked on its associated executor.
  template <class M, class Token = asio::use_awaitable_t<>>
    requires answers<T, std::decay_t<M>> && (!detail::is_duration<std::decay_t<Token>>) &&
             (!detail::is_time_point<std::decay_t<Token>>)
  auto ask(M&& msg, Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), cell_->sys().config.ask_timeout, std::forward<Token>(token));
  }

  /// As `ask(msg, token)`, failing with `errc::timeout` when no reply arrived
  /// within `timeout`. A timeout that has passed (zero or negative) fails at
  /// once and sends nothing; `troupe::no_timeout` never expires
  /// (`timeout.hpp`).
  template <class M, class Rep, class Period, class Token = asio::use_awaitable_t<>>
    requires answers<T, std::decay_t<M>>
  auto ask(M&& msg, std::chrono::duration<Rep, Period> timeout, Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), detail::timeout_of(timeout), std::forward<Token>(token));
  }

  /// As `ask(msg, timeout, token)` with a deadline on the steady clock (one
  /// reached already fails at once, and nothing is sent).
  template <class M, class Duration, class Token = asio::use_awaitable_t<>>
    requires answers<T, std::decay_t<M>>
  auto ask(M&& msg, std::chrono::time_point<std::chrono::steady_clock, Duration> deadline,
           Token&& token = Token{}) const {
    return ask_within(std::forward<M>(msg), detail::timeout_until(deadline), std::forward<Token>(token));
  }

  /// Enqueues `msg`, waiting for room when the actor's bounded mailbox is
  /// full (backpressure); for an unbounded mailbox it completes at once.
  /// Signature `void(std::error_code)`: empty, or `errc::actor_stopped`.
  template <class M, class Token = asio::use_awaitable_t<>>
    requires handles<T, std::decay_t<M>>
  auto send(M&& msg, Token&& token = Token{}) const {
    detail::check_message<std::decay_t<M>>();
    return asio::async_initiate<Token, void(std::error_code)>(send_initiation{cell_.get()}, token,
                                                              std::forward<M>(msg));
  }

  // -- lifecycle --------------------------------------------------------------

  /// Asks the actor to stop after its current message; thread-safe and
  /// idempotent. Messages still queued then fail (`errc::actor_stopped`) or
  /// count as dead letters.
  void stop() const { cell_->request_stop(exit_reason::normal); }

  /// Completes once the actor has stopped (at once if it already has), with
  /// signature `void(troupe::down)`.
  template <class Token = asio::use_awaitable_t<>>
  auto when_stopped(Token&& token = Token{}) const {
    return detail::when_stopped(cell_.get(), std::forward<Token>(token));
  }

private:
  template <class>
  friend class context;
  friend class actor_system;
  friend detail::cell_base* detail::cell_of<T>(const actor_ref<T>&) noexcept;

  explicit actor_ref(detail::cell<T>* c) noexcept : cell_(c) {}

  template <class M, class Token>
  auto ask_within(M&& msg, std::chrono::nanoseconds timeout, Token&& token) const {
    using reply = reply_type_t<T, std::decay_t<M>>;
    detail::check_ask<std::decay_t<M>, reply>();
    return asio::async_initiate<Token, typename detail::ask_signature<reply>::type>(
        ask_initiation{cell_.get()}, token, std::forward<M>(msg), timeout);
  }

  struct ask_initiation {
    detail::cell<T>* c;
    template <class Handler, class M>
    void operator()(Handler&& h, M&& msg, std::chrono::nanoseconds timeout) const {
      detail::initiate_ask<T>(
          c->sys(), std::forward<Handler>(h), std::forward<M>(msg), timeout, [c = c] { return c->closed(); },
          [c = c](auto* e) { c->enqueue_ask(e); });
    }
  };

  struct send_initiation {
    detail::cell<T>* c;
    template <class Handler, class M>
    void operator()(Handler&& h, M&& msg) const {
      auto* e = new detail::tell_envelope<T, std::decay_t<M>>(std::forward<M>(msg));
      auto stored = std::make_shared<detail::stored_handler<std::decay_t<Handler>>>(std::forward<Handler>(h));
      detail::unique_function<void(std::error_code)> later = [stored](std::error_code ec) { stored->defer(ec); };
      if (auto now = c->enqueue_or_wait(e, later)) stored->post(*now);
    }
  };

  detail::cell_ptr<detail::cell<T>> cell_;
};

template <class T>
detail::cell_base* detail::cell_of(const actor_ref<T>& r) noexcept {
  return r.cell_.get();
}

} // namespace troupe
