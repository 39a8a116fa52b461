#pragma once

/// \file
/// `troupe::context<T>`: what an actor can do to itself — its own reference,
/// timers, stopping, watching other actors.

#include <troupe/timeout.hpp>
#include <troupe/actor_ref.hpp>
#include <troupe/concepts.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/cell.hpp>

#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

namespace troupe {

class actor_system;

/// Identifies a timer started with `context<T>::schedule_once` or
/// `schedule_every`.
struct timer_id {
  std::uint64_t value = 0;
  friend bool operator==(timer_id, timer_id) = default;
};

/// What `context::receive<Ms...>` produces: the message for one type, an
/// `std::variant` of them for several.
template <class... Ms>
struct receive_result {
  using type = std::variant<Ms...>;
};
template <class M>
struct receive_result<M> {
  using type = M;
};
template <class... Ms>
using receive_result_t = typename receive_result<Ms...>::type;

template <class T, class Ref, class M>
class request;

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

  /// Delivers `msg` to this actor once, after `delay` (one that has passed,
  /// zero or negative: at once, in a later turn). Like any message it is
  /// handled in turn, never concurrently with another handler. Every timer
  /// is cancelled when the actor stops or restarts (the fresh instance
  /// starts its own).
  template <class M, class Rep, class Period>
    requires handles<T, M> && std::copy_constructible<M>
  timer_id schedule_once(std::chrono::duration<Rep, Period> delay, M msg) {
    return {cell_->add_timer(detail::saturated(delay), std::chrono::nanoseconds{0}, std::move(msg))};
  }

  /// Delivers a copy of `msg` to this actor every `period` (the first after
  /// one period), at a fixed rate, until cancelled or the actor stops.
  template <class M, class Rep, class Period>
    requires handles<T, M> && std::copy_constructible<M>
  timer_id schedule_every(std::chrono::duration<Rep, Period> period, M msg) {
    auto p = detail::saturated(period);
    if (p.count() <= 0) throw error(errc::invalid_argument, "schedule_every: the period must be positive");
    return {cell_->add_timer(p, p, std::move(msg))};
  }

  // -- the awaitable mailbox ---------------------------------------------------

  /// Awaits the oldest queued message of one of the types `Ms` (a selective
  /// receive): the message itself for one type, an `std::variant<Ms...>`
  /// for several. Messages of other types stay queued, in order, for later
  /// receives or for the handlers once the coroutine has finished; asks,
  /// timer messages and watch notifications always go to the handlers.
  ///
  /// Only from the actor's own coroutine — a coroutine handler or a
  /// coroutine `on_start` — which holds the mailbox as any handler does (no
  /// other handler runs until it finishes). Each `M` must be a message the
  /// actor accepts: a `handle(M)`, or listed in `using receives =
  /// troupe::messages<...>` for an actor that only receives it. Fails with
  /// `errc::actor_stopped` once the actor is asked to stop.
  ///
  /// \code
  /// troupe::task<void> on_start() {              // a handshake as one coroutine
  ///   auto hello = co_await ctx_.receive<syn>();
  ///   hello.from.tell(syn_ack{ctx_.self()});
  ///   co_await ctx_.receive<ack>(std::chrono::seconds(1));   // or errc::receive_timeout
  /// }
  /// \endcode
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && (handles<T, Ms> && ...))
  asio::awaitable<receive_result_t<Ms...>> receive() {
    return receive_within<Ms...>(no_timeout);
  }

  /// As `receive<Ms...>()`, failing with `errc::receive_timeout` when no
  /// matching message arrived within `timeout`. A timeout that has passed
  /// (zero or negative) takes a matching message already queued, or fails
  /// at once: `receive<M>(0ms)` polls. `troupe::no_timeout` never expires.
  template <class... Ms, class Rep, class Period>
    requires(sizeof...(Ms) > 0 && (handles<T, Ms> && ...))
  asio::awaitable<receive_result_t<Ms...>> receive(std::chrono::duration<Rep, Period> timeout) {
    return receive_within<Ms...>(detail::timeout_of(timeout));
  }

  /// As `receive<Ms...>(timeout)` with a deadline on the steady clock: one
  /// deadline across several receives.
  /// \code
  /// const auto deadline = std::chrono::steady_clock::now() + 2s;
  /// auto a = co_await ctx_.receive<part>(deadline);
  /// auto b = co_await ctx_.receive<part>(deadline); // what is left of the 2 s
  /// \endcode
  template <class... Ms, class Duration>
    requires(sizeof...(Ms) > 0 && (handles<T, Ms> && ...))
  asio::awaitable<receive_result_t<Ms...>> receive(
      std::chrono::time_point<std::chrono::steady_clock, Duration> deadline) {
    return receive_within<Ms...>(detail::timeout_until(deadline));
  }

