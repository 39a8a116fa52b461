#pragma once

// The state one actor system shares with every actor it spawned.

#include <troupe/config.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/metrics.hpp>
#include <troupe/detail/executor_target.hpp>
#include <troupe/detail/post_counter.hpp>
#include <troupe/detail/run_queue.hpp>
#include <troupe/detail/spinlock.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace troupe {
class actor_system;
}

namespace troupe::detail {

class cell_base;
struct system_state;

/// An ask made from a coroutine of one system to an actor of another: the
/// asking system keeps a list of them, so that its destruction can cancel
/// those still pending (their completions are bound to its threads).
struct foreign_ask {
  /// Completes nothing any more; destroys the completion handler (here,
  /// while the asking system's threads still run).
  virtual void cancel() noexcept = 0;
  virtual void add_ref() noexcept = 0;
  virtual void dispose() noexcept = 0;
  foreign_ask* ask_prev = nullptr;
  foreign_ask* ask_next = nullptr;
  bool listed = false;

protected:
  ~foreign_ask() = default;
};

/// Marks a thread pool as an actor system's, naming the system: a
/// completion bound to one of its executors can tell whose threads it
/// needs.
class system_service final : public asio::execution_context::service {
public:
  using key_type = system_service;
  static inline asio::execution_context::id id;
  system_service(asio::execution_context& ctx, system_state* s) : service(ctx), state(s) {}
  explicit system_service(asio::execution_context& ctx) : service(ctx), state(nullptr) {} // (never made so)
  system_state* const state;

private:
  void shutdown() override {}
};

/// The thread pool of an actor system.
class system_pool final : public asio::thread_pool {
public:
  system_pool(std::size_t threads, system_state* s) : asio::thread_pool(threads) {
    asio::make_service<system_service>(*this, s);
  }
};

/// Its address names the actor type `T` (not const: never merged).
template <class T>
inline char actor_type_key = 0;

/// What a system counts of the actors of one type (its metrics).
struct actor_type_stats {
  actor_type_stats(const void* k, std::string_view n) : key(k), name(n) {}
  const void* const key;
  const std::string name;
  std::atomic<std::uint64_t> spawned{0}, stopped{0}, restarts{0};
};

/// Owned jointly by the actor_system and every cell it spawned, so a stale
/// actor_ref can still count a dead letter after the system is gone.
struct system_state {
  explicit system_state(const system_config& c, actor_system* o)
      : config(c), owner(o), queues(worker_count(c)), pool(std::in_place, queues.count(), this),
        pool_address(&*pool) {
    if (queues.count() > 1) monitor.emplace(pool->get_executor());
    core_metrics = metrics.add_collector([this](metrics_snapshot& s) { collect_core_metrics(s); });
  }

  static std::uint32_t worker_count(const system_config& c) noexcept {
    return static_cast<std::uint32_t>(c.threads ? c.threads : std::max(1u, std::thread::hardware_concurrency()));
  }

  static std::uint64_t next_generation() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  static constexpr actor_id id_block = 1024;

