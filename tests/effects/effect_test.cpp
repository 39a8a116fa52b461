// The effect state machine, the effect table and the JSON of the layer's
// events and messages.
#include <troupe/effects/effect.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_effect_test {

namespace te = troupe::effects;
namespace tp = troupe::persistence;
namespace json = boost::json;
using te::effect_status;

TEST_CASE("the effect state machine allows exactly its transitions") {
  using enum effect_status;
  const std::set<std::pair<effect_status, effect_status>> expected{
      {not_requested, pending}, {pending, completed}, {pending, failed},    {pending, unknown},
      {failed, pending},        {unknown, pending},   {unknown, completed}, {unknown, failed}};
  for (auto from : {not_requested, pending, completed, failed, unknown})
    for (auto to : {not_requested, pending, completed, failed, unknown}) {
      INFO(te::to_string(from) << " -> " << te::to_string(to));
      CHECK(te::allowed(from, to) == expected.contains({from, to}));
    }
}

TEST_CASE("the effect table follows requests and outcomes, ignores stale rounds, and keeps completed final") {
  te::effect_table t;
  CHECK(t.status("op") == effect_status::not_requested);
  t.apply(te::effect_requested{"op", "payment"});
  CHECK(t.status("op") == effect_status::pending);
  t.apply(te::effect_updated{"op", effect_status::unknown, "", "timeout", 1, 0});
  CHECK(t.status("op") == effect_status::unknown);
  // Re-queued (round 1); the outcome of round 1 may arrive before its
  // "pending": either order ends completed.
  t.apply(te::effect_updated{"op", effect_status::completed, "\"pay_1\"", "", 1, 1});
  t.apply(te::effect_updated{"op", effect_status::pending, "", "", 0, 1});
  CHECK(t.status("op") == effect_status::completed);
  CHECK(t.find("op")->result_as<std::string>() == "pay_1");
  // Stale or after completion: nothing changes.
  te::effect_updated stale{"op", effect_status::failed, "", "late", 3, 0};
  CHECK_FALSE(t.accepts(stale));
  t.apply(stale);
  t.apply(te::effect_updated{"op", effect_status::failed, "", "x", 1, 2});
  CHECK(t.status("op") == effect_status::completed);
  // A second request of the same ID is the same effect.
  t.apply(te::effect_requested{"op", "other"});
  CHECK(t.find("op")->type == "payment");
  // Unknown → failed, failed → pending (re-queue).
  t.apply(te::effect_requested{"b", "email"});
  t.apply(te::effect_updated{"b", effect_status::unknown, "", "?", 1, 0});
  t.apply(te::effect_updated{"b", effect_status::failed, "", "operator", 1, 0});
  CHECK(t.status("b") == effect_status::failed);
  t.apply(te::effect_updated{"b", effect_status::pending, "", "", 0, 1});
  CHECK(t.status("b") == effect_status::pending);
  // Snapshots carry the table.
  CHECK(json::value_to<te::effect_table>(json::value_from(t)) == t);
  CHECK_THROWS_WITH(t.find("b")->result_as<std::string>(), Catch::Contains("has no result (it is pending)"));
}

TEST_CASE("statuses have names, and names give statuses back") {
  for (auto s : {effect_status::not_requested, effect_status::pending, effect_status::completed, effect_status::failed,
                 effect_status::unknown})
    CHECK(te::effect_status_from(te::to_string(s)) == s);
  CHECK(te::to_string(effect_status::unknown) == "unknown");
  CHECK_FALSE(te::effect_status_from("lost"));
}

TEST_CASE("the layer's events, its message and the table have the JSON shape they always had") {
  te::effect_updated u{"op", effect_status::completed, R"("pay_1")", "", 2, 1};
  CHECK(tp::to_json_text(u) ==
        R"({"id":"op","status":"completed","result":"\"pay_1\"","reason":"","attempts":2,"round":1})");
  CHECK(tp::to_json_text(te::effect_update{u}) == tp::to_json_text(u));
  CHECK(tp::to_json_text(te::effect_requested{"op", "payment"}) == R"({"id":"op","type":"payment"})");
  te::effect_table t;
  t.apply(te::effect_requested{"b", "mail"});
  t.apply(te::effect_requested{"a", "payment"});
  CHECK(tp::to_json_text(t) ==
        R"([{"id":"a","type":"payment","status":"pending","result":"","reason":"","attempts":0,"round":0},)"
        R"({"id":"b","type":"mail","status":"pending","result":"","reason":"","attempts":0,"round":0}])");
  CHECK(tp::from_json_text<te::effect_table>(tp::to_json_text(t)) == t);
  CHECK(tp::from_json_text<te::effect_update>(tp::to_json_text(te::effect_update{u})).change.result == u.result);
  CHECK_THROWS(tp::from_json_text<te::effect_updated>(
      R"({"id":"op","status":"lost","result":"","reason":"","attempts":0,"round":0})"));
}

} // namespace effects_effect_test
