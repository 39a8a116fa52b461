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
    if (capacity_ && !reserve()) {
      e->dispose();
      return errc::mailbox_full;
    }
    return push(e);
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
    } else if (capacity_ && !reserve()) {
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

  /// Enqueues `e`, waiting for room in a bounded mailbox. Returns the
  /// outcome when it is known at once; otherwise `done` receives it later,
  /// on the thread that made room (or stopped the actor).
  std::optional<std::error_code> enqueue_or_wait(envelope<T>* e, unique_function<void(std::error_code)>& done) {
    if (!capacity_ || reserve()) return push(e);
    auto& x = extras();
    {
      std::lock_guard g(x.lock);
      if (!x.refuse_waiters) {
        x.waiting.fetch_add(1, std::memory_order_seq_cst);
        if (!reserve()) {
          x.waiters.push_back({e, std::move(done)});
          return std::nullopt;
        }
        x.waiting.fetch_sub(1, std::memory_order_relaxed);
        return push(e);
      }
    }
    e->dispose();
    return errc::actor_stopped;
  }

  void request_stop(exit_reason r) override {
    std::uint8_t expected = 0;
    if (!stop_reason_.compare_exchange_strong(expected, static_cast<std::uint8_t>(r), std::memory_order_acq_rel))
      return;
    (void)push(new wake_envelope<T>);
  }

  executor_type executor() const noexcept { return sys_->executor(); }

  // -- actor context ----------------------------------------------------------

  T& instance() noexcept { return *instance_; }
  cell_extras& extras() { return cell_base::extras(); }

  /// A coroutine handler finished (`ep` set if it threw).
  void coroutine_done(envelope<T>* e, std::exception_ptr ep) noexcept {
    e->dispose();
    in_coroutine_ = false;
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
                             bool& deadline) noexcept {
    envelope_base**& scan_ = extras().receive.scan;
    for (;;) {
      envelope_base* b = *scan_;
      if (!b) {
        b = inbox_.take_all();
        if (!b) return nullptr;
        *scan_ = b;
      }
      auto* e = static_cast<envelope<T>*>(b);
      const void* tag = e->tag();
      if (tag == &receive_deadline_tag) {
        *scan_ = e->next; // a deadline: this receive's ends it, an earlier one's is stale
        deadline = static_cast<receive_deadline_envelope<T>*>(e)->generation == generation;
        e->dispose();
        if (deadline) return nullptr;
        continue;
      }
      if (tag) {
        for (std::size_t i = 0; i < count; ++i) {
          if (tags[i] != tag) continue;
          *scan_ = e->next;
          if (capacity_ && e->counts()) release_slot();
          return e;
        }
      }
      scan_ = &e->next;
    }
  }

  /// Starts a receive that found nothing queued: `done` gets the message's
  /// envelope (or an error) from a later turn.
  void wait_receive(const void* const* tags, std::size_t count, std::chrono::nanoseconds timeout,
                    unique_function<void(envelope_base*, std::exception_ptr)> done) {
    auto& r = extras().receive;
    r.tags = tags;
    r.count = count;
    r.done = std::move(done);
    const std::uint64_t generation = ++r.generation;
    receiving_ = true;
    if (timeout.count() > 0) {
      if (!r.deadline) r.deadline.emplace(executor());
      r.deadline->expires_after(timeout);
      r.deadline->async_wait([self = cell_ptr<cell>(this), generation](std::error_code ec) {
        if (!ec) self->enqueue_system(new receive_deadline_envelope<T>(generation));
      });
    }
    // The next message wakes a turn, which scans (one may have come already).
    if (!inbox_.try_block()) schedule();
  }

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
  void begin() noexcept {
    if constexpr (has_on_start<T>) {
      if (stop_requested()) return finish_stop();
      try {
        if constexpr (coroutine_handler_result<decltype(instance_->on_start())>) {
          spawn_coroutine(
              *this, instance_->on_start(),
              [this](std::exception_ptr ep) {
                in_coroutine_ = false;
                if (ep && on_failure(ep, /*resumable=*/false)) return;
                schedule();
              },
              [this] { coroutine_abandoned(); });
          return;
        } else {
          instance_->on_start();
        }
      } catch (...) {
        if (on_failure(std::current_exception(), /*resumable=*/false)) return;
      }
    }
    run();
  }

  /// Runs this actor's turn, then those it hands off to (see turn_state).
  void run() noexcept { run_turns(this); }

  /// One turn: up to `throughput` messages, then yield the thread.
  void turn() noexcept override {
    busy_.store(true, std::memory_order_relaxed);
    running_scope running(this);
    if (receiving_) return receive_turn();
    const std::uint32_t budget = sys_->config.throughput;
    for (std::uint32_t n = 0; n < budget;) {
      if (!cache_) {
        cache_ = inbox_.take_all();
        if (!cache_) {
          if (inbox_.try_block()) return;
          continue;
        }
      }
      if (stop_requested()) return finish_stop();
      auto* e = static_cast<envelope<T>*>(cache_);
      cache_ = e->next;
      if (capacity_ && e->counts()) release_slot();
      bool user = e->counts();
      bool suspended;
      try {
        suspended = e->process(*this);
      } catch (...) {
        auto ep = std::current_exception();
        e->reject(handler_failure(type_name<T>(), e->name(), ep));
        e->dispose();
        if (on_failure(ep)) return;
        continue;
      }
      if (suspended) return;
      e->dispose();
      n += user ? 1 : 0;
    }
    schedule();
  }

  /// Posts the next turn to the queue all workers share.
  void schedule() noexcept { post(false); }

  void post(bool continuation) noexcept override {
    std::optional<post_counter::guard> counted;
    if (!this_turn.in_turn || this_turn.sys != sys_) counted.emplace(sys_->posts); // maybe a thread outside the pool
    if (continuation)
      asio::post(asio::prefer(executor(), asio::execution::relationship.continuation), [this] { run(); });
    else
      asio::post(executor(), [this] { run(); });
  }

  void force_stop() noexcept override {
    if (!in_coroutine_) return finish_stop();
    if (receiving_) {
      // The coroutine waits in a receive nothing will end now: its frame
      // (held by the receive) goes once the rest has stopped.
      receiving_ = false;
      auto frame = std::move(extras().receive.done);
      finish_stop(/*keep_instance=*/true);
      frame = {}; // coroutine_abandoned: the instance's on_stop
      return;
    }
    // A coroutine handler is still suspended: its frame (destroyed with the
    // thread pool) owns a reference to this cell and may still use the
    // instance, so the instance outlives it (its on_stop runs when the
    // frame goes: coroutine_abandoned); everything else stops now.
    finish_stop(/*keep_instance=*/true);
  }

protected:
  cell(system_state& s, const spawn_options& o)
      : cell_base(s, /*start_blocked=*/false), capacity_(o.mailbox_capacity), policy_(o.supervision) {}

  /// Constructs the instance from the spawn arguments; `first` may move them.
  virtual void construct(bool first) = 0;

public:
  /// An entity's cell (see `entity.hpp`): asked to passivate (actor
  /// context); and, once it has, hands what was still queued (`list`,
  /// oldest first) to its next activation, returning what it did not take.
  /// Plain actors never passivate.
  virtual void passivation_requested() noexcept {}
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
  void receive_turn() noexcept {
    auto& r = extras().receive;
    for (;;) {
      if (stop_requested()) return end_receive(nullptr, stopped_error());
      bool deadline = false;
      if (auto* e = take_matching(r.tags, r.count, r.generation, deadline)) return end_receive(e, nullptr);
      if (deadline)
        return end_receive(nullptr, error_ptr(errc::receive_timeout,
                                              "receive of " + std::string(type_name<T>()) + ": no matching message"));
      if (inbox_.try_block()) return;
    }
  }

  void end_receive(envelope<T>* e, std::exception_ptr ep) noexcept {
    auto& r = extras().receive;
    receiving_ = false;
    if (r.deadline) r.deadline->cancel();
    auto done = std::move(r.done);
    // Resumes the coroutine here, in this turn, until it waits again or
    // ends (which may release the cell: nothing of it is touched after).
    done(e, std::move(ep));
  }

  bool reserve() noexcept {
    if (size_.fetch_add(1, std::memory_order_seq_cst) < capacity_) return true;
    size_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }

  void release_slot() noexcept {
    size_.fetch_sub(1, std::memory_order_seq_cst);
    auto* x = extras_if_any();
    if (!x || x->waiting.load(std::memory_order_seq_cst) == 0) return;
    // Hand the freed room to waiting senders, oldest first.
    for (;;) {
      cell_extras::waiter w;
      {
        std::lock_guard g(x->lock);
        if (x->waiters.empty() || !reserve()) return;
        w = std::move(x->waiters.front());
        x->waiters.pop_front();
        x->waiting.fetch_sub(1, std::memory_order_relaxed);
      }
      w.done(push(static_cast<envelope<T>*>(w.env)));
    }
  }

  std::error_code push(envelope<T>* e) noexcept {
    auto& turn = this_turn;
    // From outside this system's turns, the pool must outlive the push and
    // what follows it (the post of a turn, or the rejected envelope's end,
    // which may cancel its timer): counted over both. A shutdown closes
    // every inbox, then waits for the count, then destroys the pool.
    std::optional<post_counter::guard> counted;
    if (!turn.in_turn || turn.sys != sys_) counted.emplace(sys_->posts);
    switch (inbox_.push(e)) {
    case inbox::push_result::queued:
      if (turn.pending && ++turn.pushes > turn_state::max_pushes_held) turn.flush(false);
      return {};
    case inbox::push_result::unblocked:
      if (turn.in_turn && turn.sys == sys_)
        turn.hold(this);
      else
        schedule();
      return {};
    case inbox::push_result::closed: break;
    }
    if (e->reject(stopped_error())) sys_->dead_letters.fetch_add(1, std::memory_order_relaxed);
    e->dispose();
    return errc::actor_stopped;
  }

  /// Applies the supervision policy. True if the run loop must end (the actor
  /// stopped, or a restart is pending). A failure of `on_start` is not
  /// `resumable`: the instance never started (a persistent actor's
  /// recovery failed, say), so `resume` stops it; `restart` starts afresh.
  bool on_failure(const std::exception_ptr& ep, bool resumable = true) noexcept {
    using d = supervision::directive;
    // A stop was asked for: it stops, whatever the policy.
    if (stop_requested()) {
      finish_stop();
      return true;
    }
    if (policy_.on_failure == d::resume && instance_ && resumable) return false;
    if (policy_.on_failure == d::restart) {
      if (auto backoff = restarts_.next(policy_, std::chrono::steady_clock::now())) {
        cancel_all_timers();
        destroy_instance(); // its on_stop: the restart replaces it
        try {
          auto& timer = extras().backoff;
          if (!timer) timer.emplace(executor());
          timer->expires_after(*backoff);
          timer->async_wait([self = cell_ptr<cell>(this)](std::error_code) { self->restart_now(); });
          return true;
        } catch (...) {
          // no memory for the timer: fall through and stop
        }
      }
    }
    failure_ = what_of(ep);
    stop_reason_.store(static_cast<std::uint8_t>(exit_reason::failure), std::memory_order_release);
    finish_stop();
    return true;
  }

  void restart_now() noexcept {
    if (stop_requested()) return finish_stop();
    try {
      ++incarnation_;
      construct(false);
    } catch (...) {
      if (on_failure(std::current_exception())) return;
    }
    begin();
  }

  /// The instance's end: its `on_stop` (every instance constructed gets
  /// exactly one), then its destruction.
  void destroy_instance() noexcept {
    if (!instance_) return;
    if constexpr (has_on_stop<T>) {
      try {
        instance_->on_stop();
      } catch (...) {}
    }
    instance_.reset();
  }

  /// The actor's last turn: fail what is queued, release its timers and
  /// watches, run on_stop, tell the watchers, leave the registry. Whatever
  /// the actor holds of the system's pool goes now, not with its last
  /// reference (which may outlive the system).
  void finish_stop(bool keep_instance = false, bool registered = true) noexcept {
    auto reason = static_cast<exit_reason>(stop_reason_.load(std::memory_order_acquire));
    if (reason != exit_reason::normal && reason != exit_reason::failure && reason != exit_reason::system_shutdown &&
        reason != exit_reason::passivated)
      reason = exit_reason::normal;
    auto stopped = stopped_error();
    auto drop = [&](envelope_base* list) {
      std::uint64_t dead = 0;
      while (list) {
        auto* e = static_cast<envelope<T>*>(list);
        list = e->next;
        if (e->reject(stopped)) ++dead;
        e->dispose();
      }
      if (dead) sys_->dead_letters.fetch_add(dead, std::memory_order_relaxed);
    };
    envelope_base* stashed = nullptr;
    if (auto* x = extras_if_any(); x && x->stash_head) {
      stashed = std::exchange(x->stash_head, nullptr);
      x->stash_tail = &x->stash_head;
      x->stashed = 0;
    }
    if (reason == exit_reason::passivated) {
      // What waits goes to the entity's next activation (in order: what was
      // stashed first), not to the dead letters.
      envelope_base* rest = std::exchange(cache_, nullptr);
      if (stashed) {
        envelope_base** tail = &stashed;
        while (*tail) tail = &(*tail)->next;
        *tail = rest;
        rest = stashed;
      }
      envelope_base** end = &rest;
      while (*end) end = &(*end)->next;
      *end = inbox_.close();
      drop(hand_over(rest));
    } else {
      drop(stashed);
      drop(std::exchange(cache_, nullptr));
      drop(inbox_.close());
    }
    cancel_all_timers();
    auto& x = extras();
    x.backoff.reset();
    x.receive.deadline.reset();
    leave_watched();
    {
      std::deque<cell_extras::waiter> waiters;
      {
        std::lock_guard g(x.lock);
        x.refuse_waiters = true; // watchers are told below, with the final reason
        waiters.swap(x.waiters);
      }
      for (auto& w : waiters) {
        static_cast<envelope<T>*>(w.env)->dispose();
        w.done(errc::actor_stopped);
      }
    }
    if (!keep_instance) destroy_instance();
    if (registered) leave_registry(); // before the watchers learn of it: live_actors() agrees with them
    notify_watchers(down{id_, reason, reason == exit_reason::failure ? failure_ : std::string{}});
    release(); // the registry's reference; may delete this
  }

  void cancel_all_timers() noexcept {
    if (auto* x = extras_if_any()) x->timers.cancel_all();
  }

  envelope_base* cache_ = nullptr;
  std::uint32_t capacity_;
  std::atomic<std::uint32_t> size_{0};
  bool in_coroutine_ = false;
  bool receiving_ = false;
  std::uint32_t incarnation_ = 0;
  restart_budget restarts_;
  troupe::supervision policy_;
  std::string failure_;
};

