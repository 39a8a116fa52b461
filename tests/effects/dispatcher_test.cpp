// The dispatcher: execution through adapters, queries of unknown outcomes,
// retries, operators, restarts, several dispatchers, retention, and the
// invariant under seeded faults.
#include <troupe/effects/dispatcher.hpp>

#include "world.hpp"

#include <troupe/testing/wall_clock.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_dispatcher_test {

using namespace effects_world;

using namespace std::chrono_literals;
using te::effect_status;

TEST_CASE("an effect goes from pending to completed with the external result, and its outbox record is done") {
  world w;
  auto gateway = std::make_shared<tk::payment_gateway>();
  te::adapters a;
  a.add("payment", tk::payment_adapter(gateway), fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  CHECK(test::get(s.ask(place{42, 1999}, asio::use_future)));
  REQUIRE(w.settled(s, payment_id(42), effect_status::completed));
  auto e = *w.effects(s).find(payment_id(42));
  CHECK(e.type == "payment");
  CHECK(e.attempts == 1);
  CHECK(e.result_as<std::string>().starts_with("pay_"));
  CHECK(gateway->charges(payment_id(42)) == 1);
  REQUIRE(w.eventually([&] { return w.record(payment_id(42))->status == effect_status::completed; }));
  CHECK(w.record(payment_id(42))->result == e.result);
  // Placing it again is the same order: no second effect.
  CHECK_FALSE(test::get(s.ask(place{42, 1999}, asio::use_future)));
  CHECK(gateway->requests() == 1);
}

TEST_CASE("a charge whose response was lost is resolved by query, without a second charge") {
  world w;
  tk::simulator_options go;
  go.honours_keys = false; // troupe must not count on the gateway's dedup
  go.faults.lose_response = 1;
  auto gateway = std::make_shared<tk::payment_gateway>(go);
  te::adapters a;
  a.add("payment", tk::payment_adapter(gateway), fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  for (long n = 1; n <= 5; ++n) CHECK(test::get(s.ask(place{n, 100 * n}, asio::use_future)));
  for (long n = 1; n <= 5; ++n) {
    REQUIRE(w.settled(s, payment_id(n), effect_status::completed));
    CHECK(gateway->charges(payment_id(n)) == 1);
    CHECK(w.effects(s).find(payment_id(n))->result_as<std::string>().starts_with("pay_"));
  }
  CHECK(gateway->requests() == 5);
  CHECK(gateway->queries() >= 5);
  auto history = w.record(payment_id(1))->history;
  REQUIRE(history.size() == 2);
  CHECK(history[0].action == "execute");
  CHECK(history[0].result == "unknown");
  CHECK(history[1].action == "query");
  CHECK(history[1].result == "completed");
}

TEST_CASE("a timeout, a dropped connection and a 5xx are unknown, only a decline is a failure") {
  asio::io_context io;
  auto outcome_of = [&](tk::gateway_faults f) {
    tk::simulator_options o;
    o.faults = f;
    auto g = std::make_shared<tk::payment_gateway>(o);
    tk::payment_adapter a(g, 20ms);
    auto fut = asio::co_spawn(
        io,
        [&]() -> troupe::task<te::outcome> {
          te::operation op{"order:1:payment", "payment", "{\"amount\":5}", "shop", 1};
          co_return co_await a.execute(op);
        },
        asio::use_future);
    io.restart();
    io.run();
    return fut.get();
  };
  auto timeout = outcome_of({.timeout = 1});
  CHECK(timeout.what == te::outcome::kind::unknown);
  CHECK(timeout.detail == "no answer within 20 ms");
  CHECK(outcome_of({.lose_response = 1}).what == te::outcome::kind::unknown);
  CHECK(outcome_of({.fail_before = 1}).what == te::outcome::kind::unknown);
  auto declined = outcome_of({.decline = 1});
  CHECK(declined.what == te::outcome::kind::failed);
  CHECK(declined.permanent);
  auto slow = outcome_of({.slow = 1, .slow_latency = 5ms});
  CHECK(slow.what == te::outcome::kind::completed);
}

TEST_CASE("failed attempts are retried, when they run out the threshold callback fires and the effect is failed") {
  world w;
  auto sc = w.new_script();
  sc->otherwise = te::outcome::failed("processor down");
  auto policy = fast_retries(3);
  policy.on_threshold = [p = w.probes](const te::effect_info& i) { p->record(p->thresholds, i); };
  te::adapters a;
  a.add("task", queryable{sc}, policy);
  auto d = w.dispatcher(std::move(a));
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::failed));
  CHECK(sc->execute_calls == 3);
  CHECK(sc->query_calls == 0); // a definite failure needs no query
  auto e = *w.effects(s).find("job:1");
  CHECK(e.attempts == 3);
  CHECK(e.reason == "gave up after 3 attempts: processor down");
  REQUIRE(w.eventually([&] {
    std::lock_guard g(w.probes->m);
    return w.probes->thresholds.size() == 1;
  }));
  CHECK(w.probes->thresholds[0].id == "job:1");
  auto listed = test::get(d.ask(te::list_effects{}, asio::use_future));
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].status == effect_status::failed);
  CHECK(listed[0].history.size() == 3); // kept
  for (auto& h : listed[0].history) CHECK(h.result == "failed");
}

