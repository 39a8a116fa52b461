// Entities (troupe/entity.hpp): activated by their first message,
// passivated when idle or past a region's limit, nothing lost or reordered
// across passivations, at most one live activation per key.
#include <troupe/entity.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_entity_test {

using namespace std::chrono_literals;

namespace {

struct note {
  int sender = 0;
  int n = 0;
};
struct whoami {};
struct how_many {};
struct sleepy {}; // a coroutine handler that waits a little
struct keep_me {
  bool on = true;
};
/// Starts a one-shot timer that tells the entity `ring` after `after`.
struct set_alarm {
  std::chrono::milliseconds after;
};
struct ring {};
/// A coroutine handler that waits `for_`.
struct nap {
  std::chrono::milliseconds for_;
};
/// Starts a timer that tells the entity `beat` every millisecond.
struct start_beating {};
struct beat {};
struct beats {};
struct crash {}; // a handler that throws: the entity restarts
/// Starts a one-shot timer that tells the entity `stall`: a handler that
/// holds its thread for `for_` (as a preempted thread would).
struct stall_soon {
  std::chrono::milliseconds for_;
};
struct stall {
  std::chrono::milliseconds for_;
};
/// An operation of a library with an io_context of its own (not run).
struct outside {
  std::unique_ptr<asio::io_context> io = std::make_unique<asio::io_context>();
  std::unique_ptr<asio::steady_timer> timer = std::make_unique<asio::steady_timer>(*io, std::chrono::hours(1));
};
class account;
/// Asks `peer` to nap through the context (`then`), and notes the reply.
struct ask_peer {
  troupe::entity_ref<account> peer;
  std::chrono::milliseconds for_;
};
struct wait_outside { // a reentrant handler that waits for it
  std::shared_ptr<outside> on;
};
struct daydream { // a reentrant coroutine handler: other messages are handled while it waits
  std::chrono::milliseconds for_;
};
/// Handled by telling the entity itself (its activation's own reference)
/// a note from `sender + 100`.
struct echo {
  int sender = 0;
  int n = 0;
};

/// What every activation of `account` saw, kept outside the instances.
struct journal {
  std::mutex m;
  std::map<std::string, std::vector<std::pair<int, int>>> seen; // key -> (sender, n) in handling order
  std::atomic<int> constructed{0}, destroyed{0}, live{0}, max_live{0}, concurrent_same_key{0};
  std::map<std::string, int> live_by_key;

  void up(const std::string& key) {
    ++constructed;
    const int now = ++live;
    for (int m = max_live.load(); now > m && !max_live.compare_exchange_weak(m, now);) {}
    std::lock_guard g(this->m);
    if (++live_by_key[key] > 1) ++concurrent_same_key;
  }
  void down(const std::string& key) {
    ++destroyed;
    --live;
    std::lock_guard g(this->m);
    --live_by_key[key];
  }
  void record(const std::string& key, note n) {
    std::lock_guard g(m);
    seen[key].emplace_back(n.sender, n.n);
  }
  std::size_t count(const std::string& key) {
    std::lock_guard g(m);
    return seen[key].size();
  }
};

class account {
public:
  using reentrant = troupe::messages<daydream, wait_outside>;

  account(troupe::context<account> ctx, troupe::entity_id id, std::shared_ptr<journal> j)
      : ctx_(ctx), id_(std::move(id.value)), j_(std::move(j)) {
    if (id_ == "broken") throw std::runtime_error("account broken cannot be opened");
    j_->up(id_);
  }
  ~account() { j_->down(id_); }

