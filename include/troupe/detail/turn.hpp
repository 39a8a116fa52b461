#pragma once

// Turn scheduling: which actor a worker thread runs next, and when another
// worker takes some of its work.

#include <troupe/detail/after_turn.hpp>
#include <troupe/detail/cell_base.hpp>
#include <troupe/detail/run_queue.hpp>
#include <troupe/detail/system_state.hpp>

#include <asio/defer.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

namespace troupe::detail {

/// What the current worker thread is doing, for scheduling decisions.
///
/// An actor that a push wakes up while this thread runs another actor's
/// turn is not posted: it is kept in `woken`, and when the turn ends the
/// first one woken runs next on this thread (a hand-off: no queue, no
/// lock); the others go to this thread's run queue, as do the actors that
/// the turn's completions wake. Actors that talk to each other so stay on
/// one thread, in its cache.
///
/// Work moves to another thread only when one would otherwise idle, and
/// only when the work is worth the move: an actor moved to another core
/// loses its cache, and every message it then exchanges with the actors
/// left behind crosses cores, which for short turns costs more than the
/// second core gains. Each worker keeps its recent time per turn, so the
/// work waiting in its queue has a length in time (`backlog_ns`); it is
/// shared when that reaches `system_config::share_threshold`, in three
/// cases. A worker out of work takes half of the queue with the most work
/// waiting. A turn that pushes more messages than one turn of an actor
/// takes (a producer flooding a consumer; see `flood_pushes`) moves the
/// actors it holds to the run queue
/// and posts a request for help at once, whatever their length: an idle
/// worker takes it and steals, and the consumer runs in parallel with its
/// producer. Otherwise, while work waits in a run queue, a monitor timer
/// looks every `monitor_period` (armed by the first actor queued, on
/// whichever worker is free): a worker that began no turn since its last
/// look is stuck in a long one, and its queue is shared whatever its
/// length; a queue whose work reaches the threshold is shared too; either
/// way the worker that runs the monitor steals half of it.
struct turn_state {
  static constexpr std::uint32_t max_pending = 4;
  /// Pushes within one turn beyond one turn's budget before the turn
  /// floods (see `flood_pushes`), and the most pushes it takes whatever
  /// the budget.
  static constexpr std::uint32_t flood_slack = 16;
  static constexpr std::uint32_t max_flood_pushes = 4096;
  /// Hand-offs in a row before the next actor goes behind those queued.
  static constexpr std::uint32_t max_handoffs = 64;
  /// Turns, or time, before the thread goes back to the pool's queue
  /// (timers and completions waiting there run): an actor whose turns use
  /// their budget up goes on in this thread's queue, so a busy thread
  /// returns to the pool only so often.
  static constexpr std::uint32_t max_turns = 256;
  static constexpr std::chrono::microseconds max_run{2000};
  static constexpr std::chrono::microseconds monitor_period{1000};
  /// Every so many turns a busy worker takes the actors scheduled from
  /// outside (`take_injected`) before the next from its queue: they wait
  /// a few turns at most, and a stream of them from another thread is not
  /// taken one at a time (each take fetches the list's line from that
  /// thread's core).
  static constexpr std::uint32_t injected_interval = 8;

  bool in_turn = false;
  /// A turn or the completions it produced run on this thread: what they
  /// wake goes to its run queue (a turn's wake-ups are held first).
  bool holding = false;
  /// The system whose actor's turn runs (only its actors are held: an actor
  /// of another system runs on its own system's threads).
  const system_state* sys = nullptr;
  std::uint32_t pending = 0;
  std::uint32_t pushes = 0;
  /// `flood_pushes(*sys)`, read when the run of turns began.
  std::uint32_t flood = 0;
  cell_base* woken[max_pending];
  /// Messages taken by this thread's turns since its run of turns began
  /// (with `system_config::metrics`): counted in its run queue when it ends.
  std::uint64_t handled = 0;
  /// This thread's run queue (once it ran a turn of `queue_sys`), or null.
  run_queue* queue = nullptr;
  const system_state* queue_sys = nullptr;

