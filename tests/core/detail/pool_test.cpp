// The envelope pool on its own: blocks are reused within a thread and
// handed between threads in batches; a flooding sender takes lanes.
#include <troupe/detail/pool.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_detail_pool_test {

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

// Lanes: a thread that floods receivers in turn (a producer whose
// consumers run on other threads) takes each receiver's blocks from a lane
// of its own, so one receiver's messages lie together; a thread that frees
// as it sends, or sends to a receiver that runs on it, reuses the block it
// freed last.
namespace {
constexpr std::size_t lane_size = 32;
constexpr std::size_t lane_cls = lane_size / pool::granule - 1;
static_assert(lane_cls < pool::lane_classes);
} // namespace

TEST_CASE("a thread floods once its list of free blocks has run dry since it last freed one") {
#if !defined(TROUPE_DETAIL_NO_POOL)
  std::thread([] {
    auto& c = pool::cache();
    CHECK_FALSE(c.flooding);
    int r = 0;
    void* first = pool::allocate_near(lane_size, reinterpret_cast<std::uintptr_t>(&r), [] { return 0u; });
    CHECK(c.flooding); // a new thread's list is empty
    pool::deallocate(first, lane_size);
    CHECK_FALSE(c.flooding);
    std::vector<void*> taken;
    while (c.head[lane_cls]) taken.push_back(pool::allocate_near(lane_size, 1, [] { return 0u; }));
    CHECK_FALSE(c.flooding); // the list ran dry, but nothing was asked of it since
    taken.push_back(pool::allocate_near(lane_size, 1, [] { return 0u; }));
    CHECK(c.flooding);
    for (auto* p : taken) pool::deallocate(p, lane_size);
  }).join();
#endif
}

TEST_CASE("a thread that floods receivers in turn gives each a run of blocks of its own, in the order they were freed") {
#if !defined(TROUPE_DETAIL_NO_POOL)
  std::thread([] {
    constexpr std::uint32_t run = pool::lane_run;
    std::vector<void*> blocks;
    for (std::uint32_t i = 0; i < 2 * run; ++i) blocks.push_back(pool::allocate(lane_size));
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool::deallocate(*it, lane_size);
    auto& c = pool::cache();
    CHECK(c.head[lane_cls] == blocks.front()); // the thread's list: blocks[0], blocks[1], ...
    if (c.head[lane_cls] != blocks.front()) return; // (a REQUIRE off the test's thread would end the program)
    c.flooding = true; // as when its list has run dry since it last freed a block
    int a = 0, b = 0;  // two receivers, sent to in turn
    std::vector<void*> to_a, to_b;
    for (std::uint32_t i = 0; i < run; ++i) {
      to_a.push_back(pool::allocate_near(lane_size, reinterpret_cast<std::uintptr_t>(&a), [] { return 0u; }));
      to_b.push_back(pool::allocate_near(lane_size, reinterpret_cast<std::uintptr_t>(&b), [] { return 1u; }));
    }
    // Handed out in the order they came, `a` would have had every other block.
    CHECK(to_a == std::vector<void*>(blocks.begin(), blocks.begin() + run));
    CHECK(to_b == std::vector<void*>(blocks.begin() + run, blocks.end()));
    for (auto* p : to_a) pool::deallocate(p, lane_size);
    for (auto* p : to_b) pool::deallocate(p, lane_size);
    CHECK_FALSE(c.flooding); // a thread that frees is not flooding
  }).join();
#endif
}

TEST_CASE("a thread that frees as it sends, or sends to a receiver that runs on it, reuses the block it freed last") {
#if !defined(TROUPE_DETAIL_NO_POOL)
  std::thread([] {
    int r = 0;
    const auto key = reinterpret_cast<std::uintptr_t>(&r);
    void* m = pool::allocate(lane_size);
    pool::deallocate(m, lane_size);
    void* n = pool::allocate_near(lane_size, key, [] { return 3u; });
    CHECK(n == m); // not flooding: no lane
    pool::deallocate(n, lane_size);
    pool::cache().flooding = true;
    void* o = pool::allocate_near(lane_size, key + 64, [] { return pool::no_lane; });
    CHECK(o == n); // flooding, but the receiver runs on this thread
    pool::deallocate(o, lane_size);
  }).join();
#endif
}

TEST_CASE("a thread whose blocks ran out finds the shared list empty without taking its lock") {
#if !defined(TROUPE_DETAIL_NO_POOL)
  constexpr std::size_t size = 208;
  constexpr std::size_t cls = size / pool::granule - 1;
  auto& s = pool::shared(cls);
  std::unique_lock held(s.mutex); // as while another thread hands a batch over
  if (!s.batches.empty()) {
    WARN("the shared list of this class is not empty in this process: nothing to check");
    return;
  }
  // A new thread: its list is empty, so it looks at the shared one.
  auto allocated = std::async(std::launch::async, [] {
    void* p = pool::allocate(size);
    pool::deallocate(p, size);
    return p != nullptr;
  });
  const bool without_waiting = allocated.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  held.unlock();
  CHECK(allocated.get());
  CHECK(without_waiting); // it did not wait for the lock
#endif
}

TEST_CASE("every block, new or reused, from a thread's list or from a lane, is aligned for any fundamental type") {
  std::thread([] {
    constexpr auto align = alignof(std::max_align_t);
    auto aligned = [](void* p) { return reinterpret_cast<std::uintptr_t>(p) % align == 0; };
    bool all_aligned = true;
    std::set<void*> freed;
    std::size_t reused_from_lanes = 0;
    for (int round = 0; round < 3; ++round) { // new blocks, then blocks taken back from the lists
      std::vector<std::pair<void*, std::size_t>> blocks;
      for (std::size_t size = 1; size <= 300; ++size)
        for (int k = 0; k < 4; ++k) {
          void* p = pool::allocate(size);
          all_aligned = all_aligned && aligned(p);
          blocks.emplace_back(p, size);
        }
      // A flooding sender: blocks of the small classes come from lanes.
      pool::cache().flooding = true;
      for (std::size_t size = 1; size <= 64; ++size)
        for (std::uint32_t receiver = 0; receiver < 4; ++receiver) {
          void* q = pool::allocate_near(size, 1000 + receiver, [receiver] { return receiver % pool::lanes; });
          all_aligned = all_aligned && aligned(q);
          if (freed.count(q)) ++reused_from_lanes;
          blocks.emplace_back(q, size);
        }
      freed.clear();
      for (auto [p, size] : blocks) {
        freed.insert(p);
        pool::deallocate(p, size);
      }
    }
    CHECK(all_aligned);
#if !defined(TROUPE_DETAIL_NO_POOL)
    CHECK(reused_from_lanes > 0); // the lanes handed out blocks freed before
#endif
  }).join();
}

} // namespace core_detail_pool_test
