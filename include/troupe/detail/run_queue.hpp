#pragma once

// A worker thread's queue of actors ready to run.

#include <troupe/detail/spinlock.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <utility>

namespace troupe::detail {

/// The link an actor's cell has for the run queue it waits in (at most
/// one: an actor is scheduled once until its turn runs).
struct run_link {
  run_link* run_next = nullptr;
};

/// The actors a worker thread woke and will run, oldest first. Its owner
/// pushes and pops; an idle worker steals half of it. A short lock: the
/// owner's operations are uncontended but for a steal.
class alignas(64) run_queue {
public:
  /// Returns how many wait in the queue now.
  std::uint32_t push(run_link* c) noexcept {
    c->run_next = nullptr;
    return append(c, c, 1);
  }

  run_link* pop() noexcept {
    if (size_.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard g(lock_);
    run_link* c = head_;
    if (!c) return nullptr;
    head_ = c->run_next;
    if (!head_) tail_ = nullptr;
    size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return c;
  }

  /// Takes the older half (at least one, at most `max_taken`), oldest
  /// first, as a chain; `n` receives its length and `last` its last link.
  /// The chain is walked under the lock, one cold cell at a time: the cap
  /// keeps the owner's wait short however long the queue.
  run_link* take_half(std::uint32_t& n, run_link*& last) noexcept {
    n = 0;
    last = nullptr;
    if (size_.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard g(lock_);
    const std::uint32_t size = size_.load(std::memory_order_relaxed);
    if (size == 0) return nullptr;
    n = std::min((size + 1) / 2, max_taken);
    run_link* first = head_;
    last = first;
    for (std::uint32_t i = 1; i < n; ++i) last = last->run_next;
    head_ = last->run_next;
    if (!head_) tail_ = nullptr;
    last->run_next = nullptr;
    size_.store(size - n, std::memory_order_relaxed);
    return first;
  }

  /// Takes the whole queue, oldest first, as a chain; `n` receives its
  /// length and `last` its last link.
  run_link* take_all(std::uint32_t& n, run_link*& last) noexcept {
    n = 0;
    last = nullptr;
    if (size_.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard g(lock_);
    run_link* first = std::exchange(head_, nullptr);
    last = std::exchange(tail_, nullptr);
    n = size_.load(std::memory_order_relaxed);
    size_.store(0, std::memory_order_relaxed);
    return first;
  }

  /// Appends a chain of `n`, `first` to `last` (from a steal); returns how
  /// many wait in the queue now.
  std::uint32_t append(run_link* first, run_link* last, std::uint32_t n) noexcept {
    std::lock_guard g(lock_);
    if (tail_)
      tail_->run_next = first;
    else
      head_ = first;
    tail_ = last;
    const std::uint32_t size = size_.load(std::memory_order_relaxed) + n;
    size_.store(size, std::memory_order_relaxed);
    return size;
  }

  /// Racy: for choosing a victim.
  std::uint32_t size() const noexcept { return size_.load(std::memory_order_relaxed); }

  /// The owner records a run of `turns` turns that took `elapsed`: its
  /// time per turn, a moving average (an eighth of the new figure).
  void record_turns(std::uint32_t turns, std::chrono::nanoseconds elapsed) noexcept {
    const auto per_turn = static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed.count(), 0)) / turns;
    const std::int64_t old = turn_ns_.load(std::memory_order_relaxed);
    const std::int64_t now = static_cast<std::int64_t>(std::min<std::uint64_t>(per_turn, max_turn_ns));
    // The first figure is taken whole: an average that starts from zero
    // would call a new worker's queue empty of work for many runs.
    turn_ns_.store(static_cast<std::uint32_t>(old == 0 ? now : old + (now - old) / 8), std::memory_order_relaxed);
  }
  /// The owner counts a run of `turns` turns that took `elapsed` and
  /// handled `messages` (for the metrics).
  void count_run(std::uint32_t turns, std::uint64_t messages, std::chrono::nanoseconds elapsed) noexcept {
    turns_total_.store(turns_total_.load(std::memory_order_relaxed) + turns, std::memory_order_relaxed);
    messages_.store(messages_.load(std::memory_order_relaxed) + messages, std::memory_order_relaxed);
    busy_ns_.store(busy_ns_.load(std::memory_order_relaxed) + static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed.count(), 0)),
                   std::memory_order_relaxed);
  }
  /// Racy: turns run, messages handled and time spent in runs of turns by
  /// the owner so far.
  std::uint64_t turns_total() const noexcept { return turns_total_.load(std::memory_order_relaxed); }
  std::uint64_t messages() const noexcept { return messages_.load(std::memory_order_relaxed); }
  std::uint64_t busy_ns() const noexcept { return busy_ns_.load(std::memory_order_relaxed); }

