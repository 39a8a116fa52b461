#include <troupe/testing/faulty_journal.hpp>

#include <troupe/persistence/memory_store.hpp>

#include "../support.hpp"

#include <chrono>

// In a namespace of its own: the tests build several files as one unit.
namespace testing_faulty_journal_test {

using namespace std::chrono_literals;
namespace tp = troupe::persistence;

namespace {
struct fixture {
  std::shared_ptr<tp::memory_store> store = std::make_shared<tp::memory_store>();
  std::shared_ptr<troupe::testing::faulty_journal> j =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));

  std::error_code write(tp::sequence_nr seq) {
    std::promise<std::error_code> p;
    j->write("p", {{seq, "m", 1, "x"}}, {}, [&](std::error_code ec) { p.set_value(ec); });
    return test::get(p.get_future());
  }
};
} // namespace

TEST_CASE("failed and rejected writes write nothing, then writes go through again") {
  fixture f;
  f.j->fail_next_writes(1);
  CHECK(f.write(1) == tp::errc::storage_failure);
  f.j->reject_next_writes(2);
  CHECK(f.write(1) == tp::errc::write_rejected);
  CHECK(f.write(1) == tp::errc::write_rejected);
  CHECK(f.store->highest_sequence_nr("p") == 0);
  CHECK_FALSE(f.write(1));
  CHECK(f.store->highest_sequence_nr("p") == 1);
}

TEST_CASE("failed replays and snapshot loads report storage_failure, then work again") {
  fixture f;
  REQUIRE_FALSE(f.write(1));
  f.j->fail_next_replays(1);
  int seen = 0;
  auto count = [&](const tp::event_record&) { ++seen; };
  CHECK(f.j->replay("p", 1, tp::max_sequence_nr, 10, count) == tp::errc::storage_failure);
  CHECK_FALSE(f.j->replay("p", 1, tp::max_sequence_nr, 10, count));
  CHECK(seen == 1);
  REQUIRE_FALSE(f.j->save_snapshot("p", {1, 5, "{}"}));
  f.j->fail_next_snapshot_loads(1);
  std::optional<tp::snapshot_record> s;
  CHECK(f.j->load_snapshot("p", {}, s) == tp::errc::storage_failure);
  CHECK(!s);
  CHECK_FALSE(f.j->load_snapshot("p", {}, s));
  CHECK(s);
}

TEST_CASE("delayed writes are acknowledged no sooner than the delay, in order") {
  fixture f;
  f.j->delay_writes(30ms);
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(f.write(1));
  CHECK(std::chrono::steady_clock::now() - start >= 30ms);
  f.j->delay_writes(0ms);
  CHECK_FALSE(f.write(2));
}

TEST_CASE("tables and later writes pass through to the wrapped journal") {
  fixture f;
  auto t = f.j->open_table("t");
  CHECK(t == f.store->open_table("t"));
  f.j->fail_next_writes(1); // later writes are not failed
  f.j->write_later({tp::table_write::put(t, "k", "v")});
  std::optional<std::string> v;
  REQUIRE_FALSE(f.store->get(t, "k", v));
  CHECK(v == "v");
}

TEST_CASE("a delayed write's completion may drop the journal's last reference, on the journal's timer thread") {
  for (int round = 0; round < 20; ++round) {
    auto store = std::make_shared<tp::memory_store>();
    auto j = std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
    j->delay_writes(1ms);
    std::promise<std::thread::id> done;
    auto fut = done.get_future();
    // The completion holds the journal, as an actor's callback may: the
    // caller lets go first, so the journal goes with the completion.
    j->write("p", {{1, "m", 1, "x"}}, {},
             [keep = j, &done](std::error_code) mutable { done.set_value(std::this_thread::get_id()); });
    j.reset();
    CHECK(test::get(std::move(fut)) != std::this_thread::get_id());
    CHECK(store->highest_sequence_nr("p") == 1);
  }
}

} // namespace testing_faulty_journal_test
