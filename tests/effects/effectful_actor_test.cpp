// An effect's owner: the intent written with its causes, bad requests, the
// workflow continued from an outcome, a crash before the dispatch.
#include <troupe/effects/effectful_actor.hpp>

#include "world.hpp"

#include "../persistence/temp_dir.hpp"

#include <troupe/rocksdb/store.hpp>

#include <future>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_effectful_actor_test {

using namespace effects_world;

using namespace std::chrono_literals;
using te::effect_status;

TEST_CASE("the intent event and the outbox record are written atomically, or neither is") {
  world w; // no dispatcher: records stay in the outbox
  auto s = w.owner();
  w.journal->reject_next_writes(1);
  CHECK_THROWS_WITH(test::get(s.ask(place{1, 10}, asio::use_future)), Catch::Contains("write rejected"));
  CHECK_FALSE(w.record(payment_id(1)));
  CHECK(w.store->highest_sequence_nr("shop") == 0);
  CHECK(w.status(s, payment_id(1)) == effect_status::not_requested);
  CHECK(test::get(s.ask(place{1, 10}, asio::use_future)));
  CHECK(w.store->highest_sequence_nr("shop") == 2); // order_placed + effect_requested
  auto r = w.record(payment_id(1));
  REQUIRE(r);
  CHECK(r->status == effect_status::pending);
  CHECK(r->owner == "shop");
  CHECK(r->type == "payment");
  CHECK(w.status(s, payment_id(1)) == effect_status::pending);
}

TEST_CASE("bad requests are refused with a clear error and nothing is written") {
  world w;
  auto s = w.owner();
  CHECK_THROWS_WITH(test::get(s.ask(start_task{""}, asio::use_future)), Catch::Contains("operation ID is empty"));
  CHECK_THROWS_WITH(test::get(s.ask(start_task{std::string(1000, 'x')}, asio::use_future)),
                    Catch::Contains("at most 900"));
  CHECK_THROWS_WITH(test::get(s.ask(start_bad{"bad"}, asio::use_future)),
                    Catch::Contains("cannot serialize the request of effect bad") && Catch::Contains("no JSON here"));
  CHECK(w.store->highest_sequence_nr("shop") == 0);
  te::adapters a;
  auto sc = w.new_script();
  CHECK_THROWS_WITH(a.add("task", bare{sc}, fast_retries(0)), Catch::Contains("max_attempts >= 1"));
  a.add("task", bare{sc});
  CHECK_THROWS_WITH(a.add("task", bare{sc}), Catch::Contains("already registered"));
}

