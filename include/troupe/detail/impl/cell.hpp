#pragma once

// The bodies of cell<T>'s longer members (turns, receive, failure, stop),
// and what builds on a complete cell: cell_impl (the instance from the
// spawn arguments), coroutine handlers' completion, the executor of
// reentrant handlers. Included at the end of cell.hpp.

#include <troupe/detail/cell.hpp>

namespace troupe::detail {

template <class T>
envelope<T>* cell<T>::take_matching(const void* const* tags, std::size_t count, std::uint64_t generation,
                                    bool& deadline) noexcept {
  envelope_base**& scan_ = extras().receive.scan;
  for (;;) {
    envelope_base* b = *scan_;
    if (!b) {
      std::uint32_t n;
      b = inbox_.take_all(n);
      if (!b) return nullptr;
      if (sys_->config.metrics) count_seen(n);
      *scan_ = b;
    }
    auto* e = static_cast<envelope<T>*>(b);
    const void* tag = e->tag();
    if (tag == &receive_deadline_tag) {
      *scan_ = e->next; // a deadline: this receive's ends it, an earlier one's is stale
      if (sys_->config.metrics) count_passed();
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
        if (sys_->config.metrics) count_passed();
        return e;
      }
    }
    scan_ = &e->next;
  }
}

template <class T>
void cell<T>::wait_receive(const void* const* tags, std::size_t count, std::chrono::nanoseconds timeout,
                           unique_function<void(envelope_base*, std::exception_ptr)> done) {
  auto& r = extras().receive;
  r.tags = tags;
  r.count = count;
  r.done = std::move(done);
  const std::uint64_t generation = ++r.generation;
  receiving_ = true;
  if (!unlimited(timeout)) { // (one that had passed never waits: see context::receive)
    if (!r.deadline) r.deadline.emplace(executor());
    r.deadline->expires_after(timeout);
    r.deadline->async_wait([self = cell_ptr<cell>(this), generation](std::error_code ec) {
      if (!ec) self->enqueue_system(new receive_deadline_envelope<T>(generation));
    });
  }
  // The next message wakes a turn, which scans (one may have come already).
  if (!inbox_.try_block()) schedule();
}