  /// Takes a run queue of `s` for this thread if it is one of `s`'s
  /// workers (once; any other thread has none).
  void bind(system_state& s) noexcept {
    if (queue_sys == &s) return;
    queue_sys = &s;
    queue = s.executor().running_in_this_thread() ? s.claim_queue() : nullptr;
  }

  void hold(cell_base* c) noexcept;
  /// Counts a push to an actor already scheduled while the turn holds one
  /// it woke; past `flood`, spills what the turn holds.
  void pushed() noexcept;
  /// Moves the held actors to this thread's run queue and asks for help.
  void spill() noexcept;
  /// Queues `c` behind this thread's work; `help`: ask an idle worker to
  /// take some at once (else the monitor looks soon).
  void enqueue(cell_base* c, bool help) noexcept;
};
inline thread_local turn_state this_turn;

/// The actor whose turn this thread runs now (null outside turns).
inline thread_local cell_base* running_cell = nullptr;

/// Sets `running_cell` for a turn's duration.
struct running_scope {
  cell_base* outer;
  explicit running_scope(cell_base* c) noexcept : outer(running_cell) { running_cell = c; }
  ~running_scope() { running_cell = outer; }
  running_scope(const running_scope&) = delete;
  running_scope& operator=(const running_scope&) = delete;
};

void run_turns(cell_base* c) noexcept;

inline cell_base* as_cell(run_link* l) noexcept { return static_cast<cell_base*>(l); }

/// The work (in nanoseconds of turns) that a queue of `s` holds before
/// an idle worker takes half of it.
inline std::uint64_t share_ns(const system_state& s) noexcept {
  // In microseconds first: a huge threshold (`microseconds::max()`, say)
  // must not overflow into a small one; a negative one is zero.
  const auto us = s.config.share_threshold.count();
  if (us <= 0) return 0;
  constexpr std::int64_t max_us = std::numeric_limits<std::int64_t>::max() / 1000;
  return static_cast<std::uint64_t>(std::min<std::int64_t>(us, max_us)) * 1000;
}

/// Pushes within one turn (counted while it holds an actor it woke, from
/// the turn's start) beyond which the turn floods the actors it holds
/// (`spill`): they go where an idle worker takes them, and so do those it
/// wakes later in the turn. A stage of a
/// pipeline hands on in each turn what its turn took, at most a turn's
/// budget, and the stage it woke takes it all in one turn of its own, next
/// on this thread: no flood. A producer that pushes more than that in one
/// turn keeps its consumers busy for turns to come, and they had better
/// run in parallel with it. A few pushes beyond the budget (a stage that
/// also reports to a monitor, say) are no flood either; and a huge budget
/// does not keep a producer's consumers held for long (`max_flood_pushes`).
inline std::uint32_t flood_pushes(const system_state& s) noexcept {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(
      std::uint64_t{s.config.throughput} + turn_state::flood_slack, turn_state::max_flood_pushes));
}

inline void arm_monitor(system_state& s) noexcept;

/// Runs the work this thread's queue holds, or work stolen from another
/// worker's (posted as a request for help, or to resume after a yield).
inline void drain(system_state& s) noexcept {
  auto& t = this_turn;
  t.bind(s);
  cell_base* c = t.queue ? as_cell(t.queue->pop()) : nullptr;
  if (!c) c = as_cell(s.queues.steal(t.queue));
  if (c) run_turns(c);
}

