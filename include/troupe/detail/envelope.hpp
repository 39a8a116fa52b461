#pragma once

// The message envelopes of an actor's mailbox: tells, asks (with their
// completion handler and timeout), timer ticks, system messages.

#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/inbox.hpp>
#include <troupe/detail/post_counter.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/system_state.hpp>
#include <troupe/detail/type_name.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace troupe::detail {

template <class T>
class cell;

template <class T>
struct envelope : envelope_base {
  virtual ~envelope() = default;
  /// Runs the handler in the actor's context. True when the handler is a
  /// coroutine that suspended: the envelope then belongs to the coroutine,
  /// which hands it back through cell::coroutine_done.
  virtual bool process(cell<T>& c) = 0;
  /// The message will never be handled (actor stopped, handler threw): an
  /// ask completes with `ep`. True if it counts as a dead letter.
  virtual bool reject(const std::exception_ptr&) noexcept { return counts(); }
  /// Whether `reject` reports its error to someone (an asker): the error
  /// is built only then, so a stopping actor's tells cost no exception.
  virtual bool wants_error() const noexcept { return false; }
  /// User messages count towards a bounded mailbox and as dead letters;
  /// internal ones (timer ticks, stop requests, watch notifications) do not.
  virtual bool counts() const noexcept { return true; }
  virtual void dispose() noexcept { delete this; }
  /// The message type, for error messages.
  virtual std::string_view name() const noexcept { return "internal message"; }
  /// Set aside by `context::stash` (an entity's next activation takes it).
  virtual bool stashed() const noexcept { return false; }
  /// What `context::receive` matches: `&message_tag<M>` for a told message
  /// of type `M`; null for what only handlers take (asks, timer messages,
  /// watch notifications, internal messages).
  virtual const void* tag() const noexcept { return nullptr; }
};

/// One address per message type (an inline variable: the same in every
/// translation unit).
template <class M>
inline constexpr char message_tag = 0;

inline std::string what_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "non-standard exception";
  }
}

/// An exception pointer to a `troupe::error`. Made in a function of its own
/// so that the `error` temporary is gone before the pointer is handed on: it
/// shares its message with the thrown copy, which another thread may be
/// reading as soon as the pointer has been handed on.
inline std::exception_ptr error_ptr(errc e, const std::string& what) { return std::make_exception_ptr(error(e, what)); }

/// What an ask receives when the handler threw.
inline std::exception_ptr handler_failure(std::string_view actor, std::string_view msg, const std::exception_ptr& ep) {
  return std::make_exception_ptr(error(errc::handler_failed, "handler of " + std::string(actor) + " for " +
                                                                 std::string(msg) + " threw: " + what_of(ep)));
}

/// Thrown by a layer's coroutine handler that has dealt with a failure
/// itself (counted it durably, recovered its state): the ask fails with
/// `error`, and the actor does not (its supervisor sees nothing; a tell
/// that ends so is dropped).
struct ask_failure {
  std::exception_ptr error;
};

/// The error an `ask_failure` carries, or null for any other exception.
inline std::exception_ptr ask_failure_of(const std::exception_ptr& ep) noexcept {
  if (!ep) return nullptr;
  try {
    std::rethrow_exception(ep);
  } catch (const ask_failure& f) {
    return f.error;
  } catch (...) {
  }
  return nullptr;
}

/// Starts a coroutine handler; `done(ep, value...)` runs when it finishes,
/// or `abandoned()` if its frame is destroyed unfinished (the system's pool
/// went away with it suspended). The cell stays alive (and the instance with
/// it) while the coroutine runs.
template <class T, class Awaitable, class Done, class Abandoned>
void spawn_coroutine(cell<T>& c, Awaitable&& aw, Done done, Abandoned abandoned);

template <class T>
class turn_executor;

/// Starts a reentrant coroutine handler (the message is listed in
/// `T::reentrant`): its steps run as turns of the actor, between other
/// messages; `done(ep, value...)` runs, in a turn, when it finishes.
template <class T, class Awaitable, class Done>
void spawn_reentrant(cell<T>& c, Awaitable&& aw, Done done);

template <class T, class M>
struct tell_envelope : envelope<T> {
  template <class... A>
  explicit tell_envelope(A&&... a) : msg(std::forward<A>(a)...) {}