  /// Racy: the owner's recent time per turn (0 before it ran any).
  std::uint32_t turn_ns() const noexcept { return turn_ns_.load(std::memory_order_relaxed); }
  /// Racy: how long the actors waiting here would keep the owner busy,
  /// by its recent time per turn.
  std::uint64_t backlog_ns() const noexcept { return std::uint64_t{size()} * turn_ns(); }

  /// The owner counts its turns; the monitor compares the count with the
  /// one it saw last, to tell a worker stuck in a long turn.
  void count_turn() noexcept { turns_.store(turns_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  /// For the monitor (one at a time): whether no turn began since its
  /// last look.
  bool stuck_since_last_look() noexcept {
    const std::uint32_t now = turns_.load(std::memory_order_relaxed);
    return std::exchange(seen_, now) == now;
  }

  /// The most one steal takes.
  static constexpr std::uint32_t max_taken = 64;

private:
  static constexpr std::uint64_t max_turn_ns = 1'000'000'000;

  spinlock lock_;
  std::atomic<std::uint32_t> turns_{0};
  std::atomic<std::uint32_t> turn_ns_{0};
  std::uint32_t seen_ = 0;
  std::atomic<std::uint64_t> turns_total_{0};
  std::atomic<std::uint64_t> messages_{0};
  std::atomic<std::uint64_t> busy_ns_{0};
  std::atomic<std::uint32_t> size_{0};
  run_link* head_ = nullptr;
  run_link* tail_ = nullptr;
};

/// The run queues of one system's workers.
class run_queues {
public:
  explicit run_queues(std::uint32_t workers) : count_(workers), queues_(new run_queue[workers]) {}
  ~run_queues() { delete[] queues_; }
  run_queues(const run_queues&) = delete;
  run_queues& operator=(const run_queues&) = delete;

  std::uint32_t count() const noexcept { return count_; }
  run_queue& operator[](std::uint32_t i) noexcept { return queues_[i]; }
  const run_queue& operator[](std::uint32_t i) const noexcept { return queues_[i]; }

  /// A queue for the calling worker thread (once per thread), or null when
  /// every one is taken (a thread that is not one of the workers).
  run_queue* claim() noexcept {
    const std::uint32_t i = next_.fetch_add(1, std::memory_order_relaxed);
    return i < count_ ? &queues_[i] : nullptr;
  }

  /// Work for `thief` (its own queue, or null): the oldest half of the
  /// other queue with the most work waiting (`backlog_ns`), if that is at
  /// least `least_ns`; 0 takes from any queue that holds one. Returns the
  /// first to run; the rest go to `thief`'s queue.
  run_link* steal(run_queue* thief, std::uint64_t least_ns = 0) noexcept {
    run_queue* victim = nullptr;
    std::uint64_t most = 0;
    for (std::uint32_t i = 0; i < count_; ++i) {
      auto& q = queues_[i];
      if (&q == thief || q.size() == 0) continue;
      if (const auto work = q.backlog_ns(); work >= least_ns && (!victim || work > most || (work == most && q.size() > victim->size()))) {
        most = work;
        victim = &q;
      }
    }
    if (!victim) return nullptr;
    return steal_from(thief, *victim);
  }

  /// Work for `thief` (its own queue, or null) from `victim`: its oldest
  /// half (at most `run_queue::max_taken`). Returns the first to run; the
  /// rest go to `thief`'s queue.
  run_link* steal_from(run_queue* thief, run_queue& victim_queue) noexcept {
    run_queue* victim = &victim_queue;
    std::uint32_t n = 0;
    run_link* last = nullptr;
    run_link* first = victim->take_half(n, last);
    if (!first || n == 1) return first;
    run_link* rest = first->run_next;
    first->run_next = nullptr;
    if (thief) {
      thief->append(rest, last, n - 1);
    } else { // no queue of its own: the rest goes back
      for (run_link* c = rest; c;) {
        run_link* following = c->run_next;
        victim->push(c);
        c = following;
      }
    }
    return first;
  }

private:
  const std::uint32_t count_;
  run_queue* const queues_;
  std::atomic<std::uint32_t> next_{0};
};

} // namespace troupe::detail
