#pragma once

// The runtime behind actor_ref, context and actor_system: an actor's cell
// (mailbox, instance, lifecycle), the message envelopes, and the system state
// the cells share. Not for direct use.

#include <troupe/concepts.hpp>
#include <troupe/config.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/inbox.hpp>
#include <troupe/detail/spinlock.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/type_name.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/co_spawn.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <thread>
#include <vector>

namespace troupe {

template <class T>
class actor_ref;
template <class T>
class context;
class actor_system;

namespace detail {

class cell_base;
template <class T>
class cell;

// -- shared state of one actor system ----------------------------------------

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

// -- envelopes ---------------------------------------------------------------

/// A message in an actor's mailbox, with the code that handles it.
template <class T>
struct envelope : envelope_base {
  virtual ~envelope() = default;
  /// Runs the handler in the actor's context. True when the handler is a
  /// coroutine that suspended: the envelope then belongs to the coroutine,
  /// which hands it back through cell::coroutine_done.
  virtual bool process(cell<T>& c) = 0;
  /// The message will never be handled (actor stopped, handler threw): an
  /// ask completes with `ep`. True if it counts as a dead letter.
  virtual bool reject(const std::exception_ptr&) noexcept { return counts(); }
  /// User messages count towards a bounded mailbox and as dead letters;
  /// internal ones (timer ticks, stop requests, watch notifications) do not.
  virtual bool counts() const noexcept { return true; }
  virtual void dispose() noexcept { delete this; }
  /// The message type, for error messages.
  virtual std::string_view name() const noexcept { return "internal message"; }
};

inline std::string what_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "non-standard exception";
  }
}

/// What an ask receives when the handler threw.
inline std::exception_ptr handler_failure(std::string_view actor, std::string_view msg, const std::exception_ptr& ep) {
  return std::make_exception_ptr(error(errc::handler_failed, "handler of " + std::string(actor) + " for " +
                                                                 std::string(msg) + " threw: " + what_of(ep)));
}

/// Starts a coroutine handler; `done(ep, value...)` runs when it finishes.
/// The cell stays alive (and the instance with it) while the coroutine runs.
template <class T, class Awaitable, class Done>
void spawn_coroutine(cell<T>& c, Awaitable&& aw, Done done);

template <class T, class M>
struct tell_envelope : envelope<T> {
  template <class... A>
  explicit tell_envelope(A&&... a) : msg(std::forward<A>(a)...) {}

  bool process(cell<T>& c) override {
    if constexpr (coroutine_handler<T, M>) {
      spawn_coroutine(c, invoke_handle(c.instance(), std::move(msg)),
                      [this, &c](std::exception_ptr ep, auto&&...) { c.coroutine_done(this, std::move(ep)); });
      return true;
    } else {
      invoke_handle(c.instance(), std::move(msg));
      return false;
    }
  }

  std::string_view name() const noexcept override { return type_name<M>(); }

  M msg;
};

/// A message the system sends on its own (watch notifications): not a dead
/// letter when the watcher has already stopped.
template <class T, class M>
struct system_envelope final : tell_envelope<T, M> {
  using tell_envelope<T, M>::tell_envelope;
  bool counts() const noexcept override { return false; }
};

/// Wakes a stopping actor; the run loop sees the stop request first.
template <class T>
struct wake_envelope final : envelope<T> {
  bool process(cell<T>&) override { return false; }
  bool counts() const noexcept override { return false; }
};

/// A timer's message, delivered only if the timer is still armed.
template <class T, class M>
struct timer_envelope final : tell_envelope<T, M> {
  timer_envelope(std::uint64_t id, M m) : tell_envelope<T, M>(std::move(m)), timer(id) {}
  bool process(cell<T>& c) override {
    if (!c.timer_fired(timer)) return false;
    return tell_envelope<T, M>::process(c);
  }
  bool counts() const noexcept override { return false; }
  std::uint64_t timer;
};

template <class R>
struct ask_signature {
  using type = void(std::exception_ptr, R);
};
template <>
struct ask_signature<void> {
  using type = void(std::exception_ptr);
};

/// An ask: the message, the asker's completion handler and, with a timeout,
/// a timer racing the reply. Reference-counted when a timer holds it.
template <class T, class M, class Handler>
struct ask_envelope final : envelope<T> {
  using reply = reply_type_t<T, M>;

  ask_envelope(Handler&& h, M&& m) : msg(std::move(m)), handler(std::move(h)) {}