TEST_CASE("a permanent failure is not retried") {
  world w;
  auto sc = w.new_script();
  sc->otherwise = te::outcome::failed("declined", true);
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries(5));
  w.dispatcher(std::move(a));
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::failed));
  CHECK(sc->execute_calls == 1);
  CHECK(w.effects(s).find("job:1")->reason == "declined");
}

TEST_CASE("an operator lists failed and unknown effects and re-queues one, which then completes") {
  world w;
  auto sc = w.new_script();
  sc->otherwise = te::outcome::failed("down");
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries(2));
  auto d = w.dispatcher(std::move(a));
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::failed));
  CHECK_FALSE(test::get(d.ask(te::requeue_effect{"no-such-job"}, asio::use_future)));
  {
    std::lock_guard g(sc->m);
    sc->otherwise = te::outcome::completed(std::string("finally"));
  }
  CHECK(test::get(d.ask(te::requeue_effect{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::completed));
  auto e = *w.effects(s).find("job:1");
  CHECK(e.round == 1);
  CHECK(e.attempts == 1); // counted afresh
  CHECK(e.result_as<std::string>() == "finally");
  CHECK(test::get(d.ask(te::list_effects{}, asio::use_future)).empty());
  CHECK_FALSE(test::get(d.ask(te::requeue_effect{"job:1"}, asio::use_future))); // completed: nothing to re-queue
}

TEST_CASE("an adapter that can neither query nor retry safely leaves an unknown outcome to an operator") {
  world w;
  auto sc = w.new_script();
  sc->otherwise = te::outcome::unknown("connection reset");
  te::adapters a;
  a.add("task", bare{sc}, fast_retries(5));
  auto d = w.dispatcher(std::move(a));
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::unknown));
  CHECK(sc->execute_calls == 1); // never executed again on its own
  CHECK(w.effects(s).find("job:1")->reason.find("an operator must check") != std::string::npos);
  auto listed = test::get(d.ask(te::list_effects{}, asio::use_future));
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].status == effect_status::unknown);
  CHECK_FALSE(test::get(d.ask(te::resolve_effect{"nope", true, "\"x\""}, asio::use_future)));
  CHECK(test::get(d.ask(te::resolve_effect{"job:1", true, "\"checked by hand\""}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::completed));
  CHECK(w.effects(s).find("job:1")->result_as<std::string>() == "checked by hand");
  CHECK(sc->execute_calls == 1);
  CHECK(w.record("job:1")->history.back().action == "operator");
}

TEST_CASE("an unknown outcome of a system that dedups is resolved by sending again with the same key") {
  world w;
  tk::simulator_options o;
  o.seed = 7;
  o.faults.lose_response = 0.5;
  o.faults.fail_before = 0.1;
  auto mail = std::make_shared<tk::email_service>(o);
  te::adapters a;
  a.add("email", tk::email_adapter(mail), fast_retries(50));
  w.dispatcher(std::move(a));
  auto s = w.owner();
  for (long n = 1; n <= 20; ++n) CHECK(test::get(s.ask(send_email{n}, asio::use_future)));
  for (long n = 1; n <= 20; ++n) {
    REQUIRE(w.settled(s, email_id(n), effect_status::completed));
    CHECK(mail->deliveries(email_id(n)) == 1);
  }
  CHECK(mail->requests() > 20); // lost responses were retried
}