/// Goes on with the queue `from` after its owner yielded the thread (see
/// `run_turns`). Usually the owner runs this; a worker that was idle may
/// come first, while the owner runs what waited in the pool's queue: it
/// then takes the whole queue, so the actors that were running together
/// stay together and none is left behind a worker that may now idle. A
/// worker with a queue of its own (it yielded too, and its own
/// continuation waits) takes half, and the monitor looks at the rest.
inline void resume(system_state& s, run_queue* from) noexcept {
  auto& t = this_turn;
  t.bind(s);
  if (t.queue && t.queue != from) {
    if (t.queue->size() == 0) {
      std::uint32_t n = 0;
      run_link* last = nullptr;
      if (run_link* first = from->take_all(n, last)) t.queue->append(first, last, n);
    } else if (run_link* first = s.queues.steal_from(t.queue, *from)) {
      t.queue->push(first);
      arm_monitor(s);
    }
  }
  drain(s);
}

/// Asks an idle worker of `s` to take work from the run queues (at most one
/// request outstanding).
inline void request_help(system_state& s) noexcept {
  if (s.queues.count() < 2 || s.help_requested.load(std::memory_order_relaxed) ||
      s.help_requested.exchange(true, std::memory_order_acq_rel))
    return;
  asio::post(s.executor(), [sp = &s] {
    sp->help_requested.store(false, std::memory_order_release);
    drain(*sp);
  });
}

void monitor_look(system_state& s) noexcept;
inline void arm_monitor(system_state& s) noexcept;

/// Moves the actors scheduled from outside the system's turns (`inject`)
/// behind the work of this worker's queue `q`, oldest first: a worker
/// busy with its own actors looks at the list every `injected_interval`
/// turns, so what comes from outside waits a few turns, not until the
/// worker yields to the pool (the drain posted for the list may then find
/// it empty).
/// The injected list `newest` (newest first) turned oldest first; `n`
/// receives its length.
inline run_link* oldest_first(run_link* newest, std::uint32_t& n) noexcept {
  run_link* first = nullptr;
  n = 0;
  for (run_link* l = newest; l; ++n) {
    run_link* older = l->run_next;
    l->run_next = first;
    first = l;
    l = older;
  }
  return first;
}

inline void take_injected(system_state& s, run_queue& q) noexcept {
  run_link* newest = s.injected.exchange(nullptr, std::memory_order_acquire);
  if (!newest) return;
  std::uint32_t n = 0;
  run_link* first = oldest_first(newest, n);
  q.append(first, newest, n);
  if (q.backlog_ns() >= share_ns(s)) request_help(s);
  arm_monitor(s);
}

/// Runs the actors scheduled from outside the system's turns (`inject`):
/// the oldest here, the others behind this thread's work, where another
/// worker may take them.
inline void drain_injected(system_state& s) noexcept {
  // Cleared before the list is taken: a push after the take posts again.
  // (Sequentially consistent with the push and its look at the flag in
  // `inject`: either this take sees the push, or the push sees the flag
  // cleared and posts.)
  s.drain_posted.store(false, std::memory_order_seq_cst);
  run_link* newest = s.injected.exchange(nullptr, std::memory_order_seq_cst);
  std::uint32_t n = 0;
  run_link* first = oldest_first(newest, n);
  if (!first) return;
  auto& t = this_turn;
  t.bind(s);
  if (run_link* rest = first->run_next) {
    first->run_next = nullptr;
    if (t.queue) {
      // For an idle worker to take half now if they are work enough for
      // two; else the monitor looks while any still wait behind a long
      // turn here.
      t.queue->append(rest, newest, n - 1);
      if (t.queue->backlog_ns() >= share_ns(s)) request_help(s);
      arm_monitor(s);
    } else { // not a worker of `s` (cannot happen: only they run its pool)
      for (run_link* c = rest; c;) {
        run_link* following = c->run_next;
        as_cell(c)->post(false);
        c = following;
      }
    }
  }
  run_turns(as_cell(first));
}

