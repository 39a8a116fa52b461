#include <troupe/metrics.hpp>

#include <troupe/actor_system.hpp>

#include "../support.hpp"

#include <troupe/task.hpp>

#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_metrics_test {

using troupe::metric_labels;
using troupe::metric_type;

struct add {
  int n;
};
struct total {};
struct block {
  std::shared_ptr<std::promise<void>> entered;
  std::shared_future<void> release;
};
struct fail {};

class counting {
public:
  void handle(add m) { sum_ += m.n; }
  int handle(total) const { return sum_; }
  void handle(const block& b) {
    b.entered->set_value();
    b.release.wait();
  }
  void handle(fail) { throw std::runtime_error("failed on purpose"); }

private:
  int sum_ = 0;
};

class other {
public:
  int handle(total) const { return 0; }
};

const std::string counting_type{troupe::detail::type_name<counting>()};
const std::string other_type{troupe::detail::type_name<other>()};

TEST_CASE("metrics: a counter, gauge or histogram is made once per name and labels") {
  troupe::metrics_registry r;
  auto& a = r.make_counter("orders_total", "Orders placed", {{"shop", "north"}});
  auto& b = r.make_counter("orders_total", "Orders placed", {{"shop", "north"}});
  auto& c = r.make_counter("orders_total", "Orders placed", {{"shop", "south"}});
  CHECK(&a == &b);
  CHECK(&a != &c);
  a.add();
  b.add(2);
  c.add(5);
  auto& g = r.make_gauge("queue_length", "Waiting");
  g.set(7);
  g.sub(2);
  auto& h = r.make_histogram("latency_seconds", "Latency", {0.1, 1});
  h.observe(0.05);
  h.observe(0.1); // on the bound: in its bucket (le)
  h.observe(0.5);
  h.observe(3);
  const auto s = r.snapshot();
  CHECK(s.value("orders_total", {{"shop", "north"}}) == 3);
  CHECK(s.value("orders_total", {{"shop", "south"}}) == 5);
  CHECK(s.total("orders_total") == 8);
  CHECK(s.value("queue_length") == 5);
  CHECK_FALSE(s.value("orders_total").has_value()); // no such label set
  const auto* hs = s.sample("latency_seconds");
  REQUIRE(hs);
  CHECK(hs->cumulative == std::vector<std::uint64_t>{2, 3, 4});
  CHECK(hs->count == 4);
  CHECK(hs->sum == Approx(3.65));
}

TEST_CASE("metrics: bad names, labels, bounds and a second type are refused with invalid_argument") {
  troupe::metrics_registry r;
  auto refused = [](auto&& f) {
    try {
      f();
    } catch (const troupe::error& e) {
      return e.code() == troupe::errc::invalid_argument;
    }
    return false;
  };
  CHECK(refused([&] { r.make_counter("9lives", "x"); }));
  CHECK(refused([&] { r.make_counter("has space", "x"); }));
  CHECK(refused([&] { r.make_counter("", "x"); }));
  CHECK(refused([&] { r.make_counter("ok", "x", {{"bad-label", "v"}}); }));
  CHECK(refused([&] { r.make_counter("ok", "x", {{"__reserved", "v"}}); }));
  CHECK(refused([&] { r.make_histogram("h", "x", {1, 1}); }));
  CHECK(refused([&] { r.make_histogram("h", "x", {2, 1}); }));
  CHECK(refused([&] { r.make_histogram("h", "x", {1}, {{"le", "1"}}); }));
  r.make_counter("taken", "x");
  CHECK(refused([&] { r.make_gauge("taken", "x"); }));
  CHECK(refused([&] { r.make_counter("taken", "another help"); }));
  CHECK(r.snapshot().families().size() == 1); // nothing refused was kept
}

TEST_CASE("metrics: the Prometheus text has HELP, TYPE, escaped labels, buckets up to +Inf, sum and count") {
  troupe::metrics_registry r;
  r.make_counter("jobs_total", "Jobs done\nby kind \\ all", {{"kind", "a \"quoted\"\nvalue\\"}}).add(3);
  r.make_gauge("temperature", "Now").set(-4);
  auto& h = r.make_histogram("wait_seconds", "Waits", {0.25, 1}, {{"queue", "q"}});
  h.observe(0.125);
  h.observe(2);
  const std::string expected = "# HELP jobs_total Jobs done\\nby kind \\\\ all\n"
                               "# TYPE jobs_total counter\n"
                               "jobs_total{kind=\"a \\\"quoted\\\"\\nvalue\\\\\"} 3\n"
                               "# HELP temperature Now\n"
                               "# TYPE temperature gauge\n"
                               "temperature -4\n"
                               "# HELP wait_seconds Waits\n"
                               "# TYPE wait_seconds histogram\n"
                               "wait_seconds_bucket{queue=\"q\",le=\"0.25\"} 1\n"
                               "wait_seconds_bucket{queue=\"q\",le=\"1\"} 1\n"
                               "wait_seconds_bucket{queue=\"q\",le=\"+Inf\"} 2\n"
                               "wait_seconds_sum{queue=\"q\"} 2.125\n"
                               "wait_seconds_count{queue=\"q\"} 2\n";
  CHECK(r.snapshot().prometheus() == expected);
}

