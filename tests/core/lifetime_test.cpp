// The lifecycle rules (docs/core.md): what happens to actors, references,
// timers and asks around construction, restart, stop and shutdown, and
// between systems. Several of these fail only under AddressSanitizer (a
// use after free) or LeakSanitizer (a leak): the suite runs under both.
#include <troupe/actor_system.hpp>

#include <troupe/context.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_lifetime_test {

using namespace std::chrono_literals;

namespace {

struct ping {};
struct fail {};
/// A coroutine handler that waits an hour (`entered`: it has begun).
struct park {
  std::shared_ptr<test::latch> entered = std::make_shared<test::latch>(1);
};

/// Counts what happened to the instances of an actor type.
struct counts {
  std::atomic<int> constructed{0}, started{0}, stopped{0}, handled{0};
  std::mutex m;
  std::condition_variable changed;
  void bump(std::atomic<int>& n) {
    ++n;
    std::lock_guard g(m);
    changed.notify_all();
  }
  /// Waits up to `d` for `pred`.
  template <class P>
  bool wait(P pred, std::chrono::milliseconds d = test::deadline) {
    std::unique_lock l(m);
    return changed.wait_for(l, d, pred);
  }
};

class flaky {
public:
  explicit flaky(std::shared_ptr<counts> c) : c_(std::move(c)) { c_->bump(c_->constructed); }
  ~flaky() { c_->bump(c_->stopped); }
  int handle(ping) { return ++n_; }
  int handle(fail) { throw std::runtime_error("failed on purpose"); }

private:
  std::shared_ptr<counts> c_;
  int n_ = 0;
};

/// Tells itself from its constructor, then waits a while: no handler may
/// run before the constructor has returned.
class eager {
public:
  eager(troupe::context<eager> ctx, std::shared_ptr<counts> c, bool then_throw) : c_(std::move(c)) {
    ctx.self().tell(ping{});
    ctx.schedule_once(0ms, ping{});
    // The handler would run on another thread at once if the mailbox were
    // open: give it the time to, then check that it did not.
    constructing_ = true;
    c_->wait([&] { return c_->handled.load() != 0; }, 100ms);
    constructing_ = false;
    if (then_throw) throw std::runtime_error("constructor failed after telling itself");
    c_->bump(c_->constructed);
  }
  void handle(ping) {
    if (constructing_) ++early_;
    c_->bump(c_->handled);
  }
  int handle(fail) { return early_; }

private:
  std::shared_ptr<counts> c_;
  bool constructing_ = false;
  int early_ = 0;
};

/// Arms a timer in its constructor.
class timed {
public:
  timed(troupe::context<timed> ctx, std::shared_ptr<counts> c) : c_(std::move(c)) {
    c_->bump(c_->constructed);
    ctx.schedule_once(1h, ping{});
  }
  void handle(ping) {}

private:
  std::shared_ptr<counts> c_;
};

/// Answers after a while.
struct slow_ping {
  std::chrono::milliseconds d;
};
class slowpoke {
public:
  troupe::task<int> handle(slow_ping m) {
    asio::steady_timer t(co_await asio::this_coro::executor, m.d);
    co_await t.async_wait(asio::use_awaitable);
    co_return 7;
  }
};

class parker {
public:
  troupe::task<int> handle(park p) {
    p.entered->count_down();
    asio::steady_timer t(co_await asio::this_coro::executor, 1h);
    co_await t.async_wait(asio::use_awaitable);
    co_return 1;
  }
  int handle(ping) { return 0; }
};

} // namespace

TEST_CASE("a reference that outlives its system, to an actor that restarted, is safe to use and to drop") {
  auto c = std::make_shared<counts>();
  troupe::actor_ref<flaky> ref; // declared before the system: dropped after it
  {
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    ref = sys.spawn<flaky>(c);
    CHECK_THROWS_AS(test::get(ref.ask(fail{}, asio::use_future)), troupe::error);
    CHECK(test::get(ref.ask(ping{}, asio::use_future)) == 1); // the restarted instance
    CHECK(c->constructed == 2);
  }
  CHECK(ref.tell(ping{}) == troupe::errc::actor_stopped);
  CHECK_THROWS_AS(test::get(ref.ask(ping{}, asio::use_future)), troupe::error);
  ref = {}; // the last reference goes after the system: nothing of the pool is touched
  CHECK(c->stopped == 2);
}