TEST_CASE("a crash between the execution and its outcome is resolved by query, not by a second charge") {
  world w;
  tk::simulator_options go;
  go.honours_keys = false;
  go.faults.slow = 1;
  go.faults.slow_latency = 1h; // charged, and the answer is still on its way when the process dies
  auto gateway = std::make_shared<tk::payment_gateway>(go);
  {
    te::adapters a;
    a.add("payment", tk::payment_adapter(gateway, 2h), fast_retries());
    w.dispatcher(std::move(a));
    auto s = w.owner();
    CHECK(test::get(s.ask(place{1, 700}, asio::use_future)));
    REQUIRE(w.eventually([&] { return gateway->charges(payment_id(1)) == 1; }));
  }
  w.crash();
  gateway->heal();
  w.boot();
  te::adapters a;
  a.add("payment", tk::payment_adapter(gateway), fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  REQUIRE(w.settled(s, payment_id(1), effect_status::completed));
  CHECK(gateway->charges(payment_id(1)) == 1);
  CHECK(gateway->requests() == 1);
  CHECK(w.record(payment_id(1))->history.back().action == "query");
}

TEST_CASE("several dispatchers after a crash mid-charge, against a gateway that does not dedup: one charge per key") {
  // The attempt's record says it may have run (written before it ran), so
  // whichever dispatcher takes it after the restart, having read the record
  // again, asks the gateway first.
  constexpr long orders = 4;
  for (int run = 0; run < 6; ++run) {
    INFO("run " << run);
    world w;
    tk::simulator_options go;
    go.honours_keys = false;
    go.faults.slow = 1;
    go.faults.slow_latency = 1h; // charged, the answer still on its way when the process dies
    auto gateway = std::make_shared<tk::payment_gateway>(go);
    {
      te::adapters a;
      a.add("payment", tk::payment_adapter(gateway, 2h), fast_retries());
      w.dispatcher(std::move(a), fast_dispatcher("dispatcher-1"));
      auto s = w.owner();
      for (long o = 1; o <= orders; ++o) CHECK(test::get(s.ask(place{o, 100 * o}, asio::use_future)));
      REQUIRE(w.eventually([&] {
        for (long o = 1; o <= orders; ++o)
          if (gateway->charges(payment_id(o)) != 1) return false;
        return true;
      }));
    }
    w.crash();
    for (long o = 1; o <= orders; ++o) CHECK(w.record(payment_id(o))->in_doubt);
    gateway->heal();
    w.boot();
    te::adapters a1, a2, a3;
    a1.add("payment", tk::payment_adapter(gateway), fast_retries());
    a2.add("payment", tk::payment_adapter(gateway), fast_retries());
    a3.add("payment", tk::payment_adapter(gateway), fast_retries());
    // All three spawned at once: each has joined before any loads the
    // outbox, so that each attempt reads its record again first.
    te::spawn_dispatcher(*w.sys, std::move(a1), fast_dispatcher("dispatcher-1"));
    te::spawn_dispatcher(*w.sys, std::move(a2), fast_dispatcher("dispatcher-2"));
    te::spawn_dispatcher(*w.sys, std::move(a3), fast_dispatcher("dispatcher-3"));
    auto s = w.owner();
    for (long o = 1; o <= orders; ++o) REQUIRE(w.settled(s, payment_id(o), effect_status::completed));
    for (long o = 1; o <= orders; ++o) CHECK(gateway->charges(payment_id(o)) == 1);
    CHECK(gateway->requests() == static_cast<std::uint64_t>(orders));
  }
}

TEST_CASE("an attempt cut short by a crash, where the adapter can neither query nor retry, ends unknown") {
  world w;
  auto sc = w.new_script();
  sc->hold = true;
  {
    te::adapters a;
    a.add("task", bare{sc}, fast_retries());
    w.dispatcher(std::move(a));
    auto s = w.owner();
    CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
    REQUIRE(w.eventually([&] { return sc->holding.load() == 1; }));
  }
  w.crash();
  REQUIRE(w.record("job:1")->in_doubt); // written before the attempt ran
  sc->hold = false;
  w.boot();
  te::adapters a;
  a.add("task", bare{sc}, fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  REQUIRE(w.settled(s, "job:1", effect_status::unknown));
  CHECK(sc->execute_calls == 1); // never run twice
  CHECK(w.effects(s).find("job:1")->reason.find("interrupted") != std::string::npos);
}

TEST_CASE("after a restart, in-doubt effects are resolved before any other effect is executed") {
  world w;
  auto sq = w.new_script();
  auto si = w.new_script();
  {
    auto s = w.owner();
    for (int n = 0; n < 10; ++n) {
      CHECK(test::get(s.ask(start_task{"q:" + std::to_string(n)}, asio::use_future)));
      CHECK(test::get(s.ask(start_task{"i:" + std::to_string(n), "other"}, asio::use_future)));
    }
  }
  w.crash();
  w.boot();
  for (int n = 0; n < 10; ++n) sq->queries.push_back(te::query_result::completed(std::string("was done")));
  te::adapters a;
  a.add("task", queryable{sq}, fast_retries());
  a.add("other", idempotent{si}, fast_retries());
  auto o = fast_dispatcher();
  o.max_in_flight = 4;
  w.dispatcher(std::move(a), o);
  auto s = w.owner();
  REQUIRE(w.all_completed(s, 20));
  std::vector<std::string> calls;
  {
    std::lock_guard g(w.probes->m);
    calls = w.probes->calls;
  }
  REQUIRE(calls.size() == 20);
  for (int n = 0; n < 10; ++n) CHECK(calls[n].starts_with("query:q:"));
  for (int n = 10; n < 20; ++n) CHECK(calls[n].starts_with("execute:i:"));
  CHECK(sq->execute_calls == 0); // each was done already: not executed again
}

TEST_CASE("two dispatchers on one store never run the same operation at once, and run each once") {
  world w;
  auto sc = w.new_script();
  constexpr int n = 40;
  auto s = w.owner(); // one live owner: a second spawn of its ID would fail with already_running
  for (int i = 0; i < n; ++i)
    CHECK(test::get(s.ask(start_task{"job:" + std::to_string(i), "other"}, asio::use_future)));
  // Both find every record at start, and race for them, five at a time
  // each, while the first attempts are held.
  sc->hold = true;
  te::adapters a1, a2;
  a1.add("other", idempotent{sc}, fast_retries());
  a2.add("other", idempotent{sc}, fast_retries());
  auto o1 = fast_dispatcher("dispatcher-1"), o2 = fast_dispatcher("dispatcher-2");
  o1.max_in_flight = o2.max_in_flight = 5;
  auto d1 = w.dispatcher(std::move(a1), o1);
  auto d2 = w.dispatcher(std::move(a2), o2);
  (void)test::get(d1.ask(te::effects_status{}, asio::use_future)); // both loaded the outbox
  (void)test::get(d2.ask(te::effects_status{}, asio::use_future));
  REQUIRE(w.eventually([&] { return sc->holding.load() == 10; }));
  CHECK(test::get(d1.ask(te::effects_status{}, asio::use_future)).running == 5);
  CHECK(test::get(d2.ask(te::effects_status{}, asio::use_future)).running == 5);
  sc->hold = false;
  REQUIRE(w.all_completed(s, n));
  for (int i = 0; i < n; ++i) CHECK(sc->executions("job:" + std::to_string(i)) == 1);
  CHECK(sc->max_running_same_id == 1);
}

TEST_CASE("retention removes completed records after their time and failed ones after theirs, never unknown or pending "
          "ones") {
  world w;
  auto ok = w.new_script();
  auto unknown = w.new_script();
  unknown->otherwise = te::outcome::unknown("reset");
  auto pending = w.new_script();
  pending->hold = true;
  auto failing = w.new_script();
  failing->otherwise = te::outcome::failed("no", true);
  // Four types, one behaviour each.
  te::adapters a;
  a.add("task", queryable{ok}, fast_retries());
  a.add("other", bare{unknown}, fast_retries());
  a.add("fail", queryable{failing}, fast_retries());
  a.add("hold", queryable{pending}, fast_retries());
  auto o = fast_dispatcher();
  o.retention.completed = 30ms;
  o.retention.failed = 1500ms;
  w.dispatcher(std::move(a), o);
  auto s = w.owner();
  for (int i = 0; i < 3; ++i) CHECK(test::get(s.ask(start_task{"done:" + std::to_string(i)}, asio::use_future)));
  CHECK(test::get(s.ask(start_task{"unknown", "other"}, asio::use_future)));
  CHECK(test::get(s.ask(start_task{"failed", "fail"}, asio::use_future)));
  CHECK(test::get(s.ask(start_task{"pending", "hold"}, asio::use_future)));
  REQUIRE(w.settled(s, "unknown", effect_status::unknown));
  REQUIRE(w.settled(s, "failed", effect_status::failed));
  for (int i = 0; i < 3; ++i) REQUIRE(w.settled(s, "done:" + std::to_string(i), effect_status::completed));
  REQUIRE(w.eventually([&] {
    w.drop_expired();
    for (int i = 0; i < 3; ++i)
      if (w.record("done:" + std::to_string(i))) return false;
    return true;
  }));
  // The failed record outlives the completed ones, then goes too.
  CHECK(w.record("failed"));
  REQUIRE(w.eventually([&] {
    w.drop_expired();
    return !w.record("failed");
  }));
  CHECK(w.record("unknown"));
  CHECK(w.record("pending"));
  CHECK(w.record("pending")->status == effect_status::pending);
  pending->hold = false;
  REQUIRE(w.settled(s, "pending", effect_status::completed));
}

TEST_CASE("finished records go once their outcome was confirmed and their time came, with nothing of them in the "
          "dispatcher's memory; pending ones are paged in a window at a time") {
  world w;
  auto ok = w.new_script();
  te::adapters a;
  a.add("task", queryable{ok}, fast_retries());
  auto o = fast_dispatcher();
  o.retention.completed = 20ms;
  o.window = 4; // 30 pending records, 4 at a time in memory
  o.max_in_flight = 2;
  // Recorded before the dispatcher starts: it finds them in the outbox.
  auto s = w.owner();
  for (int i = 0; i < 30; ++i) CHECK(test::get(s.ask(start_task{"done:" + std::to_string(i)}, asio::use_future)));
  auto d = w.dispatcher(std::move(a), o);
  for (int i = 0; i < 30; ++i) REQUIRE(w.settled(s, "done:" + std::to_string(i), effect_status::completed));
  CHECK(ok->execute_calls == 30);
  // Each owner has confirmed its outcome (a record stays until then).
  REQUIRE(w.eventually([&] { return test::get(d.ask(td::delivery_status{}, asio::use_future)).unconfirmed == 0; }));
  troupe::testing::step_wall_clock(std::chrono::seconds(1)); // past the retention, without waiting for it
  struct step_back {
    ~step_back() { troupe::testing::step_wall_clock(-std::chrono::milliseconds(1000)); }
  } back;
  CHECK(w.eventually([&] {
    w.drop_expired();
    for (int i = 0; i < 30; ++i)
      if (w.record("done:" + std::to_string(i))) return false;
    return true;
  }));
}

TEST_CASE("with a faulty gateway over many seeded runs, nothing is charged twice and every effect ends completed, "
          "failed or unknown") {
  const auto base = seed_from_env();
  std::cout << "effects property test: TROUPE_PROPERTY_SEED=" << base << "\n";
  std::map<effect_status, int> ends;
  for (std::uint64_t run = 0; run < 20; ++run) {
    const auto seed = base + run;
    INFO("seed " << seed << " (rerun with TROUPE_PROPERTY_SEED=" << base << ")");
    world w;
    tk::simulator_options go;
    go.seed = seed;
    go.honours_keys = false; // at most once must not depend on the gateway's dedup
    go.faults = {.fail_before = 0.15,
                 .lose_response = 0.15,
                 .timeout = 0.1,
                 .slow = 0.1,
                 .decline = 0.05,
                 .query_unavailable = 0.3,
                 .slow_latency = 2ms};
    auto gateway = std::make_shared<tk::payment_gateway>(go);
    auto start = [&] {
      te::adapters a;
      a.add("payment", tk::payment_adapter(gateway, 10ms), fast_retries(4));
      w.dispatcher(std::move(a));
      return w.owner();
    };
    auto s = start();
    constexpr long orders = 30;
    for (long n = 1; n <= orders; ++n) CHECK(test::get(s.ask(place{n, n * 10}, asio::use_future)));
    if (run % 2 == 1) {
      // A crash in the middle: attempts under way are abandoned.
      REQUIRE(w.eventually([&] { return gateway->requests() >= orders / 2; }));
      w.crash();
      w.boot();
      s = start();
    }
    REQUIRE(w.eventually(
        [&] {
          auto t = w.effects(s);
          if (t.size() != orders) return false;
          for (auto& [id, e] : t)
            if (e.status == effect_status::pending) return false;
          return true;
        },
        60s));
    auto t = w.effects(s);
    for (long n = 1; n <= orders; ++n) {
      const auto id = payment_id(n);
      const auto& e = *t.find(id);
      INFO(id << " is " << te::to_string(e.status) << ": " << e.reason);
      const auto charged = gateway->charges(id);
      CHECK(charged <= 1);
      ++ends[e.status];
      switch (e.status) {
      case effect_status::completed: {
        CHECK(charged == 1);
        CHECK(e.result_as<std::string>().starts_with("pay_"));
        break;
      }
      case effect_status::failed: CHECK(charged == 0); break; // failed means it certainly did not happen
      case effect_status::unknown: break;                     // the gateway could not tell
      default: FAIL("effect " << id << " ended " << te::to_string(e.status));
      }
    }
  }
  std::cout << "  ends: " << ends[effect_status::completed] << " completed, " << ends[effect_status::failed]
            << " failed, " << ends[effect_status::unknown] << " unknown\n";
}

TEST_CASE("an outcome is redelivered to an owner that is down past the sender's horizon, and its outbox record "
          "stays until the owner confirmed it") {
  world w;
  auto sc = w.new_script();
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries());
  auto o = fast_dispatcher();
  o.delivery.redelivery.max_attempts = 2; // a horizon of 80 ms for ordinary deliveries
  o.retention.completed = 1ms;
  auto d = w.dispatcher(std::move(a), o);
  w.complete_while_owner_is_down(*sc, "job:1");
  // Four resends (at least 8 + 16 + 32 + 32 ms with the jitter): past the
  // horizon, and past the completed record's retention.
  REQUIRE(w.eventually([&] { return test::get(d.ask(td::delivery_status{}, asio::use_future)).resent >= 4; }));
  CHECK(test::get(d.ask(td::list_dead_letters{}, asio::use_future)).empty());
  w.drop_expired();
  CHECK(w.record("job:1")); // not dropped: the owner has not confirmed the outcome
  auto s = w.owner();
  REQUIRE(w.settled(s, "job:1", effect_status::completed));
  REQUIRE(w.eventually([&] {
    w.drop_expired();
    return !w.record("job:1");
  })); // dropped once confirmed
}

TEST_CASE("a dispatcher left alone after another stopped mid-attempt reads the record again: never a second execution "
          "without asking") {
  world w;
  auto sc = w.new_script();
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future))); // pending in the store, no dispatcher yet
  sc->hold = true;
  te::adapters a1, a2;
  a1.add("task", bare{sc}, fast_retries());
  a2.add("task", bare{sc}, fast_retries());
  // Both load the record before either attempts it.
  auto d1 = te::spawn_dispatcher(*w.sys, std::move(a1), fast_dispatcher("dispatcher-1"));
  auto d2 = te::spawn_dispatcher(*w.sys, std::move(a2), fast_dispatcher("dispatcher-2"));
  REQUIRE(w.eventually([&] { return sc->holding.load() == 1; }));
  REQUIRE(w.record("job:1")->in_doubt); // written before the attempt ran
  // The one running it stops; the other is left alone.
  const bool first = test::get(d1.ask(te::effects_status{}, asio::use_future)).running == 1;
  auto& running = first ? d1 : d2;
  auto& other = first ? d2 : d1;
  running.stop();
  test::get(running.when_stopped(asio::use_future));
  sc->hold = false;
  REQUIRE(w.settled(s, "job:1", effect_status::unknown)); // the attempt may have run: an operator decides
  CHECK(sc->execute_calls == 1);
  CHECK(test::get(other.ask(te::effects_status{}, asio::use_future)).executed == 0);
}