/// Schedules `c` from outside its system's turns (a thread of the program,
/// a completion): it joins the system's list of injected actors, and only
/// the push that finds the list empty, with no drain posted and not yet
/// begun, posts a drain of it into the pool. A burst of tells from outside
/// so costs the pool's lock and a wake-up of a worker once, not once per
/// actor, also while a busy worker keeps taking the list.
inline void inject(cell_base* c) noexcept {
  system_state& s = c->sys();
  run_link* head = s.injected.load(std::memory_order_relaxed);
  do {
    c->run_next = head;
  } while (!s.injected.compare_exchange_weak(head, c, std::memory_order_seq_cst, std::memory_order_relaxed));
  if (!head && !s.drain_posted.exchange(true, std::memory_order_seq_cst))
    asio::post(s.executor(), [sp = &s] { drain_injected(*sp); });
}

/// Arms the monitor of `s` unless it is armed (worker threads only).
inline void arm_monitor(system_state& s) noexcept {
  if (!s.monitor || s.monitor_armed.load(std::memory_order_relaxed) ||
      s.monitor_armed.exchange(true, std::memory_order_acq_rel))
    return;
  try {
    s.monitor->expires_after(turn_state::monitor_period);
    s.monitor->async_wait([sp = &s](std::error_code ec) {
      if (!ec) monitor_look(*sp);
    });
  } catch (...) {
    s.monitor_armed.store(false, std::memory_order_release);
  }
}

/// The monitor's look (on a worker that is free): steals for this thread
/// if a worker is stuck with work queued or a queue holds work enough to
/// share; looks again later while work waits.
inline void monitor_look(system_state& s) noexcept {
  bool waiting = false;
  run_queue* stuck_one = nullptr; // shared first: its owner cannot get to it
  run_queue* longest = nullptr;   // else the most work waiting, if enough
  std::uint64_t most = 0;
  for (std::uint32_t i = 0; i < s.queues.count(); ++i) {
    auto& q = s.queues[i];
    const bool stuck = q.stuck_since_last_look();
    if (q.size() == 0) continue;
    waiting = true;
    if (stuck && !stuck_one) stuck_one = &q;
    if (const auto work = q.backlog_ns(); work >= share_ns(s) && (!longest || work > most)) {
      most = work;
      longest = &q;
    }
  }
  s.monitor_armed.store(false, std::memory_order_release);
  if (waiting) arm_monitor(s); // looks again while anything waits (a stuck worker's rest, say)
  run_queue* victim = stuck_one ? stuck_one : longest;
  if (!victim) return;
  auto& t = this_turn;
  t.bind(s);
  if (t.queue == victim) return; // this worker's own: it runs it now anyway
  if (auto* c = as_cell(s.queues.steal_from(t.queue, *victim))) run_turns(c);
}

