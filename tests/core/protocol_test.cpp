// Protocol-typed references, with_context, reentrant coroutine handlers.

#include <troupe/protocol.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/gather.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <memory>
#include <string>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_protocol_test {

using namespace std::chrono_literals;

namespace {

// -- a protocol, two classes implementing it ------------------------------------

struct add {
  int n;
};
struct total {};
using counter_protocol = troupe::protocol<void(add), int(total)>;

class plain_counter {
public:
  void handle(add a) { sum_ += a.n; }
  int handle(total) const { return sum_; }

private:
  int sum_ = 0;
};

/// Counts twice as fast, and answers totals later (a promise).
struct reset {};
class doubling_counter {
public:
  void handle(add a) { sum_ += 2 * a.n; }
  int handle(total) const { return sum_; }
  void handle(reset) { sum_ = 0; }

private:
  int sum_ = 0;
};

/// Handles add, but its total is a string: not the protocol.
class wrong_reply {
public:
  void handle(add) {}
  std::string handle(total) const { return {}; }
};

// -- a pipeline whose stages know only the protocol of the next ----------------

struct item {
  int value;
};
struct finished {
  using reply_type = int;
};
using stage_protocol = troupe::protocol<void(item), int(finished)>;

class doubler {
public:
  explicit doubler(troupe::typed_ref<stage_protocol> next) : next_(std::move(next)) {}
  void handle(item i) { next_.tell(item{i.value * 2}); }
  troupe::task<int> handle(finished) { co_return co_await next_.ask(finished{}); }

private:
  troupe::typed_ref<stage_protocol> next_;
};

class summer {
public:
  void handle(item i) { sum_ += i.value; }
  void handle(finished, troupe::reply_promise<int> p) { p.deliver(sum_); }

private:
  int sum_ = 0;
};

// -- with_context -----------------------------------------------------------------

struct who {};
struct quit {};
class self_aware : public troupe::with_context<self_aware> {
public:
  troupe::actor_ref<self_aware> handle(who) const { return self(); }
  void handle(quit) { stop(); }
};

// -- requests through a protocol ---------------------------------------------------

struct poll_total {
  troupe::typed_ref<counter_protocol> counter;
};
struct seen_query {};
class poller : public troupe::with_context<poller> {
public:
  explicit poller(std::shared_ptr<test::latch> seen) : seen_signal_(std::move(seen)) {}
  void handle(poll_total p) {
    ctx().ask(p.counter, total{}).then([this](int t) {
      seen_.push_back(t);
      seen_signal_->count_down();
    });
  }
  std::vector<int> handle(seen_query) const { return seen_; }

private:
  std::shared_ptr<test::latch> seen_signal_;
  std::vector<int> seen_;
};

} // namespace

TEST_CASE("a protocol is implemented by a class only with every message and the exact reply types") {
  STATIC_REQUIRE(troupe::implements<plain_counter, counter_protocol>);
  STATIC_REQUIRE(troupe::implements<doubling_counter, counter_protocol>); // more messages is fine
  STATIC_REQUIRE_FALSE(troupe::implements<wrong_reply, counter_protocol>);
  STATIC_REQUIRE_FALSE(troupe::implements<self_aware, counter_protocol>);
  STATIC_REQUIRE(troupe::implements<summer, stage_protocol>); // a reply answered later counts
  STATIC_REQUIRE(std::is_convertible_v<troupe::actor_ref<plain_counter>, troupe::typed_ref<counter_protocol>>);
  STATIC_REQUIRE(std::is_same_v<troupe::protocol_reply_t<counter_protocol, total>, int>);
  STATIC_REQUIRE(troupe::in_protocol<counter_protocol, add>);
  STATIC_REQUIRE_FALSE(troupe::in_protocol<counter_protocol, reset>);
}

