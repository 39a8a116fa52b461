#include <troupe/actor_ref.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/bind_executor.hpp>
#include <asio/executor.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_actor_ref_test {

using namespace std::chrono_literals;

namespace {

struct push {
  int sender;
  int seq;
};
struct log_query {};
struct add {
  int n;
};
struct total {};
struct touch {};
struct add_and_total {
  int n;
};

/// Records every message it receives.
class recorder {
public:
  void handle(push p) { log_.push_back(p); }
  std::vector<push> handle(log_query) const { return log_; }

private:
  std::vector<push> log_;
};

class counter {
public:
  void handle(add m) { sum_ += m.n; }
  int handle(total) const { return sum_; }
  void handle(touch) { ++touched_; }
  int handle(add_and_total m) { return sum_ += m.n; }

private:
  int sum_ = 0;
  int touched_ = 0;
};

/// Holds back its replies until released: lets tests make asks wait.
struct gate_wait {
  std::shared_ptr<std::promise<void>> entered; // set once the handler runs
};
struct slow_echo {
  int n;
};
class gated {
public:
  explicit gated(std::shared_future<void> open) : open_(std::move(open)) {}
  void handle(gate_wait g) {
    if (g.entered) g.entered->set_value();
    open_.wait();
  }
  int handle(slow_echo m) { return m.n; }

private:
  std::shared_future<void> open_;
};

/// Replies after a delay, on a timer (a coroutine handler).
struct delayed {
  std::chrono::milliseconds delay;
  int value;
};
class sleeper {
public:
  troupe::task<int> handle(delayed d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d.delay);
    co_await t.async_wait(asio::use_awaitable);
    ++answered_;
    co_return d.value;
  }
  int handle(total) const { return answered_; }

private:
  int answered_ = 0;
};

} // namespace

TEST_CASE("tell delivers messages from one sender in the order sent") {
  troupe::actor_system sys;
  auto r = sys.spawn<recorder>();
  for (int i = 0; i < 10'000; ++i) CHECK(!r.tell(push{0, i}));
  auto log = test::get(r.ask(log_query{}, asio::use_future));
  REQUIRE(log.size() == 10'000);
  for (int i = 0; i < 10'000; ++i) REQUIRE(log[i].seq == i);
}

TEST_CASE("tells from many threads are all delivered, and each sender's stay in order") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto r = sys.spawn<recorder>();
  constexpr int senders = 8, per_sender = 20'000;
  std::vector<std::thread> threads;
  for (int s = 0; s < senders; ++s)
    threads.emplace_back([r, s] {
      for (int i = 0; i < per_sender; ++i) r.tell(push{s, i});
    });
  for (auto& t : threads) t.join();
  auto log = test::get(r.ask(log_query{}, asio::use_future));
  REQUIRE(log.size() == std::size_t{senders} * per_sender);
  std::vector<int> next(senders, 0);
  for (auto& p : log) {
    REQUIRE(p.seq == next[p.sender]);
    ++next[p.sender];
  }
}

namespace {
/// A message the compiler must place on a 64-byte boundary.
struct alignas(64) wide {
  char bytes[8];
};
struct wide_ask {
  alignas(64) char bytes[8];
};
/// Counts messages that arrived off their alignment (the handlers take the
/// message where its envelope holds it).
class alignment_checker {
public:
  void handle(const wide& w) { count(&w); }
  int handle(const wide_ask& w) {
    count(&w);
    return off_;
  }
  int handle(total) const { return seen_ * 1000 + off_; }

private:
  void count(const void* p) {
    ++seen_;
    off_ += reinterpret_cast<std::uintptr_t>(p) % 64 != 0 ? 1 : 0;
  }
  int seen_ = 0;
  int off_ = 0;
};

/// Sends `each` numbered pushes to every recorder in turn, in one turn.
struct flood {
  int each;
};
class flooder {
public:
  explicit flooder(std::vector<troupe::actor_ref<recorder>> to) : to_(std::move(to)) {}
  void handle(flood f) {
    for (int i = 0; i < f.each; ++i)
      for (auto& r : to_) r.tell(push{0, i});
  }

private:
  std::vector<troupe::actor_ref<recorder>> to_;
};
} // namespace

TEST_CASE("an over-aligned message is delivered at its alignment, told or asked") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto c = sys.spawn<alignment_checker>();
  for (int i = 0; i < 300; ++i) c.tell(wide{});
  for (int i = 0; i < 20; ++i) CHECK(test::get(c.ask(wide_ask{}, asio::use_future)) == 0);
  CHECK(test::get(c.ask(total{}, asio::use_future)) == 320 * 1000);
}

TEST_CASE("a producer that floods receivers in turn, on another worker, delivers each one's messages in order") {
  // The producer's thread runs out of free envelopes and takes each
  // receiver's from a lane of its own (detail/pool.hpp).
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  constexpr int receivers = 12, each = 20'000;
  std::vector<troupe::actor_ref<recorder>> to;
  for (int i = 0; i < receivers; ++i) to.push_back(sys.spawn<recorder>());
  auto p = sys.spawn<flooder>(to);
  p.tell(flood{each});
  p.tell(flood{each});
  for (auto& r : to) {
    std::vector<push> log; // an ask from here may overtake the floods: asked until they are in
    REQUIRE(test::eventually([&] {
      log = test::get(r.ask(log_query{}, asio::use_future));
      return log.size() == std::size_t{2} * each;
    }));
    for (int i = 0; i < 2 * each; ++i) REQUIRE(log[i].seq == i % each);
  }
}

TEST_CASE("ask returns the handler's result through use_future") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  c.tell(add{40});
  c.tell(add{2});
  CHECK(test::get(c.ask(total{}, asio::use_future)) == 42);
}