  bool process(cell<T>& c) override {
    if constexpr (reentrant_handler<T, M>) {
      // The envelope goes when this returns: the message lives with the
      // coroutine's completion, which outlives the coroutine's frame (a
      // handler may take it by reference).
      auto owned = std::make_unique<M>(std::move(msg));
      auto op = invoke_handle(c.instance(), std::move(*owned));
      spawn_reentrant(c, std::move(op), [owned = std::move(owned)](std::exception_ptr ep, auto&&...) {
        if (ep && !ask_failure_of(ep)) std::rethrow_exception(ep); // a failure of the actor, in its turn
      });
      return false;
    } else if constexpr (coroutine_handler<T, M>) {
      spawn_coroutine(
          c, invoke_handle(c.instance(), std::move(msg)),
          [this, &c](std::exception_ptr ep, auto&&...) {
            c.coroutine_done(this, ask_failure_of(ep) ? nullptr : std::move(ep));
          },
          [this, &c] { c.coroutine_abandoned(this); });
      return true;
    } else if constexpr (handles_directly<T, M>) {
      invoke_handle(c.instance(), std::move(msg));
      return false;
    } else if constexpr (handles_later<T, M>) {
      static_assert(!awaitable_traits<decltype(c.instance().handle(std::move(msg),
                                                                    reply_promise<reply_of_t<M>>{}))>::is_awaitable,
                    "troupe: a handler that answers later through a reply_promise cannot be a coroutine");
      // Told, not asked: nobody waits for the answer.
      c.instance().handle(std::move(msg), reply_promise<reply_of_t<M>>{});
      return false;
    } else {
      // Listed in `receives` only, and no receive took it: no handler will.
      c.unreceived();
      return false;
    }
  }

  std::string_view name() const noexcept override { return type_name<M>(); }
  const void* tag() const noexcept override { return &message_tag<M>; }

  M msg;
};

/// A message set aside with `context::stash`, handled again after
/// `unstash_all`. Not counted in a bounded mailbox; a dead letter if the
/// actor stops first.
template <class T, class M>
struct stashed_envelope final : tell_envelope<T, M> {
  using tell_envelope<T, M>::tell_envelope;
  bool counts() const noexcept override { return false; }
  bool reject(const std::exception_ptr&) noexcept override { return true; }
  bool stashed() const noexcept override { return true; }
};

/// An ask set aside with `context::stash(msg, promise)`: handled again with
/// its promise after `unstash_all`; if the actor stops first, the ask fails
/// with `actor_stopped` (as one still queued).
template <class T, class M>
struct stashed_ask_envelope final : envelope<T> {
  using R = reply_of_t<M>;
  stashed_ask_envelope(M m, reply_promise<R> p) : msg(std::move(m)), promise(std::move(p)) {
    sink = promise_access::sink(promise);
    if (sink) sink->retain_sink();
  }
  ~stashed_ask_envelope() {
    if (sink) sink->release_sink();
  }
  bool process(cell<T>& c) override {
    // As an ask handled the first time: a handler that throws fails it with
    // its exception (reject), one that drops the promise breaks it.
    if (sink) sink->handling(true);
    c.instance().handle(std::move(msg), std::move(promise));
    if (sink) sink->handling(false);
    return false;
  }
  bool counts() const noexcept override { return false; }
  bool reject(const std::exception_ptr& ep) noexcept override {
    if (sink) sink->settle(ep, nullptr);
    return true;
  }
  bool wants_error() const noexcept override { return sink != nullptr; }
  bool stashed() const noexcept override { return true; }
  std::string_view name() const noexcept override { return type_name<M>(); }

  M msg;
  reply_promise<R> promise;
  reply_sink<R>* sink = nullptr;
};

/// The continuation of a request made with `context::request`: runs as a
/// turn of the asking actor, unless that actor restarted since (the
/// instance that asked is gone).
template <class T>
struct continuation_envelope final : envelope<T> {
  continuation_envelope(unique_function<void(T&)> f, std::uint32_t incarnation)
      : fn(std::move(f)), incarnation(incarnation) {}
  bool process(cell<T>& c) override {
    if (c.incarnation() == incarnation) fn(c.instance());
    return false;
  }
  bool counts() const noexcept override { return false; }

  unique_function<void(T&)> fn;
  std::uint32_t incarnation;
};

/// The deadline of a `context::receive` (number `generation`): ends that
/// receive if it still waits, else nothing.
inline constexpr char receive_deadline_tag = 0;
template <class T>
struct receive_deadline_envelope final : envelope<T> {
  explicit receive_deadline_envelope(std::uint64_t g) : generation(g) {}
  bool process(cell<T>&) override { return false; }
  bool counts() const noexcept override { return false; }
  const void* tag() const noexcept override { return &receive_deadline_tag; }
  std::uint64_t generation;
};

/// A message the system sends on its own (watch notifications): not a dead
/// letter when the watcher has already stopped.
template <class T, class M>
struct system_envelope final : tell_envelope<T, M> {
  using tell_envelope<T, M>::tell_envelope;
  bool counts() const noexcept override { return false; }
};

/// A watched actor stopped: handled only if the watch still stands (an
/// `unwatch` after it was queued drops it).
template <class T>
struct down_envelope final : tell_envelope<T, down> {
  using tell_envelope<T, down>::tell_envelope;
  bool process(cell<T>& c) override {
    if (!c.watch_ended(this->msg.id)) return false;
    return tell_envelope<T, down>::process(c);
  }
  bool counts() const noexcept override { return false; }
  const void* tag() const noexcept override { return nullptr; }
};