  void arm(asio::thread_pool::executor_type ex, std::chrono::nanoseconds timeout) {
    timer.emplace(ex, timeout);
    add_ref();
    timer->async_wait([this, timeout](std::error_code ec) {
      if (!ec) {
        complete(std::make_exception_ptr(error(
            errc::timeout, "ask of " + std::string(type_name<M>()) + " to " + std::string(type_name<T>()) +
                               " got no reply within " +
                               std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(timeout).count()) +
                               " us")));
      }
      dispose();
    });
  }

  bool process(cell<T>& c) override {
    if constexpr (coroutine_handler<T, M>) {
      spawn_coroutine(c, invoke_handle(c.instance(), std::move(msg)), [this, &c](std::exception_ptr ep, auto&&... v) {
        if (ep)
          complete(handler_failure(type_name<T>(), type_name<M>(), ep));
        else
          complete(nullptr, std::forward<decltype(v)>(v)...);
        c.coroutine_done(this, std::move(ep));
      });
      return true;
    } else if constexpr (std::is_void_v<reply>) {
      invoke_handle(c.instance(), std::move(msg));
      complete(nullptr);
      return false;
    } else {
      complete(nullptr, invoke_handle(c.instance(), std::move(msg)));
      return false;
    }
  }

  bool reject(const std::exception_ptr& ep) noexcept override {
    complete(ep);
    return false;
  }

  std::string_view name() const noexcept override { return type_name<M>(); }

  /// Exactly once, whoever comes first: the reply, the timer, a rejection.
  /// While the asker is still inside `ask()` the handler is posted, never
  /// called inline (an initiating function must not complete inline).
  template <class... V>
  void complete(std::exception_ptr ep, V&&... v) noexcept {
    if (done.exchange(true, std::memory_order_acq_rel)) return;
    if (timer) timer->cancel();
    const bool post = initiating.load(std::memory_order_acquire);
    auto finish = [&](auto&&... args) {
      if (post)
        handler.post(std::forward<decltype(args)>(args)...);
      else
        handler.dispatch(std::forward<decltype(args)>(args)...);
    };
    if constexpr (std::is_void_v<reply>)
      finish(std::move(ep));
    else if constexpr (sizeof...(V) == 0)
      finish(std::move(ep), reply{});
    else
      finish(std::move(ep), reply(std::forward<V>(v)...));
  }

  void add_ref() noexcept { refs.fetch_add(1, std::memory_order_relaxed); }
  void dispose() noexcept override {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  M msg;
  stored_handler<Handler> handler;
  std::atomic<std::uint8_t> refs{1};
  std::atomic<bool> done{false};
  std::atomic<bool> initiating{true};
  std::optional<asio::steady_timer> timer;
};

// -- cells -------------------------------------------------------------------

/// Rarely used per-actor state, allocated on first use.
struct cell_extras {
  // Guarded by lock (any thread).
  spinlock lock;
  bool stopped = false;        // final_down is set: watchers are told at once
  bool refuse_waiters = false; // the actor is stopping: senders no longer wait
  down final_down;
  std::vector<unique_function<void(const down&)>> watchers;
  struct waiter {
    envelope_base* env;
    unique_function<void(std::error_code)> done;
  };
  std::deque<waiter> waiters;
  std::atomic<std::uint32_t> waiting{0};

  // Actor context only.
  struct timer_slot {
    timer_slot(std::uint64_t i, asio::thread_pool::executor_type ex, std::chrono::nanoseconds p)
        : id(i), timer(ex), period(p) {}
    std::uint64_t id;
    asio::steady_timer timer;
    std::chrono::nanoseconds period;
    unique_function<void()> arm;
  };
  std::vector<std::unique_ptr<timer_slot>> timers;
  std::uint64_t next_timer = 1;
  std::optional<asio::steady_timer> backoff;
};

/// What the current worker thread is doing, for scheduling decisions.
///
/// An actor that a push wakes up while this thread is running another
/// actor's turn is not posted at once: it is kept in `pending` and posted as
/// a continuation when the turn ends, so a request and its reply are handled
/// on one thread without a lock or a wake-up. A second wake-up, or a long run
/// of pushes within one turn (a producer flooding a consumer), posts the
/// pending actor to the shared queue instead, where another thread can take it.
struct turn_state {
  static constexpr std::uint32_t max_pending = 4;
  static constexpr std::uint32_t max_pushes_held = 16;
  static constexpr std::uint32_t max_handoffs = 64;

