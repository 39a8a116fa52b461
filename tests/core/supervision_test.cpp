#include <troupe/supervision.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/task.hpp>

#include "../support.hpp"

#include <asio/steady_timer.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_supervision_test {

using namespace std::chrono_literals;

namespace {

struct fail {};
struct fail_async {};
struct add {
  int n;
};
struct total {};
struct refuse_async {};

/// Counts constructions and the time of each one (restarts).
struct history {
  std::mutex m;
  std::vector<std::chrono::steady_clock::time_point> constructed;
  void record() {
    std::lock_guard g(m);
    constructed.push_back(std::chrono::steady_clock::now());
  }
  std::size_t count() {
    std::lock_guard g(m);
    return constructed.size();
  }
};

class flaky {
public:
  explicit flaky(std::shared_ptr<history> h) { h->record(); }
  void handle(add m) { sum_ += m.n; }
  int handle(total) const { return sum_; }
  int handle(fail) { throw std::runtime_error("flaky failed on purpose"); }
  troupe::task<int> handle(fail_async) {
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    throw std::runtime_error("flaky failed after a co_await");
  }
  /// A layer that has dealt with the failure itself: the ask fails, the actor does not.
  troupe::task<int> handle(refuse_async) {
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    throw troupe::detail::ask_failure{
        std::make_exception_ptr(troupe::error(troupe::errc::invalid_argument, "refused on purpose"))};
  }

private:
  int sum_ = 0;
};

class bad_start {
public:
  explicit bad_start(std::shared_ptr<history> h) : h_(std::move(h)) { h_->record(); }
  void on_start() {
    if (h_->count() < 3) throw std::runtime_error("not ready yet");
  }
  int handle(total) const { return static_cast<int>(h_->count()); }

private:
  std::shared_ptr<history> h_;
};

troupe::error ask_error(std::future<int>& f) {
  REQUIRE(f.wait_for(test::deadline) == std::future_status::ready);
  try {
    f.get();
  } catch (const troupe::error& e) {
    return e;
  }
  FAIL("the ask did not fail");
  return troupe::error(troupe::errc::invalid_argument);
}

} // namespace

TEST_CASE("the default supervision restarts up to 3 times within 10 seconds with a backoff from 10 ms") {
  troupe::supervision s;
  CHECK(s.on_failure == troupe::supervision::directive::restart);
  CHECK(s.max_restarts == 3);
  CHECK(s.window == 10s);
  CHECK(s.min_backoff == 10ms);
  CHECK(s.max_backoff == 1s);
  CHECK(troupe::spawn_options{}.supervision.on_failure == troupe::supervision::directive::restart);
}

TEST_CASE("the ask that caused a failure gets handler_failed with the exception's message") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(h);
  auto f = a.ask(fail{}, asio::use_future);
  auto e = ask_error(f);
  CHECK(e.code() == troupe::errc::handler_failed);
  CHECK(std::string(e.what()).find("flaky failed on purpose") != std::string::npos);
  CHECK(std::string(e.what()).find("flaky") != std::string::npos);
}

TEST_CASE("restart builds a fresh instance and keeps the queued messages") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(h);
  a.tell(add{5});
  a.tell(fail{});
  a.tell(add{1}); // queued during the failure: handled by the new instance
  a.tell(add{2});
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 3); // the 5 was lost with the old state
  CHECK(h->count() == 2);
}

TEST_CASE("restarts back off exponentially") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::restart(3, 10s, 20ms, 1s)}, h);
  for (int i = 0; i < 3; ++i) a.tell(fail{});
  test::get(a.ask(total{}, asio::use_future));
  REQUIRE(h->count() == 4);
  std::lock_guard g(h->m);
  auto& t = h->constructed;
  CHECK(t[1] - t[0] >= 20ms);
  CHECK(t[2] - t[1] >= 40ms);
  CHECK(t[3] - t[2] >= 80ms);
}

