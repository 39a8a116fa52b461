#pragma once

// What every actor's cell has, whatever the actor's type: the reference
// count, the mailbox, the stop request, the registry links, and the rarely
// used part (watchers, senders waiting for room, timers, the restart
// timer), allocated on first use.

#include <troupe/lifecycle.hpp>
#include <troupe/detail/inbox.hpp>
#include <troupe/detail/run_queue.hpp>
#include <troupe/detail/spinlock.hpp>
#include <troupe/detail/system_state.hpp>
#include <troupe/detail/timers.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/steady_timer.hpp>

#include <atomic>
#include <cstdint>
#include <list>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe::detail {

class cell_base;

/// Intrusive owning pointer to a cell.
template <class C>
class cell_ptr {
public:
  cell_ptr() = default;
  explicit cell_ptr(C* c) noexcept : c_(c) {
    if (c_) c_->add_ref();
  }
  cell_ptr(const cell_ptr& o) noexcept : cell_ptr(o.c_) {}
  cell_ptr(cell_ptr&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  cell_ptr& operator=(cell_ptr o) noexcept {
    std::swap(c_, o.c_);
    return *this;
  }
  ~cell_ptr() {
    if (c_) c_->release();
  }
  C* get() const noexcept { return c_; }
  C* operator->() const noexcept { return c_; }
  explicit operator bool() const noexcept { return c_ != nullptr; }

private:
  C* c_ = nullptr;
};

/// The cell whose instance this thread is constructing (null otherwise):
/// the base of an actor that takes no context can reach its actor through
/// it (a persistent actor holds its persistence ID for the actor's life).
inline thread_local cell_base* constructing_cell = nullptr;

/// Rarely used per-actor state, allocated on first use.
struct cell_extras {
  // Guarded by lock (any thread).
  spinlock lock;
  bool stopped = false;        // final_down is set: watchers are told at once
  bool refuse_waiters = false; // the actor is stopping: senders no longer wait
  down final_down;
  /// What made the actor fail (its `down`'s text), kept here: a failure is
  /// rare, and every actor's cell would pay for the string.
  std::string failure;
  /// The actors watching this one (`context::watch`), by watcher: a
  /// watcher that stops or unwatches takes its entry out.
  std::unordered_map<const cell_base*, unique_function<void(const down&)>> watchers;
  /// Others told once this actor has stopped (`when_stopped`).
  std::vector<unique_function<void(const down&)>> observers;
  struct waiter {
    envelope_base* env;
    unique_function<void(std::error_code)> done;
  };
  std::list<waiter> waiters; // (a default std::deque allocates: this block must not cost more)

  // Actor context only.
  timer_set timers;
  std::optional<asio::steady_timer> backoff;
  /// The actors this one watches, by ID.
  std::unordered_map<actor_id, cell_ptr<cell_base>> watching;
  /// Messages set aside by `context::stash`, oldest first.
  envelope_base* stash_head = nullptr;
  envelope_base** stash_tail = &stash_head;
  std::size_t stashed = 0;
  /// The receive a coroutine of the actor waits in (`context::receive`):
  /// the message tags it takes, its number, what completes it (with the
  /// envelope taken, or an error) and its deadline.
  struct receive_wait {
    const void* const* tags = nullptr;
    std::size_t count = 0;
    std::uint64_t generation = 0;
    /// The link the scan of the queued messages stands at.
    envelope_base** scan = nullptr;
    unique_function<void(envelope_base*, std::exception_ptr)> done;
    std::optional<asio::steady_timer> deadline;
  } receive;
};

class cell_base : public run_link, public pool::pooled {
public:
  cell_base(const cell_base&) = delete;
  cell_base& operator=(const cell_base&) = delete;

  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  actor_id id() const noexcept { return id_; }
  /// Whether the actor had a turn since the last call (entities' idleness).
  bool take_busy() noexcept { return busy_.exchange(false, std::memory_order_relaxed); }
  /// How many of its messages the actor handled (wrapping; read from any
  /// thread): an entity asked to passivate that handled one since was busy.
  std::uint32_t handled() const noexcept { return handled_.load(std::memory_order_relaxed); }
  system_state& sys() const noexcept { return *sys_; }
  bool closed() const noexcept { return inbox_.closed(); }
  /// Racy: messages the actor took from its mailbox and has not yet
  /// handled (the one in its handler too), as of its last take (with
  /// `system_config::metrics`; 0 without). The mailbox is taken whole at
  /// once, so this is its depth when the actor last looked at it; what
  /// came since is counted at its next look (a sender counts nothing:
  /// that would put an atomic read-modify-write on every send).
  std::uint32_t queued() const noexcept {
    const auto d = static_cast<std::int32_t>(seen_.load(std::memory_order_relaxed) -
                                             handled_.load(std::memory_order_relaxed) -
                                             passed_.load(std::memory_order_relaxed));
    return d > 0 ? static_cast<std::uint32_t>(d) : 0;
  }