TEST_CASE("named messages are copied by tell, ask and send") {
  troupe::actor_system sys;
  auto r = sys.spawn<recorder>();
  const push first{1, 1};
  push second{1, 2};
  CHECK(!r.tell(first));
  test::get(r.send(second, asio::use_future));
  const log_query query;
  auto log = test::get(r.ask(query, asio::use_future));
  REQUIRE(log.size() == 2);
  CHECK(log[1].seq == 2);
  CHECK(second.seq == 2); // still there: copied, not moved
}

TEST_CASE("ask works in a coroutine with the default use_awaitable token") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  int v = test::run(sys.get_executor(), [c]() -> asio::awaitable<int> {
    for (int i = 0; i < 100; ++i) co_await c.ask(add{1});
    co_return co_await c.ask(total{});
  });
  CHECK(v == 100);
}

TEST_CASE("ask works with as_tuple, deferred and plain callbacks") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  c.tell(add{7});

  auto [ep, v] = test::run(sys.get_executor(), [c]() -> asio::awaitable<std::tuple<std::exception_ptr, int>> {
    co_return co_await c.ask(total{}, asio::experimental::as_tuple(asio::use_awaitable));
  });
  CHECK(!ep);
  CHECK(v == 7);

  auto op = c.ask(total{}, asio::experimental::deferred);
  CHECK(test::get(std::move(op)(asio::use_future)) == 7);

  std::promise<int> p;
  c.ask(total{}, [&p](std::exception_ptr e, int r) {
    if (e)
      p.set_exception(e);
    else
      p.set_value(r);
  });
  CHECK(test::get(p.get_future()) == 7);
}

TEST_CASE("an ask bound to an io_context with no other work delivers its reply to it") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto c = sys.spawn<counter>();
  c.tell(add{3});
  constexpr int asks = 200;
  int replies = 0;
  for (int i = 0; i < asks; ++i) {
    asio::io_context io;
    c.ask(total{}, asio::bind_executor(io, [&](std::exception_ptr e, int v) {
            CHECK(!e);
            CHECK(v == 3);
            ++replies;
          }));
    // The ask's outstanding work keeps the context running until the reply
    // has been handed to it, whenever it comes.
    io.run();
  }
  CHECK(replies == asks);
}