TEST_CASE("messages an actor sends itself from its constructor wait until the constructor has returned") {
  auto c = std::make_shared<counts>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto a = sys.spawn<eager>(c, false);
  CHECK(c->wait([&] { return c->handled.load() == 2; }));
  CHECK(test::get(a.ask(fail{}, asio::use_future)) == 0); // none handled while constructing
}

TEST_CASE("a constructor that throws after telling itself and arming a timer leaves nothing behind") {
  auto c = std::make_shared<counts>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  for (int i = 0; i < 20; ++i) CHECK_THROWS_AS(sys.spawn<eager>(c, true), std::runtime_error);
  CHECK(c->handled == 0);
  CHECK(sys.live_actors() == 0);
}

TEST_CASE("spawn after shutdown fails at once and constructs nothing") {
  auto c = std::make_shared<counts>();
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  sys.shutdown();
  try {
    sys.spawn<timed>(c);
    FAIL("spawned after shutdown");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::system_shutdown);
  }
  CHECK(c->constructed == 0);
}

TEST_CASE("spawns racing a shutdown either fail with system_shutdown or give a working reference") {
  for (int round = 0; round < 20; ++round) {
    auto c = std::make_shared<counts>();
    auto sys = std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 2});
    std::atomic<bool> go{false};
    std::vector<troupe::actor_ref<timed>> refs;
    std::thread spawner([&] {
      while (!go) std::this_thread::yield();
      for (int i = 0; i < 200; ++i) {
        try {
          refs.push_back(sys->spawn<timed>(c));
        } catch (const troupe::error& e) {
          CHECK(e.code() == troupe::errc::system_shutdown);
          break;
        }
      }
    });
    go = true;
    sys->shutdown();
    spawner.join();
    for (auto& r : refs) CHECK(r.tell(ping{}) == troupe::errc::actor_stopped);
    sys.reset();
  }
}

TEST_CASE("shutdown from two threads at once returns in both") {
  for (int round = 0; round < 20; ++round) {
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    auto c = std::make_shared<counts>();
    for (int i = 0; i < 10; ++i) sys.spawn<flaky>(c);
    std::atomic<int> returned{0};
    std::thread a([&] {
      sys.shutdown();
      ++returned;
    });
    std::thread b([&] {
      sys.shutdown();
      ++returned;
    });
    a.join();
    b.join();
    CHECK(returned == 2);
    CHECK(sys.live_actors() == 0);
  }
}

TEST_CASE("an ask whose handler is still suspended when shutdown gives up completes with system_shutdown") {
  std::future<int> parked;
  {
    troupe::actor_system sys(troupe::system_config{.threads = 1, .shutdown_timeout = 50ms});
    auto p = sys.spawn<parker>();
    park m;
    auto entered = m.entered;
    parked = p.ask(std::move(m), asio::use_future);
    REQUIRE(entered->wait()); // suspended in the handler, not queued
  }
  REQUIRE(parked.wait_for(test::deadline) == std::future_status::ready);
  try {
    parked.get();
    FAIL("the parked ask got a reply");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::system_shutdown);
  }
}