  bool in_turn = false;
  std::uint32_t pending = 0;
  std::uint32_t pushes = 0;
  cell_base* woken[max_pending];

  void hold(cell_base* c) noexcept;
  void flush(bool continuation) noexcept;
};
inline thread_local turn_state this_turn;

class cell_base {
public:
  cell_base(const cell_base&) = delete;
  cell_base& operator=(const cell_base&) = delete;

  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  actor_id id() const noexcept { return id_; }
  system_state& sys() const noexcept { return *sys_; }
  bool closed() const noexcept { return inbox_.closed(); }

  /// Thread-safe; the first request's reason wins. The actor stops after its
  /// current handler (a suspended coroutine handler finishes first).
  virtual void request_stop(exit_reason r) = 0;

  /// Thread-safe. Registers `w` to run once the actor has stopped; returns
  /// the final notification instead (without registering) if it already has.
  std::optional<down> add_watcher(unique_function<void(const down&)> w) {
    auto& x = extras();
    std::lock_guard g(x.lock);
    if (x.stopped) return x.final_down;
    x.watchers.push_back(std::move(w));
    return std::nullopt;
  }

  /// After the pool has stopped: stop an actor that did not stop in time.
  virtual void force_stop() noexcept = 0;

  /// Posts the actor's next turn: to this thread's queue (`continuation`) or
  /// to the queue all workers share.
  virtual void post(bool continuation) noexcept = 0;

  /// Handles up to a turn's worth of messages.
  virtual void turn() noexcept = 0;

  /// Runs `c`'s turn; when that turn woke exactly one actor, runs that
  /// actor's turn next on this thread (a hand-off: no queue, no lock), up to
  /// `turn_state::max_handoffs` times, then posts what is pending.
  static void drive(cell_base* c) noexcept;

  cell_base* reg_prev = nullptr;
  cell_base* reg_next = nullptr;

protected:
  cell_base(system_state& s, bool start_blocked)
      : inbox_(start_blocked), sys_(&s), id_(s.next_id.fetch_add(1, std::memory_order_relaxed)) {
    s.add_ref();
  }
  virtual ~cell_base() {
    delete extras_.load(std::memory_order_acquire);
    sys_->release();
  }

