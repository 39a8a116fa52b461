#pragma once

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <troupe/detail/after_turn.hpp>
#include <troupe/detail/executor_target.hpp>
#include <troupe/detail/post_counter.hpp>
#include <troupe/detail/system_state.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/detail/scheduler.hpp>
#include <asio/defer.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/thread_pool.hpp>
#include <asio/system_executor.hpp>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <tuple>
#include <utility>

namespace troupe::detail {

/// The execution context `ex` runs its handlers in, when it can say.
template <class E>
asio::execution_context* context_of(const E& ex) noexcept {
  if constexpr (requires { asio::query(ex, asio::execution::context); })
    return &asio::query(ex, asio::execution::context);
  else if constexpr (requires { ex.context(); })
    return &ex.context();
  else
    return nullptr;
}

/// Executors whose copies are plain pointers to their context: a copy
/// destroyed after the context has gone touches nothing.
template <class E>
inline constexpr bool plain_executor_v = false;
template <class A, std::uintptr_t Bits>
inline constexpr bool plain_executor_v<asio::io_context::basic_executor_type<A, Bits>> = true;
template <class A, unsigned int Bits>
inline constexpr bool plain_executor_v<asio::thread_pool::basic_executor_type<A, Bits>> = true;
template <class B, class R, class A>
inline constexpr bool plain_executor_v<asio::basic_system_executor<B, R, A>> = true;

template <class E>
bool is_plain(const E& ex) noexcept {
  if constexpr (plain_executor_v<E>) {
    return true;
  } else if constexpr (std::is_same_v<E, asio::any_io_executor>) {
    using tracked_pool = decltype(asio::prefer(std::declval<asio::thread_pool::executor_type>(),
                                               asio::execution::outstanding_work.tracked));
    using tracked_io = decltype(asio::prefer(std::declval<asio::io_context::executor_type>(),
                                             asio::execution::outstanding_work.tracked));
    return target_as<asio::thread_pool::executor_type>(ex) || target_as<tracked_pool>(ex) ||
           target_as<asio::io_context::executor_type>(ex) || target_as<tracked_io>(ex);
  } else {
    return false;
  }
}

/// A handler's outstanding work. Released, it is the last thing the
/// releasing thread touches: once it is released, the context may finish
/// its `run()` and be destroyed at any moment. A guard on the handler's own
/// executor would break that for a strand (and anything wrapping one:
/// `any_io_executor`, `asio::executor`, a strand of a strand): the guard
/// releases the work, then destroys its strand copy, and the last copy
/// locks the strand service of its context. So the work of an executor
/// that is not a plain pointer to its context is counted on the context's
/// scheduler itself (an `io_context`'s or a `thread_pool`'s); an executor
/// of an actor system's pool, or of another kind of context, keeps a guard
/// of its own.
template <class Executor>
class handler_work {
public:
  explicit handler_work(const Executor& ex) : scheduler_(scheduler_of(ex)) {
    if (scheduler_)
      scheduler_->work_started();
    else
      guard_.emplace(ex);
  }
  handler_work(handler_work&& o) noexcept
      : scheduler_(std::exchange(o.scheduler_, nullptr)), guard_(std::move(o.guard_)) {
    o.guard_.reset();
  }
  handler_work& operator=(handler_work&&) = delete;
  ~handler_work() { reset(); }

  /// Releases the work (once).
  void reset() noexcept {
    guard_.reset();
    if (scheduler_) std::exchange(scheduler_, nullptr)->work_finished();
  }

private:
  /// Not an actor system's pool: a system's handlers (a reentrant actor
  /// handler's, on the actor's own executor) keep their guard as before,
  /// and the system outlives them.
  static bool foreign(asio::execution_context& ctx) { return !asio::has_service<system_service>(ctx); }

  /// The scheduler to count `ex`'s work on, or null for a guard on `ex`.
  static asio::detail::scheduler* scheduler_of(const Executor& ex) {
    if (is_plain(ex)) return nullptr;
    auto* ctx = context_of(ex);
    if (!ctx || !foreign(*ctx) || !asio::has_service<asio::detail::scheduler>(*ctx)) return nullptr;
    return &asio::use_service<asio::detail::scheduler>(*ctx);
  }

  asio::detail::scheduler* scheduler_ = nullptr;
  std::optional<asio::executor_work_guard<Executor>> guard_;
};

/// An Asio completion handler kept until its operation completes, with
/// outstanding work tracked on its associated executor's context
/// (`handler_work`: an `io_context` that only waits for a troupe reply does
/// not run out of work). Completes exactly once, on the handler's
/// associated executor.
template <class Handler>
class stored_handler {
public:
  using executor_type = asio::associated_executor_t<Handler>;

  explicit stored_handler(Handler&& h)
      : work_(asio::get_associated_executor(h)), handler_(std::move(h)) {}

  /// The handler's associated executor (until it has completed).
  executor_type get_executor() const noexcept { return asio::get_associated_executor(*handler_); }

  /// Completes as a continuation of the current handler when running on
  /// the handler's executor (it runs once that handler returns, on this
  /// thread, never inside it: a reply resumes its asker on the asker's own
  /// turn, not inside the replier's), else as a post. A handler with no
  /// executor of its own (a plain callback) runs here and now. Used when
  /// the operation finishes later, on another actor's thread.
  ///
  /// The work is released only once the handler has been handed over (a
  /// queued handler is work of its own): released first, an `io_context`
  /// with nothing else to do would stop before the handler reached its
  /// queue, and never run it. And it is released last, after this thread's
  /// copy of the executor has gone: once it is released the context may
  /// finish and be destroyed at any moment.
  template <class... Args>
  void defer(Args&&... args) {
    if constexpr (std::is_same_v<executor_type, asio::system_executor>) {
      work_.reset();
      Handler h = std::move(*handler_);
      handler_.reset();
      std::move(h)(std::forward<Args>(args)...);
      return;
    }
    {
      auto ex = get_executor();
      if (auto& later = this_after_turn; later.accepts(ex)) {
        // An actor's turn on this pool's thread completes it: it runs after
        // that turn, here (the work is released once it has run).
        later.queue.emplace_back([h = take(), w = std::move(work_), ... a = std::forward<Args>(args)]() mutable {
          std::move(h)(std::move(a)...);
        });
        work_.reset();
        return;
      }
      post_counter::guard counted(posts_in_flight);
      asio::defer(ex, [h = take(), ... a = std::forward<Args>(args)]() mutable { std::move(h)(std::move(a)...); });
    }
    work_.reset();
  }

  /// Never completes inline (used when the result is known inside the
  /// initiating function, which must not call the handler).
  template <class... Args>
  void post(Args&&... args) {
    {
      auto ex = get_executor();
      post_counter::guard counted(posts_in_flight);
      asio::post(ex, [h = take(), ... a = std::forward<Args>(args)]() mutable { std::move(h)(std::move(a)...); });
    }
    work_.reset();
  }

  /// Never completes: destroys the handler (and releases its work) here.
  /// A coroutine waiting on it is destroyed, through its own executor.
  void discard() noexcept {
    handler_.reset();
    work_.reset();
  }

private:
  Handler take() {
    Handler h = std::move(*handler_);
    handler_.reset();
    return h;
  }

  handler_work<executor_type> work_;
  std::optional<Handler> handler_;
};

} // namespace troupe::detail