  void handle(note n) {
    ++handled_;
    j_->record(id_, n);
  }
  void handle(echo e) { (void)ctx_.self().tell(note{e.sender + 100, e.n}); }
  std::string handle(whoami) const { return id_; }
  int handle(how_many) const { return handled_; }
  troupe::task<int> handle(sleepy) {
    asio::steady_timer t(co_await asio::this_coro::executor, 2ms);
    co_await t.async_wait(asio::use_awaitable);
    co_return ++handled_;
  }
  void handle(keep_me k) { keep_ = k.on; }
  void handle(set_alarm a) { ctx_.schedule_once(a.after, ring{}); }
  void handle(ring) { j_->record(id_, note{-1, -1}); }
  troupe::task<int> handle(nap n) {
    asio::steady_timer t(co_await asio::this_coro::executor, n.for_);
    co_await t.async_wait(asio::use_awaitable);
    co_return ++handled_;
  }
  troupe::task<int> handle(daydream d) {
    j_->record(id_, note{-3, 0});
    asio::steady_timer t(co_await asio::this_coro::executor, d.for_);
    co_await t.async_wait(asio::use_awaitable);
    co_return ++handled_;
  }
  void handle(crash) { throw std::runtime_error("crash"); }
  void handle(ask_peer p) {
    ctx_.ask(p.peer, nap{p.for_}, 5s)
        .then([this](int) { j_->record(id_, note{-4, 0}); },
              [this](const troupe::error&) { j_->record(id_, note{-5, 0}); });
  }
  troupe::task<int> handle(wait_outside w) {
    j_->record(id_, note{-3, 0});
    co_await w.on->timer->async_wait(asio::use_awaitable);
    co_return ++handled_;
  }
  void handle(start_beating) { ctx_.schedule_every(1ms, beat{}); }
  void handle(beat) { j_->record(id_, note{-2, ++beats_}); }
  int handle(beats) const { return beats_; }
  void handle(stall_soon s) { ctx_.schedule_once(1ms, stall{s.for_}); }
  void handle(stall s) {
    std::this_thread::sleep_for(s.for_);
    j_->record(id_, note{-6, 0});
  }
  bool can_passivate() const { return !keep_; }

private:
  troupe::context<account> ctx_;
  std::string id_;
  std::shared_ptr<journal> j_;
  int handled_ = 0;
  int beats_ = 0;
  bool keep_ = false;
};

using test::eventually;

} // namespace

TEST_CASE("an entity is activated by its first message, with its key, and not before") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 0ms}, j);
  auto a = accounts.get("acct-1");
  CHECK(j->constructed == 0);
  CHECK(accounts.stats().live == 0);
  CHECK(test::get(a.ask(whoami{}, asio::use_future)) == "acct-1");
  CHECK(j->constructed == 1);
  // Another reference to the same key reaches the same activation.
  REQUIRE_FALSE(sys.entity<account>("acct-1").tell(note{1, 1}));
  CHECK(test::get(sys.entity<account>("acct-1").ask(how_many{}, asio::use_future)) == 1);
  CHECK(j->constructed == 1);
  CHECK(accounts.stats().live == 1);
  CHECK(accounts.stats().activations == 1);
}

TEST_CASE("an entity ask whose timeout has passed fails at once and activates nothing") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 0ms}, j);
  std::vector<std::future<int>> asks;
  asks.push_back(accounts.get("late").ask(how_many{}, -1ms, asio::use_future));
  asks.push_back(accounts.get("late").ask(how_many{}, std::chrono::steady_clock::now() - 1ms, asio::use_future));
  for (auto& f : asks) {
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    try {
      f.get();
      FAIL("the ask succeeded");
    } catch (const troupe::error& e) {
      CHECK(e.code() == troupe::errc::timeout);
    }
  }
  CHECK(j->constructed == 0);
  CHECK(accounts.stats().activations == 0);
}

TEST_CASE("an idle entity is passivated, and its next message activates it again") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  // Long enough that the tell and the ask below meet one activation also on
  // a loaded machine under TSan (20 ms was not, once).
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 250ms}, j);
  auto a = accounts.get("acct-1");
  REQUIRE_FALSE(a.tell(note{1, 1}));
  CHECK(test::get(a.ask(how_many{}, asio::use_future)) == 1);
  REQUIRE(eventually([&] { return j->destroyed == 1 && accounts.stats().live == 0; }));
  CHECK(accounts.stats().passivations == 1);
  // A fresh instance: its in-memory count starts again.
  CHECK(test::get(a.ask(how_many{}, asio::use_future)) == 0);
  CHECK(j->constructed == 2);
}

TEST_CASE("an entity that declines passivation stays live until it allows it") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 10ms}, j);
  auto a = accounts.get("acct-1");
  REQUIRE_FALSE(a.tell(keep_me{true}));
  REQUIRE(eventually([&] { return accounts.stats().declined >= 3; }));
  CHECK(j->destroyed == 0);
  CHECK(accounts.stats().live == 1);
  REQUIRE_FALSE(a.tell(keep_me{false}));
  REQUIRE(eventually([&] { return j->destroyed == 1 && accounts.stats().live == 0; }));
}