  cell_extras& extras() {
    cell_extras* x = extras_.load(std::memory_order_acquire);
    if (x) return *x;
    auto fresh = std::make_unique<cell_extras>();
    if (extras_.compare_exchange_strong(x, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
    return *x;
  }
  cell_extras* extras_if_any() const noexcept { return extras_.load(std::memory_order_acquire); }

  /// Removes the actor from the registry; the caller then releases the
  /// registry's reference.
  void leave_registry() noexcept {
    system_state& s = *sys_;
    {
      std::lock_guard g(s.mutex);
      if (reg_prev) reg_prev->reg_next = reg_next;
      else s.first = reg_next;
      if (reg_next) reg_next->reg_prev = reg_prev;
      if (--s.live == 0) s.all_stopped.notify_all();
    }
  }

  void notify_watchers(down d) noexcept {
    auto& x = extras();
    std::vector<unique_function<void(const down&)>> ws;
    {
      std::lock_guard g(x.lock);
      x.stopped = true;
      x.final_down = d;
      ws.swap(x.watchers);
    }
    for (auto& w : ws) w(d);
  }

  std::atomic<std::uint32_t> refs_{1}; // one for the registry
  std::atomic<std::uint8_t> stop_reason_{0};
  inbox inbox_;
  system_state* sys_;
  actor_id id_;
  std::atomic<cell_extras*> extras_{nullptr};
};

inline void cell_base::drive(cell_base* c) noexcept {
  auto& t = this_turn;
  if (t.in_turn) return c->turn(); // nested: the outer turn posts what is pending
  for (std::uint32_t handoffs = 0;; ++handoffs) {
    t.in_turn = true;
    c->turn(); // may destroy c
    t.in_turn = false;
    if (t.pending == 1 && handoffs < turn_state::max_handoffs) {
      c = t.woken[0];
      t.pending = 0;
      continue;
    }
    t.flush(true);
    return;
  }
}

inline void turn_state::hold(cell_base* c) noexcept {
  if (pending == max_pending) {
    woken[0]->post(false); // the oldest goes to the shared queue
    std::copy(woken + 1, woken + max_pending, woken);
    --pending;
  }
  woken[pending++] = c;
  pushes = 0;
}

inline void turn_state::flush(bool continuation) noexcept {
  for (std::uint32_t i = 0; i < pending; ++i) woken[i]->post(continuation);
  pending = 0;
}

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
      e->reject(std::make_exception_ptr(error(errc::mailbox_full, "mailbox of " +
                                                                      std::string(type_name<T>()) + " is full")));
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

  template <class M>
  std::uint64_t add_timer(std::chrono::nanoseconds delay, std::chrono::nanoseconds period, M msg) {
    auto& x = extras();
    auto slot = std::make_unique<cell_extras::timer_slot>(x.next_timer++, executor(), period);
    auto* s = slot.get();
    s->arm = [this, s, proto = std::move(msg)]() {
      s->timer.async_wait([self = cell_ptr<cell>(this), id = s->id, m = proto](std::error_code ec) mutable {
        if (!ec) self->enqueue_system(new timer_envelope<T, M>(id, std::move(m)));
      });
    };
    s->timer.expires_after(delay);
    s->arm();
    x.timers.push_back(std::move(slot));
    return s->id;
  }

  bool cancel_timer(std::uint64_t id) noexcept {
    auto* x = extras_if_any();
    if (!x) return false;
    auto it = std::find_if(x->timers.begin(), x->timers.end(), [id](auto& s) { return s->id == id; });
    if (it == x->timers.end()) return false;
    (*it)->timer.cancel();
    x->timers.erase(it);
    return true;
  }

  /// A timer's message arrived: false if the timer was cancelled meanwhile;
  /// re-arms a periodic timer, forgets a one-shot one.
  bool timer_fired(std::uint64_t id) {
    auto* x = extras_if_any();
    if (!x) return false;
    auto it = std::find_if(x->timers.begin(), x->timers.end(), [id](auto& s) { return s->id == id; });
    if (it == x->timers.end()) return false;
    auto& s = **it;
    if (s.period.count() > 0) {
      s.timer.expires_at(s.timer.expiry() + s.period);
      s.arm();
    } else {
      x->timers.erase(it);
    }
    return true;
  }

  void set_in_coroutine() noexcept { in_coroutine_ = true; }

  /// First turn of a new instance: `on_start`, then the mailbox.
  void begin() noexcept {
    if constexpr (has_on_start<T>) {
      if (stop_requested()) return finish_stop();
      try {
        if constexpr (coroutine_handler_result<decltype(instance_->on_start())>) {
          spawn_coroutine(*this, instance_->on_start(), [this](std::exception_ptr ep) {
            in_coroutine_ = false;
            if (ep && on_failure(ep)) return;
            schedule();
          });
          return;
        } else {
          instance_->on_start();
        }
      } catch (...) {
        if (on_failure(std::current_exception())) return;
      }
    }
    run();
  }

  /// Runs this actor's turn, then those it hands off to (see turn_state).
  void run() noexcept { drive(this); }

  /// One turn: up to `throughput` messages, then yield the thread.
  void turn() noexcept override {
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
    std::optional<post_in_flight> counted;
    if (!this_turn.in_turn) counted.emplace(); // maybe a thread outside the pool
    if (continuation)
      asio::post(asio::prefer(executor(), asio::execution::relationship.continuation), [this] { run(); });
    else
      asio::post(executor(), [this] { run(); });
  }

  void force_stop() noexcept override {
    if (!in_coroutine_) return finish_stop();
    // A coroutine handler is still suspended: its frame (destroyed with the
    // thread pool) owns a reference to this cell and may still use the
    // instance, so the instance outlives it; everything else stops now.
    finish_stop(/*keep_instance=*/true);
  }

protected:
  cell(system_state& s, const spawn_options& o)
      : cell_base(s, !has_on_start<T>), capacity_(o.mailbox_capacity), policy_(o.supervision) {}

  /// Constructs the instance from the spawn arguments; `first` may move them.
  virtual void construct(bool first) = 0;

  std::optional<T> instance_;

private:
  template <class R>
  static constexpr bool coroutine_handler_result = awaitable_traits<R>::is_awaitable;

  template <class, class, class>
  friend struct ask_envelope;
  friend class troupe::actor_system;

  bool stop_requested() const noexcept { return stop_reason_.load(std::memory_order_acquire) != 0; }

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
    switch (inbox_.push(e)) {
    case inbox::push_result::queued:
      if (turn.pending && ++turn.pushes > turn_state::max_pushes_held) turn.flush(false);
      return {};
    case inbox::push_result::unblocked:
      if (turn.in_turn)
        turn.hold(this);
      else
        schedule();
      return {};
    case inbox::push_result::closed: break;
    }
    if (e->reject(stopped_error()))
      sys_->dead_letters.fetch_add(1, std::memory_order_relaxed);
    e->dispose();
    return errc::actor_stopped;
  }

