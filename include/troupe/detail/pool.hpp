#pragma once

// Recycling of small message envelopes.
//
// Messages are allocated by the sender's thread and freed by the receiver's,
// which makes the general-purpose allocator move memory between threads on
// every message (in glibc, half the time of a flood of tells). Here each
// thread keeps free blocks per size class; a thread that frees more than it
// allocates hands batches to a shared list, from which an allocating thread
// takes a whole batch under one short lock. Under AddressSanitizer the pool
// is bypassed, so use-after-free of an envelope is still caught.
//
// A thread that floods receivers in turn (one producer, many consumers on
// other threads) allocates a receiver's messages close together: the small
// classes keep lanes of free blocks, a receiver's messages are taken from
// its lane, and a lane takes a run of blocks in the order they were freed
// (neighbours, mostly). The receiver's core then walks its mailbox through
// neighbouring lines, which the hardware prefetches. Blocks handed out in
// the order they came would put one receiver's messages as far apart as
// the receivers the sender cycles through, and each would cost the walk a
// transfer from the sender's core. A lane holds at most `lane_run` blocks.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TROUPE_DETAIL_NO_POOL 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TROUPE_DETAIL_NO_POOL 1
#endif
#endif

namespace troupe::detail::pool {

inline constexpr std::size_t granule = 16;
inline constexpr std::size_t classes = 16; // blocks up to 256 bytes
inline constexpr std::uint32_t batch = 128;
/// Lanes of the classes up to `lane_classes` (blocks up to 64 bytes: the
/// envelopes of small messages), and the run of blocks a lane takes.
inline constexpr std::size_t lane_classes = 4;
inline constexpr std::uint32_t lanes = 64;
inline constexpr std::uint32_t lane_run = 16;

struct free_block {
  free_block* next;
};

/// Batches of free blocks that threads hand each other.
struct shared_list {
  std::mutex mutex;
  std::vector<free_block*> batches; // each a chain of `batch` blocks
  /// How many batches there are, read without the lock: a thread whose
  /// blocks ran out (a producer flooding its consumers, every allocation
  /// of it) does not take the lock to find the list empty.
  std::atomic<std::size_t> available{0};
};

/// Never destroyed: blocks are freed until the process ends (a global
/// actor system shuts down in static destruction, after the statics that
/// were first used once it was constructed are gone).
inline shared_list& shared(std::size_t cls) {
  static shared_list* const lists = new shared_list[classes];
  return lists[cls];
}

struct thread_cache {
  free_block* head[classes] = {};
  std::uint32_t count[classes] = {};
  free_block* lane[lane_classes][lanes] = {};
  /// Lanes are used by a thread that ran out of free blocks since it last
  /// freed one (a sender flooding receivers that run elsewhere), for
  /// messages to one receiver, then another. A thread that frees as it
  /// sends reuses the block it freed last, still in its cache; a sender to
  /// one receiver takes neighbouring blocks from its list anyway.
  bool flooding = false;
  std::uintptr_t last_key = 0;
  /// Set by the destructor: a block allocated or freed on this thread
  /// after it (another thread-local's destructor, a global's in static
  /// destruction) goes to the general allocator instead. Checked on the
  /// slow paths only: the destructor leaves every list empty and every
  /// count at the threshold of a hand-over.
  bool gone = false;

  ~thread_cache() {
    gone = true;
    // A finished thread leaves its blocks to the others.
    for (std::size_t cls = 0; cls < lane_classes; ++cls)
      for (auto& l : lane[cls])
        while (l) {
          auto* b = l;
          l = b->next;
          ::operator delete(b);
        }
    for (std::size_t cls = 0; cls < classes; ++cls) {
      while (count[cls] >= batch && give_batch(cls)) {
      }
      while (head[cls]) {
        auto* b = head[cls];
        head[cls] = b->next;
        ::operator delete(b);
      }
      count[cls] = 2 * batch - 1; // the next free on this thread calls `overflow`
    }
  }

  /// The class's list reached two batches: one goes to the shared list.
  /// Once the cache is gone, the block just freed goes to the general
  /// allocator instead.
  void overflow(std::size_t cls) noexcept {
    if (gone) [[unlikely]] {
      free_block* b = head[cls];
      head[cls] = b->next;
      --count[cls];
      ::operator delete(b);
      return;
    }
    (void)give_batch(cls); // else the blocks stay here
  }

  /// Hands `batch` blocks to the shared list; false (the blocks stay
  /// here) if there is no memory for the list's entry.
  bool give_batch(std::size_t cls) noexcept {
    free_block* chain = head[cls];
    free_block* last = chain;
    for (std::uint32_t i = 1; i < batch; ++i) last = last->next;
    free_block* rest = last->next;
    last->next = nullptr; // cut before the chain is published
    try {
      auto& s = shared(cls);
      std::lock_guard g(s.mutex);
      s.batches.push_back(chain);
      s.available.store(s.batches.size(), std::memory_order_relaxed);
    } catch (...) {
      last->next = rest;
      return false;
    }
    head[cls] = rest;
    count[cls] -= batch;
    return true;
  }

