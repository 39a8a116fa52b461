// The lifecycle stress suite: several threads spawn, ask, fail, restart and
// stop actors of two systems while both systems are destroyed, in either
// order, with references that outlive them and completions bound to a
// foreign io_context and to strands. Checked: every ask completes exactly
// once, every instance constructed got its on_stop, shutdown finishes within
// its timeout plus a bound, and (in the sanitizer builds) no use after free,
// no race, no leak.
//
// Seeded: TROUPE_STRESS_SEED replays a run (the seed is printed on
// failure); TROUPE_STRESS_ROUNDS sets its length (the suite runs 8; the long
// mode in docs/core.md runs 500).
#include <troupe/actor_system.hpp>

#include <troupe/context.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <shared_mutex>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_lifecycle_stress_test {

using namespace std::chrono_literals;

namespace {

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  if (const char* s = std::getenv(name)) return std::strtoull(s, nullptr, 10);
  return fallback;
}

/// What every instance and every ask did, over a round.
struct ledger {
  std::atomic<long> started{0}, stopped{0}; // instances constructed, and their on_stop
  std::mutex m;
  std::deque<std::atomic<int>> completions; // per ask: how many times it completed
  std::deque<std::atomic<int>> cancellable; // asks of a system that may go first: at most once

  std::atomic<int>* new_ask(bool may_be_cancelled = false) {
    std::lock_guard g(m);
    return &(may_be_cancelled ? cancellable : completions).emplace_back(0);
  }
  std::size_t asks() {
    std::lock_guard g(m);
    return completions.size() + cancellable.size();
  }
};

struct ping {};
struct boom {};
struct nap {
  std::chrono::milliseconds d;
};
struct arm {
  std::chrono::milliseconds d;
};
struct tick {};
struct quit {};

class worker {
public:
  worker(troupe::context<worker> ctx, std::shared_ptr<ledger> l) : ctx_(ctx), l_(std::move(l)) { ++l_->started; }
  void on_start() {}
  void on_stop() { ++l_->stopped; }
  int handle(ping) { return ++n_; }
  int handle(boom) { throw std::runtime_error("boom"); }
  troupe::task<int> handle(nap m) {
    asio::steady_timer t(co_await asio::this_coro::executor, m.d);
    co_await t.async_wait(asio::use_awaitable);
    co_return ++n_;
  }
  void handle(arm m) {
    ctx_.schedule_once(m.d, tick{});
    ctx_.schedule_every(m.d + 1ms, tick{});
  }
  void handle(tick) { ++n_; }
  void handle(quit) { ctx_.stop(); }
  void handle(troupe::down) {}

private:
  troupe::context<worker> ctx_;
  std::shared_ptr<ledger> l_;
  int n_ = 0;
};

