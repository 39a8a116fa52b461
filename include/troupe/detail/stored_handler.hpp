#pragma once

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <troupe/detail/post_counter.hpp>

#include <asio/associated_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

#include <optional>
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

  /// Completes inline when already running on the handler's executor (used
  /// when the operation finishes later, on another actor's thread).
  ///
  /// The work is released only once the handler has been handed over (run,
  /// or queued: a queued handler is work of its own): released first, an
  /// `io_context` with nothing else to do would stop before the handler
  /// reached its queue, and never run it.
  template <class... Args>
  void dispatch(Args&&... args) {
    auto ex = work_->get_executor();
    post_counter::guard counted(posts_in_flight);
    asio::dispatch(
        ex, [h = std::move(handler_), ... a = std::forward<Args>(args)]() mutable { std::move(h)(std::move(a)...); });
    work_.reset();
  }

  /// Never completes inline (used when the result is known inside the
  /// initiating function, which must not call the handler).
  template <class... Args>
  void post(Args&&... args) {
    auto ex = work_->get_executor();
    post_counter::guard counted(posts_in_flight);
    asio::post(
        ex, [h = std::move(handler_), ... a = std::forward<Args>(args)]() mutable { std::move(h)(std::move(a)...); });
    work_.reset();
  }

private:
  std::optional<asio::executor_work_guard<executor_type>> work_;
  Handler handler_;
};

} // namespace troupe::detail