template <class T, class... Args>
class cell_impl : public cell<T> {
public:
  template <class... A>
  cell_impl(system_state& s, const spawn_options& o, A&&... a) : cell<T>(s, o), args_(std::forward<A>(a)...) {}

  void construct(bool first) override {
    constexpr bool copyable = (std::is_copy_constructible_v<Args> && ...);
    if constexpr (copyable) {
      std::apply([this](const Args&... a) { emplace(a...); }, args_);
    } else {
      if (!first)
        throw error(errc::invalid_argument,
                    "cannot restart " + std::string(type_name<T>()) + ": its spawn arguments are not copyable");
      std::apply([this](Args&... a) { emplace(std::move(a)...); }, args_);
    }
  }

private:
  template <class... A>
  void emplace(A&&... a) {
    struct constructing {
      cell_base* outer = std::exchange(constructing_cell, nullptr);
      explicit constructing(cell_base* c) noexcept { constructing_cell = c; }
      ~constructing() { constructing_cell = outer; }
    } scope(this);
    if constexpr (std::is_constructible_v<T, context<T>, A&&...>)
      this->instance_.emplace(context<T>(this), std::forward<A>(a)...);
    else
      this->instance_.emplace(std::forward<A>(a)...);
  }

  std::tuple<Args...> args_;
};

