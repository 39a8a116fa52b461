#pragma once

#include <atomic>
#include <thread>

namespace troupe::detail {

/// Counts posts into an executor that are still returning. A post signals
/// the executor's queue (a condition variable) after the work it posted may
/// already have run and released the last owner of that queue; whoever
/// destroys the queue waits for the count to reach zero first.
class post_counter {
public:
  /// Counts one post for its whole duration. (Sequentially consistent with
  /// `wait_idle`: a counter that checks an inbox after counting, and a
  /// shutdown that closes it before waiting, never miss each other.)
  class guard {
  public:
    explicit guard(post_counter& c) noexcept : c_(c) { c_.n_.fetch_add(1, std::memory_order_seq_cst); }
    ~guard() { c_.n_.fetch_sub(1, std::memory_order_acq_rel); }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

  private:
    post_counter& c_;
  };

  /// Returns once no counted post is still returning.
  void wait_idle() const noexcept {
    while (n_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }

private:
  std::atomic<long> n_{0};
};

/// Posts from troupe's completions (`stored_handler`) into any executor
/// (it cannot tell whose): an actor system waits for these, held only while
/// a completion is being posted, before it destroys its thread pool. Posts of
/// actor turns count in their own system's `system_state::posts`.
inline post_counter posts_in_flight;

} // namespace troupe::detail