TEST_CASE("typed references to actors of different classes are used alike") {
  troupe::actor_system sys;
  std::vector<troupe::typed_ref<counter_protocol>> counters{sys.spawn<plain_counter>(), sys.spawn<doubling_counter>()};
  for (auto& c : counters)
    for (int i = 1; i <= 10; ++i) CHECK_FALSE(c.tell(add{i}));
  CHECK(test::get(counters[0].ask(total{}, asio::use_future)) == 55);
  CHECK(test::get(counters[1].ask(total{}, 5s, asio::use_future)) == 110);
  CHECK(test::get(troupe::gather(counters, total{}, 5s, asio::use_future)) == std::vector<int>{55, 110});
  CHECK(test::run(sys.get_executor(), [&]() -> troupe::task<int> { co_return co_await counters[1].ask(total{}); }) ==
        110);
  troupe::typed_ref<counter_protocol> copy = counters[0];
  CHECK(copy == counters[0]);
  CHECK_FALSE(copy == counters[1]);
  copy.stop();
  test::get(copy.when_stopped(asio::use_future));
  CHECK(copy.tell(add{1}) == troupe::errc::actor_stopped);
  try {
    test::get(copy.ask(total{}, asio::use_future));
    FAIL("an ask of a stopped actor succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::actor_stopped);
  }
}

TEST_CASE("a pipeline's stages reference the next by protocol, never by class") {
  troupe::actor_system sys;
  troupe::typed_ref<stage_protocol> last = sys.spawn<summer>();
  troupe::typed_ref<stage_protocol> head = last;
  for (int i = 0; i < 5; ++i) head = sys.spawn<doubler>(head);
  for (int v = 1; v <= 100; ++v) head.tell(item{v});
  CHECK(test::get(head.ask(finished{}, asio::use_future)) == 32 * 5050);
}

TEST_CASE("a request through a protocol continues in the asking actor") {
  troupe::actor_system sys;
  troupe::typed_ref<counter_protocol> c = sys.spawn<plain_counter>();
  c.tell(add{7});
  auto seen = std::make_shared<test::latch>(1);
  auto p = sys.spawn<poller>(seen);
  p.tell(poll_total{c});
  REQUIRE(seen->wait()); // the continuation ran in the asking actor
  CHECK(test::get(p.ask(seen_query{}, asio::use_future)) == std::vector<int>{7});
}

TEST_CASE("with_context gives an actor self and stop without a constructor parameter") {
  troupe::actor_system sys;
  auto a = sys.spawn<self_aware>();
  CHECK(test::get(a.ask(who{}, asio::use_future)) == a);
  a.tell(quit{});
  CHECK(test::get(a.when_stopped(asio::use_future)).reason == troupe::exit_reason::normal);
  try {
    self_aware outside;
    FAIL("constructed outside an actor system");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
  }
}

// -- reentrant coroutine handlers -------------------------------------------------

namespace {

struct slow_query {
  using reply_type = int;
};
struct let_go {};
class slow_service {
public:
  void handle(slow_query, troupe::reply_promise<int> p) { parked_.push_back(std::move(p)); }
  void handle(let_go) {
    for (auto& p : parked_) p.deliver(42);
    parked_.clear();
  }

private:
  std::vector<troupe::reply_promise<int>> parked_;
};

struct fetch_twice {
  troupe::actor_ref<slow_service> from;
};
struct ping {};
struct fail_later {};
struct view {};
struct observed {
  bool waiting = false;
  int pings = 0;
  std::vector<int> pings_seen_across_await;
  int fetched = 0;
};

class interleaver {
public:
  using reentrant = troupe::messages<fetch_twice, fail_later>;
  explicit interleaver(troupe::context<interleaver> ctx, std::shared_ptr<test::latch> waiting = nullptr)
      : ctx_(ctx), waiting_(std::move(waiting)) {}

  /// Other messages run between its steps: the pings counted while it waits.
  troupe::task<int> handle(fetch_twice f) {
    const int before = state_.pings;
    state_.waiting = true;
    if (waiting_) waiting_->count_down();
    int a = co_await f.from.ask(slow_query{});
    state_.pings_seen_across_await.push_back(state_.pings - before);
    int b = co_await f.from.ask(slow_query{});
    state_.fetched += a + b;
    co_return a + b;
  }
  troupe::task<void> handle(fail_later) {
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    throw std::runtime_error("failed after a wait");
  }
  void handle(ping) { ++state_.pings; }
  observed handle(view) const { return state_; }

private:
  troupe::context<interleaver> ctx_;
  std::shared_ptr<test::latch> waiting_;
  observed state_;
};

} // namespace

TEST_CASE("a reentrant coroutine handler lets other messages in while it waits, one turn at a time") {
  troupe::actor_system sys;
  auto svc = sys.spawn<slow_service>();
  auto waiting = std::make_shared<test::latch>(1);
  auto a = sys.spawn<interleaver>(waiting);
  auto reply = a.ask(fetch_twice{svc}, asio::use_future);
  REQUIRE(waiting->wait()); // its first step ran: it waits now
  CHECK(test::get(a.ask(view{}, asio::use_future)).waiting);
  for (int i = 0; i < 100; ++i) a.tell(ping{});
  CHECK(test::get(a.ask(view{}, asio::use_future)).pings == 100); // handled while the handler waits
  CHECK(reply.wait_for(0ms) == std::future_status::timeout);
  const auto until = std::chrono::steady_clock::now() + test::deadline;
  while (reply.wait_for(1ms) != std::future_status::ready) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    svc.tell(let_go{}); // both of its asks, one after the other
  }
  CHECK(reply.get() == 84);
  auto st = test::get(a.ask(view{}, asio::use_future));
  CHECK(st.fetched == 84);
  CHECK(st.pings_seen_across_await == std::vector<int>{100});
  STATIC_REQUIRE(troupe::reentrant_handler<interleaver, fetch_twice>);
  STATIC_REQUIRE_FALSE(troupe::reentrant_handler<interleaver, ping>);
}

TEST_CASE("a reentrant handler that throws is a failure of its actor; an actor that stops ends its waits") {
  troupe::actor_system sys;
  auto a = sys.spawn<interleaver>(troupe::spawn_options{.supervision = troupe::supervision::stop()});
  a.tell(fail_later{});
  auto d = test::get(a.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(d.what.find("failed after a wait") != std::string::npos);

  auto svc = sys.spawn<slow_service>();
  auto b = sys.spawn<interleaver>();
  auto reply = b.ask(fetch_twice{svc}, asio::use_future);
  test::get(b.ask(view{}, asio::use_future));
  b.stop();
  test::get(b.when_stopped(asio::use_future));
  svc.tell(let_go{}); // the reply resumes nothing: the handler's actor has stopped
  try {
    test::get(reply);
    FAIL("the ask of a stopped actor's reentrant handler succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::actor_stopped);
  }
}

} // namespace core_protocol_test