TEST_CASE("an outcome is never rejected as poison: an owner whose on_effect keeps failing learns it once it stops "
          "failing") {
  world w;
  auto sc = w.new_script();
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  w.probes->on_effect_failures = 5; // past max_handler_failures (3)
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::completed));
  CHECK(w.probes->on_effect_failures == 0);
  std::lock_guard g(w.probes->m);
  CHECK(w.probes->outcomes.size() == 1);
}

TEST_CASE("a dispatcher does not sweep a record whose outcome another dispatcher reported and its owner has not "
          "confirmed") {
  world w;
  auto sc = w.new_script();
  te::adapters a1;
  a1.add("task", queryable{sc}, fast_retries());
  auto o1 = fast_dispatcher("dispatcher-1");
  o1.retention.completed = 24h;
  auto d1 = w.dispatcher(std::move(a1), o1);
  w.complete_while_owner_is_down(*sc, "job:1");
  // A second dispatcher loads the completed record, with a short retention.
  auto other = w.new_script();
  te::adapters a2;
  a2.add("task", queryable{other}, fast_retries());
  auto o2 = fast_dispatcher("dispatcher-2");
  o2.retention.completed = 1ms;
  auto d2 = w.dispatcher(std::move(a2), o2); // (it has loaded the record once it answers)
  // Past the short retention of the finished record.
  REQUIRE(w.eventually([&] { return troupe::detail::now_ms() > w.record("job:1")->finished_ms + 1; }));
  w.drop_expired();
  CHECK(w.record("job:1")); // the owner has not confirmed the outcome
  auto s = w.owner();
  REQUIRE(w.settled(s, "job:1", effect_status::completed));
  CHECK(other->execute_calls == 0);
}

