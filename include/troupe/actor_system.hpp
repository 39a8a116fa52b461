#pragma once

/// \file
/// `troupe::actor_system`: owns the worker threads and the actors.

#include <troupe/actor_ref.hpp>
#include <troupe/config.hpp>
#include <troupe/context.hpp>
#include <troupe/entity.hpp>
#include <troupe/error.hpp>
#include <troupe/metrics.hpp>
#include <troupe/detail/cell.hpp>
#include <troupe/detail/region.hpp>
#include <troupe/detail/spawn.hpp>
#include <troupe/detail/type_name.hpp>

#include <asio/post.hpp>
#include <asio/thread_pool.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe {

namespace detail {
template <class... Args>
inline constexpr bool starts_with_options = false;
template <class First, class... Rest>
inline constexpr bool starts_with_options<First, Rest...> = std::is_same_v<std::decay_t<First>, spawn_options>;
} // namespace detail

/// Owns a pool of worker threads (an `asio::thread_pool`) and every actor
/// spawned in it.
///
/// Any class with `handle(Msg)` members is an actor: no base class. A
/// handler is synchronous (returns `void` or a value: the fast path) or a
/// coroutine (returns `troupe::task<R>`, so it can `co_await`). Either way an
/// actor handles one message at a time, also while a coroutine handler is
/// suspended; its other messages wait.
///
/// Optional members, found at compile time: `on_start()` (may be a
/// coroutine; runs in the actor's context before any message), `on_stop()`
/// (runs once when the actor stops), and a constructor taking
/// `troupe::context<T>` first (its own reference, timers, watch, stop).
///
/// Thread-safe. Destruction calls `shutdown()`.
class actor_system {
public:
  using executor_type = asio::thread_pool::executor_type;

  /// Throws `errc::invalid_argument` for a setting out of range (an
  /// `ask_timeout` that is not positive).
  explicit actor_system(system_config config = {}) : state_(new detail::system_state(checked(config), this)) {}

  actor_system(const actor_system&) = delete;
  actor_system& operator=(const actor_system&) = delete;

  ~actor_system() {
    shutdown();
    {
      std::lock_guard g(extensions_mutex_);
      extensions_.clear(); // after the actors, before the runtime
    }
    state_->owner = nullptr;
    state_->release();
  }

  /// Constructs a `T` from `args` (preceded by its `context<T>` if the
  /// constructor takes one) and starts it. The arguments are kept for
  /// restarts, so the supervisor can build a fresh instance. The constructor
  /// runs in the calling thread, and its exception propagates from here.
  /// Throws `troupe::error` with `errc::system_shutdown` once `shutdown()`
  /// has begun.
  template <class T, class... Args>
    requires(!detail::starts_with_options<Args...>)
  actor_ref<T> spawn(Args&&... args) {
    return spawn<T>(spawn_options{}, std::forward<Args>(args)...);
  }

  /// As `spawn(args...)`, with a bounded mailbox or a supervision policy.
  template <class T, class... Args>
  actor_ref<T> spawn(const spawn_options& options, Args&&... args) {
    static_assert(!std::is_reference_v<T> && !std::is_const_v<T>, "troupe: spawn<T> needs a plain class type");
    return actor_ref<T>(
        detail::start_cell<T, detail::cell_impl<T, std::decay_t<Args>...>>(*state_, options, std::forward<Args>(args)...)
            .get());
  }

  // -- entities -----------------------------------------------------------------

