// The envelope pool on its own: blocks are reused within a thread and
// handed between threads in batches.
#include <troupe/detail/pool.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace pool = troupe::detail::pool;

TEST_CASE("a freed block of a size class is reused by the next allocation of that class on the thread") {
  void* a = pool::allocate(40);
  std::memset(a, 0x5a, 40);
  pool::deallocate(a, 40);
  void* b = pool::allocate(48); // the same class: 33 to 48 bytes
#if !defined(TROUPE_DETAIL_NO_POOL)
  CHECK(b == a);
#endif
  pool::deallocate(b, 48);
}

TEST_CASE("blocks larger than the largest class come from the general allocator and go back to it") {
  void* big = pool::allocate(4096);
  std::memset(big, 1, 4096);
  pool::deallocate(big, 4096);
  SUCCEED();
}

TEST_CASE("blocks freed on one thread are reused by another after a batch has gone to the shared list") {
  constexpr int n = 3 * pool::batch;
  std::vector<void*> blocks;
  for (int i = 0; i < n; ++i) blocks.push_back(pool::allocate(64));
  std::set<void*> freed;
  std::thread([&] {
    for (auto* b : blocks) {
      freed.insert(b);
      pool::deallocate(b, 64);
    }
  }).join(); // the thread's cache goes to the shared list when it ends
  int reused = 0;
  std::vector<void*> again;
  for (int i = 0; i < n; ++i) {
    again.push_back(pool::allocate(64));
    reused += freed.count(again.back()) ? 1 : 0;
  }
#if !defined(TROUPE_DETAIL_NO_POOL)
  CHECK(reused >= static_cast<int>(pool::batch));
#endif
  for (auto* b : again) pool::deallocate(b, 64);
}