  /// Thread-safe; the first request's reason wins. The actor stops after its
  /// current handler (a suspended coroutine handler finishes first).
  virtual void request_stop(exit_reason r) = 0;

  /// Thread-safe. Registers `w` to run once the actor has stopped (as the
  /// watch of `owner`, replacing an earlier one of it; or, with no owner, as
  /// one observer more); returns the final notification instead (without
  /// registering) if it already has.
  std::optional<down> add_watcher(unique_function<void(const down&)> w, const cell_base* owner = nullptr) {
    auto& x = extras();
    std::lock_guard g(x.lock);
    if (x.stopped) return x.final_down;
    if (owner)
      x.watchers.insert_or_assign(owner, std::move(w));
    else
      x.observers.push_back(std::move(w));
    return std::nullopt;
  }

  /// Thread-safe. Forgets `owner`'s watch, if any.
  void remove_watcher(const cell_base* owner) noexcept {
    auto* x = extras_if_any();
    if (!x) return;
    unique_function<void(const down&)> gone; // destroyed outside the lock
    {
      std::lock_guard g(x->lock);
      auto it = x->watchers.find(owner);
      if (it == x->watchers.end()) return;
      gone = std::move(it->second);
      x->watchers.erase(it);
    }
  }

  /// Watches registered on this actor now (for tests and monitoring).
  std::size_t watcher_count() const noexcept {
    auto* x = extras_if_any();
    if (!x) return 0;
    std::lock_guard g(x->lock);
    return x->watchers.size() + x->observers.size();
  }

  /// After the pool has stopped: stop an actor that did not stop in time.
  virtual void force_stop() noexcept = 0;

  /// Posts the actor's next turn: to this thread's queue (`continuation`) or
  /// to the queue all workers share.
  virtual void post(bool continuation) noexcept = 0;

  /// Handles up to a turn's worth of messages.
  virtual void turn() noexcept = 0;

  cell_base* reg_prev = nullptr;
  cell_base* reg_next = nullptr;

protected:
  cell_base(system_state& s, bool start_blocked, actor_type_stats& type)
      : shard_(system_state::this_thread_shard()), inbox_(start_blocked), sys_(&s), id_(s.new_id()), type_(&type) {
    s.cell_made(shard_);
  }
  virtual ~cell_base() {
    delete extras_if_any();
    sys_->cell_destroyed(shard_);
  }