template <class T>
void cell<T>::begin() noexcept {
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

template <class T>
void cell<T>::turn() noexcept {
  busy_.store(true, std::memory_order_relaxed);
  running_scope running(this);
  if (receiving_) return receive_turn();
  const std::uint32_t budget = sys_->config.throughput;
  const bool metrics = sys_->config.metrics;
  auto& t = this_turn;
  for (std::uint32_t n = 0; n < budget;) {
    if (!cache_) {
      std::uint32_t taken;
      cache_ = inbox_.take_all(taken);
      if (!cache_) {
        if (inbox_.try_block()) return;
        continue;
      }
      if (metrics) count_seen(taken);
    }
    if (stop_requested()) return finish_stop();
    auto* e = static_cast<envelope<T>*>(cache_);
    cache_ = e->next;
    if (capacity_ && e->counts()) release_slot();
    bool user = e->counts();
    if (metrics) t.handled += user; // (a message whose handler fails or suspends counts too)
    bool suspended;
    try {
      suspended = e->process(*this);
    } catch (...) {
      auto ep = std::current_exception();
      e->reject(handler_failure(type_name<T>(), e->name(), ep));
      e->dispose();
      if (metrics) count_passed();
      if (on_failure(ep)) return;
      continue;
    }
    if (suspended) return; // (counted out by coroutine_done: the cell may be gone by now)
    e->dispose();
    handled_.store(handled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    n += user ? 1 : 0;
  }
  requeue();
}

template <class T>
void cell<T>::force_stop() noexcept {
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

template <class T>
void cell<T>::receive_turn() noexcept {
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

template <class T>
void cell<T>::end_receive(envelope<T>* e, std::exception_ptr ep) noexcept {
  auto& r = extras().receive;
  receiving_ = false;
  if (r.deadline) r.deadline->cancel();
  auto done = std::move(r.done);
  // Resumes the coroutine here, in this turn, until it waits again or
  // ends (which may release the cell: nothing of it is touched after).
  done(e, std::move(ep));
}

template <class T>
void cell<T>::release_slot() noexcept {
  std::uint64_t v = slots_.load(std::memory_order_relaxed);
  for (;;) {
    if (v < one_waiter) { // nobody waits: the slot is free again
      if (slots_.compare_exchange_weak(v, v - 1, std::memory_order_relaxed, std::memory_order_relaxed)) return;
    } else if (slots_.compare_exchange_weak(v, v - one_waiter, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      break; // the slot stays taken: it is the oldest waiter's now (never freed, never taken by another)
    }
  }
  auto* x = extras_if_any(); // a waiter was counted: its sender made the extras
  cell_extras::waiter w;
  {
    std::lock_guard g(x->lock);
    if (x->waiters.empty()) return; // a stop took the list
    w = std::move(x->waiters.front());
    x->waiters.pop_front();
  }
  w.done(push(static_cast<envelope<T>*>(w.env)));
}

template <class T>
bool cell<T>::on_failure(const std::exception_ptr& ep, bool resumable) noexcept {
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
  try {
    extras().failure = what_of(ep);
  } catch (...) {
    // no memory for the text: the down says failure without it
  }
  stop_reason_.store(static_cast<std::uint8_t>(exit_reason::failure), std::memory_order_release);
  finish_stop();
  return true;
}

template <class T>
void cell<T>::restart_now() noexcept {
  if (stop_requested()) return finish_stop();
  type_->restarts.fetch_add(1, std::memory_order_relaxed);
  try {
    ++incarnation_;
    awaited_.store(std::uint64_t(incarnation_) << 32, std::memory_order_relaxed); // the earlier one's never resume
    construct(false);
  } catch (...) {
    if (on_failure(std::current_exception())) return;
  }
  begin();
}

template <class T>
void cell<T>::destroy_instance() noexcept {
  if (!instance_) return;
  if constexpr (has_on_stop<T>) {
    try {
      instance_->on_stop();
    } catch (...) {}
  }
  instance_.reset();
}

template <class T>
down cell<T>::final_down() const {
  auto reason = static_cast<exit_reason>(stop_reason_.load(std::memory_order_acquire));
  if (reason != exit_reason::normal && reason != exit_reason::failure && reason != exit_reason::system_shutdown &&
      reason != exit_reason::passivated)
    reason = exit_reason::normal;
  const cell_extras* x = extras_if_any();
  return down{id_, reason, reason == exit_reason::failure && x ? x->failure : std::string{}};
}

template <class T>
void cell<T>::finish_stop(bool keep_instance, bool registered) noexcept {
  std::exception_ptr stopped; // built for the first ask failed, if any
  auto drop = [&](envelope_base* list) {
    std::uint64_t dead = 0;
    while (list) {
      auto* e = static_cast<envelope<T>*>(list);
      list = e->next;
      if (!stopped && e->wants_error()) stopped = stopped_error();
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
  if (stop_reason_.load(std::memory_order_acquire) == static_cast<std::uint8_t>(exit_reason::passivated)) {
    // What waits goes to the entity's next activation (in order: what was
    // stashed first), not to the dead letters; the wake-up is this cell's.
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
    for (envelope_base** at = &rest; *at;) {
      if (*at == &wake_)
        *at = wake_.next;
      else
        at = &(*at)->next;
    }
    drop(hand_over(rest));
  } else {
    drop(stashed);
    drop(std::exchange(cache_, nullptr));
    drop(inbox_.close());
  }
  cancel_all_timers();
  if (auto* x = extras_if_any()) {
    x->backoff.reset();
    x->receive.deadline.reset();
    leave_watched();
  }
  if (!keep_instance) destroy_instance();
  if (registered) leave_registry(); // before the watchers learn of it: live_actors() agrees with them
  // An actor that never needed its extras stops without making them; else
  // senders waiting for room fail, and watchers are told.
  if (cell_extras* x; !mark_stopped(x)) {
    std::list<cell_extras::waiter> waiters;
    {
      std::lock_guard g(x->lock);
      x->refuse_waiters = true;
      waiters.swap(x->waiters);
      slots_.fetch_and(taken_mask, std::memory_order_relaxed); // nobody waits any more
    }
    for (auto& w : waiters) {
      static_cast<envelope<T>*>(w.env)->dispose();
      w.done(errc::actor_stopped);
    }
    notify_watchers(*x, final_down());
  }
  release(); // the registry's reference; may delete this
}

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
    if constexpr (std::is_constructible_v<T, context<T>, A&&...>) {
      this->instance_.emplace(context<T>(this), std::forward<A>(a)...);
    } else if constexpr (std::is_constructible_v<T, A&&...>) {
      this->instance_.emplace(std::forward<A>(a)...);
    } else if constexpr (std::is_constructible_v<T, context<T>&, A&&...>) {
      static_assert(!std::is_constructible_v<T, context<T>&, A&&...>,
                    "troupe: the actor's constructor takes troupe::context<T>& (a non-const reference), which the "
                    "actor system cannot bind: take troupe::context<T> by value (a small handle: keep a copy as a "
                    "member) or by const&");
    } else {
      static_assert(std::is_constructible_v<T, A&&...>,
                    "troupe: no constructor of the actor takes (troupe::context<T>, the arguments...) nor (the "
                    "arguments...): check its parameters (a context<T> by value or const& first; an entity then "
                    "gets its key, a persistent actor its persistence_id, then the arguments given)");
    }
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

/// Counts what a cell's instance awaits (a reentrant handler, an ask's
/// continuation) from its start until its completion runs, or is destroyed
/// without running (its frame destroyed unfinished, on whatever thread, or
/// the instance restarted).
template <class T>
class awaited_count {
public:
  explicit awaited_count(cell<T>& c) noexcept : cell_(&c), incarnation_(c.incarnation()) { c.awaited_started(); }
  awaited_count(awaited_count&&) noexcept = default;
  awaited_count& operator=(awaited_count&&) = delete;
  ~awaited_count() {
    if (cell_) cell_->awaited_ended(incarnation_);
  }

  /// In a turn of the cell, as the completion runs: an entity whose last
  /// one this was may now be passivated.
  void ended() noexcept {
    const auto c = std::move(cell_);
    if (c->awaited_ended(incarnation_)) c->awaited_all_ended();
  }

private:
  cell_ptr<cell<T>> cell_;
  std::uint32_t incarnation_;
};

template <class T, class Awaitable, class Done>
void spawn_reentrant(cell<T>& c, Awaitable&& aw, Done done) {
  asio::co_spawn(asio::any_io_executor(turn_executor<T>(c)), std::forward<Awaitable>(aw),
                 [count = awaited_count<T>(c), done = std::move(done)](std::exception_ptr ep, auto&&... v) mutable {
                   count.ended();
                   done(std::move(ep), std::forward<decltype(v)>(v)...);
                 });
}

} // namespace troupe::detail
