#pragma once

// Test helpers: waiting on events with a deadline (never sleeping).

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>

namespace test {

using namespace std::chrono_literals;

/// How long a test waits for an event before it fails.
inline constexpr std::chrono::seconds deadline{20};

/// Waits for a future with the deadline, then returns its value (or throws
/// its exception).
template <class T>
T get(std::future<T>& f) {
  REQUIRE(f.wait_for(deadline) == std::future_status::ready);
  return f.get();
}
template <class T>
T get(std::future<T>&& f) {
  return get(f);
}

/// A countdown latch whose wait has a deadline.
class latch {
public:
  explicit latch(int n) : n_(n) {}
  void count_down(int k = 1) {
    std::lock_guard g(m_);
    n_ -= k;
    if (n_ <= 0) cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds d = deadline) {
    std::unique_lock l(m_);
    return cv_.wait_for(l, d, [&] { return n_ <= 0; });
  }
  int remaining() {
    std::lock_guard g(m_);
    return n_;
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_;
};

/// Runs a coroutine on `ex` and waits for its result with the deadline.
template <class Executor, class F>
auto run(const Executor& ex, F&& f) {
  return get(asio::co_spawn(ex, std::forward<F>(f), asio::use_future));
}

} // namespace test

#include <asio/io_context.hpp>

namespace test {

/// Runs an awaitable to completion on an io_context of this thread.
template <class Awaitable>
auto run_here(Awaitable a) {
  asio::io_context io;
  auto f = asio::co_spawn(io, std::move(a), asio::use_future);
  io.run();
  return f.get();
}

} // namespace test
