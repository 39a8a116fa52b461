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

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
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

struct free_block {
  free_block* next;
};

/// Batches of free blocks that threads hand each other.
struct shared_list {
  std::mutex mutex;
  std::vector<free_block*> batches; // each a chain of `batch` blocks
};

inline shared_list& shared(std::size_t cls) {
  static shared_list lists[classes];
  return lists[cls];
}

struct thread_cache {
  free_block* head[classes] = {};
  std::uint32_t count[classes] = {};

  ~thread_cache() {
    // A finished thread leaves its blocks to the others.
    for (std::size_t cls = 0; cls < classes; ++cls) {
      while (count[cls] >= batch) give_batch(cls);
      while (head[cls]) {
        auto* b = head[cls];
        head[cls] = b->next;
        ::operator delete(b);
      }
    }
  }

  void give_batch(std::size_t cls) {
    free_block* chain = head[cls];
    free_block* last = chain;
    for (std::uint32_t i = 1; i < batch; ++i) last = last->next;
    head[cls] = last->next;
    last->next = nullptr;
    count[cls] -= batch;
    auto& s = shared(cls);
    std::lock_guard g(s.mutex);
    s.batches.push_back(chain);
  }

  bool take_batch(std::size_t cls) {
    auto& s = shared(cls);
    std::lock_guard g(s.mutex);
    if (s.batches.empty()) return false;
    head[cls] = s.batches.back();
    s.batches.pop_back();
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

inline void deallocate(void* p, std::size_t size) noexcept {
#if !defined(TROUPE_DETAIL_NO_POOL)
  const std::size_t cls = (size + granule - 1) / granule - 1;
  if (cls < classes) {
    auto& c = cache();
    auto* b = static_cast<free_block*>(p);
    b->next = c.head[cls];
    c.head[cls] = b;
    if (++c.count[cls] >= 2 * batch) {
      try {
        c.give_batch(cls);
      } catch (...) {
        // no memory for the shared list: keep the blocks here
      }
    }
    return;
  }
#endif
  ::operator delete(p, size);
}

/// Base for pooled objects: class-specific new and delete.
struct pooled {
  static void* operator new(std::size_t size) { return allocate(size); }
  static void operator delete(void* p, std::size_t size) noexcept { deallocate(p, size); }
};

} // namespace troupe::detail::pool
