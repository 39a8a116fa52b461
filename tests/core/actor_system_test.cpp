#include <troupe/actor_system.hpp>

#include <troupe/detail/turn.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_actor_system_test {

using namespace std::chrono_literals;

namespace {

struct get_name {};
struct get_events {};
struct ev {
  std::string what;
};

/// Records its lifecycle into a shared log.
struct shared_log {
  std::mutex m;
  std::vector<std::string> entries;
  void add(std::string s) {
    std::lock_guard g(m);
    entries.push_back(std::move(s));
  }
  std::vector<std::string> snapshot() {
    std::lock_guard g(m);
    return entries;
  }
};

class named {
public:
  named(troupe::context<named> ctx, std::string name, int n) : ctx_(ctx), name_(name + std::to_string(n)) {}
  std::string handle(get_name) const { return name_ + "#" + std::to_string(ctx_.self().id()); }

private:
  troupe::context<named> ctx_;
  std::string name_;
};

class lifecycle {
public:
  explicit lifecycle(std::shared_ptr<shared_log> log) : log_(std::move(log)) {}
  void on_start() { log_->add("start"); }
  void handle(ev e) { log_->add(e.what); }
  void on_stop() { log_->add("stop"); }

private:
  std::shared_ptr<shared_log> log_;
};

class async_starter {
public:
  explicit async_starter(std::shared_ptr<shared_log> log) : log_(std::move(log)) {}
  troupe::task<> on_start() {
    asio::steady_timer t(co_await asio::this_coro::executor, 20ms);
    co_await t.async_wait(asio::use_awaitable);
    log_->add("started");
  }
  void handle(ev e) { log_->add(e.what); }

private:
  std::shared_ptr<shared_log> log_;
};

class throwing_ctor {
public:
  explicit throwing_ctor(int) { throw std::invalid_argument("bad configuration"); }
  void handle(ev) {}
};

/// Checks that it never runs two handlers at once, even across co_await.
struct step {
  int n;
};
class serial_checker {
public:
  explicit serial_checker(std::shared_ptr<std::atomic<int>> overlaps) : overlaps_(std::move(overlaps)) {}
  troupe::task<int> handle(step s) {
    if (busy_) ++*overlaps_;
    busy_ = true;
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    order_.push_back(s.n);
    busy_ = false;
    co_return s.n;
  }
  std::vector<int> handle(get_events) const { return order_; }

private:
  std::shared_ptr<std::atomic<int>> overlaps_;
  bool busy_ = false;
  std::vector<int> order_;
};

struct spin {};
struct count_query {};
class busy {
public:
  explicit busy(std::shared_ptr<std::atomic<int>> n) : n_(std::move(n)) {}
  void handle(spin) { ++*n_; }

private:
  std::shared_ptr<std::atomic<int>> n_;
};
struct block_on {
  std::shared_future<void> f;
  std::shared_ptr<std::promise<void>> entered = {}; // set once the handler runs
};
class blocker {
public:
  void handle(block_on b) {
    if (b.entered) b.entered->set_value();
    b.f.wait();
  }
};
class observer {
public:
  explicit observer(std::shared_ptr<std::atomic<int>> n) : n_(std::move(n)) {}
  int handle(count_query) const { return n_->load(); }

private:
  std::shared_ptr<std::atomic<int>> n_;
};

struct where {};
class thread_reporter {
public:
  std::thread::id handle(where) const { return std::this_thread::get_id(); }
};

struct address_query {};
/// State over-aligned: its cell bypasses the recycling pool, whose blocks
/// are aligned to 16 bytes only.
class over_aligned {
public:
  std::uintptr_t handle(address_query) const { return reinterpret_cast<std::uintptr_t>(&line_); }

private:
  alignas(64) char line_[64] = {};
};

/// A ring of stages passing tokens: each stage hands each token on until
/// it has made its hops, and counts the messages it handled per thread.
struct ring_token {
  int hops_left;
};
class ring_stage;
struct ring_link {
  troupe::actor_ref<ring_stage> next;
};
struct ring_start {
  int tokens, hops;
};
struct ring_counts {};
class ring_stage {
public:
  explicit ring_stage(std::shared_ptr<test::latch> done) : done_(std::move(done)) {}
  void handle(ring_link l) { next_ = std::move(l.next); }
  void handle(ring_start s) {
    for (int i = 0; i < s.tokens; ++i) next_.tell(ring_token{s.hops});
  }
  void handle(ring_token t) {
    const auto here = std::this_thread::get_id();
    if (handled_.empty() == false && here != last_) ++moves_;
    last_ = here;
    ++handled_[here];
    if (t.hops_left == 0)
      done_->count_down();
    else
      next_.tell(ring_token{t.hops_left - 1});
  }
  /// Messages handled, and how often a message was handled on another
  /// thread than the one before it.
  std::pair<long, long> handle(ring_counts) const {
    long n = 0;
    for (auto [thread, k] : handled_) n += k;
    return {n, moves_};
  }

private:
  std::shared_ptr<test::latch> done_;
  troupe::actor_ref<ring_stage> next_;
  std::map<std::thread::id, long> handled_;
  std::thread::id last_;
  long moves_ = 0;
};

/// A chain of stages handing items on: each counts the items it handled
/// and how many of those a stage handed on were sent on another thread
/// (crossed cores).
struct chain_item {
  int hops_left;
  std::thread::id sent_on;
};
class chain_stage;
struct chain_link {
  troupe::actor_ref<chain_stage> next;
};
struct chain_start {
  int items, hops;
};
class chain_stage {
public:
  explicit chain_stage(std::shared_ptr<test::latch> done) : done_(std::move(done)) {}
  void handle(chain_link l) { next_ = std::move(l.next); }
  void handle(chain_start s) {
    // The flood: not counted (the flooded stage may rightly run on the
    // other thread, in parallel).
    for (int i = 0; i < s.items; ++i) next_.tell(chain_item{s.hops, std::thread::id{}});
  }
  void handle(chain_item i) {
    const auto here = std::this_thread::get_id();
    ++handled_;
    if (i.sent_on != std::thread::id{} && i.sent_on != here) ++crossed_;
    if (i.hops_left == 0)
      done_->count_down();
    else
      next_.tell(chain_item{i.hops_left - 1, here});
  }
  std::pair<long, long> handle(ring_counts) const { return {handled_, crossed_}; }

private:
  std::shared_ptr<test::latch> done_;
  troupe::actor_ref<chain_stage> next_;
  long handled_ = 0, crossed_ = 0;
};

/// Spawns a ring of `stages` stages (`Stage`, linked by `Link`) in `sys`,
/// starts `tokens` tokens of `hops` hops each at the first, waits until
/// every one has made them, and returns the sum of the stages' two counts
/// (messages handled, and the stage's own second count).
template <class Stage, class Link, class Start>
std::pair<long, long> run_ring(troupe::actor_system& sys, int stages, int tokens, int hops) {
  auto done = std::make_shared<test::latch>(tokens);
  std::vector<troupe::actor_ref<Stage>> ring;
  for (int i = 0; i < stages; ++i) ring.push_back(sys.spawn<Stage>(done));
  for (int i = 0; i < stages; ++i) test::get(ring[i].ask(Link{ring[(i + 1) % stages]}, asio::use_future));
  ring[0].tell(Start{tokens, hops});
  REQUIRE(done->wait());
  long total = 0, counted = 0;
  for (auto& r : ring) {
    auto [n, m] = test::get(r.ask(ring_counts{}, asio::use_future));
    total += n;
    counted += m;
  }
  return {total, counted};
}

/// Spawns an actor from inside the system and answers with its ID.
struct spawn_one {};
class spawner {
public:
  explicit spawner(troupe::context<spawner> ctx) : ctx_(ctx) {}
  troupe::actor_id handle(spawn_one) { return ctx_.system().spawn<thread_reporter>().id(); }

private:
  troupe::context<spawner> ctx_;
};

} // namespace