  /// Makes the region of the entities of type `T`: actors addressed by a
  /// key (`get(key)` of the result, or `entity<T>(key)`), activated by their
  /// first message and passivated when idle (see `entity_ref`). Each
  /// activation constructs a `T` from its context (if its constructor takes
  /// one), its key (an `entity_id`, or `T::entity_key` if `T` declares it:
  /// a persistent actor's `persistence_id`) and copies of `args`. One region
  /// per type and system: a second throws `invalid_argument`.
  template <class T, class... Args>
  entity_region<T> entities(entity_options options, Args&&... args) {
    static_assert(!std::is_reference_v<T> && !std::is_const_v<T>, "troupe: entities<T> needs a plain class type");
    using key = typename detail::entity_key<T>::type;
    using cell = detail::entity_cell<T, key, std::decay_t<Args>...>;
    auto r = std::make_shared<detail::region<T>>(*state_, options);
    spawn_options so;
    so.supervision = options.supervision;
    r->set_factory([so, made = std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)](
                       detail::region<T>& rg, detail::region_entry<T>& e) {
      return std::apply(
          [&](const auto&... a) {
            return detail::start_cell<T, cell>(rg.sys(), so, rg.shared_from_this(), &e, key{e.key}, a...);
          },
          made);
    });
    {
      std::lock_guard g(extensions_mutex_);
      for (auto& [k, v] : extensions_)
        if (k == &extension_key<detail::region<T>>)
          throw error(errc::invalid_argument,
                      "entities of " + std::string(detail::type_name<T>()) + " are already in this actor system");
      extensions_.emplace_back(&extension_key<detail::region<T>>, r);
    }
    r->start_sweeper([this](std::weak_ptr<detail::region<T>> w, std::chrono::nanoseconds period) {
      spawn<detail::region_sweeper<T>>(std::move(w), period);
    });
    return entity_region<T>(std::move(r));
  }

  /// The entity of type `T` named `key` (see `entities`). Throws
  /// `invalid_argument` if this system has no region of `T`.
  template <class T>
  entity_ref<T> entity(std::string key) const {
    auto r = extension<detail::region<T>>();
    if (!r)
      throw error(errc::invalid_argument, "no entities of " + std::string(detail::type_name<T>()) +
                                              " in this actor system: call entities<T>(...) first");
    return entity_region<T>(std::move(r)).get(std::move(key));
  }

  /// Stops every actor (each finishes its current handler, runs `on_stop`,
  /// and fails or counts as dead letters what is left in its mailbox), waits
  /// for them up to `system_config::shutdown_timeout`, then stops and joins
  /// the threads. Thread-safe and idempotent: a second caller returns once
  /// the first has finished. Must not be called from one of the system's
  /// own threads.
  void shutdown() {
    std::lock_guard once(shutdown_mutex_);
    auto& s = *state_;
    if (!s.pool) return;
    if (s.executor().running_in_this_thread())
      throw std::logic_error("troupe::actor_system::shutdown() called from one of its own threads");
    std::vector<detail::cell_base*> cells;
    s.shutting_down.store(true, std::memory_order_seq_cst);
    {
      // A spawn past its check constructs with the pool: let it finish (it
      // registers, and is stopped below).
      std::unique_lock l(s.mutex);
      s.all_stopped.wait(l, [&] { return s.spawning_count() == 0; });
    }
    for (auto& sh : s.shards) {
      std::lock_guard g(sh.lock);
      for (auto* c = sh.first; c; c = c->reg_next) {
        c->add_ref();
        cells.push_back(c);
      }
    }
    for (auto* c : cells) {
      c->request_stop(exit_reason::system_shutdown);
      c->release();
    }
    {
      std::unique_lock l(s.mutex);
      s.all_stopped.wait_for(l, s.config.shutdown_timeout,
                             [&] { return s.live_count() == 0; });
    }
    // Asks of this system's coroutines still waiting on other systems:
    // cancelled while these threads run (a reply would need them).
    s.cancel_foreign_asks();
    s.pool->stop();
    s.pool->join();
    s.monitor.reset(); // armed only by the workers, now gone
    // A thread outside the pool may still be returning from a post into it
    // (a turn, this system's own count; a completion, the process's).
    s.posts.wait_idle();
    detail::posts_in_flight.wait_idle();
    // Actors still suspended in a coroutine handler past the timeout.
    for (;;) {
      detail::cell_base* c = nullptr;
      for (auto& sh : s.shards) {
        std::lock_guard g(sh.lock);
        if ((c = sh.first)) {
          c->add_ref();
          break;
        }
      }
      if (!c) break;
      c->force_stop();
      c->release();
    }
    s.posts.wait_idle();
    detail::posts_in_flight.wait_idle();
    // Completions of journal operations still under way (a coroutine that
    // outlived its actor, say) are posted into the stopped pool, which they
    // need alive, before it goes.
    s.wait_completions(s.config.shutdown_timeout);
    // The pool's pending work goes with it: a suspended coroutine's frame
    // is destroyed, and its ask completes with system_shutdown.
    s.pool.reset();
  }

  /// Messages that were never handled because their actor had stopped (tells
  /// to a stopped actor, and tells still queued when it stopped). Failed asks
  /// are not counted: their askers got the error.
  std::uint64_t dead_letters() const noexcept { return state_->dead_letters.load(std::memory_order_relaxed); }

  /// Actors spawned and not yet stopped (exact when no spawn or stop is
  /// under way; the count is kept in parts, summed here).
  std::size_t live_actors() const {
    return state_->live_count();
  }

  /// Every metric of this system now: the core's (actors, messages,
  /// mailboxes, workers), and those of the layers and engines it uses
  /// (docs/operations.md lists them). Thread-safe; valid after shutdown.
  metrics_snapshot metrics() const { return state_->metrics.snapshot(); }

  /// Where this system's metrics are kept: a layer, or the application,
  /// makes its own there (they appear in `metrics()` and on the endpoint).
  troupe::metrics_registry& metric_registry() const noexcept { return state_->metrics; }

  /// The executor of the worker threads (valid until shutdown).
  executor_type get_executor() const noexcept { return state_->executor(); }

  const system_config& config() const noexcept { return state_->config; }

  /// Keeps `value` as this system's extension of type `T` (at most one per
  /// type; a later call replaces it). Extensions are released after every
  /// actor has stopped, when the system is destroyed: the place for a
  /// resource shared by all actors, such as the persistence store.
  template <class T>
  void set_extension(std::shared_ptr<T> value) {
    std::lock_guard g(extensions_mutex_);
    for (auto& [key, v] : extensions_)
      if (key == &extension_key<T>) {
        v = std::move(value);
        return;
      }
    extensions_.emplace_back(&extension_key<T>, std::move(value));
  }

  /// The extension of type `T`, made by `make()` (a `std::shared_ptr<T>`)
  /// and kept if there is none yet: two threads asking at once get the
  /// same one. `make` runs with the extensions locked: it must not use them.
  template <class T, class F>
  std::shared_ptr<T> extension_or(F&& make) {
    std::lock_guard g(extensions_mutex_);
    for (auto& [key, v] : extensions_)
      if (key == &extension_key<T>) return std::static_pointer_cast<T>(v);
    std::shared_ptr<T> made = std::forward<F>(make)();
    extensions_.emplace_back(&extension_key<T>, made);
    return made;
  }

  /// The extension of type `T`, or null.
  template <class T>
  std::shared_ptr<T> extension() const {
    std::lock_guard g(extensions_mutex_);
    for (auto& [key, v] : extensions_)
      if (key == &extension_key<T>) return std::static_pointer_cast<T>(v);
    return nullptr;
  }

private:
  static const system_config& checked(const system_config& c) {
    if (c.ask_timeout <= std::chrono::nanoseconds::zero())
      throw error(errc::invalid_argument,
                  "system_config::ask_timeout must be positive, or troupe::no_timeout (the default)");
    return c;
  }

  template <class T>
  static inline char extension_key = 0; // its address names T (not const: never merged)

  detail::system_state* state_;
  std::mutex shutdown_mutex_;
  mutable std::mutex extensions_mutex_;
  std::vector<std::pair<const void*, std::shared_ptr<void>>> extensions_;
};

} // namespace troupe