TEST_CASE("a region keeps at most max_live entities, passivating the least recently used") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 0ms, .max_live = 3}, j);
  for (int i = 1; i <= 3; ++i) CHECK(test::get(accounts.get("a" + std::to_string(i)).ask(how_many{}, asio::use_future)) == 0);
  // a1 is used again: a2 is now the least recently used.
  REQUIRE_FALSE(accounts.get("a1").tell(note{1, 1}));
  CHECK(test::get(accounts.get("a1").ask(how_many{}, asio::use_future)) == 1);
  CHECK(test::get(accounts.get("a4").ask(how_many{}, asio::use_future)) == 0);
  REQUIRE(eventually([&] { return j->destroyed == 1 && accounts.stats().live == 3; }));
  // a1 kept its activation (its count), a2 was the one passivated.
  CHECK(test::get(accounts.get("a1").ask(how_many{}, asio::use_future)) == 1);
  CHECK(j->constructed == 4);
  CHECK(test::get(accounts.get("a2").ask(how_many{}, asio::use_future)) == 0);
  CHECK(j->constructed == 5);
  REQUIRE(eventually([&] { return j->destroyed == 2 && accounts.stats().live == 3; }));
}

TEST_CASE("messages to entities that passivate all the time are each handled once, in each sender's order, with "
          "never two activations of a key at once") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  auto j = std::make_shared<journal>();
  {
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    // Passivated after 1 ms idle, and at most 4 of 16 live: constant churn.
    auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 1ms, .max_live = 4}, j);
    constexpr int senders = 4, per_sender = 3000, keys = 16;
    std::vector<std::thread> threads;
    for (int s = 0; s < senders; ++s)
      threads.emplace_back([&, s] {
        std::mt19937 rng(seed + static_cast<unsigned>(s));
        std::vector<int> next(keys, 0), next_echo(keys, 0);
        for (int i = 0; i < per_sender; ++i) {
          const int k = static_cast<int>(rng() % keys);
          auto to = accounts.get("k" + std::to_string(k));
          // A quarter through the entity's own reference: what it holds
          // when it passivates goes to its next activation.
          if (rng() % 4 == 0)
            REQUIRE_FALSE(to.tell(echo{s, next_echo[k]++}));
          else
            REQUIRE_FALSE(to.tell(note{s, next[k]++}));
          if (rng() % 16 == 0) std::this_thread::sleep_for(2ms); // let some go idle
        }
      });
    for (auto& t : threads) t.join();
    std::size_t total = 0;
    REQUIRE(eventually([&] {
      total = 0;
      for (int k = 0; k < keys; ++k) total += j->count("k" + std::to_string(k));
      return total == senders * per_sender;
    }));
    const auto st = accounts.stats();
    std::printf("churn: %llu activations, %llu passivations, %llu messages waited\n",
                static_cast<unsigned long long>(st.activations), static_cast<unsigned long long>(st.passivations),
                static_cast<unsigned long long>(st.waited));
    CHECK(st.passivations > 0);
  }
  CHECK(j->concurrent_same_key == 0);
  CHECK(j->constructed == j->destroyed);
  // Each sender's messages to each key: every one once, in order.
  for (auto& [key, seen] : j->seen) {
    std::map<int, int> expect;
    for (auto [sender, n] : seen) {
      INFO(key << " from " << sender);
      CHECK(n == expect[sender]);
      expect[sender] = n + 1;
    }
  }
}

TEST_CASE("an entity asked to passivate while busy finishes what it was sent first; a message sent after the "
          "request keeps it live, and the one least recently used now goes instead") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 0ms, .max_live = 1}, j);
  // Coroutine handlers keep a busy while b's activation asks it to
  // passivate: the request waits behind them.
  std::vector<std::future<int>> replies;
  for (int i = 0; i < 20; ++i) replies.push_back(accounts.get("a").ask(sleepy{}, asio::use_future));
  CHECK(test::get(accounts.get("b").ask(how_many{}, asio::use_future)) == 0);
  for (int i = 0; i < 20; ++i) CHECK(test::get(replies[static_cast<std::size_t>(i)]) == i + 1);
  REQUIRE(eventually([&] { return accounts.stats().passivations == 1 && accounts.stats().live == 1; }));
  // a again: b is asked to passivate, but hears from a sender first.
  replies.clear();
  for (int i = 0; i < 20; ++i) replies.push_back(accounts.get("b").ask(sleepy{}, asio::use_future));
  CHECK(test::get(accounts.get("a").ask(how_many{}, asio::use_future)) == 0); // a fresh activation
  REQUIRE_FALSE(accounts.get("b").tell(note{0, 0}));
  for (auto& f : replies) test::get(f);
  CHECK(test::get(accounts.get("b").ask(how_many{}, asio::use_future)) == 21); // the same activation
  REQUIRE(eventually([&] { return accounts.stats().passivations == 2 && accounts.stats().live == 1; })); // a instead
  CHECK(j->concurrent_same_key == 0);
}

