#pragma once

// The cell of an actor of type T: its instance, its mailbox's handling
// (turns), its lifecycle (start, supervision and restart, stop). Not for
// direct use: actor_ref, context and actor_system are its interface.

#include <troupe/concepts.hpp>
#include <troupe/config.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/cell_base.hpp>
#include <troupe/detail/envelope.hpp>
#include <troupe/detail/restart.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/turn.hpp>
#include <troupe/detail/type_name.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace troupe {

template <class T>
class context;
class actor_system;

namespace detail {

template <class T>
concept has_on_start = requires(T& t) { t.on_start(); };
template <class T>
concept has_on_stop = requires(T& t) { t.on_stop(); };

template <class T>
class cell : public cell_base {
public:
  using executor_type = asio::thread_pool::executor_type;

  // -- messaging (any thread) -------------------------------------------------

  /// Enqueues a user message. Never throws.
  std::error_code enqueue(envelope<T>* e) noexcept {
    if (capacity_ && !take_slot()) {
      // A stopped actor's count stays where it stopped: say so (and count
      // the dead letter), as for any tell to a stopped actor.
      if (closed()) return push(e);
      e->dispose();
      return errc::mailbox_full; // also while a send waits for room: a tell never overtakes it
    }
    return push(e);
  }

  /// A tell of `M` to this actor, in a block near the other messages this
  /// thread sends it (`pool::allocate_near`), unless the actor runs on
  /// this thread anyway (its system's one worker).
  template <class M, class A>
  tell_envelope<T, M>* make_tell(A&& msg) {
    using E = tell_envelope<T, M>;
    if constexpr (alignof(E) > pool::granule) {
      return new E(std::forward<A>(msg));
    } else {
      // The id is read only for a lane: it shares a line with the mailbox's
      // head, which the receiver's thread writes.
      void* p = pool::allocate_near(sizeof(E), reinterpret_cast<std::uintptr_t>(this), [this] {
        return runs_here() ? pool::no_lane : static_cast<std::uint32_t>(id_ % pool::lanes);
      });
      try {
        return ::new (p) E(std::forward<A>(msg));
      } catch (...) {
        pool::deallocate(p, sizeof(E));
        throw;
      }
    }
  }

  /// Whether this thread is the one worker of this actor's system.
  bool runs_here() const noexcept {
    const auto& t = this_turn;
    return t.queue && t.queue_sys == sys_ && sys_->queues.count() == 1;
  }

  /// Enqueues an internal message (not bounded, not a dead letter).
  void enqueue_system(envelope<T>* e) noexcept { (void)push(e); }

  /// Enqueues an ask; completes it with an error if it cannot be queued.
  template <class E>
  void enqueue_ask(E* e) noexcept {
    e->add_ref(); // keeps `initiating` readable after a concurrent reply
    if (closed()) {
      e->reject(stopped_error());
      e->dispose();
    } else if (capacity_ && !take_slot()) { // (also while a send waits: an ask never overtakes it)
      e->reject(error_ptr(errc::mailbox_full, "mailbox of " + std::string(type_name<T>()) + " is full"));
      e->dispose();
    } else {
      (void)push(e);
    }
    e->initiating.store(false, std::memory_order_release);
    e->dispose();
  }

  static std::exception_ptr stopped_error() {
    return std::make_exception_ptr(error(errc::actor_stopped, std::string(type_name<T>()) + " has stopped"));
  }

  /// Rejects `e` because the actor has stopped (the error is built only for
  /// an envelope that reports it); true if it counts as a dead letter.
  static bool reject_stopped(envelope<T>* e) noexcept {
    return e->reject(e->wants_error() ? stopped_error() : std::exception_ptr{});
  }

