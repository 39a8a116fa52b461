// Requests whose continuation runs in the asking actor (context::ask(...).then)
// and gather.

#include <troupe/context.hpp>
#include <troupe/gather.hpp>
#include <troupe/task.hpp>

#include <troupe/actor_system.hpp>

#include "../support.hpp"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_request_test {

using namespace std::chrono_literals;

namespace {

// -- a slow service: answers only when released ------------------------------

struct compute {
  int n;
  using reply_type = int;
};
struct release {};
struct fail_next {};
struct load {};
struct parked_query {};

class service {
public:
  explicit service(int id = 0) : id_(id) {}
  void handle(compute c, troupe::reply_promise<int> p) {
    if (failing_) return p.fail(troupe::errc::invalid_argument, "refused");
    parked_.push_back({c.n, std::move(p)});
  }
  void handle(release) {
    for (auto& [n, p] : parked_) p.deliver(n + 1);
    parked_.clear();
  }
  void handle(fail_next) { failing_ = true; }
  int handle(load) const { return id_; }
  std::size_t handle(parked_query) const { return parked_.size(); }

private:
  int id_;
  bool failing_ = false;
  std::vector<std::pair<int, troupe::reply_promise<int>>> parked_;
};

// -- a client whose state only its turns touch ---------------------------------

struct start {
  troupe::actor_ref<service> to;
  std::chrono::nanoseconds timeout = troupe::no_timeout;
  bool handle_errors = true;
};
struct bump {};
struct state_query {};
struct client_state {
  int bumps = 0;
  std::vector<int> replies;
  std::vector<std::error_code> errors;
  int bumps_when_replied = -1;
};

class client {
public:
  /// `constructed` (if given) counts each instance: the first and each restart's.
  client(troupe::context<client> ctx, std::shared_ptr<test::latch> done,
         std::shared_ptr<test::latch> constructed = nullptr)
      : ctx_(ctx), done_(std::move(done)) {
    if (constructed) constructed->count_down();
  }

  void handle(start s) {
    auto on_reply = [this](int r) {
      state_.replies.push_back(r); // the actor's own state: safe in its turn
      state_.bumps_when_replied = state_.bumps;
      done_->count_down();
    };
    if (s.handle_errors)
      ctx_.ask(s.to, compute{41}, s.timeout).then(on_reply, [this](const troupe::error& e) {
        state_.errors.push_back(e.code());
        done_->count_down();
      });
    else
      ctx_.ask(s.to, compute{41}, s.timeout).then(on_reply);
  }
  void handle(bump) { ++state_.bumps; }
  client_state handle(state_query) const { return state_; }

private:
  troupe::context<client> ctx_;
  std::shared_ptr<test::latch> done_;
  client_state state_;
};

} // namespace

TEST_CASE("a request's continuation runs later as a turn of the asking actor, which handles other messages meanwhile") {
  troupe::actor_system sys;
  auto svc = sys.spawn<service>();
  auto done = std::make_shared<test::latch>(1);
  auto c = sys.spawn<client>(done);
  c.tell(start{svc});
  for (int i = 0; i < 1000; ++i) c.tell(bump{});
  CHECK(test::get(c.ask(state_query{}, asio::use_future)).bumps == 1000); // not blocked by the pending request
  svc.tell(release{});
  REQUIRE(done->wait());
  auto st = test::get(c.ask(state_query{}, asio::use_future));
  CHECK(st.replies == std::vector<int>{42});
  CHECK(st.bumps_when_replied == 1000);
  CHECK(st.errors.empty());
}

TEST_CASE("a request's continuation and the actor's handlers never run at once (many requests, many messages)") {
  troupe::actor_system sys;
  auto svc = sys.spawn<service>();
  constexpr int n = 2000;
  auto done = std::make_shared<test::latch>(n);
  auto c = sys.spawn<client>(done);
  for (int i = 0; i < n; ++i) {
    c.tell(start{svc});
    c.tell(bump{});
    if (i % 7 == 0) svc.tell(release{});
  }
  // Requests still on their way to the service are released by a later round.
  const auto until = std::chrono::steady_clock::now() + test::deadline;
  while (!done->wait(1ms)) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    svc.tell(release{});
  }
  auto st = test::get(c.ask(state_query{}, asio::use_future));
  CHECK(st.replies.size() == n);
  CHECK(st.bumps == n);
}

TEST_CASE("a request that times out or fails runs the error continuation with the error") {
  troupe::actor_system sys;
  auto svc = sys.spawn<service>();
  auto done = std::make_shared<test::latch>(2);
  auto c = sys.spawn<client>(done);
  c.tell(start{svc, 20ms}); // never released
  auto refusing = sys.spawn<service>();
  refusing.tell(fail_next{});
  c.tell(start{refusing});
  REQUIRE(done->wait());
  auto st = test::get(c.ask(state_query{}, asio::use_future));
  REQUIRE(st.errors.size() == 2);
  CHECK(std::count(st.errors.begin(), st.errors.end(), troupe::errc::timeout) == 1);
  CHECK(std::count(st.errors.begin(), st.errors.end(), troupe::errc::invalid_argument) == 1);
  CHECK(st.replies.empty());
}