  void add_ref() noexcept { refs.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  asio::thread_pool::executor_type executor() noexcept { return pool->get_executor(); }

  std::atomic<std::size_t> refs{1};
  /// Tells this system from an earlier one at the same address (for the
  /// threads' blocks of actor IDs).
  const std::uint64_t generation = next_generation();
  const system_config config;
  actor_system* owner;
  /// One run queue per worker thread (see turn_state).
  run_queues queues;
  /// A request for help (an idle worker to steal) is posted and not yet run.
  std::atomic<bool> help_requested{false};
  /// Actors scheduled from outside the system's turns, newest first; a
  /// drain is posted while the list is not empty (see `inject`).
  std::atomic<run_link*> injected{nullptr};
  /// A drain of `injected` is posted and has not begun: a push onto the
  /// list emptied meanwhile by a busy worker (see `take_injected`) posts
  /// no other.
  std::atomic<bool> drain_posted{false};
  run_queue* claim_queue() noexcept { return queues.claim(); }
  std::optional<system_pool> pool;
  /// Where the pool is (or was: reset at shutdown), for comparisons from any
  /// thread.
  const asio::thread_pool* const pool_address;
  /// Looks at the run queues while work waits in them (see turn_state):
  /// armed from the workers only, so gone before the pool is.
  std::optional<asio::steady_timer> monitor;
  std::atomic<bool> monitor_armed{false};
  /// Posts of actor turns into this pool still returning (a tell from a
  /// thread outside it): the pool is not destroyed before they have.
  post_counter posts;
  std::atomic<std::uint64_t> dead_letters{0};

  // -- metrics ------------------------------------------------------------------

  metrics_registry metrics;
  metrics_registry::collector_handle core_metrics;
  /// Messages handled on threads that are not this system's workers (each
  /// worker counts its own in its run queue).
  std::atomic<std::uint64_t> outside_handled{0};
  /// The stats of the actors of each type, made on their type's first spawn.
  mutable spinlock types_lock;
  std::deque<std::unique_ptr<actor_type_stats>> types;

  /// The stats of the actors whose type `key` names (`name` for a new one).
  actor_type_stats& type_stats(const void* key, std::string_view name) {
    struct last_seen {
      std::uint64_t generation = 0;
      const void* key = nullptr;
      actor_type_stats* stats = nullptr;
    };
    thread_local last_seen last; // a thread that spawns many of one type looks once
    if (last.generation == generation && last.key == key) return *last.stats;
    actor_type_stats* found = nullptr;
    {
      std::lock_guard g(types_lock);
      for (auto& t : types)
        if (t->key == key) found = t.get();
    }
    if (!found) {
      auto made = std::make_unique<actor_type_stats>(key, name); // (no allocation under the spinlock)
      std::lock_guard g(types_lock);
      for (auto& t : types)
        if (t->key == key) found = t.get();
      if (!found) found = types.emplace_back(std::move(made)).get();
    }
    last = {generation, key, found};
    return *found;
  }

  /// Adds the core's metrics to `s` (a collector of `metrics`).
  TROUPE_DECL void collect_core_metrics(metrics_snapshot& s) const;

  /// The first ID of the next block handed to a thread (see `new_id`).
  std::atomic<actor_id> next_id{1};

  /// A new actor ID, unique in this system. Each thread takes IDs from a
  /// block of its own, so spawns on different threads share no counter
  /// (IDs are unique, not in spawn order across threads).
  actor_id new_id() noexcept {
    struct block {
      std::uint64_t generation = 0;
      actor_id next = 0, end = 0;
    };
    thread_local block b;
    if (b.generation != generation || b.next == b.end) {
      b.generation = generation;
      b.next = next_id.fetch_add(id_block, std::memory_order_relaxed);
      b.end = b.next + id_block;
    }
    return b.next++;
  }

  // Registry of live actors, for shutdown and live_actors(): lists split by
  // spawning thread (four per thread, see `this_thread_shard`), each under a
  // lock of its own with its own counts, so spawns and stops on different
  // threads share no cache line (an actor leaves the list it entered, from
  // whichever thread it stops on).
  struct alignas(64) registry_shard {
    mutable spinlock lock;
    cell_base* first = nullptr;
    /// Actors in this list (changed under the lock, read without it).
    std::atomic<std::size_t> live{0};
    /// Spawns counted here between their check of `shutting_down` and
    /// their registration: shutdown waits for them (their constructors use
    /// the pool).
    std::atomic<std::size_t> spawning{0};
    /// Cells made on this list's threads and not yet destroyed (stopped or
    /// not): while any is, the list holds one reference to the system.
    std::atomic<std::size_t> cells{0};
  };
  static constexpr std::size_t registry_shards = 16;
  /// The lists of one thread's cells, taken in turn: a thread that spawns
  /// while another stops what it spawned (a program's thread handing work
  /// to actors that stop when done) rarely waits for that one's lock.
  static constexpr std::size_t shards_per_thread = 4;
  struct thread_shard_turn {
    std::uint32_t first = 0, next = 0;
    bool chosen = false;
  };
  static thread_shard_turn& thread_shards() noexcept {
    static std::atomic<std::uint32_t> threads{0};
    thread_local thread_shard_turn t; // constant-initialized: no guard on each use
    if (!t.chosen) {
      t.first = threads.fetch_add(1, std::memory_order_relaxed) % (registry_shards / shards_per_thread) *
                shards_per_thread;
      t.chosen = true;
    }
    return t;
  }
  registry_shard shards[registry_shards];
  /// The list the calling thread's next cell enters (its lists in turn).
  static std::uint8_t this_thread_shard() noexcept {
    auto& t = thread_shards();
    return static_cast<std::uint8_t>(t.first + t.next++ % shards_per_thread);
  }
  /// The calling thread's first list, where its spawns under way are
  /// counted.
  static std::uint8_t this_thread_home_shard() noexcept { return static_cast<std::uint8_t>(thread_shards().first); }
  /// A cell was made on a thread of `shard` / one made there is destroyed:
  /// the system lives while any cell does, without a count that every
  /// thread's spawns and stops would share.
  void cell_made(std::uint8_t shard) noexcept {
    if (shards[shard].cells.fetch_add(1, std::memory_order_relaxed) == 0) add_ref();
  }
  void cell_destroyed(std::uint8_t shard) noexcept {
    if (shards[shard].cells.fetch_sub(1, std::memory_order_acq_rel) == 1) release();
  }
  /// Sums over the lists: exact when no spawn or stop is under way, a
  /// moment's approximation otherwise (the lists are read one by one).
  std::size_t live_count() const noexcept {
    std::size_t n = 0;
    for (const auto& sh : shards) n += sh.live.load(std::memory_order_seq_cst);
    return n;
  }
  std::size_t spawning_count() const noexcept {
    std::size_t n = 0;
    for (const auto& sh : shards) n += sh.spawning.load(std::memory_order_seq_cst);
    return n;
  }
  /// Set as `shutdown()` begins: no spawn starts after it; and (the pool
  /// lives on until every post counted in `posts` has returned) what may
  /// arm a timer on the pool from outside its turns checks it after
  /// counting itself there.
  std::atomic<bool> shutting_down{false};
  /// What shutdown waits on (the last spawn under way, the last actor):
  /// only taken once `shutting_down` is set.
  std::mutex mutex;
  std::condition_variable all_stopped;

  /// A spawn counted in `shard` begins: false once shutdown has begun (then
  /// nothing counted).
  bool begin_spawn(std::uint8_t shard) noexcept {
    shards[shard].spawning.fetch_add(1, std::memory_order_seq_cst);
    if (!shutting_down.load(std::memory_order_seq_cst)) return true;
    end_spawn(shard);
    return false;
  }
  void end_spawn(std::uint8_t shard) noexcept {
    if (shards[shard].spawning.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        shutting_down.load(std::memory_order_seq_cst))
      wake_shutdown(); // shutdown sums the lists again
  }
  /// An actor left the list `shard` (its count already lowered).
  void left(std::size_t now_in_shard) noexcept {
    if (now_in_shard == 0 && shutting_down.load(std::memory_order_seq_cst)) wake_shutdown();
  }
  void wake_shutdown() noexcept {
    std::lock_guard g(mutex);
    all_stopped.notify_all();
  }

  // Completions of operations outside the system (a journal's write or
  // blocking call) that will be posted to its pool: the pool outlives them.
  std::mutex completions_mutex;
  std::condition_variable completions_done;
  std::size_t completions = 0;

  void add_completion() noexcept {
    std::lock_guard g(completions_mutex);
    ++completions;
  }
  void completion_posted() noexcept {
    std::lock_guard g(completions_mutex);
    if (--completions == 0) completions_done.notify_all();
  }
  /// Waits (up to `limit`) until every completion counted has been posted.
  void wait_completions(std::chrono::milliseconds limit) {
    std::unique_lock l(completions_mutex);
    completions_done.wait_for(l, limit, [&] { return completions == 0; });
  }

  // Asks of this system's coroutines to other systems' actors, pending.
  std::mutex asks_mutex;
  foreign_ask* first_ask = nullptr;
  bool asks_cancelled = false; // at shutdown: no more are listed

  /// False once the system has cancelled its asks (it is shutting down).
  bool list_ask(foreign_ask* a) noexcept {
    std::lock_guard g(asks_mutex);
    if (asks_cancelled) return false;
    a->ask_next = first_ask;
    if (first_ask) first_ask->ask_prev = a;
    first_ask = a;
    a->listed = true;
    return true;
  }

  void unlist_ask(foreign_ask* a) noexcept {
    std::lock_guard g(asks_mutex);
    if (!a->listed) return;
    if (a->ask_prev)
      a->ask_prev->ask_next = a->ask_next;
    else
      first_ask = a->ask_next;
    if (a->ask_next) a->ask_next->ask_prev = a->ask_prev;
    a->listed = false;
  }

  /// Cancels every pending ask of this system's coroutines to other
  /// systems (at shutdown, while the pool still runs).
  void cancel_foreign_asks() noexcept {
    for (;;) {
      foreign_ask* a;
      {
        std::lock_guard g(asks_mutex);
        asks_cancelled = true;
        a = first_ask;
        if (!a) return;
        first_ask = a->ask_next;
        if (first_ask) first_ask->ask_prev = nullptr;
        a->listed = false;
        a->add_ref();
      }
      a->cancel();
      a->dispose();
    }
  }
};

/// The actor system whose threads run `ex`, or null (another executor).
template <class Executor>
system_state* system_of(const Executor& ex) noexcept {
  const asio::thread_pool::executor_type* p = nullptr;
  if constexpr (std::is_same_v<Executor, asio::any_io_executor>)
    p = target_as<asio::thread_pool::executor_type>(ex);
  else if constexpr (std::is_same_v<Executor, asio::thread_pool::executor_type>)
    p = &ex;
  if (!p) return nullptr;
  auto& pool = p->context();
  if (!asio::has_service<system_service>(pool)) return nullptr;
  return asio::use_service<system_service>(pool).state;
}

/// Counts, in the actor system whose threads a handler's executor runs (if
/// any), one completion of an operation outside it, until destroyed — after
/// the completion was posted: the system's shutdown waits for it before its
/// pool goes (a journal's thread would otherwise post to a destroyed pool).
class completion_guard {
public:
  template <class Handler>
  explicit completion_guard(const Handler& h) noexcept : s_(system_of(asio::get_associated_executor(h))) {
    if (s_) {
      s_->add_ref();
      s_->add_completion();
    }
  }
  completion_guard(completion_guard&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  completion_guard(const completion_guard&) = delete;
  completion_guard& operator=(const completion_guard&) = delete;
  completion_guard& operator=(completion_guard&&) = delete;
  ~completion_guard() {
    if (s_) {
      s_->completion_posted();
      s_->release();
    }
  }

private:
  system_state* s_;
};

/// The actor system whose threads run `ex`, or null (another executor):
/// `likely` when they are its (without a lookup).
template <class Executor>
system_state* system_of(const Executor& ex, system_state& likely) noexcept {
  const asio::thread_pool::executor_type* p = nullptr;
  if constexpr (std::is_same_v<Executor, asio::any_io_executor>)
    p = target_as<asio::thread_pool::executor_type>(ex);
  else if constexpr (std::is_same_v<Executor, asio::thread_pool::executor_type>)
    p = &ex;
  if (!p) return nullptr;
  auto& pool = p->context();
  if (&pool == likely.pool_address) return &likely;
  if (!asio::has_service<system_service>(pool)) return nullptr;
  return asio::use_service<system_service>(pool).state;
}

} // namespace troupe::detail