  /// Enqueues `e`, waiting for room in a bounded mailbox behind every
  /// sender already waiting. Returns the outcome when it is known at once;
  /// otherwise `done` receives it later, on the thread that made room (or
  /// stopped the actor).
  std::optional<std::error_code> enqueue_or_wait(envelope<T>* e, unique_function<void(std::error_code)>& done) {
    if (!capacity_ || take_slot()) return push(e);
    auto& x = extras();
    // The waiter's node is made before the lock (no allocation under the
    // spinlock) and spliced in under it: once the sender is counted as
    // waiting, nothing can fail.
    std::list<cell_extras::waiter> node;
    node.push_back({e, std::move(done)});
    bool stopped = false;
    {
      std::lock_guard g(x.lock);
      if (x.refuse_waiters) {
        stopped = true;
      } else if (!take_slot_or_wait()) {
        x.waiters.splice(x.waiters.end(), node); // counted and listed in one critical section
        return std::nullopt;
      }
    }
    if (stopped) {
      e->dispose();
      return errc::actor_stopped;
    }
    return push(e); // a slot came free and nobody waits: there is no one to overtake
  }

  void request_stop(exit_reason r) override {
    std::uint8_t expected = 0;
    if (!stop_reason_.compare_exchange_strong(expected, static_cast<std::uint8_t>(r), std::memory_order_acq_rel))
      return;
    (void)push(&wake_); // the cell's own: a stop allocates nothing
  }

  executor_type executor() const noexcept { return sys_->executor(); }

  // -- actor context ----------------------------------------------------------

  T& instance() noexcept { return *instance_; }
  cell_extras& extras() { return cell_base::extras(); }

  /// A coroutine handler finished (`ep` set if it threw).
  void coroutine_done(envelope<T>* e, std::exception_ptr ep) noexcept {
    e->dispose();
    in_coroutine_ = false;
    if (sys_->config.metrics) count_passed(); // its message has left (see `queued`)
    if (ep && on_failure(ep)) return;
    schedule();
  }

  /// A coroutine handler's frame was destroyed unfinished (`e`: its
  /// message, if any): the actor was stopped by force, its pool is going.
  void coroutine_abandoned(envelope<T>* e = nullptr) noexcept {
    if (e) e->dispose();
    in_coroutine_ = false;
    destroy_instance(); // kept for the frame (force_stop): its on_stop now
  }

  template <class M>
  std::uint64_t add_timer(std::chrono::nanoseconds delay, std::chrono::nanoseconds period, M msg) {
    return extras().timers.add(
        executor(), delay, period, [this, proto = std::move(msg)](asio::steady_timer& timer, std::uint64_t id) {
          timer.async_wait([self = cell_ptr<cell>(this), id, m = proto](std::error_code ec) mutable {
            if (!ec) self->enqueue_system(new timer_envelope<T, M>(id, std::move(m)));
          });
        });
  }

  bool cancel_timer(std::uint64_t id) noexcept {
    auto* x = extras_if_any();
    return x && x->timers.cancel(id);
  }

  /// A timer's message arrived: false if the timer was cancelled meanwhile.
  bool timer_fired(std::uint64_t id) {
    auto* x = extras_if_any();
    return x && x->timers.fired(id);
  }

  void set_in_coroutine() noexcept { in_coroutine_ = true; }