TEST_CASE("a request that fails with no error continuation is a failure of the asking actor") {
  troupe::actor_system sys;
  auto svc = sys.spawn<service>();
  svc.tell(fail_next{});
  auto done = std::make_shared<test::latch>(1);
  auto c = sys.spawn<client>(troupe::spawn_options{.supervision = troupe::supervision::stop()}, done);
  c.tell(start{svc, troupe::no_timeout, /*handle_errors=*/false});
  auto d = test::get(c.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(d.what.find("refused") != std::string::npos);
}

TEST_CASE("a continuation does not run in an instance that restarted since the request") {
  troupe::actor_system sys;
  auto svc = sys.spawn<service>();
  auto done = std::make_shared<test::latch>(1);
  auto constructed = std::make_shared<test::latch>(2); // the first instance, and the one after the restart
  auto c = sys.spawn<client>(troupe::spawn_options{.supervision = troupe::supervision::restart(3, 10s, 1ms, 1ms)},
                             done, constructed);
  c.tell(start{svc}); // parked by the service
  c.tell(bump{});
  REQUIRE(test::get(c.ask(state_query{}, asio::use_future)).bumps == 1);
  svc.tell(fail_next{});
  c.tell(start{svc, troupe::no_timeout, /*handle_errors=*/false}); // refused: the client fails and restarts
  REQUIRE(constructed->wait());
  REQUIRE(test::get(c.ask(state_query{}, asio::use_future)).bumps == 0); // the new instance
  svc.tell(release{}); // the first request's reply: the instance that asked is gone
  test::get(svc.ask(load{}, asio::use_future));
  CHECK(test::get(c.ask(state_query{}, asio::use_future)).replies.empty());
  CHECK(done->remaining() == 1);
}

// -- gather ---------------------------------------------------------------------

TEST_CASE("gather asks every actor and completes with the replies in order") {
  troupe::actor_system sys;
  std::vector<troupe::actor_ref<service>> refs;
  for (int i = 0; i < 50; ++i) refs.push_back(sys.spawn<service>(i));
  auto loads = test::get(troupe::gather(refs, load{}, 5s, asio::use_future));
  REQUIRE(loads.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(loads[i] == i);
  // From an actor's coroutine, with use_awaitable.
  auto sum = test::run(sys.get_executor(), [&]() -> troupe::task<int> {
    auto v = co_await troupe::gather(refs, load{});
    int s = 0;
    for (int x : v) s += x;
    co_return s;
  });
  CHECK(sum == 49 * 50 / 2);
  // No refs: no replies, at once.
  CHECK(test::get(troupe::gather(std::vector<troupe::actor_ref<service>>{}, load{}, asio::use_future)).empty());
}

TEST_CASE("gather completes with the first error, without waiting for the others") {
  troupe::actor_system sys;
  auto slow = sys.spawn<service>(); // never released
  auto refusing = sys.spawn<service>();
  refusing.tell(fail_next{});
  std::vector<troupe::actor_ref<service>> refs{slow, refusing};
  auto f = troupe::gather(refs, compute{1}, asio::use_future);
  try {
    test::get(f);
    FAIL("gather succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
  }
  slow.tell(release{}); // its late reply goes nowhere
  test::get(slow.ask(load{}, asio::use_future));
}

TEST_CASE("gather fails with timeout at its one deadline when a reply is missing") {
  troupe::actor_system sys;
  std::vector<troupe::actor_ref<service>> refs{sys.spawn<service>(), sys.spawn<service>(), sys.spawn<service>()};
  const auto t0 = std::chrono::steady_clock::now();
  auto f = troupe::gather(refs, compute{1}, 50ms, asio::use_future);
  refs[0].tell(release{}); // two of three answer; the third never does
  refs[1].tell(release{});
  try {
    test::get(f);
    FAIL("gather succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::timeout);
  }
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
}

TEST_CASE("a request or a gather whose timeout has passed fails at once with timeout, asking nobody") {
  troupe::actor_system sys;
  auto svc = sys.spawn<service>();
  auto done = std::make_shared<test::latch>(2);
  auto c = sys.spawn<client>(done);
  c.tell(start{svc, -1ms});  // negative: a deadline computed as deadline - now() after it passed
  c.tell(start{svc, 0ms});   // zero has passed too
  REQUIRE(done->wait(5s));
  auto st = test::get(c.ask(state_query{}, asio::use_future));
  CHECK(st.errors == std::vector<std::error_code>{troupe::errc::timeout, troupe::errc::timeout});
  CHECK(test::get(svc.ask(parked_query{}, asio::use_future)) == 0); // nothing was sent

  std::vector<troupe::actor_ref<service>> refs{svc, sys.spawn<service>()};
  std::vector<std::future<std::vector<int>>> gathers;
  gathers.push_back(troupe::gather(refs, compute{1}, -1ms, asio::use_future));
  gathers.push_back(troupe::gather(refs, compute{1}, std::chrono::steady_clock::now() - 1ms, asio::use_future));
  for (auto& f : gathers) {
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    try {
      f.get();
      FAIL("gather succeeded");
    } catch (const troupe::error& e) {
      CHECK(e.code() == troupe::errc::timeout);
    }
  }
  for (auto& r : refs) CHECK(test::get(r.ask(parked_query{}, asio::use_future)) == 0);
  CHECK(test::get(troupe::gather(refs, load{}, troupe::no_timeout, asio::use_future)).size() == 2);
  CHECK(test::get(troupe::gather(refs, load{}, std::chrono::steady_clock::now() + 5s, asio::use_future)).size() == 2);
}

} // namespace core_request_test