TEST_CASE("an ask from a coroutine on a strand of an io_context (a polymorphic executor of another type) completes there") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto c = sys.spawn<counter>();
  c.tell(add{4});
  // Each round's io_context goes as soon as its run() returns: by then the
  // reply's thread must hold no copy of the strand (its last copy would
  // lock the strand service of a context that is gone), whatever wraps it.
  auto coroutine = [&]() -> asio::awaitable<int> {
    int a = co_await c.ask(total{});
    int b = co_await c.ask(total{}, 5s);
    co_return a + b;
  };
  for (int round = 0; round < 5000; ++round) {
    auto io = std::make_unique<asio::io_context>();
    std::future<int> f;
    int bound = 0;
    switch (round % 5) {
    case 0:
      f = asio::co_spawn(asio::make_strand(*io), coroutine, asio::use_future);
      break;
    case 1: // a strand of a polymorphic executor
      f = asio::co_spawn(asio::make_strand(asio::any_io_executor(io->get_executor())), coroutine, asio::use_future);
      break;
    case 2: // a strand of a strand
      f = asio::co_spawn(asio::any_io_executor(asio::make_strand(asio::make_strand(*io))), coroutine, asio::use_future);
      break;
    case 3: { // a strand of an executor with an allocator of its own
      auto ex = asio::require(io->get_executor(), asio::execution::allocator(std::allocator<int>()));
      f = asio::co_spawn(asio::any_io_executor(asio::make_strand(ex)), coroutine, asio::use_future);
      break;
    }
    case 4: // a callback bound to a strand inside asio::executor, of which only the ask keeps a copy
      c.ask(total{}, asio::bind_executor(asio::executor(asio::make_strand(*io)), [&](std::exception_ptr e, int v) {
              CHECK(!e);
              bound = 2 * v;
            }));
      break;
    }
    io->run();
    io.reset();
    CHECK((f.valid() ? test::get(f) : bound) == 8);
  }
}

TEST_CASE("ask of a handler returning void completes after the handler ran") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  test::get(c.ask(add{5}, asio::use_future));
  CHECK(test::get(c.ask(total{}, asio::use_future)) == 5);
}

TEST_CASE("ask fails with errc::timeout when no reply arrives in time") {
  troupe::actor_system sys;
  auto s = sys.spawn<sleeper>();
  auto f = s.ask(delayed{2s, 1}, 20ms, asio::use_future);
  try {
    test::get(f);
    FAIL("the ask did not time out");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::timeout);
    CHECK(std::string(e.what()).find("no reply within") != std::string::npos);
  }
}

TEST_CASE("a reply arriving after the timeout is dropped and the actor goes on") {
  troupe::actor_system sys;
  auto s = sys.spawn<sleeper>();
  auto [ep, v] = test::run(sys.get_executor(), [s]() -> asio::awaitable<std::tuple<std::exception_ptr, int>> {
    co_return co_await s.ask(delayed{100ms, 1}, 5ms, asio::experimental::as_tuple(asio::use_awaitable));
  });
  CHECK(troupe::error_code_of(ep) == troupe::errc::timeout);
  CHECK(v == 0);
  // The late reply was produced (the handler ran to the end) and dropped;
  // the next ask, queued behind it, is answered normally.
  CHECK(test::get(s.ask(delayed{1ms, 2}, asio::use_future)) == 2);
  CHECK(test::get(s.ask(total{}, asio::use_future)) == 2);
}

TEST_CASE("ask without a timeout uses the system's default") {
  troupe::actor_system sys(troupe::system_config{.ask_timeout = 20ms});
  auto s = sys.spawn<sleeper>();
  auto f = s.ask(delayed{2s, 1}, asio::use_future);
  REQUIRE(f.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_MATCHES(f.get(), troupe::error,
                       Catch::Predicate<troupe::error>([](auto& e) { return e.code() == troupe::errc::timeout; }));
}

TEST_CASE("an ask to a stopped actor fails at once with actor_stopped") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  c.stop();
  test::get(c.when_stopped(asio::use_future));
  auto f = c.ask(total{}, asio::use_future);
  REQUIRE(f.wait_for(1s) == std::future_status::ready); // at once, not after a timeout
  try {
    f.get();
    FAIL("the ask succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::actor_stopped);
  }
}

TEST_CASE("asks still queued when the actor stops fail with actor_stopped") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::promise<void> open;
  auto g = sys.spawn<gated>(open.get_future().share());
  auto entered = std::make_shared<std::promise<void>>();
  g.tell(gate_wait{entered}); // blocks the actor (and the only thread) until opened
  test::get(entered->get_future());
  std::vector<std::future<int>> asks;
  for (int i = 0; i < 5; ++i) asks.push_back(g.ask(slow_echo{i}, asio::use_future));
  g.stop();
  open.set_value();
  for (auto& f : asks) {
    REQUIRE(f.wait_for(test::deadline) == std::future_status::ready);
    CHECK(troupe::error_code_of([&] {
            try {
              f.get();
              return std::exception_ptr{};
            } catch (...) {
              return std::current_exception();
            }
          }()) == troupe::errc::actor_stopped);
  }
  CHECK(sys.dead_letters() == 0); // failed asks are not dead letters: their askers know
}

