// The awaitable mailbox: context::receive in an actor's own coroutine.

#include <troupe/context.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <memory>
#include <stdexcept>
#include <thread>
#include <string>
#include <variant>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_receive_test {

using namespace std::chrono_literals;

namespace {

// -- a two-step handshake written as one coroutine ------------------------------

class server;
struct syn {
  int seq;
};
struct ack {
  int seq;
};
struct data {
  std::string text;
};
struct log_query {};

/// on_start: waits for syn, then for ack (data arriving meanwhile stays
/// queued for the handler), then ends; the handlers take over.
/// `synced`, if given, is counted down once the syn is taken.
class server {
public:
  explicit server(troupe::context<server> ctx, std::shared_ptr<test::latch> synced = nullptr)
      : ctx_(ctx), synced_(std::move(synced)) {}

  troupe::task<void> on_start() {
    auto s = co_await ctx_.receive<syn>();
    log_.push_back("syn " + std::to_string(s.seq));
    if (synced_) synced_->count_down();
    auto a = co_await ctx_.receive<ack>();
    log_.push_back("ack " + std::to_string(a.seq));
  }
  void handle(syn) { log_.push_back("late syn"); }
  void handle(ack) { log_.push_back("late ack"); }
  void handle(data d) { log_.push_back("data " + d.text); }
  std::vector<std::string> handle(log_query) const { return log_; }

private:
  troupe::context<server> ctx_;
  std::shared_ptr<test::latch> synced_;
  std::vector<std::string> log_;
};

// -- receive with a deadline, and of several types --------------------------------

struct go {
  std::chrono::milliseconds deadline;
};
struct left_msg {
  int v;
};
struct right_msg {
  std::string v;
};
struct outcome_query {};
struct poll {
  std::chrono::milliseconds deadline;
  bool tell_first;
};
struct collect {
  std::chrono::milliseconds budget;
};
struct elapsed_query {};

class chooser {
public:
  explicit chooser(troupe::context<chooser> ctx) : ctx_(ctx) {}

  troupe::task<void> handle(go g) {
    try {
      auto m = co_await ctx_.receive<left_msg, right_msg>(g.deadline);
      if (auto* l = std::get_if<left_msg>(&m))
        outcome_.push_back("left " + std::to_string(l->v));
      else
        outcome_.push_back("right " + std::get<right_msg>(m).v);
    } catch (const troupe::error& e) {
      outcome_.push_back(e.code() == troupe::errc::receive_timeout ? "timeout" : "error");
    }
  }
  /// `tell_first`: a matching message is queued before the receive looks.
  troupe::task<void> handle(poll p) {
    if (p.tell_first) ctx_.self().tell(left_msg{42});
    co_await handle(go{p.deadline});
  }
  /// Up to three messages under one deadline `budget` from now; records the
  /// time to the timeout.
  troupe::task<void> handle(collect c) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + c.budget;
    try {
      for (int i = 0; i < 3; ++i) {
        auto m = co_await ctx_.receive<left_msg>(deadline);
        outcome_.push_back("left " + std::to_string(m.v));
      }
    } catch (const troupe::error& e) {
      outcome_.push_back(e.code() == troupe::errc::receive_timeout ? "timeout" : "error");
      elapsed_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    }
  }
  std::chrono::milliseconds handle(elapsed_query) const { return elapsed_; }
  void handle(left_msg l) { outcome_.push_back("handler left " + std::to_string(l.v)); }
  void handle(right_msg r) { outcome_.push_back("handler right " + r.v); }
  std::vector<std::string> handle(outcome_query) const { return outcome_; }

private:
  troupe::context<chooser> ctx_;
  std::vector<std::string> outcome_;
  std::chrono::milliseconds elapsed_{-1};
};

// -- an actor that only receives: ping-pong as two coroutines ------------------

class ponger;
struct ping {
  troupe::actor_ref<ponger> from;
  int n;
};
struct pong {
  int n;
};
struct quit {};

class pinger;
/// Sends 1,000 pings, one at a time, each answered before the next; then
/// waits for quit.
class ponger {
public:
  using receives = troupe::messages<pong, quit>;
  ponger(troupe::context<ponger> ctx, troupe::actor_ref<pinger> to, std::shared_ptr<int> got)
      : ctx_(ctx), to_(std::move(to)), got_(std::move(got)) {}
  troupe::task<void> on_start();

private:
  troupe::context<ponger> ctx_;
  troupe::actor_ref<pinger> to_;
  std::shared_ptr<int> got_;
};

class pinger {
public:
  using receives = troupe::messages<ping, quit>;
  explicit pinger(troupe::context<pinger> ctx) : ctx_(ctx) {}
  troupe::task<void> on_start() {
    for (;;) {
      auto m = co_await ctx_.receive<ping, quit>();
      if (std::holds_alternative<quit>(m)) break;
      auto& p = std::get<ping>(m);
      p.from.tell(pong{p.n + 1});
    }
    ctx_.stop();
  }

private:
  troupe::context<pinger> ctx_;
};

troupe::task<void> ponger::on_start() {
  for (int i = 0; i < 1000; ++i) {
    to_.tell(ping{ctx_.self(), i});
    auto p = co_await ctx_.receive<pong>();
    if (p.n != i + 1) throw std::runtime_error("pong out of order");
    ++*got_;
  }
  co_await ctx_.receive<quit>();
  ctx_.stop();
}

