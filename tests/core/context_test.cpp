#include <troupe/context.hpp>

#include <troupe/actor_system.hpp>

#include "../support.hpp"

#include <atomic>
#include <memory>

// In a namespace of its own: the tests build several files as one unit.
namespace core_context_test {

using namespace std::chrono_literals;

namespace {

struct tick {};
struct count_query {};
struct start_every {
  std::chrono::milliseconds period;
};
struct start_once {
  std::chrono::milliseconds delay;
};
struct cancel_it {};
struct self_query {};

/// Counts timer ticks; reports the time of the first one.
class ticker {
public:
  ticker(troupe::context<ticker> ctx, std::shared_ptr<test::latch> ticks) : ctx_(ctx), ticks_(std::move(ticks)) {}

  void handle(start_once s) {
    started_ = std::chrono::steady_clock::now();
    ctx_.schedule_once(s.delay, tick{});
  }
  void handle(start_every s) { timer_ = ctx_.schedule_every(s.period, tick{}); }
  void handle(tick) {
    if (count_++ == 0) first_ = std::chrono::steady_clock::now();
    if (ticks_) ticks_->count_down();
  }
  bool handle(cancel_it) { return ctx_.cancel(timer_); }
  int handle(count_query) const { return count_; }
  std::chrono::steady_clock::duration handle(self_query) const { return first_ - started_; }

private:
  troupe::context<ticker> ctx_;
  std::shared_ptr<test::latch> ticks_;
  troupe::timer_id timer_;
  int count_ = 0;
  std::chrono::steady_clock::time_point started_, first_;
};

/// Replies with its own reference, obtained through its context.
class selfish {
public:
  explicit selfish(troupe::context<selfish> ctx) : ctx_(ctx) {}
  troupe::actor_ref<selfish> handle(self_query) const { return ctx_.self(); }

private:
  troupe::context<selfish> ctx_;
};

struct watch_it {
  troupe::actor_ref<ticker> target;
};
struct downs_query {};
/// Watches others and records the notifications.
class watcher {
public:
  watcher(troupe::context<watcher> ctx, std::shared_ptr<test::latch> seen) : ctx_(ctx), seen_(std::move(seen)) {}
  void handle(watch_it w) { ctx_.watch(w.target); }
  void handle(troupe::down d) {
    downs_.push_back(d);
    seen_->count_down();
  }
  std::vector<troupe::down> handle(downs_query) const { return downs_; }

private:
  troupe::context<watcher> ctx_;
  std::shared_ptr<test::latch> seen_;
  std::vector<troupe::down> downs_;
};

struct boom {};
class fragile {
public:
  void handle(boom) { throw std::runtime_error("fragile broke"); }
};
struct watch_fragile {
  troupe::actor_ref<fragile> target;
};
class fragile_watcher {
public:
  explicit fragile_watcher(troupe::context<fragile_watcher> ctx) : ctx_(ctx) {}
  void handle(watch_fragile w) { ctx_.watch(w.target); }
  void handle(troupe::down d) { promise_->set_value(d); }
  std::future<troupe::down> handle(downs_query) { return promise_->get_future(); }

private:
  troupe::context<fragile_watcher> ctx_;
  std::shared_ptr<std::promise<troupe::down>> promise_ = std::make_shared<std::promise<troupe::down>>();
};

} // namespace

TEST_CASE("schedule_once delivers its message once, after the delay") {
  troupe::actor_system sys;
  auto ticks = std::make_shared<test::latch>(1);
  auto t = sys.spawn<ticker>(ticks);
  t.tell(start_once{30ms});
  REQUIRE(ticks->wait());
  CHECK(test::get(t.ask(self_query{}, asio::use_future)) >= 30ms);
  // Once means once: after a second, longer timer elsewhere has fired, the
  // count is still one.
  auto probe_ticks = std::make_shared<test::latch>(1);
  sys.spawn<ticker>(probe_ticks).tell(start_once{60ms});
  REQUIRE(probe_ticks->wait());
  CHECK(test::get(t.ask(count_query{}, asio::use_future)) == 1);
}

TEST_CASE("schedule_every delivers repeatedly until cancelled") {
  troupe::actor_system sys;
  auto ticks = std::make_shared<test::latch>(5);
  auto t = sys.spawn<ticker>(ticks);
  t.tell(start_every{2ms});
  REQUIRE(ticks->wait());
  CHECK(test::get(t.ask(cancel_it{}, asio::use_future)));
  int at_cancel = test::get(t.ask(count_query{}, asio::use_future));
  CHECK(at_cancel >= 5);
  // After cancel no tick is handled, not even one already queued. Wait for a
  // second timer of 10 periods on another actor, then compare.
  auto probe_ticks = std::make_shared<test::latch>(1);
  auto probe = sys.spawn<ticker>(probe_ticks);
  probe.tell(start_once{20ms});
  REQUIRE(probe_ticks->wait());
  CHECK(test::get(t.ask(count_query{}, asio::use_future)) == at_cancel);
  CHECK_FALSE(test::get(t.ask(cancel_it{}, asio::use_future))); // already cancelled
}

TEST_CASE("timers are cancelled when the actor stops") {
  troupe::actor_system sys;
  auto ticks = std::make_shared<test::latch>(3);
  auto t = sys.spawn<ticker>(ticks);
  t.tell(start_every{1ms});
  REQUIRE(ticks->wait());
  t.stop();
  test::get(t.when_stopped(asio::use_future));
  int after_stop = 3 - ticks->remaining();
  auto probe_ticks = std::make_shared<test::latch>(1);
  sys.spawn<ticker>(probe_ticks).tell(start_once{20ms});
  REQUIRE(probe_ticks->wait());
  CHECK(3 - ticks->remaining() == after_stop); // no tick after the stop
  CHECK(sys.dead_letters() == 0);              // timer messages are not dead letters
}

TEST_CASE("self returns a reference to the actor itself") {
  troupe::actor_system sys;
  auto a = sys.spawn<selfish>();
  CHECK(test::get(a.ask(self_query{}, asio::use_future)) == a);
}

TEST_CASE("a watcher receives down with reason normal when the watched actor stops") {
  troupe::actor_system sys;
  auto seen = std::make_shared<test::latch>(1);
  auto w = sys.spawn<watcher>(seen);
  auto target = sys.spawn<ticker>(nullptr);
  test::get(w.ask(watch_it{target}, asio::use_future));
  target.stop();
  REQUIRE(seen->wait());
  auto downs = test::get(w.ask(downs_query{}, asio::use_future));
  REQUIRE(downs.size() == 1);
  CHECK(downs[0].id == target.id());
  CHECK(downs[0].reason == troupe::exit_reason::normal);
}

TEST_CASE("watching an actor that already stopped delivers down at once") {
  troupe::actor_system sys;
  auto seen = std::make_shared<test::latch>(1);
  auto w = sys.spawn<watcher>(seen);
  auto target = sys.spawn<ticker>(nullptr);
  target.stop();
  test::get(target.when_stopped(asio::use_future));
  w.tell(watch_it{target});
  REQUIRE(seen->wait());
  auto downs = test::get(w.ask(downs_query{}, asio::use_future));
  REQUIRE(downs.size() == 1);
  CHECK(downs[0].id == target.id());
}

TEST_CASE("a watcher learns of a failure stop with the exception's message") {
  troupe::actor_system sys;
  auto f = sys.spawn<fragile>(troupe::spawn_options{.supervision = troupe::supervision::stop()});
  auto w = sys.spawn<fragile_watcher>();
  auto got = test::get(w.ask(downs_query{}, asio::use_future));
  test::get(w.ask(watch_fragile{f}, asio::use_future));
  f.tell(boom{});
  REQUIRE(got.wait_for(test::deadline) == std::future_status::ready);
  auto d = got.get();
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(d.what == "fragile broke");
}

TEST_CASE("when_stopped reports a system shutdown as the reason") {
  std::future<troupe::down> d;
  {
    troupe::actor_system sys;
    auto t = sys.spawn<ticker>(nullptr);
    d = t.when_stopped(asio::use_future);
  }
  CHECK(test::get(d).reason == troupe::exit_reason::system_shutdown);
}

TEST_CASE("schedule_every rejects a period that is not positive") {
  struct bad_period {};
  troupe::actor_system sys;
  // Timers are started from inside an actor.
  class tryer {
  public:
    explicit tryer(troupe::context<tryer> ctx) : ctx_(ctx) {}
    bool handle(bad_period) {
      try {
        ctx_.schedule_every(0ms, bad_period{});
      } catch (const troupe::error& e) {
        return e.code() == troupe::errc::invalid_argument;
      }
      return false;
    }

  private:
    troupe::context<tryer> ctx_;
  };
  CHECK(test::get(sys.spawn<tryer>().ask(bad_period{}, asio::use_future)));
}

} // namespace core_context_test
