#pragma once

// Turn scheduling: which actor a worker thread runs next.

#include <troupe/detail/after_turn.hpp>
#include <troupe/detail/cell_base.hpp>
#include <troupe/detail/system_state.hpp>

#include <algorithm>
#include <cstdint>

namespace troupe::detail {

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
  /// The system whose actor's turn runs (only its actors are held: an actor
  /// of another system runs on its own system's threads).
  const system_state* sys = nullptr;
  std::uint32_t pending = 0;
  std::uint32_t pushes = 0;
  cell_base* woken[max_pending];

  void hold(cell_base* c) noexcept;
  void flush(bool continuation) noexcept;
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

/// Runs `c`'s turn, then the completions it produced for this pool's
/// coroutines (`after_turn`: a reply resumes its asker here, once the
/// replier is released); when that turn woke exactly one actor, runs that
/// actor's turn next on this thread (a hand-off: no queue, no lock), up to
/// `turn_state::max_handoffs` times, then posts what is pending.
inline void run_turns(cell_base* c) noexcept {
  auto& t = this_turn;
  if (t.in_turn) { // nested: the outer turn posts what is pending
    if (t.sys == &c->sys()) return c->turn();
    return c->post(false); // another system's actor: on its own threads
  }
  auto& later = this_after_turn;
  for (std::uint32_t handoffs = 0;; ++handoffs) {
    system_state* sys = &c->sys();
    t.in_turn = true;
    t.sys = sys;
    later.open = true;
    c->turn(); // may destroy c
    if (!later.queue.empty()) {
      // The continuations are no actor's turn: what they wake is posted
      // where any idle thread takes it, never held behind their work (a
      // reply's asker may work long after its ask).
      t.in_turn = false;
      t.flush(false);
      later.run(sys->executor());
    }
    later.open = false;
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

} // namespace troupe::detail