private:
  template <class... Ms>
  asio::awaitable<receive_result_t<Ms...>> receive_within(std::chrono::nanoseconds timeout) {
    using result = receive_result_t<Ms...>;
    static constexpr const void* tags[] = {&detail::message_tag<Ms>...};
    detail::cell<T>* c = cell_;
    c->check_receive();
    c->rescan();
    bool deadline = false;
    if (auto* e = c->take_matching(tags, sizeof...(Ms), 0, deadline)) co_return take<Ms...>(e);
    if (detail::expired(timeout))
      throw error(errc::receive_timeout, "receive in " + std::string(detail::type_name<T>()) +
                                             ": no matching message was queued, and its deadline had passed");
    auto got = co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                             void(std::exception_ptr, std::optional<result>)>(
        [c, timeout](auto handler) {
          // Completed by a turn of this actor, on its thread: the coroutine
          // resumes inside that turn, as a handler would run (what it sends
          // is handed off as a handler's messages are). The actor's pool
          // outlives the wait (a stop ends it), so no work is tracked.
          c->wait_receive(tags, sizeof...(Ms), timeout,
                          [h = std::move(handler)](detail::envelope_base* e, std::exception_ptr ep) mutable {
                            if (ep)
                              std::move(h)(std::move(ep), std::optional<result>());
                            else
                              std::move(h)(nullptr,
                                           std::optional<result>(take<Ms...>(static_cast<detail::envelope<T>*>(e))));
                          });
        },
        asio::use_awaitable);
    co_return std::move(*got);
  }

public:
  // -- stash ------------------------------------------------------------------

  /// Sets `msg` aside: it is handled again, in the order stashed and before
  /// anything queued, after `unstash_all()`. Stashed messages survive a
  /// restart; when the actor stops they are dead letters; an entity's next
  /// activation receives them first.
  template <class M>
    requires handles<T, std::decay_t<M>>
  void stash(M&& msg) {
    detail::check_message<std::decay_t<M>>();
    cell_->stash(new detail::stashed_envelope<T, std::decay_t<M>>(std::forward<M>(msg)));
  }

  /// Sets an ask aside with its promise (for a handler that answers later):
  /// handled again with the promise after `unstash_all()`; if the actor
  /// stops first, the asker gets `errc::actor_stopped` (as for an ask still
  /// queued); a restart keeps it stashed; an entity's next activation
  /// receives it.
  template <class M>
    requires detail::handles_later<T, std::decay_t<M>>
  void stash(M&& msg, reply_promise<detail::reply_of_t<std::decay_t<M>>> promise) {
    detail::check_message<std::decay_t<M>>();
    cell_->stash(new detail::stashed_ask_envelope<T, std::decay_t<M>>(std::forward<M>(msg), std::move(promise)));
  }

  /// Puts every stashed message back in front of the mailbox; returns how
  /// many.
  std::size_t unstash_all() noexcept { return cell_->unstash_all(); }
  /// How many messages are stashed.
  std::size_t stashed() const noexcept { return cell_->stashed(); }

  // -- requests whose continuation runs in the actor --------------------------

  /// Asks `to` (an `actor_ref`, `entity_ref` or `typed_ref`) with `msg`, without
  /// blocking this actor: `.then(on_reply, on_error)` sends it, and the
  /// continuation runs later as a turn of this actor (its state is safe to
  /// touch there), while the actor goes on handling other messages. Fails
  /// with `errc::timeout` after `timeout` (one that has passed: at once,
  /// nothing sent; `troupe::no_timeout`: never). See `request`.
  template <class Ref, class M, class Rep, class Period>
    requires askable<Ref, std::decay_t<M>>
  [[nodiscard]] request<T, Ref, std::decay_t<M>> ask(const Ref& to, M&& msg,
                                                     std::chrono::duration<Rep, Period> timeout) const {
    return request<T, Ref, std::decay_t<M>>(cell_, to, std::forward<M>(msg), detail::timeout_of(timeout));
  }
  /// As `ask(to, msg, timeout)` with a deadline on the steady clock.
  template <class Ref, class M, class Duration>
    requires askable<Ref, std::decay_t<M>>
  [[nodiscard]] request<T, Ref, std::decay_t<M>> ask(
      const Ref& to, M&& msg, std::chrono::time_point<std::chrono::steady_clock, Duration> deadline) const {
    return request<T, Ref, std::decay_t<M>>(cell_, to, std::forward<M>(msg), detail::timeout_until(deadline));
  }
  /// As `ask(to, msg, timeout)` with the system's default ask timeout.
  template <class Ref, class M>
    requires askable<Ref, std::decay_t<M>>
  [[nodiscard]] request<T, Ref, std::decay_t<M>> ask(const Ref& to, M&& msg) const {
    return request<T, Ref, std::decay_t<M>>(cell_, to, std::forward<M>(msg), cell_->sys().config.ask_timeout);
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
  template <class... Ms>
  static receive_result_t<Ms...> take(detail::envelope<T>* e) noexcept {
    struct disposer {
      detail::envelope<T>* e;
      ~disposer() { e->dispose(); }
    } d{e};
    if constexpr (sizeof...(Ms) == 1) {
      return std::move(static_cast<detail::tell_envelope<T, Ms...>*>(e)->msg);
    } else {
      std::optional<receive_result_t<Ms...>> r;
      const void* tag = e->tag();
      ((tag == &detail::message_tag<Ms> ? (void)r.emplace(std::in_place_type<Ms>,
                                                           std::move(static_cast<detail::tell_envelope<T, Ms>*>(e)->msg))
                                        : (void)0),
       ...);
      return std::move(*r);
    }
  }

  detail::cell<T>* cell_;
};