/// Runs `c`'s turn, then the completions it produced for this pool's
/// coroutines (`after_turn`: a reply resumes its asker here, once the
/// replier is released); then the actor that turn woke first (a hand-off),
/// or the oldest in this thread's run queue, or one stolen from another
/// worker's; up to `turn_state::max_turns` turns, then yields the thread.
inline void run_turns(cell_base* c) noexcept {
  auto& t = this_turn;
  if (t.in_turn) { // nested: the outer turn posts what is pending
    if (t.sys == &c->sys()) return c->turn();
    return c->post(false); // another system's actor: on its own threads
  }
  system_state* sys = &c->sys();
  t.bind(*sys);
  t.flood = flood_pushes(*sys);
  run_queue* q = t.queue;
  auto& later = this_after_turn;
  std::uint32_t handoffs = 0;
  std::uint32_t since_injected = 0;
  constexpr auto max_run_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(turn_state::max_run).count());
  std::uint32_t turns = 1;
  // The thread's time per turn, for telling how long its queue would keep
  // it busy (two clock reads per run of turns, not per turn).
  struct timing {
    run_queue* q;
    system_state& sys;
    const std::uint32_t& turns;
    std::chrono::steady_clock::time_point began = q ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    ~timing() {
      auto& handled = this_turn.handled;
      if (q) {
        const auto elapsed = std::chrono::steady_clock::now() - began;
        q->record_turns(turns, elapsed);
        q->count_run(turns, std::exchange(handled, 0), elapsed);
      } else if (handled) {
        sys.outside_handled.fetch_add(std::exchange(handled, 0), std::memory_order_relaxed);
      }
    }
  } timed{q, *sys, turns};
  for (;; ++turns) {
    t.in_turn = true;
    t.holding = true;
    t.sys = sys;
    t.pushes = 0; // a flood is counted within one turn
    if (q) q->count_turn();
    later.open = true;
    c->turn(); // may destroy c
    if (!later.queue.empty()) {
      // What the completions wake goes to this thread's queue, where the
      // monitor lets an idle worker take it if a coroutine resumed here
      // works on long after it woke them.
      t.in_turn = false;
      later.run(sys->executor());
    }
    later.open = false;
    t.in_turn = false;
    t.holding = false;
    cell_base* next = nullptr;
    if (!q) { // a thread without a queue: the first woken next, the others posted
      if (t.pending) next = t.woken[0];
      for (std::uint32_t i = 1; i < t.pending; ++i) t.woken[i]->post(true);
      t.pending = 0;
      if (!next || ++handoffs > turn_state::max_handoffs) {
        if (next) next->post(true);
        return;
      }
      c = next;
      continue;
    }
    if (t.pending) {
      next = t.woken[0];
      for (std::uint32_t i = 1; i < t.pending; ++i) t.enqueue(t.woken[i], false);
      t.pending = 0;
      if (++handoffs > turn_state::max_handoffs) { // let those queued have their turn
        q->push(next);
        next = nullptr;
      }
    }
    if (++since_injected >= turn_state::injected_interval) {
      since_injected = 0;
      if (sys->injected.load(std::memory_order_relaxed)) {
        take_injected(*sys, *q);
        if (next) { // those from outside go first, then the hand-off
          q->push(next);
          next = nullptr;
        }
      }
    }
    if (!next) {
      handoffs = 0;
      next = as_cell(q->pop());
      // Out of work: another worker's queue is taken from only when it
      // holds work enough to share (else this thread goes idle; the
      // monitor or a request for help brings it back): a few actors with
      // short turns talk to each other faster left together on their
      // thread.
      if (!next) next = as_cell(sys->queues.steal(q, share_ns(*sys)));
      if (!next) return;
    }
    // The clock is read every 16 turns, or after every turn when turns
    // are long (this thread's recent time per turn), so that `max_run`
    // holds for a few long turns as for many short ones.
    if (turns == turn_state::max_turns ||
        ((turns % 16 == 0 || std::uint64_t{q->turn_ns()} * 16 >= max_run_ns) &&
         std::chrono::steady_clock::now() - timed.began >= turn_state::max_run)) {
      // Back to the pool's queue for a while: what waits there runs, then
      // this thread (or an idle one) goes on with the queue.
      q->push(next);
      asio::defer(sys->executor(), [sys, q] { resume(*sys, q); });
      return;
    }
    c = next;
  }
}

inline void turn_state::hold(cell_base* c) noexcept {
  if (pending == max_pending) {
    enqueue(woken[0], false); // the oldest goes where another thread can take it
    std::copy(woken + 1, woken + max_pending, woken);
    --pending;
  }
  woken[pending++] = c;
  if (++pushes > flood) spill();
}

inline void turn_state::pushed() noexcept {
  if (++pushes > flood) spill();
}

inline void turn_state::spill() noexcept {
  for (std::uint32_t i = 0; i < pending; ++i) enqueue(woken[i], true);
  pending = 0;
}

inline void turn_state::enqueue(cell_base* c, bool help) noexcept {
  // Read before the push: once queued, another worker may take `c`, run
  // its last turn and free it.
  system_state& s = c->sys();
  if (!queue || queue_sys != &s) return c->post(false);
  queue->push(c);
  if (help)
    request_help(s);
  else
    arm_monitor(s);
}

} // namespace troupe::detail
