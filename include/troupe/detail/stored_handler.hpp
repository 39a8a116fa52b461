#pragma once

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <troupe/detail/after_turn.hpp>
#include <troupe/detail/post_counter.hpp>

#include <asio/associated_executor.hpp>
#include <asio/defer.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/system_executor.hpp>

#include <optional>
#include <type_traits>
#include <tuple>
#include <utility>

namespace troupe::detail {

/// An Asio completion handler kept until its operation completes, with
/// outstanding work tracked on its associated executor (so an `io_context`
/// that only waits for a troupe reply does not run out of work). Completes
/// exactly once, on the handler's associated executor.
template <class Handler>
class stored_handler {
public:
  using executor_type = asio::associated_executor_t<Handler>;

  explicit stored_handler(Handler&& h) : work_(asio::get_associated_executor(h)), handler_(std::move(h)) {}

  /// The handler's associated executor (until it has completed).
  executor_type get_executor() const noexcept { return work_->get_executor(); }

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
  /// queue, and never run it.
  template <class... Args>
  void defer(Args&&... args) {
    if constexpr (std::is_same_v<executor_type, asio::system_executor>) {
      work_.reset();
      Handler h = std::move(*handler_);
      handler_.reset();
      std::move(h)(std::forward<Args>(args)...);
      return;
    }
    auto ex = work_->get_executor();
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
    work_.reset();
  }

  /// Never completes inline (used when the result is known inside the
  /// initiating function, which must not call the handler).
  template <class... Args>
  void post(Args&&... args) {
    auto ex = work_->get_executor();
    post_counter::guard counted(posts_in_flight);
    asio::post(ex, [h = take(), ... a = std::forward<Args>(args)]() mutable { std::move(h)(std::move(a)...); });
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

  std::optional<asio::executor_work_guard<executor_type>> work_;
  std::optional<Handler> handler_;
};

} // namespace troupe::detail