  /// What the instance awaits: reentrant coroutine handlers under way, and
  /// replies that an ask's `then` waits for. An entity is not passivated
  /// while it awaits any. Counted per instance (the high half of `awaited_`
  /// is its incarnation), since a handler's frame or an ask's continuation
  /// may be destroyed unrun on any thread (the operation it waited for let
  /// go of it), or outlive a restart. Started in actor context.
  void awaited_started() noexcept { awaited_.fetch_add(1, std::memory_order_relaxed); }
  /// One of instance `incarnation` ended, or went unrun (any thread): true
  /// if it was that instance's last one.
  bool awaited_ended(std::uint32_t incarnation) noexcept {
    auto v = awaited_.load(std::memory_order_relaxed);
    do {
      if ((v >> 32) != incarnation || (v & 0xffff'ffffu) == 0) return false;
    } while (!awaited_.compare_exchange_weak(v, v - 1, std::memory_order_relaxed));
    return (v & 0xffff'ffffu) == 1;
  }
  std::uint32_t awaited_under_way() const noexcept {
    return static_cast<std::uint32_t>(awaited_.load(std::memory_order_relaxed));
  }

  /// Counts the instances constructed so far (a restart makes a new one).
  std::uint32_t incarnation() const noexcept { return incarnation_; }

  /// A message only `receive` takes reached the handlers: a dead letter.
  void unreceived() noexcept { sys_->dead_letters.fetch_add(1, std::memory_order_relaxed); }

  // -- stash (actor context) ------------------------------------------------------

  void stash(envelope<T>* e) noexcept {
    auto& x = extras();
    e->next = nullptr;
    *x.stash_tail = e;
    x.stash_tail = &e->next;
    ++x.stashed;
  }

  /// Puts every stashed message back in front of the mailbox, oldest first:
  /// they are handled before anything that is queued.
  std::size_t unstash_all() noexcept {
    auto* x = extras_if_any();
    if (!x || !x->stash_head) return 0;
    *x->stash_tail = cache_;
    cache_ = std::exchange(x->stash_head, nullptr);
    x->stash_tail = &x->stash_head;
    if (sys_->config.metrics) count_seen(static_cast<std::uint32_t>(x->stashed));
    return std::exchange(x->stashed, 0);
  }

  std::size_t stashed() const noexcept {
    auto* x = extras_if_any();
    return x ? x->stashed : 0;
  }

  // -- receive (actor context: the actor's own coroutine) -------------------------

  bool stop_requested() const noexcept { return stop_reason_.load(std::memory_order_acquire) != 0; }

  /// A receive may start: the actor runs a coroutine of its own and waits in
  /// no other receive.
  void check_receive() const {
    if (!in_coroutine_ || receiving_)
      throw error(errc::invalid_argument,
                  "receive: only in a coroutine of " + std::string(type_name<T>()) +
                      " (a coroutine handler or on_start), one receive at a time");
    if (stop_requested()) std::rethrow_exception(stopped_error());
  }

  /// The oldest queued message whose tag is one of `tags` (taken out of
  /// the mailbox), or null. Scans from where the last call of this receive
  /// stopped: what it passed stays where it is, in order. Sets `deadline`
  /// when the deadline of receive number `generation` came first.
  envelope<T>* take_matching(const void* const* tags, std::size_t count, std::uint64_t generation,
                             bool& deadline) noexcept;

  /// Starts a receive that found nothing queued: `done` gets the message's
  /// envelope (or an error) from a later turn.
  void wait_receive(const void* const* tags, std::size_t count, std::chrono::nanoseconds timeout,
                    unique_function<void(envelope_base*, std::exception_ptr)> done);

  /// Begins scanning the mailbox from its oldest message (a new receive).
  void rescan() { extras().receive.scan = &cache_; }

  // -- watching (actor context) -------------------------------------------------

  /// This actor receives `down` when `other` stops (at once if it has); a
  /// second watch of the same actor changes nothing.
  void watch(cell_base* other) {
    static_assert(handles<T, down>, "troupe: to watch another actor, an actor must have handle(troupe::down)");
    auto& x = extras();
    if (!x.watching.try_emplace(other->id(), cell_ptr<cell_base>(other)).second) return;
    auto notify = [self = cell_ptr<cell>(this)](const down& d) { self->enqueue_system(new down_envelope<T>(d)); };
    if (auto d = other->add_watcher(notify, this)) notify(*d);
  }

  /// No `down` of `other` is handled from now on, even one already queued.
  void unwatch(cell_base* other) noexcept {
    auto* x = extras_if_any();
    if (!x || x->watching.erase(other->id()) == 0) return;
    other->remove_watcher(this);
  }

  /// A `down` of `id` arrived: false if this actor no longer watches it.
  bool watch_ended(actor_id id) noexcept {
    auto* x = extras_if_any();
    return x && x->watching.erase(id) != 0;
  }

  // -- lifecycle ------------------------------------------------------------------

  /// Once constructed and registered: the first turn (`on_start`, or the
  /// messages sent during construction). Until then nothing is handled:
  /// the mailbox queues without scheduling.
  void start() noexcept {
    if constexpr (has_on_start<T>)
      asio::post(executor(), [this] { begin(); });
    else if (!inbox_.try_block())
      schedule();
  }

  /// A cell that will never start (its constructor threw, or the system
  /// began shutting down): what was queued fails, timers and watches go,
  /// an instance constructed gets its `on_stop`; the registry never knew it.
  void abandon() noexcept {
    std::uint8_t expected = 0;
    stop_reason_.compare_exchange_strong(expected, static_cast<std::uint8_t>(exit_reason::system_shutdown),
                                         std::memory_order_acq_rel);
    finish_stop(/*keep_instance=*/false, /*registered=*/false);
  }

  /// First turn of a new instance: `on_start`, then the mailbox.
  void begin() noexcept;

  /// Runs this actor's turn, then those it hands off to (see turn_state).
  void run() noexcept { run_turns(this); }

  /// One turn: up to `throughput` messages, then yield the thread.
  void turn() noexcept override;

  /// Posts the next turn to the queue all workers share.
  void schedule() noexcept { post(false); }
  /// Its turn used its budget up with messages left: it goes behind the
  /// other actors waiting on this thread (a worker of its system), as if
  /// woken now; posting it would hand it to whichever worker the pool
  /// wakes, away from the actors it talks to.
  void requeue() noexcept {
    auto& t = this_turn;
    if (t.in_turn && t.sys == sys_ && t.queue && t.queue_sys == sys_ && sys_->queues.count() > 1)
      return t.enqueue(this, false);
    schedule(); // with one worker the post wakes no other thread
  }

  void post(bool continuation) noexcept override {
    std::optional<post_counter::guard> counted;
    if (!this_turn.in_turn || this_turn.sys != sys_) counted.emplace(sys_->posts); // maybe a thread outside the pool
    if (continuation)
      asio::post(asio::prefer(executor(), asio::execution::relationship.continuation), [this] { run(); });
    else if (counted)
      inject(this); // from outside this system's turns
    else
      asio::post(executor(), [this] { run(); });
  }

  void force_stop() noexcept override;

protected:
  cell(system_state& s, const spawn_options& o)
      : cell_base(s, /*start_blocked=*/false, s.type_stats(&actor_type_key<T>, type_name<T>())),
        capacity_(o.mailbox_capacity), policy_(o.supervision) {}

  /// Constructs the instance from the spawn arguments; `first` may move them.
  virtual void construct(bool first) = 0;

public:
  /// An entity's cell (see `entity.hpp`): asked to passivate (actor
  /// context); and, once it has, hands what was still queued (`list`,
  /// oldest first) to its next activation, returning what it did not take.
  /// Plain actors never passivate.
  virtual void passivation_requested() noexcept {}
  /// An entity's cell: the last of what it awaited ended (in its turn).
  virtual void awaited_all_ended() noexcept {}
  virtual envelope_base* hand_over(envelope_base* list) noexcept { return list; }

protected:
  std::optional<T> instance_;

private:
  template <class R>
  static constexpr bool coroutine_handler_result = awaitable_traits<R>::is_awaitable;

  template <class, class, class>
  friend struct ask_envelope;
  friend class troupe::actor_system;

  /// A turn while a coroutine waits in a receive: hand it the first
  /// matching message, its deadline, or the stop; everything else stays
  /// queued for the handlers, in order.
  void receive_turn() noexcept;

  void end_receive(envelope<T>* e, std::exception_ptr ep) noexcept;

  // A bounded mailbox's one word: its low half counts the slots taken
  // (messages queued or being pushed), its high half the senders waiting
  // for one. A waiter puts the word past every capacity, so "a slot is
  // free and nobody waits" is one comparison; and a release either frees
  // its slot or hands it to the oldest waiter in one step, so a slot is
  // never free while anyone waits (one sender's messages keep their order
  // for every mix of tell, ask and send). Waiting > 0 implies every slot
  // is taken.
  static constexpr std::uint64_t one_waiter = std::uint64_t{1} << 32;
  static constexpr std::uint64_t taken_mask = one_waiter - 1;

  /// tell, ask, and a send's first try: a slot, if one is free and no
  /// sender waits for one.
  bool take_slot() noexcept {
    std::uint64_t v = slots_.load(std::memory_order_relaxed);
    while (v < capacity_)
      if (slots_.compare_exchange_weak(v, v + 1, std::memory_order_relaxed, std::memory_order_relaxed)) return true;
    return false;
  }

  /// Under the extras' lock (a send that found no room): takes a slot if
  /// one has come free and nobody waits (true), else counts the caller as
  /// waiting (false). One CAS: it and a release never miss each other.
  bool take_slot_or_wait() noexcept {
    std::uint64_t v = slots_.load(std::memory_order_relaxed);
    for (;;) {
      const bool room = v < capacity_;
      if (slots_.compare_exchange_weak(v, room ? v + 1 : v + one_waiter, std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
        return room;
    }
  }

  void release_slot() noexcept;

  std::error_code push(envelope<T>* e) noexcept {
    auto& turn = this_turn;
    // From outside this system's turns, the pool must outlive the push and
    // what follows it (the post of a turn, or the rejected envelope's end,
    // which may cancel its timer): counted over both. A shutdown closes
    // every inbox, then waits for the count, then destroys the pool.
    std::optional<post_counter::guard> counted;
    if (!turn.holding || turn.sys != sys_) counted.emplace(sys_->posts);
    switch (inbox_.push(e)) {
    case inbox::push_result::queued:
      // Counted while the turn holds an actor it woke (a turn's pushes to
      // actors of any system): with nothing held there is nothing to spill.
      if (turn.pending) turn.pushed();
      return {};
    case inbox::push_result::unblocked:
      if (turn.in_turn && turn.sys == sys_)
        turn.hold(this);
      else if (turn.holding && turn.sys == sys_)
        turn.enqueue(this, false); // woken by a turn's completion (a coroutine that may work long): stealable
      else
        schedule();
      return {};
    case inbox::push_result::closed: break;
    }
    if (reject_stopped(e)) sys_->dead_letters.fetch_add(1, std::memory_order_relaxed);
    e->dispose();
    return errc::actor_stopped;
  }

  /// Applies the supervision policy. True if the run loop must end (the actor
  /// stopped, or a restart is pending). A failure of `on_start` is not
  /// `resumable`: the instance never started (a persistent actor's
  /// recovery failed, say), so `resume` stops it; `restart` starts afresh.
  bool on_failure(const std::exception_ptr& ep, bool resumable = true) noexcept;

  void restart_now() noexcept;

  /// The instance's end: its `on_stop` (every instance constructed gets
  /// exactly one), then its destruction.
  void destroy_instance() noexcept;

  /// The actor's last turn: fail what is queued, release its timers and
  /// watches, run on_stop, tell the watchers, leave the registry. Whatever
  /// the actor holds of the system's pool goes now, not with its last
  /// reference (which may outlive the system).
  void finish_stop(bool keep_instance = false, bool registered = true) noexcept;

  down final_down() const override;

  void cancel_all_timers() noexcept {
    if (auto* x = extras_if_any()) x->timers.cancel_all();
  }

  envelope_base* cache_ = nullptr;
  std::atomic<std::uint64_t> slots_{0}; // (see take_slot)
  std::uint32_t capacity_;
  bool in_coroutine_ = false;
  bool receiving_ = false;
  std::atomic<std::uint64_t> awaited_{0};
  std::uint32_t incarnation_ = 0;
  restart_budget restarts_;
  troupe::supervision policy_;
  wake_envelope<T> wake_;
};

} // namespace detail
} // namespace troupe

#include <troupe/detail/impl/cell.hpp>