TEST_CASE("a reply to a system that is gone is dropped safely") {
  auto replier = std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 1});
  auto slow = replier->spawn<slowpoke>();
  std::atomic<int> resumed{0};
  auto asked = std::make_shared<test::latch>(5);
  {
    troupe::actor_system asker(troupe::system_config{.threads = 1, .shutdown_timeout = 50ms});
    for (int i = 0; i < 5; ++i)
      asio::co_spawn(
          asker.get_executor(),
          [slow, &resumed, asked]() -> troupe::task<> {
            auto reply = slow.ask(slow_ping{100ms});
            asked->count_down();
            (void)co_await std::move(reply);
            ++resumed;
          },
          asio::detached);
    REQUIRE(asked->wait());
  } // gone before the replies
  // The replies come, to a pool that is no more.
  CHECK(test::get(slow.ask(slow_ping{1ms}, asio::use_future)) == 7);
  replier.reset();
  CHECK(resumed == 0);
}

TEST_CASE("an ask from one system to another completes safely whichever system goes first") {
  for (bool asker_first : {true, false}) {
    auto asker = std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 1, .shutdown_timeout = 50ms});
    auto replier =
        std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 1, .shutdown_timeout = 50ms});
    auto c = std::make_shared<counts>();
    auto slow = replier->spawn<parker>();
    auto fast = replier->spawn<flaky>(c);
    std::atomic<int> finished{0};
    // Coroutines on the asker's threads, waiting on the replier's actors.
    for (int i = 0; i < 10; ++i)
      asio::co_spawn(
          asker->get_executor(),
          [slow, fast, &finished]() -> troupe::task<> {
            try {
              (void)co_await fast.ask(ping{});
              park m; // named: GCC 12 and aggregate temporaries in co_await
              (void)co_await slow.ask(std::move(m));
            } catch (const troupe::error&) {}
            ++finished;
          },
          asio::detached);
    if (asker_first) {
      asker.reset();
      replier.reset();
    } else {
      replier.reset();
      asker.reset();
    }
    CHECK(finished <= 10);
  }
}

namespace {

/// Stops itself, then fails: the failure must not restart it.
struct stop_then_fail {};
class quitter {
public:
  quitter(troupe::context<quitter> ctx, std::shared_ptr<counts> c) : ctx_(ctx), c_(std::move(c)) {
    c_->bump(c_->constructed);
  }
  void on_stop() { c_->bump(c_->stopped); }
  int handle(ping) { return 1; }
  int handle(fail) { throw std::runtime_error("failed on purpose"); }
  void handle(stop_then_fail) {
    ctx_.stop();
    throw std::runtime_error("failed after stop");
  }

private:
  troupe::context<quitter> ctx_;
  std::shared_ptr<counts> c_;
};

} // namespace

TEST_CASE("every instance gets exactly one on_stop: when it is replaced by a restart, and when the actor stops") {
  auto c = std::make_shared<counts>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto a = sys.spawn<quitter>(c);
  CHECK_THROWS_AS(test::get(a.ask(fail{}, asio::use_future)), troupe::error); // restarts
  CHECK(test::get(a.ask(ping{}, asio::use_future)) == 1);
  CHECK(c->constructed == 2);
  CHECK(c->stopped == 1);   // the replaced instance
  a.tell(stop_then_fail{}); // a failure after stop() stops: no restart
  auto d = test::get(a.when_stopped(asio::use_future));
  CHECK(c->constructed == 2);
  CHECK(c->stopped == 2);
  CHECK(d.reason != troupe::exit_reason::system_shutdown);
}

TEST_CASE("asks with a timeout sent while the system shuts down each complete once and leak nothing") {
  for (int round = 0; round < 10; ++round) {
    std::atomic<int> completed{0}, sent{0};
    {
      troupe::actor_system sys(troupe::system_config{.threads = 2, .shutdown_timeout = 20ms});
      auto p = sys.spawn<parker>();
      (void)p.ask(park{}, [](std::exception_ptr, int) {});
      std::vector<std::thread> askers;
      for (int t = 0; t < 3; ++t)
        askers.emplace_back([&] {
          for (int i = 0; i < 200; ++i) {
            ++sent;
            p.ask(ping{}, 1h, [&](std::exception_ptr, int) { ++completed; });
          }
        });
      for (auto& t : askers) t.join();
    }
    CHECK(completed == sent);
  }
}