/// The completion of a coroutine handler: `done` when it finishes;
/// `abandoned` when it is destroyed without having run (its frame destroyed
/// unfinished), so that the ask completes and the envelope goes anyway.
template <class T, class Done, class Abandoned>
class coroutine_end {
public:
  coroutine_end(cell<T>& c, Done done, Abandoned abandoned)
      : self_(&c), done_(std::move(done)), abandoned_(std::move(abandoned)) {}
  coroutine_end(coroutine_end&& o) noexcept
      : self_(std::move(o.self_)), done_(std::move(o.done_)), abandoned_(std::move(o.abandoned_)),
        ran_(std::exchange(o.ran_, true)) {}
  coroutine_end(const coroutine_end&) = delete;
  coroutine_end& operator=(const coroutine_end&) = delete;
  ~coroutine_end() {
    if (!ran_) abandoned_();
  }

  template <class... V>
  void operator()(std::exception_ptr ep, V&&... v) {
    ran_ = true;
    done_(std::move(ep), std::forward<V>(v)...);
  }

private:
  cell_ptr<cell<T>> self_;
  Done done_;
  Abandoned abandoned_;
  bool ran_ = false;
};

template <class T, class Awaitable, class Done, class Abandoned>
void spawn_coroutine(cell<T>& c, Awaitable&& aw, Done done, Abandoned abandoned) {
  c.set_in_coroutine();
  asio::co_spawn(c.executor(), std::forward<Awaitable>(aw),
                 coroutine_end<T, Done, Abandoned>(c, std::move(done), std::move(abandoned)));
}