TEST_CASE("an effect whose result is over the delivery limit reaches its owner without it, and the dispatcher goes on") {
  world w;
  auto sc = w.new_script();
  sc->otherwise = te::outcome::completed(std::string(20000, 'x'));
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries());
  auto o = fast_dispatcher();
  o.delivery.max_message_bytes = te::dispatcher::min_message_bytes;
  w.dispatcher(std::move(a), o);
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::completed));
  auto e = *w.effects(s).find("job:1");
  CHECK(e.result.empty());
  CHECK(e.reason.find("result of 20002 bytes") != std::string::npos); // its JSON text
  CHECK(e.reason.find("max_message_bytes") != std::string::npos);
  CHECK(w.record("job:1")->result.size() == 20002); // kept in the outbox record
  sc->otherwise = te::outcome::completed(std::string("small"));
  CHECK(test::get(s.ask(start_task{"job:2"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:2", effect_status::completed));
  CHECK(w.effects(s).find("job:2")->result == "\"small\"");
  CHECK(sc->execute_calls == 2);
}

TEST_CASE("a reason that grows sixfold in JSON is measured too: the outcome still reaches its owner") {
  world w;
  auto sc = w.new_script();
  sc->otherwise = te::outcome::failed(std::string(4000, '\x01'), true); // "\u0001" each in JSON
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries());
  auto o = fast_dispatcher();
  o.delivery.max_message_bytes = 20000;
  w.dispatcher(std::move(a), o);
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::failed));
  CHECK(w.effects(s).find("job:1")->reason.find("max_message_bytes (20000)") != std::string::npos);
}