TEST_CASE("an activation that fails fails what waits for it with its exception, and the next message tries again") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{}, j);
  auto f = accounts.get("broken").ask(whoami{}, asio::use_future);
  REQUIRE(f.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_WITH(f.get(), Catch::Contains("account broken cannot be opened"));
  CHECK(accounts.stats().live == 0);
  auto g = accounts.get("broken").ask(whoami{}, asio::use_future);
  REQUIRE(g.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_WITH(g.get(), Catch::Contains("cannot be opened"));
}

TEST_CASE("a region per type and system; an entity of a type without one is refused") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  CHECK_THROWS_AS(sys.entity<account>("x"), troupe::error);
  sys.entities<account>(troupe::entity_options{}, j);
  CHECK_THROWS_WITH(sys.entities<account>(troupe::entity_options{}, j), Catch::Contains("already"));
}

TEST_CASE("after shutdown an entity reference reports system_shutdown, and asks fail at once") {
  auto j = std::make_shared<journal>();
  troupe::entity_ref<account> a;
  {
    troupe::actor_system sys(troupe::system_config{.threads = 1});
    a = sys.entities<account>(troupe::entity_options{}, j).get("acct-1");
    REQUIRE_FALSE(a.tell(note{0, 0}));
    CHECK(test::get(a.ask(how_many{}, asio::use_future)) == 1);
  }
  CHECK(a.tell(note{0, 1}) == troupe::errc::system_shutdown);
  auto f = a.ask(how_many{}, 1s, asio::use_future);
  REQUIRE(f.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_AS(f.get(), troupe::error);
  CHECK(j->constructed == j->destroyed);
}

TEST_CASE("an entity's timers end with its activation: a passivated entity's alarm never rings (documented)") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 0ms, .max_live = 1}, j);
  REQUIRE_FALSE(accounts.get("a").tell(set_alarm{300ms}));
  CHECK(test::get(accounts.get("a").ask(how_many{}, asio::use_future)) == 0);
  // b's activation passivates a before its alarm is due.
  CHECK(test::get(accounts.get("b").ask(how_many{}, asio::use_future)) == 0);
  REQUIRE(eventually([&] { return accounts.stats().passivations == 1; }));
  // A live entity's alarm rings, due well after a's: once it has rung, a's
  // alarm time is long past, and a was not activated again by it nor did
  // it ring.
  REQUIRE_FALSE(accounts.get("b").tell(set_alarm{500ms}));
  REQUIRE(eventually([&] { return j->count("b") == 1; }));
  CHECK(j->count("a") == 0);
  CHECK(accounts.stats().activations == 2);
}

TEST_CASE("an entity asked to passivate for idleness stays live when a message arrives for it before it handles the "
          "request") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 100ms}, j);
  auto a = accounts.get("a");
  // A long coroutine handler: the region sees no message for a while and
  // asks it to passivate; the request waits behind the handler.
  auto napping = a.ask(nap{400ms}, asio::use_future);
  REQUIRE(eventually([&] { return accounts.stats().asked >= 1; }));
  REQUIRE_FALSE(a.tell(note{0, 0})); // after the request: it cancels it
  CHECK(test::get(napping) == 1);
  CHECK(test::get(a.ask(how_many{}, asio::use_future)) == 2); // the same activation handled both
  CHECK(accounts.stats().passivations == 0);
  CHECK(accounts.stats().activations == 1);
}