/// Wakes a stopping actor; the run loop sees the stop request first. Each
/// cell has one of its own (a stop is requested once): never freed, never
/// handed to another cell.
template <class T>
struct wake_envelope final : envelope<T> {
  bool process(cell<T>&) override { return false; }
  bool counts() const noexcept override { return false; }
  void dispose() noexcept override {}
};

/// A timer's message, delivered only if the timer is still armed.
template <class T, class M>
struct timer_envelope final : tell_envelope<T, M> {
  timer_envelope(std::uint64_t id, M m) : tell_envelope<T, M>(std::move(m)), timer(id) {}
  bool process(cell<T>& c) override {
    if (!c.timer_fired(timer)) return false;
    return tell_envelope<T, M>::process(c);
  }
  bool counts() const noexcept override { return false; }
  const void* tag() const noexcept override { return nullptr; }
  std::uint64_t timer;
};

template <class R>
struct ask_signature {
  using type = void(std::exception_ptr, R);
};
template <>
struct ask_signature<void> {
  using type = void(std::exception_ptr);
};

/// An ask: the message, the asker's completion handler and, with a timeout,
/// a timer racing the reply. Reference-counted when a timer holds it.
template <class T, class M, class Handler>
struct ask_envelope final : envelope<T>, foreign_ask, reply_sink<reply_type_t<T, M>> {
  using reply = reply_type_t<T, M>;

  /// `asker`: the system whose threads the handler needs, when it is not
  /// the actor's own (the ask is then on that system's list until done).
  ask_envelope(Handler&& h, M&& m, system_state* asker = nullptr)
      : msg(std::move(m)), handler(std::move(h)), asker_(asker) {
    if (asker_) asker_->add_ref();
  }
  ~ask_envelope() {
    if (asker_) asker_->release();
  }

  /// Puts the ask on its asker's list; false if the asker is shutting down
  /// (it can complete nothing any more: the ask is cancelled).
  bool list_with_asker() noexcept {
    if (!asker_ || asker_->list_ask(this)) return true;
    cancel();
    return false;
  }

  void cancel() noexcept override {
    if (done.exchange(true, std::memory_order_acq_rel)) return;
    if (timer) timer->cancel();
    handler.discard();
  }

  /// The timer's reference to the envelope: released when the wait's
  /// handler is destroyed, also unrun (a pool destroyed with the wait
  /// pending).
  class timer_ref {
  public:
    explicit timer_ref(ask_envelope* e) noexcept : e_(e) { e_->add_ref(); }
    timer_ref(timer_ref&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    timer_ref(const timer_ref&) = delete;
    timer_ref& operator=(const timer_ref&) = delete;
    ~timer_ref() {
      if (e_) e_->dispose();
    }
    ask_envelope* operator->() const noexcept { return e_; }

  private:
    ask_envelope* e_;
  };

  void arm(asio::thread_pool::executor_type ex, std::chrono::nanoseconds timeout) {
    timer.emplace(ex, timeout);
    timer->async_wait([self = timer_ref(this), timeout](std::error_code ec) {
      if (ec) return;
      self->complete(error_ptr(
          errc::timeout,
          "ask of " + std::string(type_name<M>()) + " to " + std::string(type_name<T>()) + " got no reply within " +
              std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(timeout).count()) + " us"));
    });
  }