TEST_CASE("spawn passes the constructor arguments, preceded by the context when accepted") {
  troupe::actor_system sys;
  auto a = sys.spawn<named>(std::string("alice"), 7);
  CHECK(test::get(a.ask(get_name{}, asio::use_future)) == "alice7#" + std::to_string(a.id()));
}

TEST_CASE("an actor whose state is over-aligned is placed on its alignment, also after others were stopped") {
  troupe::actor_system sys;
  for (int round = 0; round < 3; ++round) { // the later rounds reuse what the earlier freed
    std::vector<troupe::actor_ref<over_aligned>> refs;
    for (int i = 0; i < 200; ++i) refs.push_back(sys.spawn<over_aligned>());
    int misaligned = 0;
    for (auto& r : refs) misaligned += test::get(r.ask(address_query{}, asio::use_future)) % 64 != 0;
    CHECK(misaligned == 0);
    for (auto& r : refs) r.stop();
    REQUIRE(test::eventually([&] { return sys.live_actors() == 0; }));
  }
}

TEST_CASE("an exception from the constructor propagates from spawn") {
  troupe::actor_system sys;
  CHECK_THROWS_AS(sys.spawn<throwing_ctor>(1), std::invalid_argument);
  CHECK(sys.live_actors() == 0);
}

TEST_CASE("on_start runs before any message and on_stop runs once when the actor stops") {
  auto log = std::make_shared<shared_log>();
  troupe::actor_system sys;
  auto a = sys.spawn<lifecycle>(log);
  a.tell(ev{"one"});
  test::get(a.ask(ev{"two"}, asio::use_future));
  a.stop();
  a.stop(); // idempotent
  auto d = test::get(a.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::normal);
  CHECK(log->snapshot() == std::vector<std::string>{"start", "one", "two", "stop"});
}

