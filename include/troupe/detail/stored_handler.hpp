#pragma once

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <troupe/detail/after_turn.hpp>
#include <troupe/detail/executor_target.hpp>
#include <troupe/detail/post_counter.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/defer.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/system_executor.hpp>

#include <optional>
#include <type_traits>
#include <tuple>
#include <utility>

namespace troupe::detail {

template <class E>
inline constexpr bool is_strand_v = false;
template <class E>
inline constexpr bool is_strand_v<asio::strand<E>> = true;

/// The executor that counts a handler's outstanding work: the strand's
/// inner executor for a strand (directly or inside an `any_io_executor`),
/// else the executor itself. A strand's copies share a counted state whose
/// last release locks its context's strand service; work counted on the
/// strand itself would be released by the guard one step before its own
/// strand copy went, and a context whose `run()` returned on that release
/// could already be gone. Counted on the inner executor, the work is the
/// last thing another thread lets go of.
template <class E>
auto work_executor(const E& ex) {
  if constexpr (is_strand_v<E>) {
    return work_executor(ex.get_inner_executor());
  } else if constexpr (std::is_same_v<E, asio::any_io_executor>) {
    if (auto* s = target_as<asio::strand<asio::io_context::executor_type>>(ex))
      return asio::any_io_executor(s->get_inner_executor());
    if (auto* s = target_as<asio::strand<asio::any_io_executor>>(ex)) return work_executor(s->get_inner_executor());
    return ex;
  } else {
    return ex;
  }
}

/// An Asio completion handler kept until its operation completes, with
/// outstanding work tracked on its associated executor (so an `io_context`
/// that only waits for a troupe reply does not run out of work). Completes
/// exactly once, on the handler's associated executor.
template <class Handler>
class stored_handler {
public:
  using executor_type = asio::associated_executor_t<Handler>;

  explicit stored_handler(Handler&& h)
      : work_(work_executor(asio::get_associated_executor(h))), handler_(std::move(h)) {}

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
        later.queue.emplace_back([h = take(), w = std::move(*work_), ... a = std::forward<Args>(args)]() mutable {
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

  std::optional<asio::executor_work_guard<decltype(work_executor(std::declval<const executor_type&>()))>> work_;
  std::optional<Handler> handler_;
};

} // namespace troupe::detail