TEST_CASE("the backoff is capped at max_backoff") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::restart(10, 60s, 1ms, 2ms)}, h);
  for (int i = 0; i < 8; ++i) a.tell(fail{});
  auto start = std::chrono::steady_clock::now();
  test::get(a.ask(total{}, asio::use_future));
  CHECK(h->count() == 9);
  CHECK(std::chrono::steady_clock::now() - start < 2s); // 1,2,2,2,... ms, not 128 ms
}

TEST_CASE("past max_restarts within the window the actor stops with failure") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::restart(2, 60s, 1ms, 1ms)}, h);
  auto stopped = a.when_stopped(asio::use_future);
  for (int i = 0; i < 3; ++i) a.tell(fail{});
  auto d = test::get(stopped);
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(d.what == "flaky failed on purpose");
  CHECK(h->count() == 3); // the first instance and two restarts
  CHECK(a.tell(add{1}) == troupe::errc::actor_stopped);
}

TEST_CASE("failures outside the window do not count towards max_restarts") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::restart(1, 30ms, 1ms, 1ms)}, h);
  for (int i = 0; i < 3; ++i) {
    auto f = a.ask(fail{}, asio::use_future);
    ask_error(f);
    test::get(a.ask(total{}, asio::use_future)); // restarted
    // Let the window pass.
    asio::steady_timer window(sys.get_executor(), 40ms);
    test::get(window.async_wait(asio::use_future));
  }
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 0); // still alive after 3 spaced failures
  CHECK(h->count() == 4);
}

TEST_CASE("resume keeps the state and drops only the failing message") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::resume()}, h);
  a.tell(add{5});
  a.tell(fail{});
  a.tell(add{1});
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 6);
  CHECK(h->count() == 1);
}

TEST_CASE("the stop directive stops the actor at its first failure") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::stop()}, h);
  a.tell(fail{});
  auto d = test::get(a.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(h->count() == 1);
}

TEST_CASE("an exception in a coroutine handler is supervised like any other") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(h);
  a.tell(add{4});
  auto f = a.ask(fail_async{}, asio::use_future);
  auto e = ask_error(f);
  CHECK(e.code() == troupe::errc::handler_failed);
  CHECK(std::string(e.what()).find("after a co_await") != std::string::npos);
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 0); // restarted
  CHECK(h->count() == 2);
}

TEST_CASE("a failing on_start is supervised and retried") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a =
      sys.spawn<bad_start>(troupe::spawn_options{.supervision = troupe::supervision::restart(5, 10s, 1ms, 1ms)}, h);
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 3); // third instance started
}

TEST_CASE("a failing on_start is not resumed: under supervision::resume the actor stops, handling nothing") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<bad_start>(troupe::spawn_options{.supervision = troupe::supervision::resume()}, h);
  auto f = a.ask(total{}, asio::use_future);
  CHECK(ask_error(f).code() == troupe::errc::actor_stopped);
  auto d = test::get(a.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK_THAT(d.what, Catch::Contains("not ready yet"));
  CHECK(h->count() == 1);
}

TEST_CASE("a coroutine handler that throws an ask_failure fails the ask with its error, and not the actor") {
  troupe::actor_system sys;
  auto h = std::make_shared<history>();
  auto a = sys.spawn<flaky>(troupe::spawn_options{.supervision = troupe::supervision::stop()}, h);
  auto stopped = a.when_stopped(asio::use_future);
  a.tell(add{2});
  try {
    test::get(a.ask(refuse_async{}, asio::use_future));
    FAIL("the ask succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    CHECK(std::string(e.what()).find("refused on purpose") != std::string::npos);
  }
  a.tell(refuse_async{}); // told: nobody to tell, and no failure either
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 2);
  CHECK(stopped.wait_for(0s) == std::future_status::timeout);
  CHECK(h->count() == 1);
}

} // namespace core_supervision_test