namespace {

struct watch_it {
  troupe::actor_ref<flaky> target;
};
struct unwatch_it {
  troupe::actor_ref<flaky> target;
};
struct downs_query {};

class watcher {
public:
  explicit watcher(troupe::context<watcher> ctx) : ctx_(ctx) {}
  void handle(watch_it w) { ctx_.watch(w.target); }
  void handle(unwatch_it w) { ctx_.unwatch(w.target); }
  void handle(troupe::down) { ++downs_; }
  int handle(downs_query) const { return downs_; }

private:
  troupe::context<watcher> ctx_;
  int downs_ = 0;
};

} // namespace

TEST_CASE("a watcher that stops leaves the watched actor's list, and one that unwatches gets no down") {
  auto c = std::make_shared<counts>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto target = sys.spawn<flaky>(c);
  auto* watched = troupe::detail::cell_of(target);
  for (int i = 0; i < 1000; ++i) {
    auto w = sys.spawn<watcher>();
    w.tell(watch_it{target});
    w.tell(watch_it{target}); // a second watch of the same actor changes nothing
    CHECK(test::get(w.ask(downs_query{}, asio::use_future)) == 0);
    w.stop();
    test::get(w.when_stopped(asio::use_future));
  }
  CHECK(watched->watcher_count() == 0);
  auto kept = sys.spawn<watcher>();
  auto dropped = sys.spawn<watcher>();
  kept.tell(watch_it{target});
  dropped.tell(watch_it{target});
  dropped.tell(unwatch_it{target});
  // Both watchers have handled what they were told once each answered an ask
  // sent after it (one mailbox each, FIFO per sender).
  CHECK(test::get(kept.ask(downs_query{}, asio::use_future)) == 0);
  CHECK(test::get(dropped.ask(downs_query{}, asio::use_future)) == 0);
  CHECK(watched->watcher_count() == 1);
  target.stop();
  test::get(target.when_stopped(asio::use_future));
  CHECK(c->wait([&] { return test::get(kept.ask(downs_query{}, asio::use_future)) == 1; }, 5s));
  CHECK(test::get(dropped.ask(downs_query{}, asio::use_future)) == 0);
}

namespace {

struct work_for {
  std::chrono::milliseconds d;
};
struct ask_then_work {
  troupe::actor_ref<flaky> other;
  std::chrono::milliseconds d;
  std::shared_ptr<test::latch> replied;
};

/// After the reply, works a while on its own turn.
class asker {
public:
  troupe::task<int> handle(ask_then_work m) {
    int v = co_await m.other.ask(ping{});
    m.replied->count_down();
    const auto until = std::chrono::steady_clock::now() + m.d;
    while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
    co_return v;
  }
};

} // namespace

TEST_CASE("a reply resumes the asker on its own turn: the replier goes on serving others meanwhile") {
  auto c = std::make_shared<counts>();
  troupe::actor_system sys(troupe::system_config{.threads = 4});
  auto y = sys.spawn<flaky>(c);
  auto x = sys.spawn<asker>();
  auto replied = std::make_shared<test::latch>(1);
  auto busy = x.ask(ask_then_work{y, 1500ms, replied}, asio::use_future);
  REQUIRE(replied->wait());
  // X has its reply and works: Y answers another asker at once.
  const auto start = std::chrono::steady_clock::now();
  CHECK(test::get(y.ask(ping{}, asio::use_future)) == 2);
  CHECK(std::chrono::steady_clock::now() - start < 500ms);
  CHECK(test::get(busy) == 1);
}

TEST_CASE("destroying an idle system is not held up by another system's work") {
  auto c = std::make_shared<counts>();
  troupe::actor_system busy_sys(troupe::system_config{.threads = 2});
  auto y = busy_sys.spawn<flaky>(c);
  auto x = busy_sys.spawn<asker>();
  auto replied = std::make_shared<test::latch>(1);
  auto busy = x.ask(ask_then_work{y, 1500ms, replied}, asio::use_future);
  REQUIRE(replied->wait());
  const auto start = std::chrono::steady_clock::now();
  {
    troupe::actor_system idle(troupe::system_config{.threads = 1});
    auto z = idle.spawn<flaky>(c);
    CHECK(test::get(z.ask(ping{}, asio::use_future)) == 1);
  }
  CHECK(std::chrono::steady_clock::now() - start < 500ms);
  CHECK(test::get(busy) == 1);
}

