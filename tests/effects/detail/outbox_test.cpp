// Outbox records on their own: what is written, and what was written by
// earlier code, reads back.
#include <troupe/effects/detail/outbox.hpp>

#include <catch2/catch.hpp>

#include <string>

namespace te = troupe::effects;

TEST_CASE("an outbox record reads back as written, its history included") {
  te::detail::record r;
  r.info.id = "op-1";
  r.info.type = "payment";
  r.info.owner = "order-1";
  r.info.status = te::effect_status::unknown;
  r.info.in_doubt = true;
  r.info.attempts = 2;
  r.info.queries = 1;
  r.info.round = 3;
  r.info.reason = "timeout";
  r.info.created_ms = 10;
  r.info.finished_ms = 20;
  r.due_ms = 30;
  r.request = R"({"amount":5})";
  for (int i = 0; i < 40; ++i) r.note(i, "execute", "unknown", "attempt " + std::to_string(i));
  CHECK(r.info.history.size() == te::detail::max_history);
  CHECK(r.info.history.front().detail == "attempt 8");
  auto back = te::detail::decode("op-1", te::detail::encode(r));
  CHECK(back.info.id == "op-1");
  CHECK(back.info.type == "payment");
  CHECK(back.info.owner == "order-1");
  CHECK(back.info.status == te::effect_status::unknown);
  CHECK(back.info.in_doubt);
  CHECK(back.info.attempts == 2);
  CHECK(back.info.queries == 1);
  CHECK(back.info.round == 3);
  CHECK(back.info.reason == "timeout");
  CHECK(back.info.created_ms == 10);
  CHECK(back.info.finished_ms == 20);
  CHECK(back.due_ms == 30);
  CHECK(back.request == r.request);
  REQUIRE(back.info.history.size() == te::detail::max_history);
  CHECK(back.info.history.back().time_ms == 39);
}

TEST_CASE("a record in the format the store has always held reads back") {
  const std::string stored =
      std::string(1, '\1') +
      R"({"type":"payment","owner":"o","status":"pending","in_doubt":false,"attempts":1,"queries":0,"round":0,)"
      R"("result":"","reason":"","created":5,"finished":0,"due":6,"request":"{}",)"
      R"("history":[{"t":5,"action":"execute","result":"failed","detail":"503"}]})";
  auto r = te::detail::decode("op", stored);
  CHECK(r.info.status == te::effect_status::pending);
  CHECK(r.info.attempts == 1);
  CHECK(r.due_ms == 6);
  REQUIRE(r.info.history.size() == 1);
  CHECK(r.info.history[0].detail == "503");
  CHECK(r.reporter.empty()); // written before records named their reporter
  CHECK_FALSE(r.confirmed);   // pending: nothing to confirm yet
  // Written again, the same fields and the newer ones after them (a reader
  // that does not know them skips them).
  CHECK(te::detail::encode(r) == stored.substr(0, stored.size() - 1) + R"(,"reporter":"","confirmed":false})");
  r.reporter = "dispatcher-2";
  CHECK(te::detail::decode("op", te::detail::encode(r)).reporter == "dispatcher-2");
  // A finished record of that format counts as confirmed (its outcome was
  // swept as confirmed then).
  auto done = stored;
  done.replace(done.find("\"pending\""), 9, "\"completed\"");
  CHECK(te::detail::decode("op", done).confirmed);
}

TEST_CASE("the store may drop a finished record once its outcome is confirmed and its time has come, never a pending "
          "or unknown one") {
  te::detail::record r;
  r.info.id = "op";
  r.info.status = te::effect_status::completed;
  r.info.finished_ms = 1000;
  const auto at = [&] {
    return te::detail::record_expiry(te::detail::outbox_key("op"), te::detail::encode(r), std::chrono::milliseconds(50),
                                     std::chrono::milliseconds(500));
  };
  CHECK_FALSE(at()); // not confirmed yet
  r.confirmed = true;
  CHECK(at() == 1050);
  r.info.status = te::effect_status::failed;
  CHECK(at() == 1500);
  r.info.status = te::effect_status::unknown;
  CHECK_FALSE(at());
  r.info.status = te::effect_status::pending;
  CHECK_FALSE(at());
  // The pending index's entries are not records.
  CHECK_FALSE(te::detail::record_expiry(te::detail::pending_key("op"), "", std::chrono::milliseconds(50),
                                        std::chrono::milliseconds(500)));
}

TEST_CASE("an unreadable outbox record is corrupt_record, naming the operation") {
  for (std::string bad : {std::string(), std::string("\2{}"), std::string("\1{not json"), std::string("\1{}")}) {
    try {
      te::detail::decode("op-9", bad);
      FAIL("decoded");
    } catch (const troupe::error& e) {
      CHECK(e.code() == te::errc::corrupt_record);
      CHECK(std::string(e.what()).find("op-9") != std::string::npos);
    }
  }
}