  /// Moves up to `lane_run` blocks, in the order they were freed, from
  /// the class's list to `l`; false if there are none.
  bool fill_lane(std::size_t cls, free_block*& l) {
    if (!head[cls] && !take_batch(cls)) return false;
    free_block* last = head[cls];
    std::uint32_t n = 1;
    for (; n < lane_run && last->next; ++n) last = last->next;
    l = head[cls];
    head[cls] = last->next;
    last->next = nullptr;
    count[cls] -= n;
    return true;
  }

  bool take_batch(std::size_t cls) {
    if (gone) [[unlikely]]
      return false; // the callers fall back to the general allocator
    auto& s = shared(cls);
    if (s.available.load(std::memory_order_relaxed) == 0) return false; // a batch given meanwhile waits for the next call
    std::lock_guard g(s.mutex);
    if (s.batches.empty()) return false;
    head[cls] = s.batches.back();
    s.batches.pop_back();
    s.available.store(s.batches.size(), std::memory_order_relaxed);
    count[cls] = batch;
    return true;
  }
};

inline thread_cache& cache() {
  static thread_local thread_cache c;
  return c;
}

inline void* allocate(std::size_t size) {
#if !defined(TROUPE_DETAIL_NO_POOL)
  const std::size_t cls = (size + granule - 1) / granule - 1;
  if (cls < classes) {
    auto& c = cache();
    if (c.head[cls] || c.take_batch(cls)) {
      free_block* b = c.head[cls];
      c.head[cls] = b->next;
      --c.count[cls];
      return b;
    }
    return ::operator new((cls + 1) * granule);
  }
#endif
  return ::operator new(size);
}

/// What `allocate_near`'s `lane_of` returns for a receiver that runs on
/// this thread anyway.
inline constexpr std::uint32_t no_lane = ~std::uint32_t{0};

/// A block for a message to the receiver `key` (its address). A thread that
/// floods receivers (see `thread_cache::flooding`) takes it from the lane
/// `lane_of()` (below `lanes`, or `no_lane`) when its last message went to
/// another receiver; else it is taken as `allocate` does.
template <class LaneOf>
inline void* allocate_near(std::size_t size, std::uintptr_t key, LaneOf&& lane_of) {
#if !defined(TROUPE_DETAIL_NO_POOL)
  const std::size_t cls = (size + granule - 1) / granule - 1;
  if (cls < lane_classes) {
    auto& c = cache();
    std::uint32_t lane = no_lane;
    if (c.flooding && std::exchange(c.last_key, key) != key) lane = lane_of();
    free_block** from = &c.head[cls];
    if (lane != no_lane) {
      from = &c.lane[cls][lane];
      if (!*from && !c.fill_lane(cls, *from)) return ::operator new((cls + 1) * granule);
    } else {
      if (!*from) {
        c.flooding = true;
        if (!c.take_batch(cls)) return ::operator new((cls + 1) * granule);
      }
      --c.count[cls];
    }
    free_block* b = *from;
    *from = b->next;
    return b;
  }
#else
  (void)key;
  (void)lane_of;
#endif
  return allocate(size);
}

inline void deallocate(void* p, std::size_t size) noexcept {
#if !defined(TROUPE_DETAIL_NO_POOL)
  const std::size_t cls = (size + granule - 1) / granule - 1;
  if (cls < classes) {
    auto& c = cache();
    c.flooding = false;
    auto* b = static_cast<free_block*>(p);
    b->next = c.head[cls];
    c.head[cls] = b;
    if (++c.count[cls] >= 2 * batch) c.overflow(cls); // else kept here
    return;
  }
#endif
#if defined(__cpp_sized_deallocation)
  ::operator delete(p, size);
#else // clang without -fsized-deallocation
  (void)size;
  ::operator delete(p);
#endif
}

/// Base for pooled objects: class-specific new and delete. An over-aligned
/// object (a message declared `alignas(32)`, say) bypasses the pool, whose
/// blocks are aligned to `granule` only.
struct pooled {
  static void* operator new(std::size_t size) { return allocate(size); }
  static void operator delete(void* p, std::size_t size) noexcept { deallocate(p, size); }
  static void* operator new(std::size_t size, std::align_val_t a) { return ::operator new(size, a); }
  static void operator delete(void* p, std::size_t, std::align_val_t a) noexcept { ::operator delete(p, a); }
};

} // namespace troupe::detail::pool