TEST_CASE("an outcome continues the workflow in the same batch: a payment, then its e-mail") {
  world w;
  auto gateway = std::make_shared<tk::payment_gateway>();
  auto mail = std::make_shared<tk::email_service>();
  te::adapters a;
  a.add("payment", tk::payment_adapter(gateway), fast_retries());
  a.add("email", tk::email_adapter(mail), fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner("shop", true);
  for (long n = 1; n <= 10; ++n) CHECK(test::get(s.ask(place{n, n}, asio::use_future)));
  for (long n = 1; n <= 10; ++n) REQUIRE(w.settled(s, email_id(n), effect_status::completed));
  for (long n = 1; n <= 10; ++n) {
    CHECK(gateway->charges(payment_id(n)) == 1);
    CHECK(mail->deliveries(email_id(n)) == 1);
  }
}

TEST_CASE("a crash between the intent and the dispatch loses nothing: the effect runs after the restart") {
  world w;
  auto gateway = std::make_shared<tk::payment_gateway>();
  {
    auto s = w.owner(); // no dispatcher in this process
    for (long n = 1; n <= 3; ++n) CHECK(test::get(s.ask(place{n, 5}, asio::use_future)));
  }
  w.crash();
  CHECK(gateway->requests() == 0);
  w.boot();
  te::adapters a;
  a.add("payment", tk::payment_adapter(gateway), fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  for (long n = 1; n <= 3; ++n) {
    REQUIRE(w.settled(s, payment_id(n), effect_status::completed));
    CHECK(gateway->charges(payment_id(n)) == 1);
  }
}

TEST_CASE("an operation ID another owner holds is refused, naming both, and its record is untouched") {
  world w;
  auto sc = w.new_script();
  sc->executes.push_back(te::outcome::unknown("the answer was lost"));
  te::adapters a;
  a.add("task", bare{sc}, fast_retries(1));
  w.dispatcher(std::move(a));
  auto shop_a = w.owner("shop-A");
  auto shop_b = w.owner("shop-B");
  CHECK(test::get(shop_a.ask(start_task{"invoice:1"}, asio::use_future)));
  REQUIRE(w.settled(shop_a, "invoice:1", effect_status::unknown));
  const auto before = w.record("invoice:1");
  REQUIRE(before);
  try {
    test::get(shop_b.ask(start_task{"invoice:1"}, asio::use_future));
    FAIL("shop-B started invoice:1");
  } catch (const troupe::error& e) { // the handler's failure, with start_effect's error
    CHECK_THAT(std::string(e.what()), Catch::Contains(te::make_error_code(te::errc::id_in_use).message()) &&
                                          Catch::Contains("invoice:1") && Catch::Contains("shop-A") &&
                                          Catch::Contains("shop-B"));
  }
  CHECK(w.store->highest_sequence_nr("shop-B") == 0); // nothing of shop-B written
  CHECK(w.status(shop_b, "invoice:1") == effect_status::not_requested);
  auto after = w.record("invoice:1");
  REQUIRE(after);
  CHECK(after->owner == "shop-A");
  CHECK(after->status == before->status);
  CHECK(sc->executions("invoice:1") == 1);
}

TEST_CASE("two owners racing for one operation ID: exactly one gets it, the other is refused") {
  world w; // no dispatcher: the records stay as written
  auto a = w.owner("shop-A");
  auto b = w.owner("shop-B");
  constexpr int ids = 200;
  std::vector<std::future<int>> fa, fb;
  for (int i = 0; i < ids; ++i) {
    fa.push_back(a.ask(try_task{"id:" + std::to_string(i)}, asio::use_future));
    fb.push_back(b.ask(try_task{"id:" + std::to_string(i)}, asio::use_future));
  }
  for (int i = 0; i < ids; ++i) {
    int won = 0;
    std::string winner;
    for (auto* f : {&fa[i], &fb[i]}) {
      const int r = test::get(*f);
      CHECK(r != 0); // started (1) or refused with id_in_use (-1), never "requested before"
      if (r == 1) {
        ++won;
        winner = f == &fa[i] ? "shop-A" : "shop-B";
      }
    }
    CHECK(won == 1);
    auto r = w.record("id:" + std::to_string(i));
    REQUIRE(r);
    CHECK(r->owner == winner);
  }
}

TEST_CASE("a store write that may only create a key fails whole when the key exists") {
  for (bool rocks : {false, true}) {
    INFO((rocks ? "rocksdb" : "memory"));
    test::temp_dir dir;
    std::shared_ptr<tp::journal> j =
        rocks ? std::shared_ptr<tp::journal>(std::make_shared<tp::journal_of<tp::rocksdb_store>>(
                    std::make_shared<tp::rocksdb_store>(dir.str())))
              : std::make_shared<tp::journal_of<tp::memory_store>>(std::make_shared<tp::memory_store>());
    auto t = j->open_table("t");
    auto write = [&](std::vector<tp::table_write> tables, std::vector<tp::event_record> events = {}) {
      std::promise<std::error_code> p;
      auto f = p.get_future();
      std::string pid = events.empty() ? std::string() : std::string("p");
      j->write(std::move(pid), std::move(events), std::move(tables), [&p](std::error_code ec) { p.set_value(ec); });
      return f.get();
    };
    CHECK_FALSE(write({tp::table_write::create(t, "k", "first")}));
    CHECK(write({tp::table_write::create(t, "k", "second"), tp::table_write::put(t, "other", "x")},
                {{1, "m", 1, "{}"}}) == tp::errc::key_exists);
    std::optional<std::string> v;
    REQUIRE_FALSE(j->get(t, "k", v));
    CHECK(v == "first");
    REQUIRE_FALSE(j->get(t, "other", v));
    CHECK_FALSE(v);
    CHECK(j->highest_sequence_nr("p") == 0);
    // Two creates of one key in one group: the first wins.
    std::promise<std::error_code> p1, p2;
    j->write({}, {}, {tp::table_write::create(t, "n", "1")}, [&](std::error_code ec) { p1.set_value(ec); });
    j->write({}, {}, {tp::table_write::create(t, "n", "2")}, [&](std::error_code ec) { p2.set_value(ec); });
    CHECK_FALSE(p1.get_future().get());
    CHECK(p2.get_future().get() == tp::errc::key_exists);
    REQUIRE_FALSE(j->get(t, "n", v));
    CHECK(v == "1");
  }
}

} // namespace effects_effectful_actor_test
