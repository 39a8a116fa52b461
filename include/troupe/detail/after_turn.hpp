#pragma once

// Completions run right after the current actor turn, on this thread.

#include <troupe/detail/executor_target.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/defer.hpp>
#include <asio/prefer.hpp>
#include <asio/thread_pool.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe::detail {

/// Completions that a turn produced for work of this same thread pool (a
/// reply to a coroutine waiting on it): they run on this thread once the
/// turn that produced them has ended and its actor is released, before the
/// thread takes anything else. That is what a continuation post would do,
/// without the pool's shared queue (a lock, and often a hop to the other
/// core and back).
struct after_turn {
  /// More than this in one turn's wake are posted instead.
  static constexpr std::size_t max_inline = 1024;

  bool open = false; // a turn is running on this thread
  std::vector<unique_function<void()>> queue;

  /// Whether a completion for `ex` can wait here: a turn runs on this
  /// thread now, and `ex` is an executor of this thread's pool.
  template <class Executor>
  bool accepts(const Executor& ex) const noexcept {
    if (!open) return false;
    if constexpr (requires { ex.template target<asio::thread_pool::executor_type>(); }) {
      if (auto* p = target_as<asio::thread_pool::executor_type>(ex)) return p->running_in_this_thread();
      using tracked = decltype(asio::prefer(std::declval<asio::thread_pool::executor_type>(),
                                            asio::execution::outstanding_work.tracked));
      if (auto* p = target_as<tracked>(ex)) return p->running_in_this_thread();
      return false;
    } else if constexpr (requires { ex.running_in_this_thread(); }) {
      return std::is_convertible_v<Executor, asio::thread_pool::executor_type> && ex.running_in_this_thread();
    } else {
      return false;
    }
  }

  /// Runs what the turn queued (and what that queued in turn), in order.
  /// Past `max_inline`, the rest is posted to `pool` as continuations.
  void run(const asio::thread_pool::executor_type& pool) {
    std::size_t done = 0;
    for (std::size_t i = 0; i < queue.size(); ++i, ++done) {
      if (done == max_inline) {
        for (; i < queue.size(); ++i) asio::defer(pool, std::move(queue[i]));
        break;
      }
      auto f = std::move(queue[i]);
      f();
    }
    queue.clear();
  }
};
inline thread_local after_turn this_after_turn;

} // namespace troupe::detail