TEST_CASE("a tell to a stopped actor reports actor_stopped and counts a dead letter") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  c.stop();
  test::get(c.when_stopped(asio::use_future));
  auto before = sys.dead_letters();
  CHECK(c.tell(add{1}) == troupe::errc::actor_stopped);
  CHECK(sys.dead_letters() == before + 1);
}

TEST_CASE("a bounded mailbox rejects tells with mailbox_full when full") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::promise<void> open;
  auto g = sys.spawn<gated>(troupe::spawn_options{.mailbox_capacity = 4}, open.get_future().share());
  auto entered = std::make_shared<std::promise<void>>();
  REQUIRE(!g.tell(gate_wait{entered}));
  test::get(entered->get_future()); // the actor blocks in its handler: the mailbox is empty
  int accepted = 0;
  std::error_code last;
  for (int i = 0; i < 100; ++i) {
    last = g.tell(slow_echo{i});
    if (last) break;
    ++accepted;
  }
  CHECK(last == troupe::errc::mailbox_full);
  CHECK(accepted == 4);
  auto ask = g.ask(slow_echo{99}, asio::use_future);
  REQUIRE(ask.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_AS(ask.get(), troupe::error);
  open.set_value();
  test::get(g.send(slow_echo{7}, asio::use_future)); // room again once drained (throws on error)
}

TEST_CASE("send waits for room in a full bounded mailbox (backpressure)") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  std::promise<void> open;
  auto g = sys.spawn<gated>(troupe::spawn_options{.mailbox_capacity = 2}, open.get_future().share());
  auto sent = std::make_shared<std::atomic<int>>(0);
  auto producer = asio::co_spawn(
      sys.get_executor(),
      [g, sent]() -> asio::awaitable<void> {
        co_await g.send(gate_wait{});
        ++*sent;
        for (int i = 0; i < 50; ++i) {
          auto ec = co_await g.send(slow_echo{i}, asio::experimental::as_tuple(asio::use_awaitable));
          if (std::get<0>(ec)) throw std::system_error(std::get<0>(ec));
          ++*sent;
        }
      },
      asio::use_future);
  // The producer cannot get far while the actor is blocked: at most the
  // capacity (plus the message being handled) is accepted.
  CHECK(producer.wait_for(100ms) == std::future_status::timeout);
  CHECK(*sent <= 4);
  open.set_value();
  test::get(producer); // all 51 sends complete once the actor drains
  CHECK(*sent == 51);
}

TEST_CASE("senders waiting for room are released with actor_stopped when the actor stops") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::promise<void> open;
  auto g = sys.spawn<gated>(troupe::spawn_options{.mailbox_capacity = 1}, open.get_future().share());
  REQUIRE(!g.tell(gate_wait{}));
  // Fill the mailbox (the gate message may still be in it or being handled).
  std::vector<std::error_code> results(10);
  test::latch all(10);
  for (int i = 0; i < 10; ++i)
    g.send(slow_echo{i}, [&, i](std::error_code ec) {
      results[i] = ec;
      all.count_down();
    });
  g.stop();
  open.set_value();
  test::get(g.when_stopped(asio::use_future));
  // Every send completed: the accepted ones with success, the rest stopped.
  REQUIRE(all.wait());
  int stopped = 0;
  for (auto& ec : results)
    if (ec == troupe::errc::actor_stopped) ++stopped;
  CHECK(stopped >= 8);
}

namespace {
struct numbered {
  std::uint32_t seq;
};
struct numbered_ask {
  std::uint32_t seq;
};
struct order_state {
  std::uint64_t handled = 0, out_of_order = 0;
  std::int64_t last = -1;
  std::string first; // the first violation, as it was seen
};
struct order_report {
  std::shared_ptr<std::promise<order_state>> out;
};

/// Checks that the numbers it is told, asked and sent only grow.
class order_checker {
public:
  void handle(numbered m) { see(m.seq); }
  std::uint32_t handle(numbered_ask m) {
    see(m.seq);
    return m.seq;
  }
  void handle(order_report r) { r.out->set_value(st_); }

private:
  void see(std::uint32_t s) {
    ++st_.handled;
    if (static_cast<std::int64_t>(s) <= st_.last && st_.out_of_order++ == 0)
      st_.first = "after " + std::to_string(st_.last) + " got " + std::to_string(s);
    st_.last = std::max<std::int64_t>(st_.last, s);
  }
  order_state st_;
};

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  if (const char* s = std::getenv(name)) return std::strtoull(s, nullptr, 10);
  return fallback;
}

