// What spawning and stopping an actor costs in heap allocations: once the
// recycling pool holds blocks, nothing: the cell and the message come from
// it, and the stop makes no wake-up message, no exception for messages
// nobody asked about, no block of rarely used state. Its own executable:
// it replaces the global operator new to count.
#include <troupe/troupe.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <future>
#include <new>

namespace {

std::atomic<bool> counting{false};
std::atomic<long> allocations{0};

struct finished {
  std::atomic<long> left;
  std::promise<void> done;
  void arrive() {
    if (left.fetch_sub(1) == 1) done.set_value();
  }
};

struct hello {
  finished* f;
};
class short_lived {
public:
  explicit short_lived(troupe::context<short_lived> ctx) : ctx_(ctx) {}
  void handle(hello h) {
    ctx_.stop();
    h.f->arrive();
  }

private:
  troupe::context<short_lived> ctx_;
};

struct spawn_children {
  long n;
  finished* f;
};
class parent {
public:
  explicit parent(troupe::context<parent> ctx) : ctx_(ctx) {}
  void handle(spawn_children s) {
    for (long i = 0; i < s.n; ++i) ctx_.system().spawn<short_lived>().tell(hello{s.f});
  }

private:
  troupe::context<parent> ctx_;
};

} // namespace

// Every form the program may use with the plain operator delete below (the
// replacements pair malloc with free, which GCC cannot see through).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static void* counted_new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new(std::size_t n) {
  if (void* p = counted_new(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_new(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

TEST_CASE("spawning an actor, telling it once and its stop allocate nothing once the pool has the blocks") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  auto p = sys.spawn<parent>();
  // Warm up with the same count: the parent's one turn tells every child
  // before any runs, so that many envelopes live at once; the recycling
  // pool keeps them for the measured run.
  const long n = 20000;
  {
    finished f{n, {}};
    auto done = f.done.get_future();
    p.tell(spawn_children{n, &f});
    done.get();
  }
  finished f{n, {}};
  auto done = f.done.get_future();
  allocations = 0;
  counting = true;
  p.tell(spawn_children{n, &f});
  done.get();
  counting = false;
  const double per_actor = double(allocations.load()) / n;
  INFO("allocations per spawn, tell and stop: " << per_actor);
#if defined(TROUPE_DETAIL_NO_POOL)
  CHECK(per_actor < 2.1); // the cell and the message's envelope (no recycling pool under AddressSanitizer)
#else
  CHECK(per_actor < 0.1); // none: cells and envelopes come from the recycling pool
#endif
}

TEST_CASE("a watch of an actor that stopped without ever needing its rarely used state is told at once") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  finished f{1, {}};
  auto done = f.done.get_future();
  auto a = sys.spawn<short_lived>();
  a.tell(hello{&f});
  done.get();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sys.live_actors() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  REQUIRE(sys.live_actors() == 0); // stopped, its rarely used state never made
  auto stopped = a.when_stopped(asio::use_future);
  auto d = stopped.get();
  CHECK(d.reason == troupe::exit_reason::normal);
  CHECK(d.id == a.id());
}