  bool process(cell<T>& c) override {
    if constexpr (reentrant_handler<T, M>) {
      add_ref(); // the coroutine's, until it finishes
      struct release {
        ask_envelope* e;
        release(ask_envelope* x) noexcept : e(x) {}
        release(release&& o) noexcept : e(std::exchange(o.e, nullptr)) {}
        ~release() {
          if (e) {
            // Never finished (its actor stopped first): the ask fails.
            e->complete(error_ptr(errc::actor_stopped, std::string(type_name<T>()) + " stopped or restarted while handling " +
                                                           std::string(type_name<M>())));
            e->dispose();
          }
        }
      };
      spawn_reentrant(c, invoke_handle(c.instance(), std::move(msg)),
                      [r = release(this)](std::exception_ptr ep, auto&&... v) mutable {
                        auto* e = std::exchange(r.e, nullptr);
                        if (auto own = ask_failure_of(ep)) {
                          e->complete(std::move(own));
                          e->dispose();
                          return;
                        }
                        if (ep)
                          e->complete(handler_failure(type_name<T>(), type_name<M>(), ep));
                        else
                          e->complete(nullptr, std::forward<decltype(v)>(v)...);
                        e->dispose();
                        if (ep) std::rethrow_exception(ep);
                      });
      return false;
    } else if constexpr (coroutine_handler<T, M>) {
      spawn_coroutine(
          c, invoke_handle(c.instance(), std::move(msg)),
          [this, &c](std::exception_ptr ep, auto&&... v) {
            if (auto own = ask_failure_of(ep)) {
              complete(std::move(own));
              c.coroutine_done(this, nullptr);
              return;
            }
            if (ep)
              complete(handler_failure(type_name<T>(), type_name<M>(), ep));
            else
              complete(nullptr, std::forward<decltype(v)>(v)...);
            c.coroutine_done(this, std::move(ep));
          },
          [this, &c] {
            complete(error_ptr(errc::system_shutdown, "the actor system shut down while " +
                                                          std::string(type_name<T>()) + " was handling " +
                                                          std::string(type_name<M>())));
            c.coroutine_abandoned(this);
          });
      return true;
    } else if constexpr (handles_later<T, M>) {
      static_assert(!awaitable_traits<decltype(c.instance().handle(std::move(msg), reply_promise<reply>{}))>::is_awaitable,
                    "troupe: a handler that answers later through a reply_promise cannot be a coroutine");
      add_ref(); // the promise's
      in_handler.store(true, std::memory_order_seq_cst);
      c.instance().handle(std::move(msg), reply_promise<reply>(this));
      in_handler.store(false, std::memory_order_seq_cst);
      if (abandoned.load(std::memory_order_seq_cst)) complete(broken());
      return false;
    } else if constexpr (std::is_void_v<reply>) {
      invoke_handle(c.instance(), std::move(msg));
      complete(nullptr);
      return false;
    } else {
      complete(nullptr, invoke_handle(c.instance(), std::move(msg)));
      return false;
    }
  }

  bool reject(const std::exception_ptr& ep) noexcept override {
    complete(ep);
    return false;
  }
  bool wants_error() const noexcept override { return true; }

  std::string_view name() const noexcept override { return type_name<M>(); }

  /// Exactly once, whoever comes first: the reply, the timer, a rejection.
  /// While the asker is still inside `ask()` the handler is posted, never
  /// called inline (an initiating function must not complete inline).
  template <class... V>
  void complete(std::exception_ptr ep, V&&... v) noexcept {
    // The asking system waits for this before its pool goes (taken before
    // the race with its cancel_foreign_asks is decided).
    std::optional<post_counter::guard> counted;
    if (asker_) counted.emplace(posts_in_flight);
    if (done.exchange(true, std::memory_order_acq_rel)) return;
    if (asker_) asker_->unlist_ask(this);
    if (timer) timer->cancel();
    const bool post = initiating.load(std::memory_order_acquire);
    auto finish = [&](auto&&... args) {
      if (post)
        handler.post(std::forward<decltype(args)>(args)...);
      else
        handler.defer(std::forward<decltype(args)>(args)...);
    };
    if constexpr (std::is_void_v<reply>)
      finish(std::move(ep));
    else if constexpr (sizeof...(V) == 0)
      finish(std::move(ep), reply{});
    else
      finish(std::move(ep), reply(std::forward<V>(v)...));
  }

  void add_ref() noexcept override { refs.fetch_add(1, std::memory_order_relaxed); }
  void dispose() noexcept override {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // -- as the sink of a reply_promise (any thread) ------------------------------

  void settle(std::exception_ptr ep, std::add_pointer_t<reply> v) noexcept override {
    if (ep)
      complete(std::move(ep));
    else if constexpr (std::is_void_v<reply>)
      complete(nullptr);
    else
      complete(nullptr, std::move(*v));
  }

  /// Unanswered: the ask fails now, or (while the handler runs: it may yet
  /// throw, which fails the ask with its exception) when the handler returns.
  void abandon() noexcept override {
    abandoned.store(true, std::memory_order_seq_cst);
    if (!in_handler.load(std::memory_order_seq_cst)) complete(broken());
  }

  void release_sink() noexcept override { dispose(); }
  void retain_sink() noexcept override { add_ref(); }
  void handling(bool now) noexcept override {
    in_handler.store(now, std::memory_order_seq_cst);
    if (!now && abandoned.load(std::memory_order_seq_cst)) complete(broken());
  }

  static std::exception_ptr broken() {
    return error_ptr(errc::broken_promise, "the reply_promise of an ask of " + std::string(type_name<M>()) + " to " +
                                               std::string(type_name<T>()) + " was destroyed unanswered");
  }

  M msg;
  stored_handler<Handler> handler;
  std::atomic<std::uint8_t> refs{1};
  std::atomic<bool> done{false};
  std::atomic<bool> initiating{true};
  std::atomic<bool> in_handler{false};
  std::atomic<bool> abandoned{false};
  std::optional<asio::steady_timer> timer;
  system_state* asker_;
};

} // namespace troupe::detail
