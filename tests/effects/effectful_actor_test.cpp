// An effect's owner: the intent written with its causes, bad requests, the
// workflow continued from an outcome, a crash before the dispatch.
#include <troupe/effects/effectful_actor.hpp>

#include "world.hpp"

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

} // namespace effects_effectful_actor_test