/// A base that gives an actor its context without a constructor parameter:
/// `class counter : public troupe::with_context<counter>` may call
/// `self()`, `stop()`, `system()` and `ctx()` (for timers, watches, stash,
/// requests, receive) from its handlers and its constructor. `T` is the
/// actor class itself; only an actor system constructs it (anywhere else
/// the constructor throws `errc::invalid_argument`).
template <class T>
class with_context {
protected:
  with_context() : ctx_(current()) {}
  with_context(const with_context&) = default;
  with_context& operator=(const with_context&) = default;
  ~with_context() = default;

  context<T>& ctx() noexcept { return ctx_; }
  const context<T>& ctx() const noexcept { return ctx_; }
  actor_ref<T> self() const noexcept { return ctx_.self(); }
  actor_system& system() const noexcept { return ctx_.system(); }
  void stop() noexcept { ctx_.stop(); }

private:
  static detail::cell<T>* current() {
    auto* c = detail::constructing_cell;
    if (!c)
      throw error(errc::invalid_argument,
                  "with_context<" + std::string(detail::type_name<T>()) + ">: constructed outside an actor system");
    auto* mine = dynamic_cast<detail::cell<T>*>(c);
    if (!mine)
      throw error(errc::invalid_argument, "with_context<" + std::string(detail::type_name<T>()) +
                                              ">: the actor spawned is of another class (a class derived from " +
                                              std::string(detail::type_name<T>()) +
                                              " takes a context of its own: context<Derived> as a constructor "
                                              "parameter)");
    return mine;
  }

  context<T> ctx_;
};

/// A request made with `context<T>::ask(to, msg)`: nothing is sent until
/// `then` is called.
template <class T, class Ref, class M>
class request {
public:
  using reply_type = typename Ref::template reply_to<M>;

  request(detail::cell<T>* asker, const Ref& to, M msg, std::chrono::nanoseconds timeout)
      : asker_(asker), to_(to), msg_(std::move(msg)), timeout_(timeout) {}

  /// Sends the request. `on_reply(reply)` (or `on_reply()` for a `void`
  /// reply) runs as a turn of the asking actor when the reply arrives,
  /// `on_error(const troupe::error&)` when the ask fails (timeout, the
  /// actor stopped, its handler threw, a broken promise). Neither runs if
  /// the asking actor has stopped or restarted meanwhile (an entity is not
  /// passivated while it waits for the reply). Either may throw:
  /// that is a failure of the asking actor, as a handler's exception is.
  template <class OnReply, class OnError>
  void then(OnReply on_reply, OnError on_error) && {
    const std::uint32_t incarnation = asker_->incarnation();
    // Counted until the continuation runs or goes unrun: an entity waiting
    // for the reply is not passivated meanwhile.
    auto k = [self = detail::cell_ptr<detail::cell<T>>(asker_), incarnation, count = detail::awaited_count<T>(*asker_),
              f = std::move(on_reply), g = std::move(on_error)](std::exception_ptr ep, auto... reply) mutable {
      self->enqueue_system(new detail::continuation_envelope<T>(
          [count = std::move(count), f = std::move(f), g = std::move(g), ep = std::move(ep),
           ... r = std::move(reply)](T&) mutable {
            count.ended();
            if (ep)
              g(error_of(ep));
            else
              f(std::move(r)...);
          },
          incarnation));
    };
    to_.ask(std::move(msg_), timeout_, std::move(k));
  }

  /// As `then(on_reply, on_error)`, where a failed ask is a failure of the
  /// asking actor (its supervision decides), as if its handler had thrown.
  template <class OnReply>
  void then(OnReply on_reply) && {
    std::move(*this).then(std::move(on_reply), [](const error& e) { throw e; });
  }

private:
  detail::cell<T>* asker_;
  Ref to_;
  M msg_;
  std::chrono::nanoseconds timeout_;
};

} // namespace troupe
