// The journal's asynchronous operations, through several completion tokens,
// and journal_of's adapter over a store.
#include <troupe/persistence/journal.hpp>

#include <troupe/persistence/memory_store.hpp>
#include <troupe/persistence/persistent_actor.hpp>

#include <troupe/task.hpp>

#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include "../support.hpp"

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_journal_test {

namespace tp = troupe::persistence;

namespace {
std::vector<tp::event_record> one(tp::sequence_nr seq) { return {{seq, "m", 1, "p"}}; }

/// The error code of an async_write, through a callback.
std::error_code code_of_write(tp::journal& j, std::string pid, std::vector<tp::event_record> events,
                              std::vector<tp::table_write> tables = {}) {
  std::promise<std::error_code> p;
  j.async_write(std::move(pid), std::move(events), std::move(tables), [&](std::error_code ec) { p.set_value(ec); });
  return test::get(p.get_future());
}

struct fixture {
  std::shared_ptr<tp::memory_store> store = std::make_shared<tp::memory_store>();
  std::shared_ptr<tp::journal> j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
};
} // namespace

TEST_CASE("async_write completes with the write's error code through a callback, and use_future throws it") {
  fixture f;
  CHECK_FALSE(code_of_write(*f.j, "p", one(1)));
  CHECK(code_of_write(*f.j, "p", one(1)) == tp::errc::sequence_mismatch);
  test::get(f.j->async_write("p", one(2), {}, asio::use_future));
  auto failed = f.j->async_write("p", one(2), {}, asio::use_future);
  CHECK_THROWS_AS(test::get(failed), std::system_error);
  CHECK(f.store->highest_sequence_nr("p") == 2);
}

TEST_CASE("async_write's completion runs on the handler's executor, never inside the call") {
  fixture f;
  asio::io_context io;
  std::atomic<bool> inside{true}, ran{false};
  std::thread::id where;
  f.j->async_write("p", one(1), {}, asio::bind_executor(io, [&](std::error_code ec) {
                     CHECK(!ec);
                     CHECK_FALSE(inside.load());
                     where = std::this_thread::get_id();
                     ran = true;
                   }));
  inside = false;
  io.run();
  CHECK(ran);
  CHECK(where == std::this_thread::get_id());
}

TEST_CASE("async_run runs the call on the blocking thread and completes with its value or its exception") {
  fixture f;
  const auto caller = std::this_thread::get_id();
  auto value = f.j->async_run(
      [&] {
        CHECK(std::this_thread::get_id() != caller);
        return f.store->highest_sequence_nr("nobody") + 41;
      },
      asio::use_future);
  CHECK(test::get(value) == 41);
  auto thrown = f.j->async_run([]() -> int { throw std::runtime_error("boom"); }, asio::use_future);
  CHECK_THROWS_WITH(test::get(thrown), "boom");
  std::atomic<bool> ran{false};
  test::get(f.j->async_run([&] { ran = true; }, asio::use_future));
  CHECK(ran);
}

TEST_CASE("async_run and async_write are awaited with one co_await in a coroutine") {
  fixture f;
  asio::io_context io;
  auto result = asio::co_spawn(
      io,
      [&]() -> troupe::task<std::uint64_t> {
        auto [ec] = co_await f.j->async_write("p", one(1), {}, asio::experimental::as_tuple(asio::use_awaitable));
        CHECK(!ec);
        co_return co_await f.j->async_run([&] { return f.store->highest_sequence_nr("p"); });
      },
      asio::use_future);
  io.run();
  CHECK(test::get(result) == 1);
}

TEST_CASE("journal_of passes tables through to the store") {
  fixture f;
  auto t = f.j->open_table("things");
  CHECK(f.j->open_table("things") == t);
  REQUIRE_FALSE(code_of_write(*f.j, "", {}, {tp::table_write::put(t, "k", "v")}));
  std::optional<std::string> v;
  REQUIRE_FALSE(f.j->get(t, "k", v));
  CHECK(v == "v");
  f.j->write_later({tp::table_write::erase(t, "k")});
  REQUIRE_FALSE(code_of_write(*f.j, "", {}, {})); // after the later write
  REQUIRE_FALSE(f.j->get(t, "k", v));
  CHECK(!v);
}

} // namespace persistence_journal_test

namespace persistence_journal_test {

TEST_CASE("metrics: a system's journal reports its writes' latency, events and failures by code") {
  fixture f;
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  tp::set_journal(sys, f.j);
  for (tp::sequence_nr s = 1; s <= 5; ++s) CHECK_FALSE(code_of_write(*f.j, "p", one(s)));
  CHECK(code_of_write(*f.j, "p", one(3)) == tp::errc::sequence_mismatch);
  CHECK(code_of_write(*f.j, "p", one(3)) == tp::errc::sequence_mismatch);
  const auto s = sys.metrics();
  CHECK(s.value("troupe_persist_writes_total") == 7);
  CHECK(s.value("troupe_persist_events_total") == 7);
  const auto* latency = s.sample("troupe_persist_latency_seconds");
  REQUIRE(latency);
  CHECK(latency->count == 7);
  CHECK(latency->sum >= 0);
  const auto mismatch = tp::make_error_code(tp::errc::sequence_mismatch);
  CHECK(s.value("troupe_store_errors_total", {{"category", mismatch.category().name()},
                                              {"code", std::to_string(mismatch.value())},
                                              {"message", mismatch.message()}}) == 2);
  CHECK(s.prometheus().find("# TYPE troupe_persist_latency_seconds histogram\n") != std::string::npos);
}

TEST_CASE("metrics: a journal no longer the system's (replaced) is no longer reported") {
  fixture f, g;
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  tp::set_journal(sys, f.j);
  CHECK_FALSE(code_of_write(*f.j, "p", one(1)));
  tp::set_journal(sys, g.j);
  CHECK(sys.metrics().value("troupe_persist_writes_total") == 0); // g's
}

} // namespace persistence_journal_test