TEST_CASE("metrics: a collector adds what it reads at each snapshot, until its handle goes") {
  troupe::metrics_registry r;
  int calls = 0;
  {
    auto handle = r.add_collector([&](troupe::metrics_snapshot& s) { s.add_gauge("read_now", "x", ++calls); });
    CHECK(r.snapshot().value("read_now") == 1);
    CHECK(r.snapshot().value("read_now") == 2);
  }
  CHECK_FALSE(r.snapshot().find("read_now"));
  CHECK(calls == 2);
}

TEST_CASE("metrics: an actor system counts actors by type, messages, restarts and dead letters") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto a = sys.spawn<counting>();
  auto b = sys.spawn<counting>();
  auto c = sys.spawn<counting>();
  auto o = sys.spawn<other>();
  for (int i = 0; i < 100; ++i) a.tell(add{1});
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 100); // 101 messages to a
  CHECK(test::get(b.ask(total{}, asio::use_future)) == 0);
  a.tell(fail{}); // a restarts
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 0);
  c.stop();
  REQUIRE(test::eventually([&] { return sys.live_actors() == 3; }));
  c.tell(add{1}); // a dead letter
  REQUIRE(test::eventually([&] { return sys.metrics().value("troupe_messages_processed_total").value_or(0) == 104; }));
  const auto s = sys.metrics();
  CHECK(s.value("troupe_actors_live") == 3);
  CHECK(s.value("troupe_actors_spawned_total", {{"type", counting_type}}) == 3);
  CHECK(s.value("troupe_actors_spawned_total", {{"type", other_type}}) == 1);
  CHECK(s.value("troupe_actors_stopped_total", {{"type", counting_type}}) == 1);
  CHECK(s.value("troupe_actors_live_by_type", {{"type", counting_type}}) == 2);
  CHECK(s.value("troupe_actor_restarts_total", {{"type", counting_type}}) == 1);
  CHECK(s.value("troupe_dead_letters_total") == 1);
  CHECK(s.value("troupe_worker_threads") == 2);
  CHECK(s.total("troupe_worker_busy_seconds_total") > 0);
  CHECK(s.value("troupe_turns_total").value_or(0) > 0);
  // The whole snapshot reads as Prometheus text.
  const auto text = s.prometheus();
  CHECK(text.find("# TYPE troupe_actors_spawned_total counter\n") != std::string::npos);
  CHECK(text.find("troupe_actors_spawned_total{type=\"" + counting_type + "\"} 3\n") != std::string::npos);
}

TEST_CASE("metrics: mailbox depth counts what an actor took and has not handled yet, and drops once handled") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto a = sys.spawn<counting>();
  auto entered1 = std::make_shared<std::promise<void>>();
  auto entered2 = std::make_shared<std::promise<void>>();
  std::promise<void> release1, release2;
  a.tell(block{entered1, release1.get_future().share()});
  test::get(entered1->get_future());
  // Queued behind the first block: taken at once when it returns, then
  // the second block holds the 50 adds taken with it.
  a.tell(block{entered2, release2.get_future().share()});
  for (int i = 0; i < 50; ++i) a.tell(add{1});
  release1.set_value();
  test::get(entered2->get_future());
  auto s = sys.metrics();
  CHECK(s.value("troupe_mailbox_depth_max") == 51); // the 50, and the block in its handler
  CHECK(s.value("troupe_mailbox_depth_sum") == 51);
  release2.set_value();
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 50);
  s = sys.metrics();
  CHECK(s.value("troupe_mailbox_depth_max") == 0);
  CHECK(s.value("troupe_mailbox_depth_sum") == 0);
}

struct slow_add {
  int n;
};

class coroutine_counting {
public:
  troupe::task<int> handle(slow_add m) {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
    co_await t.async_wait(asio::use_awaitable);
    if (m.n < 0) throw std::runtime_error("failed on purpose");
    co_return sum_ += m.n;
  }
  int handle(total) const { return sum_; }

private:
  int sum_ = 0;
};

TEST_CASE("metrics: mailbox depth comes back to zero after coroutine handlers, finished or failed") {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto a = sys.spawn<coroutine_counting>();
  std::vector<std::future<int>> replies;
  for (int i = 0; i < 20; ++i) replies.push_back(a.ask(slow_add{i == 7 ? -1 : 1}, asio::use_future));
  int failed = 0;
  for (auto& r : replies) {
    try {
      (void)test::get(r);
    } catch (const std::exception&) {
      ++failed;
    }
  }
  CHECK(failed == 1);
  (void)test::get(a.ask(total{}, asio::use_future));
  const auto s = sys.metrics();
  CHECK(s.value("troupe_mailbox_depth_sum") == 0);
  CHECK(s.value("troupe_mailbox_depth_max") == 0);
}

TEST_CASE("metrics: with system_config::metrics off, the per-message counts stay zero and the rest is kept") {
  troupe::actor_system sys(troupe::system_config{.threads = 1, .metrics = false});
  auto a = sys.spawn<counting>();
  for (int i = 0; i < 10; ++i) a.tell(add{1});
  CHECK(test::get(a.ask(total{}, asio::use_future)) == 10);
  const auto s = sys.metrics();
  CHECK(s.value("troupe_messages_processed_total") == 0);
  CHECK(s.value("troupe_mailbox_depth_sum") == 0);
  CHECK(s.value("troupe_actors_spawned_total", {{"type", counting_type}}) == 1);
}

TEST_CASE("metrics: an application's own metrics appear in the system's snapshot") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  sys.metric_registry().make_counter("shop_orders_total", "Orders placed").add(4);
  CHECK(sys.metrics().value("shop_orders_total") == 4);
}

} // namespace core_metrics_test
