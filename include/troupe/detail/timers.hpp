#pragma once

// An actor's timers (schedule_once, schedule_every): run on the actor
// system's executor, cancelled all at once when the actor stops or restarts.

#include <troupe/detail/unique_function.hpp>

#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace troupe::detail {

/// The armed timers of one actor. Actor context only (not thread-safe).
class timer_set {
public:
  using executor_type = asio::thread_pool::executor_type;
  /// Starts one wait of `timer`, the wait of timer `id`.
  using arm_fn = unique_function<void(asio::steady_timer& timer, std::uint64_t id)>;

  /// Arms a timer that fires after `delay`, then every `period` (zero: once).
  std::uint64_t add(executor_type ex, std::chrono::nanoseconds delay, std::chrono::nanoseconds period, arm_fn arm) {
    auto s = std::make_unique<slot>(next_++, ex, period, std::move(arm));
    s->timer.expires_after(delay);
    s->arm(s->timer, s->id);
    slots_.push_back(std::move(s));
    return slots_.back()->id;
  }

  /// False if the timer had fired (one-shot) or was cancelled already.
  bool cancel(std::uint64_t id) noexcept {
    auto it = find(id);
    if (it == slots_.end()) return false;
    (*it)->timer.cancel();
    slots_.erase(it);
    return true;
  }

  /// A timer's message arrived: false if the timer was cancelled meanwhile;
  /// re-arms a periodic timer (at a fixed rate), forgets a one-shot one.
  bool fired(std::uint64_t id) {
    auto it = find(id);
    if (it == slots_.end()) return false;
    auto& s = **it;
    if (s.period.count() > 0) {
      s.timer.expires_at(s.timer.expiry() + s.period);
      s.arm(s.timer, s.id);
    } else {
      slots_.erase(it);
    }
    return true;
  }

  void cancel_all() noexcept {
    for (auto& s : slots_) s->timer.cancel();
    slots_.clear();
  }

  bool empty() const noexcept { return slots_.empty(); }

private:
  struct slot {
    slot(std::uint64_t i, executor_type ex, std::chrono::nanoseconds p, arm_fn a)
        : id(i), timer(ex), period(p), arm(std::move(a)) {}
    std::uint64_t id;
    asio::steady_timer timer;
    std::chrono::nanoseconds period;
    arm_fn arm;
  };

  std::vector<std::unique_ptr<slot>>::iterator find(std::uint64_t id) noexcept {
    return std::find_if(slots_.begin(), slots_.end(), [id](auto& s) { return s->id == id; });
  }

  std::vector<std::unique_ptr<slot>> slots_;
  std::uint64_t next_ = 1;
};

} // namespace troupe::detail