/// Takes quit only through receive, and never receives.
class idle_receiver {
public:
  using receives = troupe::messages<quit>;
  int handle(log_query) const { return 0; }
};

} // namespace

TEST_CASE("a handshake reads as one coroutine over the mailbox; other messages stay queued, in order") {
  troupe::actor_system sys;
  auto s = sys.spawn<server>();
  s.tell(data{"early"});
  s.tell(ack{0}); // not yet: a syn comes first
  s.tell(data{"second"});
  s.tell(syn{1});
  s.tell(syn{2});
  auto log = test::get(s.ask(log_query{}, asio::use_future));
  // The receives took syn 1 and ack 0 (the oldest of each); the handlers
  // then had everything else in the order sent.
  CHECK(log == std::vector<std::string>{"syn 1", "ack 0", "data early", "data second", "late syn"});
}

TEST_CASE("receive waits for a message that arrives later") {
  troupe::actor_system sys;
  auto synced = std::make_shared<test::latch>(1);
  auto s = sys.spawn<server>(synced);
  s.tell(syn{7});
  REQUIRE(synced->wait()); // the coroutine is on its way to wait for an ack
  s.tell(data{"meanwhile"});
  s.tell(ack{8});
  CHECK(test::get(s.ask(log_query{}, asio::use_future)) ==
        std::vector<std::string>{"syn 7", "ack 8", "data meanwhile"});
}

TEST_CASE("receive of several types returns the oldest of any of them; a deadline ends it with receive_timeout") {
  troupe::actor_system sys;
  auto c = sys.spawn<chooser>();
  c.tell(go{5s});
  c.tell(right_msg{"r"}); // taken by the first receive
  c.tell(go{30ms});
  c.tell(left_msg{1}); // queued behind the go: the second receive takes it
  c.tell(go{20ms});    // nothing left: times out
  const auto t0 = std::chrono::steady_clock::now();
  auto out = test::get(c.ask(outcome_query{}, asio::use_future));
  CHECK(out == std::vector<std::string>{"right r", "left 1", "timeout"});
  CHECK(std::chrono::steady_clock::now() - t0 >= 20ms);
  // A deadline that already fired leaves nothing behind: the next receive
  // and the handlers go on as usual.
  c.tell(go{5s});
  c.tell(left_msg{2});
  c.tell(left_msg{3});
  CHECK(test::get(c.ask(outcome_query{}, asio::use_future)) ==
        std::vector<std::string>{"right r", "left 1", "timeout", "left 2", "handler left 3"});
}

TEST_CASE("actors written only as coroutines over their mailboxes play ping-pong") {
  troupe::actor_system sys;
  auto p = sys.spawn<pinger>();
  auto got = std::make_shared<int>(0);
  auto q = sys.spawn<ponger>(p, got);
  q.tell(quit{}); // ponger's coroutine handles the rounds first: quit waits, queued
  test::get(q.when_stopped(asio::use_future));
  p.tell(quit{});
  auto d = test::get(p.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::normal);
  CHECK(*got == 1000);
}

TEST_CASE("an actor asked to stop while its coroutine waits in a receive stops") {
  troupe::actor_system sys;
  auto synced = std::make_shared<test::latch>(1);
  auto s = sys.spawn<server>(synced);
  s.tell(syn{1}); // then waits for an ack forever
  REQUIRE(synced->wait());
  s.stop();
  auto d = test::get(s.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::normal);
}

TEST_CASE("a message only receive takes, arriving when no coroutine runs, is a dead letter") {
  troupe::actor_system sys;
  auto r = sys.spawn<idle_receiver>();
  const auto before = sys.dead_letters();
  CHECK_FALSE(r.tell(quit{}));
  test::get(r.ask(log_query{}, asio::use_future));
  CHECK(sys.dead_letters() == before + 1);
  STATIC_REQUIRE(troupe::handles<pinger, ping>);
  STATIC_REQUIRE_FALSE(troupe::answers<pinger, ping>); // receive takes tells only
  STATIC_REQUIRE_FALSE(troupe::handles<pinger, pong>);
}

TEST_CASE("a receive whose deadline has passed takes a matching message already queued, or fails at once") {
  troupe::actor_system sys;
  auto c = sys.spawn<chooser>();
  c.tell(poll{-1ms, true});  // a match is queued: taken
  c.tell(poll{-1ms, false}); // nothing queued: receive_timeout at once
  c.tell(poll{0ms, false});  // zero has passed too: a poll
  auto f = c.ask(outcome_query{}, asio::use_future);
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == std::vector<std::string>{"left 42", "timeout", "timeout"});
}

TEST_CASE("one deadline across several receives: what is left of it, not a fresh wait each") {
  troupe::actor_system sys;
  auto c = sys.spawn<chooser>();
  c.tell(collect{300ms});
  c.tell(left_msg{1});
  std::this_thread::sleep_for(200ms); // the second arrives with a third of the budget left
  c.tell(left_msg{2});
  REQUIRE(test::eventually([&] { return test::get(c.ask(elapsed_query{}, asio::use_future)).count() >= 0; }));
  CHECK(test::get(c.ask(outcome_query{}, asio::use_future)) == std::vector<std::string>{"left 1", "left 2", "timeout"});
  const auto elapsed = test::get(c.ask(elapsed_query{}, asio::use_future));
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 500ms); // a fresh 300 ms for the third would end at 500 ms or later
}

} // namespace core_receive_test