namespace {
std::atomic<int> on_own_threads{0}, on_foreign_threads{0};
std::atomic<bool> in_slow_handler{false};
/// Counted down by each handled `slow_work` (set by the test).
std::atomic<test::latch*> handled{nullptr};
struct slow_work {
  int ms;
};
struct remote {
  explicit remote(troupe::context<remote> c) : ctx(c), data(std::make_unique<int>(0)) {}
  troupe::context<remote> ctx;
  std::unique_ptr<int> data;
  void handle(slow_work w) {
    (ctx.get_executor().running_in_this_thread() ? on_own_threads : on_foreign_threads)++;
    in_slow_handler = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(w.ms)); // the long handler itself
    ++*data; // the instance must still be there
    if (auto* l = handled.load()) l->count_down();
  }
};
struct kick_remote {
  troupe::actor_ref<remote> r;
  int ms;
};
struct kicker {
  void handle(kick_remote k) { k.r.tell(slow_work{k.ms}); }
};
} // namespace

TEST_CASE("an actor woken by another system's actor runs on its own system's threads, and its system's shutdown "
          "waits for it") {
  on_own_threads = on_foreign_threads = 0;
  auto s1 = std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 2});
  auto s2 =
      std::make_unique<troupe::actor_system>(troupe::system_config{.threads = 2, .shutdown_timeout = 50ms});
  auto k = s1->spawn<kicker>();
  auto r = s2->spawn<remote>();
  for (int i = 0; i < 20; ++i) { // one at a time: each wakes the remote actor anew
    test::latch one(1);
    handled = &one;
    k.tell(kick_remote{r, 0});
    REQUIRE(one.wait());
    handled = nullptr;
  }
  CHECK(on_own_threads == 20);
  CHECK(on_foreign_threads == 0);
  // A long handler of s2's actor, started by s1's: s2's shutdown sees it
  // (under ASan, freeing the instance under it would be reported).
  in_slow_handler = false;
  k.tell(kick_remote{r, 200});
  while (!in_slow_handler) std::this_thread::yield();
  s2.reset();
  s1.reset();
}

namespace {
struct hello {};
struct memo {};
std::atomic<bool> asker_toils{false};
struct answerer {
  int n = 0;
  int handle(hello) { return ++n; }
  void handle(memo) {}
};
struct ask_then_toil {
  troupe::actor_ref<answerer> y;
  bool tell_first;
};
struct busy_asker {
  troupe::task<int> handle(ask_then_toil g) {
    int v = co_await g.y.ask(hello{});
    if (g.tell_first) g.y.tell(memo{});
    const auto end = std::chrono::steady_clock::now() + 1500ms;
    asker_toils = true;
    while (std::chrono::steady_clock::now() < end) {
    }
    co_return v;
  }
};
} // namespace

TEST_CASE("an asker that tells the actor it asked, then works long, does not hold that actor up") {
  for (bool tell_first : {false, true}) {
    INFO("the asker tells it first: " << tell_first);
    troupe::actor_system sys(troupe::system_config{.threads = 4});
    auto y = sys.spawn<answerer>();
    auto x = sys.spawn<busy_asker>();
    asker_toils = false;
    auto busy = x.ask(ask_then_toil{y, tell_first}, asio::use_future);
    while (!asker_toils) std::this_thread::yield(); // its turn goes on, toiling
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(test::get(y.ask(hello{}, asio::use_future)) == 2);
    CHECK(std::chrono::steady_clock::now() - t0 < 500ms);
    (void)test::get(busy);
  }
}

} // namespace core_lifetime_test
