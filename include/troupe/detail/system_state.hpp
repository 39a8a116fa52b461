#pragma once

// The state one actor system shares with every actor it spawned.

#include <troupe/config.hpp>
#include <troupe/lifecycle.hpp>

#include <asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

namespace troupe {
class actor_system;
}

namespace troupe::detail {

class cell_base;

/// Owned jointly by the actor_system and every cell it spawned, so a stale
/// actor_ref can still count a dead letter after the system is gone.
struct system_state {
  explicit system_state(const system_config& c, actor_system* o)
      : config(c), owner(o),
        pool(std::in_place, c.threads ? c.threads : std::max(1u, std::thread::hardware_concurrency())) {}

  void add_ref() noexcept { refs.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  asio::thread_pool::executor_type executor() noexcept { return pool->get_executor(); }

  std::atomic<std::size_t> refs{1};
  const system_config config;
  actor_system* owner;
  std::optional<asio::thread_pool> pool;
  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<actor_id> next_id{1};

  // Registry of live actors: for shutdown and live_actors().
  std::mutex mutex;
  std::condition_variable all_stopped;
  cell_base* first = nullptr;
  std::size_t live = 0;
  bool shutting_down = false;
};

} // namespace troupe::detail