/// One round.
void round(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  auto l = std::make_shared<ledger>();
  // References declared before the systems: they outlive them.
  std::mutex refs_m;
  std::vector<troupe::actor_ref<worker>> refs;

  asio::io_context io;
  auto io_work = asio::make_work_guard(io);
  std::thread io_thread([&] { io.run(); });
  auto strand = asio::make_strand(io);

  const auto timeout_a = std::chrono::milliseconds(10 + pick(90));
  const auto timeout_b = std::chrono::milliseconds(10 + pick(90));
  auto a = std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 2, .shutdown_timeout = timeout_a});
  auto b = std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 2, .shutdown_timeout = timeout_b});
  std::atomic<troupe::actor_system*> systems[2] = {a.get(), b.get()};
  // A thread uses a system object (not its actors) only under this lock,
  // shared; the main thread takes it alone to take the system away, then
  // destroys it (references to its actors stay in use throughout).
  std::shared_mutex using_system[2];

  std::atomic<bool> go{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, thread_seed = rng()] {
      std::mt19937_64 r(thread_seed);
      auto rand = [&](int n) { return static_cast<int>(r() % static_cast<std::uint64_t>(n)); };
      while (go.load()) {
        const int which = rand(2);
        std::shared_lock use(using_system[which]);
        auto* sys = systems[which].load();
        if (!sys) continue;
        troupe::actor_ref<worker> target;
        bool none;
        {
          std::lock_guard g(refs_m);
          none = refs.empty();
        }
        try {
          if (rand(4) == 0 || none) {
            troupe::spawn_options o;
            o.supervision = rand(2) ? troupe::supervision::restart(3, 1s, 1ms, 5ms) : troupe::supervision::stop();
            target = sys->spawn<worker>(o, l);
            std::lock_guard g(refs_m);
            refs.push_back(target);
          }
        } catch (const troupe::error&) {
          continue; // shutting down
        }
        use.unlock();
        if (!target) {
          std::lock_guard g(refs_m);
          target = refs[static_cast<std::size_t>(rand(static_cast<int>(refs.size())))];
        }
        const int what = rand(9);
        auto* done = l->new_ask(what == 5);
        switch (what) {
        case 0: target.ask(ping{}, [done](std::exception_ptr, int) { done->fetch_add(1); }); break;
        case 1: target.ask(boom{}, [done](std::exception_ptr, int) { done->fetch_add(1); }); break;
        case 2:
          target.ask(nap{std::chrono::milliseconds(rand(50))}, std::chrono::milliseconds(1 + rand(30)),
                     [done](std::exception_ptr, int) { done->fetch_add(1); });
          break;
        case 3:
          target.ask(ping{}, asio::bind_executor(io, [done](std::exception_ptr, int) { done->fetch_add(1); }));
          break;
        case 4:
          target.ask(nap{1ms}, asio::bind_executor(strand, [done](std::exception_ptr, int) { done->fetch_add(1); }));
          break;
        case 5: {
          // A coroutine of one system asking an actor of (maybe) the other:
          // completed, or cancelled with its system; never twice.
          const int o = rand(2);
          std::shared_lock use_other(using_system[o]);
          auto* other = systems[o].load();
          if (!other) break;
          asio::co_spawn(
              other->get_executor(),
              [target, done]() -> troupe::task<> {
                try {
                  (void)co_await target.ask(nap{2ms});
                } catch (const troupe::error&) {}
                done->fetch_add(1);
              },
              asio::detached);
          break;
        }
        case 6:
          (void)target.tell(arm{std::chrono::milliseconds(1 + rand(5))});
          done->fetch_add(1);
          break;
        case 7:
          (void)target.tell(quit{});
          done->fetch_add(1);
          break;
        default:
          target.stop();
          done->fetch_add(1);
          break;
        }
      }
    });
  }
  // Some work under way (or the deadline), then the systems go.
  const std::size_t before = 100 + static_cast<std::size_t>(pick(400));
  const auto until = std::chrono::steady_clock::now() + test::deadline;
  while (l->asks() < before && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  // Destroy the systems, in either order, while the threads go on.
  const bool a_first = pick(2) == 0;
  auto destroy = [&](std::unique_ptr<troupe::actor_system>& s, int i, std::chrono::milliseconds timeout) {
    {
      std::unique_lock g(using_system[i]);
      systems[i].store(nullptr);
    }
    const auto start = std::chrono::steady_clock::now();
    s.reset();
    const auto took = std::chrono::steady_clock::now() - start;
    INFO("seed " << seed << ": shutdown took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                 << " ms, timeout " << timeout.count() << " ms");
    CHECK(took < timeout + 3s);
  };
  if (a_first) {
    destroy(a, 0, timeout_a);
    destroy(b, 1, timeout_b);
  } else {
    destroy(b, 1, timeout_b);
    destroy(a, 0, timeout_a);
  }
  go = false;
  for (auto& t : threads) t.join();
  io_work.reset();
  io_thread.join();

  INFO("seed " << seed);
  std::size_t i = 0, bad = 0;
  for (auto& c : l->completions) {
    if (c.load() != 1) {
      ++bad;
      UNSCOPED_INFO("ask " << i << " completed " << c.load() << " times");
    }
    ++i;
  }
  for (auto& c : l->cancellable) {
    if (c.load() > 1) {
      ++bad;
      UNSCOPED_INFO("a cross-system ask completed " << c.load() << " times");
    }
  }
  CHECK(bad == 0);
  CHECK(l->started.load() == l->stopped.load());
  for (auto& r : refs) CHECK(r.tell(ping{}) == troupe::errc::actor_stopped);
}

} // namespace

TEST_CASE(
    "under spawns, asks, failures and stops from several threads, both systems shut down cleanly in either order") {
  const auto seed = env_or("TROUPE_STRESS_SEED", std::random_device{}());
  const auto rounds = env_or("TROUPE_STRESS_ROUNDS", 8);
  std::cout << "lifecycle stress: seed " << seed << ", " << rounds << " rounds\n";
  std::mt19937_64 seeds(seed);
  for (std::uint64_t r = 0; r < rounds; ++r) round(seeds());
}

} // namespace core_lifecycle_stress_test