/// The executor of a reentrant coroutine handler: each function it is given
/// runs as a message of the actor (in a turn, one at a time with the
/// others), and not at all if the actor has stopped or restarted since the
/// coroutine began — its frame is then destroyed unfinished.
template <class T>
class turn_executor {
public:
  explicit turn_executor(cell<T>& c) noexcept : cell_(&c), incarnation_(c.incarnation()) {}

  /// Runs `f` here when this thread runs the actor's turn now and inline
  /// runs are allowed (a dispatch: the coroutine's first step runs within
  /// the turn of its message, before the messages after it); else queues
  /// it as a message of the actor.
  template <class F>
  void execute(F f) const {
    if (may_inline_ && running_cell == cell_.get() && cell_->incarnation() == incarnation_) return std::move(f)();
    cell_->enqueue_system(
        new continuation_envelope<T>([f = std::move(f)](T&) mutable { std::move(f)(); }, incarnation_));
  }

  asio::execution_context& query(asio::execution::context_t) const noexcept { return cell_->executor().context(); }
  asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
    return may_inline_ ? asio::execution::blocking_t(asio::execution::blocking.possibly)
                       : asio::execution::blocking_t(asio::execution::blocking.never);
  }
  turn_executor require(asio::execution::blocking_t::never_t) const noexcept {
    turn_executor e = *this;
    e.may_inline_ = false;
    return e;
  }
  turn_executor require(asio::execution::blocking_t::possibly_t) const noexcept {
    turn_executor e = *this;
    e.may_inline_ = true;
    return e;
  }

  friend bool operator==(const turn_executor& a, const turn_executor& b) noexcept {
    return a.cell_.get() == b.cell_.get() && a.incarnation_ == b.incarnation_;
  }
  friend bool operator!=(const turn_executor& a, const turn_executor& b) noexcept { return !(a == b); }

private:
  cell_ptr<cell<T>> cell_;
  std::uint32_t incarnation_;
  bool may_inline_ = false;
};

template <class T, class Awaitable, class Done>
void spawn_reentrant(cell<T>& c, Awaitable&& aw, Done done) {
  asio::co_spawn(asio::any_io_executor(turn_executor<T>(c)), std::forward<Awaitable>(aw), std::move(done));
}

} // namespace detail
} // namespace troupe
