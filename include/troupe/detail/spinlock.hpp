#pragma once

#include <atomic>
#include <thread>

namespace troupe::detail {

/// A one-byte lock for rarely contended, very short critical sections (watch
/// lists, backpressure waiters). Satisfies Lockable.
class spinlock {
public:
  void lock() noexcept {
    for (unsigned spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  bool try_lock() noexcept { return !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

private:
  std::atomic<bool> flag_{false};
};

} // namespace troupe::detail
