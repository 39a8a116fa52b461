// `decide` on its own: what each attempt's result does to an effect.
#include <troupe/effects/detail/decide.hpp>

#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_detail_decide_test {

using namespace std::chrono_literals;
namespace te = troupe::effects;
namespace d = troupe::effects::detail;
using te::effect_status;
using what = d::result::what;

namespace {

constexpr std::int64_t now = 1'000'000;

d::erased_adapter adapter(bool can_query, bool idempotent, std::uint32_t attempts = 3) {
  d::erased_adapter a;
  a.can_query = can_query;
  a.idempotent = idempotent;
  a.policy.max_attempts = attempts;
  a.policy.initial_backoff = 100ms;
  a.policy.max_backoff = 1s;
  return a;
}

d::result executed(te::outcome o, std::uint32_t attempts_before = 0) {
  d::result r;
  r.kind = what::executed;
  r.rec.info.id = "op";
  r.rec.info.type = "t";
  r.rec.info.status = effect_status::pending;
  r.rec.info.attempts = attempts_before;
  r.out = std::move(o);
  return r;
}

d::result queried(te::query_result q, std::uint32_t attempts = 1, std::uint32_t queries_before = 0) {
  d::result r;
  r.kind = what::queried;
  r.rec.info.id = "op";
  r.rec.info.status = effect_status::pending;
  r.rec.info.in_doubt = true;
  r.rec.info.attempts = attempts;
  r.rec.info.queries = queries_before;
  r.answer = std::move(q);
  return r;
}

} // namespace

TEST_CASE("a completed execution completes the effect with its result, and its owner learns it") {
  auto a = adapter(true, false);
  auto p = d::decide(executed(te::outcome::completed("pay_1")), &a, now);
  CHECK(p.write);
  CHECK_FALSE(p.drop);
  CHECK_FALSE(p.threshold);
  CHECK(p.rec.info.status == effect_status::completed);
  CHECK(p.rec.info.attempts == 1);
  CHECK(p.rec.info.finished_ms == now);
  CHECK(p.rec.info.result == R"("pay_1")");
  REQUIRE(p.update);
  CHECK(p.update->status == effect_status::completed);
  REQUIRE(p.rec.info.history.size() == 1);
  CHECK(p.rec.info.history[0].action == "execute");
}

TEST_CASE("a failed execution is retried after the backoff while attempts remain, then fails with the threshold") {
  auto a = adapter(true, false, 3);
  auto p = d::decide(executed(te::outcome::failed("503"), 0), &a, now);
  CHECK(p.rec.info.status == effect_status::pending);
  CHECK(p.rec.due_ms == now + 100);
  CHECK_FALSE(p.update);
  p = d::decide(executed(te::outcome::failed("503"), 1), &a, now);
  CHECK(p.rec.due_ms == now + 200);
  p = d::decide(executed(te::outcome::failed("503"), 2), &a, now);
  CHECK(p.rec.info.status == effect_status::failed);
  CHECK(p.threshold);
  REQUIRE(p.update);
  CHECK(p.rec.info.reason.find("gave up after 3 attempts") != std::string::npos);
}

TEST_CASE("a permanent failure fails at once, without the threshold") {
  auto a = adapter(true, false);
  auto p = d::decide(executed(te::outcome::failed("declined", true)), &a, now);
  CHECK(p.rec.info.status == effect_status::failed);
  CHECK_FALSE(p.threshold);
  CHECK(p.update);
}

TEST_CASE("an unknown execution is in doubt for an adapter that can query or retry, and an operator's otherwise") {
  auto q = adapter(true, false);
  auto p = d::decide(executed(te::outcome::unknown("timeout")), &q, now);
  CHECK(p.rec.info.status == effect_status::pending);
  CHECK(p.rec.info.in_doubt);
  CHECK_FALSE(p.update);
  auto i = adapter(false, true, 2);
  p = d::decide(executed(te::outcome::unknown("timeout"), 1), &i, now);
  CHECK(p.rec.info.status == effect_status::unknown);
  CHECK(p.threshold);
  auto bare = adapter(false, false);
  p = d::decide(executed(te::outcome::unknown("timeout")), &bare, now);
  CHECK(p.rec.info.status == effect_status::unknown);
  CHECK_FALSE(p.threshold);
  CHECK(p.rec.info.reason.find("an operator must check") != std::string::npos);
}

TEST_CASE("a query settles an effect in doubt: completed, or not found and executed again at once") {
  auto a = adapter(true, false);
  auto p = d::decide(queried(te::query_result::completed("pay_2")), &a, now);
  CHECK(p.rec.info.status == effect_status::completed);
  CHECK(p.rec.info.queries == 1);
  CHECK_FALSE(p.rec.info.in_doubt);
  p = d::decide(queried(te::query_result::not_found()), &a, now);
  CHECK(p.rec.info.status == effect_status::pending);
  CHECK_FALSE(p.rec.info.in_doubt);
  CHECK(p.rec.due_ms == now);
  p = d::decide(queried(te::query_result::unknown("no answer"), 1, 0), &a, now);
  CHECK(p.rec.info.status == effect_status::pending);
  CHECK(p.rec.info.in_doubt);
  p = d::decide(queried(te::query_result::unknown("no answer"), 1, 2), &a, now);
  CHECK(p.rec.info.status == effect_status::unknown);
  CHECK(p.threshold);
}

TEST_CASE("a record that is gone, stale or whose mark failed is not written, no adapter fails the effect") {
  auto a = adapter(true, false);
  d::result r;
  r.rec.info.id = "op";
  r.kind = what::gone;
  auto p = d::decide(r, &a, now);
  CHECK_FALSE(p.write);
  CHECK(p.drop);
  r.kind = what::stale;
  p = d::decide(r, &a, now);
  CHECK_FALSE(p.write);
  CHECK_FALSE(p.drop);
  r.kind = what::mark_failed;
  r.rec.info.status = effect_status::pending;
  p = d::decide(r, &a, now);
  CHECK_FALSE(p.write);
  CHECK(p.rec.due_ms == now + 100);
  r.kind = what::no_adapter;
  p = d::decide(r, nullptr, now);
  CHECK(p.write);
  CHECK(p.rec.info.status == effect_status::failed);
  r.kind = what::unresolvable;
  p = d::decide(r, &a, now);
  CHECK(p.rec.info.status == effect_status::unknown);
}

} // namespace effects_detail_decide_test
