#pragma once

/// \file
/// `troupe::persistence::blocking_thread`: one thread for blocking storage
/// calls, as a journal runs them (`journal::run_blocking`).

#include <troupe/detail/post_counter.hpp>

#include <asio/post.hpp>
#include <asio/thread_pool.hpp>

#include <pthread.h>

#include <utility>

namespace troupe::persistence {

/// One thread for blocking work, named for `top` and `perf`, that runs what
/// is posted in order. Destruction waits for the queued work and for every
/// `post` still returning.
class blocking_thread {
public:
  explicit blocking_thread(const char* name) {
    post([name] { pthread_setname_np(pthread_self(), name); });
  }
  blocking_thread(const blocking_thread&) = delete;
  blocking_thread& operator=(const blocking_thread&) = delete;

  ~blocking_thread() {
    pool_.join();
    posting_.wait_idle();
  }

  template <class F>
  void post(F&& f) {
    troupe::detail::post_counter::guard counted(posting_);
    asio::post(pool_, std::forward<F>(f));
  }

  asio::thread_pool& pool() noexcept { return pool_; }

private:
  asio::thread_pool pool_{1};
  troupe::detail::post_counter posting_;
};

} // namespace troupe::persistence
