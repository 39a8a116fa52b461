#pragma once

#include <troupe/detail/pool.hpp>

#include <atomic>
#include <cstdint>

namespace troupe::detail {

/// The intrusive link every message envelope starts with; envelopes are
/// allocated from the recycling pool.
struct envelope_base : pool::pooled {
  envelope_base* next = nullptr;
};

/// A lock-free multi-producer single-consumer mailbox queue.
///
/// Producers push onto a LIFO stack with one compare-and-swap; the consumer
/// takes the whole stack with one exchange and reverses it, so messages come
/// out in push order (per-sender FIFO holds). The head also encodes the
/// consumer's state, which makes scheduling exact without a second atomic:
///   nullptr   empty, consumer running (or about to run)
///   blocked   empty, consumer idle: the producer that replaces it schedules
///   closed    the actor has stopped: pushes fail
class inbox {
public:
  enum class push_result : std::uint8_t { queued, unblocked, closed };

  explicit inbox(bool start_blocked) noexcept : head_(start_blocked ? blocked_tag() : nullptr) {}

  inbox(const inbox&) = delete;
  inbox& operator=(const inbox&) = delete;

  /// Thread-safe. `unblocked` means the caller must schedule the consumer.
  push_result push(envelope_base* e) noexcept {
    envelope_base* h = head_.load(std::memory_order_relaxed);
    for (;;) {
      if (h == closed_tag()) return push_result::closed;
      e->next = h == blocked_tag() ? nullptr : h;
      if (head_.compare_exchange_weak(h, e, std::memory_order_acq_rel, std::memory_order_relaxed))
        return h == blocked_tag() ? push_result::unblocked : push_result::queued;
    }
  }

  /// Consumer only. Everything queued so far, oldest first, or nullptr.
  envelope_base* take_all() noexcept {
    std::uint32_t n;
    return take_all(n);
  }
  /// As `take_all()`, with `n` set to how many were taken.
  envelope_base* take_all(std::uint32_t& n) noexcept {
    n = 0;
    if (head_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    return reverse(head_.exchange(nullptr, std::memory_order_acq_rel), n);
  }

  /// Consumer only. Marks the consumer idle if the inbox is still empty;
  /// false means new messages arrived and the consumer must go on.
  bool try_block() noexcept {
    envelope_base* expected = nullptr;
    return head_.compare_exchange_strong(expected, blocked_tag(), std::memory_order_acq_rel, std::memory_order_relaxed);
  }

  /// Consumer only (or when no consumer can run). Closes the inbox and returns
  /// what was still queued, oldest first.
  envelope_base* close() noexcept {
    envelope_base* h = head_.exchange(closed_tag(), std::memory_order_acq_rel);
    return is_tag(h) ? nullptr : reverse(h);
  }

  bool closed() const noexcept { return head_.load(std::memory_order_acquire) == closed_tag(); }

private:
  static envelope_base* blocked_tag() noexcept { return reinterpret_cast<envelope_base*>(std::uintptr_t{1}); }
  static envelope_base* closed_tag() noexcept { return reinterpret_cast<envelope_base*>(std::uintptr_t{2}); }
  static bool is_tag(envelope_base* e) noexcept { return e == nullptr || e == blocked_tag() || e == closed_tag(); }
  static envelope_base* reverse(envelope_base* h) noexcept {
    std::uint32_t n;
    return reverse(h, n);
  }
  static envelope_base* reverse(envelope_base* h, std::uint32_t& n) noexcept {
    envelope_base* out = nullptr;
    n = 0;
    while (h) {
      envelope_base* next = h->next;
      h->next = out;
      out = h;
      h = next;
      ++n;
    }
    return out;
  }

  std::atomic<envelope_base*> head_;
};

} // namespace troupe::detail
