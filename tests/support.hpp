#pragma once

// Test helpers: waiting on events with a deadline (on a signal where there
// is one; polling, with short pauses, where there is none).

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

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

/// Waits until `ready()` holds, or `limit` passes (then false). For state
/// that nothing signals (a store, another system's counters): it yields at
/// first, then sleeps a little longer each time, up to 1 ms, so that a
/// sanitized build's actors get the cores.
template <class P>
bool eventually(P ready, std::chrono::milliseconds limit = deadline) {
  const auto end = std::chrono::steady_clock::now() + limit;
  std::chrono::microseconds pause{0};
  while (!ready()) {
    if (std::chrono::steady_clock::now() > end) return false;
    if (pause.count() == 0)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause + 50us, 1ms);
  }
  return true;
}

/// Waits until `ready()` holds, or `limit` passes (then false), woken by
/// `changed` (notified under `m` by whoever changes what `ready` reads) and
/// at least every `recheck` (for what no notification covers).
template <class P>
bool eventually(P ready, std::mutex& m, std::condition_variable& changed, std::chrono::milliseconds recheck,
                std::chrono::milliseconds limit = deadline) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::unique_lock l(m);
    changed.wait_for(l, recheck);
  }
  return true;
}

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