  /// The rarely used part, made on first use. Once the actor has stopped
  /// without ever needing it, a fresh one is made saying so (stopped, its
  /// final `down`), so a watch that comes late learns of the stop at once.
  cell_extras& extras() {
    cell_extras* x = extras_.load(std::memory_order_acquire);
    for (;;) {
      if (x && x != stopped_mark()) return *x;
      auto fresh = std::make_unique<cell_extras>();
      if (x == stopped_mark()) {
        fresh->stopped = true;
        fresh->refuse_waiters = true;
        fresh->final_down = final_down();
      }
      if (extras_.compare_exchange_strong(x, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
    }
  }
  cell_extras* extras_if_any() const noexcept {
    cell_extras* x = extras_.load(std::memory_order_acquire);
    return x == stopped_mark() ? nullptr : x;
  }

  /// The stopped actor's last word: true if it needed no extras (none are
  /// made now: a stop costs no allocation); else they are `x`, to tell.
  bool mark_stopped(cell_extras*& x) noexcept {
    x = nullptr;
    return extras_.compare_exchange_strong(x, stopped_mark(), std::memory_order_acq_rel);
  }

  /// What watchers of the stopped actor are told.
  virtual down final_down() const = 0;

public:
  /// Adds the actor to its system's registry (its shard: no lock shared by
  /// the whole system). The registry holds the first reference.
  void enter_registry() noexcept {
    auto& sh = sys_->shards[shard_];
    std::lock_guard g(sh.lock);
    reg_prev = nullptr;
    reg_next = sh.first;
    if (sh.first) sh.first->reg_prev = this;
    sh.first = this;
    sh.live.store(sh.live.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    type_->spawned.fetch_add(1, std::memory_order_relaxed);
  }

protected:
  /// Removes the actor from the registry; the caller then releases the
  /// registry's reference.
  void leave_registry() noexcept {
    system_state& s = *sys_;
    std::size_t now = 0;
    {
      auto& sh = s.shards[shard_];
      std::lock_guard g(sh.lock);
      if (reg_prev)
        reg_prev->reg_next = reg_next;
      else
        sh.first = reg_next;
      if (reg_next) reg_next->reg_prev = reg_prev;
      now = sh.live.load(std::memory_order_relaxed) - 1;
      sh.live.store(now, std::memory_order_seq_cst);
    }
    type_->stopped.fetch_add(1, std::memory_order_relaxed);
    s.left(now);
  }

  void notify_watchers(cell_extras& x, const down& d) noexcept {
    std::unordered_map<const cell_base*, unique_function<void(const down&)>> ws;
    std::vector<unique_function<void(const down&)>> os;
    {
      std::lock_guard g(x.lock);
      x.stopped = true;
      x.final_down = d;
      ws.swap(x.watchers);
      os.swap(x.observers);
    }
    for (auto& [owner, w] : ws) w(d);
    for (auto& o : os) o(d);
  }

  /// Stops watching every actor this one watches (it is stopping).
  void leave_watched() noexcept {
    auto* x = extras_if_any();
    if (!x) return;
    auto watching = std::move(x->watching);
    x->watching.clear();
    for (auto& [id, w] : watching) w->remove_watcher(this);
  }

  std::atomic<std::uint32_t> refs_{1}; // one for the registry
  std::atomic<std::uint8_t> stop_reason_{0};
  /// Set by every turn; an entity's region reads and clears it to tell an
  /// idle entity from one busy with messages that did not come through it.
  std::atomic<bool> busy_{false};
  /// Counted after each message's handler returns (in turns only: one
  /// writer, a plain store).
  std::atomic<std::uint32_t> handled_{0};
  /// The registry list of the thread that made it: the one it enters and
  /// is counted in (see `system_state::registry_shard`).
  const std::uint8_t shard_;
  inbox inbox_;
  /// For `queued`, with `system_config::metrics` (written by the turns
  /// only, plain stores as `handled_`): messages the actor's turns took
  /// from the mailbox, a batch at a time; and of those, the ones that
  /// left otherwise than through `handled_` (a handler that failed or
  /// suspended, a message a coroutine received, a stale deadline): rare,
  /// so the common path stores nothing more than `handled_`, which shares
  /// its line with the mailbox's head that senders write.
  std::atomic<std::uint32_t> seen_{0};
  std::atomic<std::uint32_t> passed_{0};
  void count_seen(std::uint32_t n) noexcept {
    seen_.store(seen_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void count_passed() noexcept { passed_.store(passed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  system_state* sys_;
  actor_id id_;
  std::atomic<cell_extras*> extras_{nullptr};
  actor_type_stats* const type_;

private:
  static cell_extras* stopped_mark() noexcept {
    return reinterpret_cast<cell_extras*>(std::uintptr_t{alignof(cell_extras)}); // never a block's address
  }
};

} // namespace troupe::detail

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/detail/impl/core_metrics.ipp>
#endif