/// What the sender's completions count (shared: they may run on any thread).
struct tally {
  std::atomic<std::uint64_t> accepted{0}, refused{0}, wrong{0}, outstanding{0}, sends_in_flight{0};
};
} // namespace

TEST_CASE("a bounded mailbox keeps one sender's order for every mix of tell, ask and send, awaited or not") {
  const std::uint64_t seed = env_or("TROUPE_PROPERTY_SEED", std::random_device{}());
  const std::uint64_t total_messages = env_or("TROUPE_BOUNDED_ORDER_MESSAGES", 600'000);
  INFO("seed " << seed << " (TROUPE_PROPERTY_SEED=" << seed << " replays the mix)");
  std::mt19937_64 rng(seed);
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  for (std::uint32_t capacity = 1; capacity <= 4; ++capacity) {
    const auto n = static_cast<std::uint32_t>(total_messages / 4);
    const std::uint64_t windows[] = {1, 2, 8, 64, 1024, n};
    const std::uint64_t window = windows[rng() % std::size(windows)];
    CAPTURE(capacity, window);
    auto r = sys.spawn<order_checker>(troupe::spawn_options{.mailbox_capacity = capacity});
    auto t = std::make_shared<tally>();
    const auto give_up = std::chrono::steady_clock::now() + test::deadline;
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto roll = rng() % 100;
      if (roll < 70) {
        // At most `window` sends on their way (1: each completes before the next).
        for (std::uint32_t spins = 0; t->sends_in_flight.load(std::memory_order_acquire) >= window; ++spins) {
          if ((spins & 1023) == 0) REQUIRE(std::chrono::steady_clock::now() < give_up); // a stranded sender
          std::this_thread::yield();
        }
        t->sends_in_flight.fetch_add(1, std::memory_order_relaxed);
        t->outstanding.fetch_add(1, std::memory_order_relaxed);
        r.send(numbered{i}, [t](std::error_code ec) {
          (ec ? t->wrong : t->accepted).fetch_add(1); // a send is never refused while the actor runs
          t->sends_in_flight.fetch_sub(1, std::memory_order_release);
          t->outstanding.fetch_sub(1, std::memory_order_release);
        });
      } else if (roll < 85) {
        const auto ec = r.tell(numbered{i});
        if (!ec)
          t->accepted.fetch_add(1);
        else
          (ec == troupe::errc::mailbox_full ? t->refused : t->wrong).fetch_add(1);
      } else {
        t->outstanding.fetch_add(1, std::memory_order_relaxed);
        r.ask(numbered_ask{i}, [t, i](std::exception_ptr ep, std::uint32_t v) {
          if (!ep)
            (v == i ? t->accepted : t->wrong).fetch_add(1);
          else
            (troupe::error_code_of(ep) == troupe::errc::mailbox_full ? t->refused : t->wrong).fetch_add(1);
          t->outstanding.fetch_sub(1, std::memory_order_release);
        });
      }
    }
    REQUIRE(test::eventually([&] { return t->outstanding.load(std::memory_order_acquire) == 0; }));
    auto out = std::make_shared<std::promise<order_state>>();
    auto report = out->get_future();
    test::get(r.send(order_report{out}, asio::use_future)); // behind everything accepted
    const auto st = test::get(report);
    INFO("first out of order: " << st.first);
    CHECK(st.out_of_order == 0);
    CHECK(t->wrong == 0);
    CHECK(st.handled == t->accepted);
    CHECK(t->accepted + t->refused == n);
    r.stop();
    test::get(r.when_stopped(asio::use_future));
  }
}