TEST_CASE("an entity is not passivated while a reentrant handler of it is under way, for idleness or past the "
          "limit") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  SECTION("idle: asked after each idle period, it declines until the handler ends") {
    auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 20ms}, j);
    auto dreaming = accounts.get("a").ask(daydream{300ms}, asio::use_future);
    CHECK(test::get(dreaming) == 1); // finished, not failed with actor_stopped
    CHECK(accounts.stats().declined >= 1);
    CHECK(accounts.stats().activations == 1);
    REQUIRE(eventually([&] { return accounts.stats().passivations == 1; })); // idle since: it goes
  }
  SECTION("past the limit: the activation of another stays within the limit once the handler ends") {
    auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 0ms, .max_live = 1}, j);
    auto dreaming = accounts.get("a").ask(daydream{300ms}, asio::use_future);
    REQUIRE(eventually([&] { return j->count("a") == 1; })); // under way
    CHECK(test::get(accounts.get("b").ask(how_many{}, asio::use_future)) == 0);
    CHECK(test::get(dreaming) == 1);
    CHECK(accounts.stats().declined >= 1);
    // Its handler ended: the region is back within its limit, without
    // waiting for another activation.
    REQUIRE(eventually([&] { return accounts.stats().passivations == 1 && accounts.stats().live == 1; }));
    CHECK(j->concurrent_same_key == 0);
  }
}

TEST_CASE("a reentrant handler that a restart abandoned does not keep its entity from passivating") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 20ms}, j);
  auto a = accounts.get("a");
  auto dreaming = a.ask(daydream{10s}, asio::use_future);
  REQUIRE(eventually([&] { return j->count("a") == 1; })); // under way
  REQUIRE_FALSE(a.tell(crash{}));                           // restarts it: the handler never resumes
  REQUIRE_THROWS(test::get(dreaming));
  REQUIRE(eventually([&] { return accounts.stats().passivations == 1; }));
  CHECK(accounts.stats().activations == 1);
}

TEST_CASE("a reentrant handler whose frame its operation destroyed unfinished does not keep its entity live") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 20ms}, j);
  auto on = std::make_shared<outside>();
  auto waiting = accounts.get("a").ask(wait_outside{on}, asio::use_future);
  REQUIRE(eventually([&] { return accounts.stats().declined >= 1; })); // under way: it declines
  // The library goes without running its io_context: the pending wait's
  // handler, and the coroutine frame it holds, are destroyed on this thread.
  on->timer.reset();
  on->io.reset();
  REQUIRE_THROWS(test::get(waiting));
  REQUIRE(eventually([&] { return accounts.stats().passivations == 1; }));
  CHECK(accounts.stats().activations == 1);
}

TEST_CASE("an entity waiting for the reply to an ask's then is not passivated before it arrives") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 20ms}, j);
  REQUIRE_FALSE(accounts.get("a").tell(ask_peer{accounts.get("b"), 300ms}));
  REQUIRE(eventually([&] { return j->count("a") == 1; }));
  {
    std::lock_guard g(j->m);
    CHECK(j->seen["a"].front().first == -4); // the reply, in a's turn
  }
  CHECK(accounts.stats().declined >= 1);
  REQUIRE(eventually([&] { return accounts.stats().passivations == 2; })); // both idle since
  CHECK(accounts.stats().activations == 2);
}

TEST_CASE("an entity busy with messages that do not come through its region (its own timers) is not idle") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 20ms}, j);
  auto a = accounts.get("a");
  REQUIRE_FALSE(a.tell(start_beating{}));
  // Ten idle periods of beats (watched from outside, without a message
  // through the region), and it is still the same activation.
  REQUIRE(eventually([&] { return j->count("a") >= 200; }));
  CHECK(accounts.stats().passivations == 0);
  CHECK(accounts.stats().activations == 1);
}

TEST_CASE("an entity whose turn outlasts the idle timeout (a long handler, a preempted thread) is not idle") {
  auto j = std::make_shared<journal>();
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto accounts = sys.entities<account>(troupe::entity_options{.idle_timeout = 20ms}, j);
  auto a = accounts.get("a");
  REQUIRE_FALSE(a.tell(start_beating{}));
  REQUIRE_FALSE(a.tell(stall_soon{200ms})); // ten idle timeouts in one turn of its own timer
  const auto stalled = [&] {
    std::lock_guard g(j->m);
    auto& s = j->seen["a"];
    return std::find(s.begin(), s.end(), std::pair{-6, 0}) != s.end();
  };
  REQUIRE(eventually(stalled));
  const auto after = j->count("a");
  // Still beating: the same activation, not passivated once the turn ended.
  REQUIRE(eventually([&] { return j->count("a") >= after + 100; }, 5s));
  CHECK(accounts.stats().passivations == 0);
  CHECK(accounts.stats().activations == 1);
}

} // namespace core_entity_test