TEST_CASE("a coroutine on_start holds messages back until it has finished") {
  auto log = std::make_shared<shared_log>();
  troupe::actor_system sys;
  auto a = sys.spawn<async_starter>(log);
  a.tell(ev{"first message"});
  test::get(a.ask(ev{"second message"}, asio::use_future));
  CHECK(log->snapshot() == std::vector<std::string>{"started", "first message", "second message"});
}

TEST_CASE("an actor handles one message at a time, also while a coroutine handler is suspended") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto overlaps = std::make_shared<std::atomic<int>>(0);
  auto a = sys.spawn<serial_checker>(overlaps);
  std::vector<std::future<int>> replies;
  for (int i = 0; i < 50; ++i) replies.push_back(a.ask(step{i}, asio::use_future));
  for (int i = 0; i < 50; ++i) CHECK(test::get(replies[i]) == i);
  CHECK(*overlaps == 0);
  auto order = test::get(a.ask(get_events{}, asio::use_future));
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[i] == i);
}

TEST_CASE("a busy actor yields its thread after a batch, so others are not starved") {
  troupe::actor_system sys(troupe::system_config{.threads = 1, .throughput = 64});
  auto n = std::make_shared<std::atomic<int>>(0);
  std::promise<void> open;
  auto b = sys.spawn<blocker>();
  auto busy_one = sys.spawn<busy>(n);
  auto obs = sys.spawn<observer>(n);
  b.tell(block_on{open.get_future().share()}); // holds the only thread
  for (int i = 0; i < 100'000; ++i) busy_one.tell(spin{});
  auto seen = obs.ask(count_query{}, asio::use_future); // queued behind busy_one's turn
  open.set_value();
  int at_answer = test::get(seen);
  // Answered after a few batches, not after 100,000 messages: the busy
  // actor's turns go on in its thread's queue, and every
  // `injected_interval` turns the thread takes what was scheduled from
  // outside (the observer) behind them.
  CHECK(at_answer <= static_cast<int>(troupe::detail::turn_state::injected_interval + 1) * 64);
  test::get(busy_one.ask(spin{}, asio::use_future));
  CHECK(*n == 100'001);
}

TEST_CASE("stop drops the messages still queued: asks fail, tells count as dead letters") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  auto log = std::make_shared<shared_log>();
  std::promise<void> open;
  auto b = sys.spawn<blocker>();
  auto a = sys.spawn<lifecycle>(log);
  test::get(a.ask(ev{"before"}, asio::use_future));
  auto entered = std::make_shared<std::promise<void>>();
  b.tell(block_on{open.get_future().share(), entered}); // a cannot run meanwhile
  test::get(entered->get_future());
  for (int i = 0; i < 3; ++i) a.tell(ev{"queued"});
  auto queued_ask = a.ask(ev{"queued ask"}, asio::use_future);
  a.stop();
  open.set_value();
  CHECK(test::get(a.when_stopped(asio::use_future)).reason == troupe::exit_reason::normal);
  CHECK(sys.dead_letters() == 3);
  REQUIRE(queued_ask.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_AS(queued_ask.get(), troupe::error);
  CHECK(log->snapshot() == std::vector<std::string>{"start", "before", "stop"});
}

TEST_CASE("an actor system with one thread runs every actor on it") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::set<std::thread::id> ids;
  for (int i = 0; i < 10; ++i) ids.insert(test::get(sys.spawn<thread_reporter>().ask(where{}, asio::use_future)));
  CHECK(ids.size() == 1);
  CHECK(*ids.begin() != std::this_thread::get_id());
}

TEST_CASE("shutdown stops every actor, runs on_stop and counts undelivered tells as dead letters") {
  auto log = std::make_shared<shared_log>();
  std::promise<void> open;
  std::uint64_t dead = 0;
  std::future<troupe::down> down_of_a;
  {
    troupe::actor_system sys(troupe::system_config{.threads = 1});
    auto a = sys.spawn<lifecycle>(log);
    auto b = sys.spawn<blocker>();
    down_of_a = a.when_stopped(asio::use_future);
    test::get(a.ask(ev{"handled"}, asio::use_future));
    auto entered = std::make_shared<std::promise<void>>();
    b.tell(block_on{open.get_future().share(), entered}); // the only thread is busy...
    test::get(entered->get_future());
    for (int i = 0; i < 10; ++i) a.tell(ev{"pending"}); // ...so these stay queued
    std::thread opener([&] {
      // Release the thread once shutdown() has begun (spawn then fails).
      auto until = std::chrono::steady_clock::now() + test::deadline;
      while (std::chrono::steady_clock::now() < until) {
        try {
          sys.spawn<thread_reporter>();
        } catch (const troupe::error&) {
          break;
        }
        std::this_thread::yield();
      }
      open.set_value();
    });
    sys.shutdown();
    opener.join();
    dead = sys.dead_letters();
    CHECK(sys.live_actors() == 0);
  }
  auto d = test::get(down_of_a);
  CHECK(d.reason == troupe::exit_reason::system_shutdown);
  auto entries = log->snapshot();
  CHECK(entries.front() == "start");
  CHECK(entries.back() == "stop");
  auto handled_pending = std::count(entries.begin(), entries.end(), "pending");
  // Every tell was either handled or counted: none silently lost.
  CHECK(handled_pending + static_cast<long>(dead) == 10);
}

TEST_CASE("spawn after shutdown fails with system_shutdown") {
  troupe::actor_system sys;
  sys.shutdown();
  sys.shutdown(); // idempotent
  try {
    sys.spawn<thread_reporter>();
    FAIL("spawn succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::system_shutdown);
  }
}

TEST_CASE("live_actors counts actors until they stop") {
  troupe::actor_system sys;
  auto a = sys.spawn<thread_reporter>();
  auto b = sys.spawn<thread_reporter>();
  CHECK(sys.live_actors() == 2);
  a.stop();
  test::get(a.when_stopped(asio::use_future));
  CHECK(sys.live_actors() == 1);
  (void)b;
}

TEST_CASE("actors that pass messages among themselves stay on one thread while the other idles, also when a turn "
          "uses its budget up") {
  // 16 tokens around 4 stages, 2 messages per turn: most turns end with
  // messages left, and the stage goes behind the others on its thread. It
  // used to be posted to the pool, waking the idle worker, which took it:
  // the stages then moved between the threads all the time, every hand-on
  // crossing cores. Work worth sharing (the threshold, ruled out here) and
  // a worker stuck in a long turn (the monitor: the machine's own
  // scheduling may pause a worker that long) still move a stage now and
  // then, so what is counted is how often a stage handled a message on
  // another thread than the one before: a few moves, not thousands.
  // The machine's scheduler may pause a worker in any run (other tests
  // share the cores): the best of three runs is checked, each one printed.
  constexpr int stages = 4, tokens = 16, hops = 4'000;
  long best = -1;
  for (int attempt = 0; attempt < 3; ++attempt) {
    troupe::actor_system sys(
        troupe::system_config{.threads = 2, .throughput = 2, .share_threshold = std::chrono::hours(1)});
    const auto [total, moves] = run_ring<ring_stage, ring_link, ring_start>(sys, stages, tokens, hops);
    REQUIRE(total == tokens * (hops + 1));
    UNSCOPED_INFO("run " << attempt + 1 << ": " << moves << " moves in " << total << " messages");
    if (best < 0 || moves < best) best = moves;
    if (best <= total / 200) break;
  }
  CHECK(best <= tokens * (hops + 1) / 200);
}

TEST_CASE("actors that hand each turn's batch of messages on to the next stay on one thread while the other idles") {
  // A pipeline's shape: the first stage is flooded with 20,000 tokens at
  // once, and each turn of a stage takes up to the budget (64 messages;
  // short turns, so that the monitor, which moves a stage off a worker
  // it finds in one turn for a millisecond, rarely does on a slow build)
  // and hands every one on to the next of 60 stages. The flood may bring
  // the idle worker in (the flooded stage then runs in parallel with the
  // one flooding it), but a turn that pushes no more than one turn of the
  // actor it woke takes is not a flood: the next stage
  // runs next on the same thread. It used to count as one after 16
  // pushes, asking the idle worker to take the stage: the stages then
  // moved between the threads all the time, hand-ons crossing cores.
  // At most twice per item: where the chain is split between the threads
  // (the monitor moves a stage off a worker it finds stuck); it was 2.5 to
  // 7 times per item. The machine's scheduler may pause a worker in any
  // run (other tests share the cores): the best of three runs is checked,
  // each one printed. Not in the sanitizer builds: slowed down several
  // times and sharing the machine with other tests, their workers are
  // found stuck so often that the monitor alone moves stages all the time.
  constexpr int stages = 60, tokens = 20'000, hops = stages - 1;
  long best = -1;
  for (int attempt = 0; attempt < 3; ++attempt) {
    troupe::actor_system sys(
        troupe::system_config{.threads = 2, .throughput = 64, .share_threshold = std::chrono::hours(1)});
    const auto [total, crossed] = run_ring<chain_stage, chain_link, chain_start>(sys, stages, tokens, hops);
    REQUIRE(total == tokens * (hops + 1));
    UNSCOPED_INFO("run " << attempt + 1 << ": " << crossed << " of " << total << " messages crossed threads");
    if (best < 0 || crossed < best) best = crossed;
    if (best <= 2L * tokens) break;
  }
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  WARN(best << " messages crossed threads at best (not checked in a sanitizer build)");
#else
  CHECK(best <= 2L * tokens);
#endif
}

TEST_CASE("actor IDs are unique however many threads spawn at once, and in each new system") {
  SECTION("threads outside the system and the system's own workers spawning together") {
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    std::vector<troupe::actor_ref<spawner>> spawners;
    for (int i = 0; i < 4; ++i) spawners.push_back(sys.spawn<spawner>());
    std::mutex m;
    std::vector<troupe::actor_id> ids;
    std::vector<std::thread> outside;
    for (int t = 0; t < 3; ++t)
      outside.emplace_back([&] {
        std::vector<troupe::actor_id> mine;
        for (int i = 0; i < 1'500; ++i) mine.push_back(sys.spawn<thread_reporter>().id());
        std::lock_guard g(m);
        ids.insert(ids.end(), mine.begin(), mine.end());
      });
    std::vector<std::future<troupe::actor_id>> inside;
    for (int i = 0; i < 1'500; ++i) inside.push_back(spawners[i % 4].ask(spawn_one{}, asio::use_future));
    for (auto& t : outside) t.join();
    for (auto& f : inside) ids.push_back(test::get(f));
    for (auto& s : spawners) ids.push_back(s.id());
    std::set<troupe::actor_id> distinct(ids.begin(), ids.end());
    CHECK(distinct.size() == ids.size());
    CHECK(ids.size() == 4 + 3 * 1'500 + 1'500);
  }
  SECTION("a thread's block of IDs from an earlier system is not used by the next one") {
    // Each thread takes IDs from a block of its own, and a new system
    // starts handing blocks out from 1 again: this thread's block from the
    // system before must not be used on (its next IDs would be those a new
    // thread's first block gives).
    for (int round = 0; round < 5; ++round) {
      troupe::actor_system sys(troupe::system_config{.threads = 1});
      std::vector<troupe::actor_id> ids{sys.spawn<thread_reporter>().id()};
      std::thread fresh([&] {
        for (int i = 0; i < 20; ++i) ids.push_back(sys.spawn<thread_reporter>().id());
      });
      fresh.join();
      ids.push_back(sys.spawn<thread_reporter>().id());
      std::set<troupe::actor_id> distinct(ids.begin(), ids.end());
      INFO("round " << round);
      CHECK(distinct.size() == ids.size());
    }
  }
}

TEST_CASE("live_actors counts actors spawned on one thread and stopped on another") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  std::vector<troupe::actor_ref<thread_reporter>> outside_made;
  for (int i = 0; i < 300; ++i) outside_made.push_back(sys.spawn<thread_reporter>());
  auto s = sys.spawn<spawner>();
  for (int i = 0; i < 300; ++i) test::get(s.ask(spawn_one{}, asio::use_future)); // made on a worker, left running
  CHECK(sys.live_actors() == 601);
  std::thread stopper([&] {
    for (auto& a : outside_made) a.stop();
  });
  stopper.join();
  for (auto& a : outside_made) test::get(a.when_stopped(asio::use_future));
  CHECK(sys.live_actors() == 301);
  sys.shutdown(); // stops the 301 made on the workers, from this thread
  CHECK(sys.live_actors() == 0);
}

} // namespace core_actor_system_test