TEST_CASE("while a send waits for room, a tell and an ask of any sender are refused, not let past it") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::promise<void> open;
  auto g = sys.spawn<gated>(troupe::spawn_options{.mailbox_capacity = 1}, open.get_future().share());
  auto entered = std::make_shared<std::promise<void>>();
  REQUIRE(!g.tell(gate_wait{entered}));
  test::get(entered->get_future()); // blocked in its handler, the mailbox empty
  REQUIRE(!g.tell(slow_echo{1}));   // the one slot
  std::promise<std::error_code> sent;
  g.send(slow_echo{2}, [&](std::error_code ec) { sent.set_value(ec); }); // waits
  CHECK(g.tell(slow_echo{3}) == troupe::errc::mailbox_full);
  auto ask = g.ask(slow_echo{4}, asio::use_future);
  REQUIRE(ask.wait_for(test::deadline) == std::future_status::ready);
  CHECK(troupe::error_code_of([&] {
          try {
            ask.get();
          } catch (...) {
            return std::current_exception();
          }
          return std::exception_ptr{};
        }()) == troupe::errc::mailbox_full);
  open.set_value();
  CHECK(!test::get(sent.get_future()));
}

TEST_CASE("a tell to a stopped actor whose bounded mailbox was full reports actor_stopped") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::promise<void> open;
  auto g = sys.spawn<gated>(troupe::spawn_options{.mailbox_capacity = 1}, open.get_future().share());
  auto entered = std::make_shared<std::promise<void>>();
  REQUIRE(!g.tell(gate_wait{entered}));
  test::get(entered->get_future());
  REQUIRE(!g.tell(slow_echo{1})); // full
  g.stop();
  open.set_value();
  test::get(g.when_stopped(asio::use_future));
  const auto before = sys.dead_letters();
  CHECK(g.tell(slow_echo{2}) == troupe::errc::actor_stopped);
  CHECK(sys.dead_letters() == before + 1);
}

TEST_CASE("an ask whose timeout has passed fails with timeout at once and sends nothing; no_timeout never expires") {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  auto code_of = [](std::future<int>& f) {
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    try {
      f.get();
    } catch (const troupe::error& e) {
      return e.code();
    }
    return std::error_code{};
  };
  const auto deadline = std::chrono::steady_clock::now() - 5ms;
  auto late = c.ask(total{}, deadline - std::chrono::steady_clock::now(), asio::use_future); // negative
  CHECK(code_of(late) == troupe::errc::timeout);
  auto zero = c.ask(total{}, 0ms, asio::use_future);
  CHECK(code_of(zero) == troupe::errc::timeout);
  auto past = c.ask(total{}, deadline, asio::use_future); // the time-point overload
  CHECK(code_of(past) == troupe::errc::timeout);
  auto late_add = c.ask(add_and_total{5}, -1ms, asio::use_future);
  CHECK(code_of(late_add) == troupe::errc::timeout);
  CHECK(test::get(c.ask(total{}, asio::use_future)) == 0); // none of them was handled
  CHECK(test::get(c.ask(total{}, troupe::no_timeout, asio::use_future)) == 0);
  CHECK(test::get(c.ask(total{}, std::chrono::milliseconds::max(), asio::use_future)) == 0);
  CHECK(test::get(c.ask(total{}, std::chrono::steady_clock::now() + 5s, asio::use_future)) == 0);
  CHECK_THROWS_AS(troupe::actor_system(troupe::system_config{.ask_timeout = 0ms}), troupe::error);
}

TEST_CASE("an ask whose timeout has passed takes no slot of a full bounded mailbox") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  std::promise<void> open;
  auto g = sys.spawn<gated>(troupe::spawn_options{.mailbox_capacity = 1}, open.get_future().share());
  auto entered = std::make_shared<std::promise<void>>();
  REQUIRE(!g.tell(gate_wait{entered}));
  test::get(entered->get_future());
  auto late = g.ask(slow_echo{1}, -1ms, asio::use_future);
  REQUIRE(late.wait_for(5s) == std::future_status::ready);
  try {
    late.get();
    FAIL("the ask succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::timeout);
  }
  CHECK(!g.tell(slow_echo{2})); // the one slot is still free
  open.set_value();
}

TEST_CASE("references are copyable, comparable and usable from any thread") {
  troupe::actor_system sys;
  auto a = sys.spawn<counter>();
  auto b = sys.spawn<counter>();
  troupe::actor_ref<counter> copy = a;
  CHECK(copy == a);
  CHECK(!(copy == b));
  CHECK(a.id() != b.id());
  troupe::actor_ref<counter> empty;
  CHECK(!empty);
  CHECK(static_cast<bool>(a));
  std::thread t([copy] { copy.tell(add{3}); });
  t.join();
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 3);
}

} // namespace core_actor_ref_test