  /// Applies the supervision policy. True if the run loop must end (the actor
  /// stopped, or a restart is pending).
  bool on_failure(const std::exception_ptr& ep) noexcept {
    using d = supervision::directive;
    if (policy_.on_failure == d::resume && instance_) return false;
    if (policy_.on_failure == d::restart) {
      auto now = std::chrono::steady_clock::now();
      if (restarts_ == 0 || now - window_start_ > policy_.window) {
        window_start_ = now;
        restarts_ = 0;
      }
      if (restarts_ < policy_.max_restarts) {
        auto backoff = policy_.min_backoff * (std::int64_t{1} << std::min<std::uint32_t>(restarts_, 30));
        ++restarts_;
        cancel_all_timers();
        instance_.reset();
        try {
          auto& timer = extras().backoff;
          if (!timer) timer.emplace(executor());
          timer->expires_after(std::min(backoff, policy_.max_backoff));
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
      construct(false);
    } catch (...) {
      if (on_failure(std::current_exception())) return;
    }
    begin();
  }

  /// The actor's last turn: fail what is queued, cancel timers, run
  /// on_stop, tell the watchers, leave the registry.
  void finish_stop(bool keep_instance = false) noexcept {
    auto reason = static_cast<exit_reason>(stop_reason_.load(std::memory_order_acquire));
    if (reason != exit_reason::normal && reason != exit_reason::failure && reason != exit_reason::system_shutdown)
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
    drop(std::exchange(cache_, nullptr));
    drop(inbox_.close());
    cancel_all_timers();
    auto& x = extras();
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
    if (instance_ && !keep_instance) {
      if constexpr (has_on_stop<T>) {
        try {
          instance_->on_stop();
        } catch (...) {
        }
      }
      instance_.reset();
    }
    leave_registry(); // before the watchers learn of it: live_actors() agrees with them
    notify_watchers(down{id_, reason, reason == exit_reason::failure ? failure_ : std::string{}});
    release(); // the registry's reference; may delete this
  }

  void cancel_all_timers() noexcept {
    if (auto* x = extras_if_any()) {
      for (auto& t : x->timers) t->timer.cancel();
      x->timers.clear();
    }
  }

  envelope_base* cache_ = nullptr;
  std::uint32_t capacity_;
  std::atomic<std::uint32_t> size_{0};
  bool in_coroutine_ = false;
  std::uint32_t restarts_ = 0;
  std::chrono::steady_clock::time_point window_start_{};
  troupe::supervision policy_;
  std::string failure_;
};

template <class T, class... Args>
class cell_impl final : public cell<T> {
public:
  template <class... A>
  cell_impl(system_state& s, const spawn_options& o, A&&... a) : cell<T>(s, o), args_(std::forward<A>(a)...) {}

  void construct(bool first) override {
    constexpr bool copyable = (std::is_copy_constructible_v<Args> && ...);
    if constexpr (copyable) {
      std::apply([this](const Args&... a) { emplace(a...); }, args_);
    } else {
      if (!first)
        throw error(errc::invalid_argument, "cannot restart " + std::string(type_name<T>()) +
                                                ": its spawn arguments are not copyable");
      std::apply([this](Args&... a) { emplace(std::move(a)...); }, args_);
    }
  }

private:
  template <class... A>
  void emplace(A&&... a) {
    if constexpr (std::is_constructible_v<T, context<T>, A&&...>)
      this->instance_.emplace(context<T>(this), std::forward<A>(a)...);
    else
      this->instance_.emplace(std::forward<A>(a)...);
  }

  std::tuple<Args...> args_;
};

template <class T, class Awaitable, class Done>
void spawn_coroutine(cell<T>& c, Awaitable&& aw, Done done) {
  c.set_in_coroutine();
  asio::co_spawn(c.executor(), std::forward<Awaitable>(aw),
                 [self = cell_ptr<cell<T>>(&c), done = std::move(done)](std::exception_ptr ep, auto&&... v) mutable {
                   done(std::move(ep), std::forward<decltype(v)>(v)...);
                 });
}

} // namespace detail
} // namespace troupe