TEST_CASE("a dispatcher refuses a delivery limit too small for an outcome, and an owner an operation ID whose outcome "
          "IDs would not fit") {
  world w;
  auto o = fast_dispatcher();
  o.delivery.max_message_bytes = 256;
  CHECK_THROWS_WITH(te::spawn_dispatcher(*w.sys, te::adapters{}, o),
                    Catch::Contains("an outcome needs room for at least 8192"));
  auto s = w.owner();
  // 600 ':' are 1200 bytes escaped: no outcome delivery ID could carry it.
  CHECK_THROWS_WITH(test::get(s.ask(start_task{std::string(600, ':')}, asio::use_future)),
                    Catch::Contains("with its ':' and '\\' escaped"));
  CHECK(w.effects(s).size() == 0);
}

TEST_CASE("what an external system answers that is not UTF-8 is stored as valid UTF-8: the record reads back and the "
          "owner learns the outcome") {
  world w;
  auto sc = w.new_script();
  sc->executes.push_back(te::outcome::failed("busy \xff\xfe", false)); // retried: its record must read back
  sc->otherwise = te::outcome::failed("declined: \xff\xfe\x80 body", true);
  te::adapters a;
  a.add("task", queryable{sc}, fast_retries());
  w.dispatcher(std::move(a));
  auto s = w.owner();
  CHECK(test::get(s.ask(start_task{"job:1"}, asio::use_future)));
  REQUIRE(w.settled(s, "job:1", effect_status::failed));
  CHECK(w.effects(s).find("job:1")->reason == "declined: \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD body");
  CHECK(w.record("job:1")->status == effect_status::failed); // readable
  CHECK(sc->execute_calls == 2);
}

} // namespace effects_dispatcher_test
