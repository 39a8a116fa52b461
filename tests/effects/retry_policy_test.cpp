#include <troupe/effects/retry_policy.hpp>

#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_retry_policy_test {

using namespace std::chrono_literals;

TEST_CASE("a retry policy waits the initial backoff after the first attempt, doubling up to the cap") {
  troupe::effects::retry_policy p;
  p.initial_backoff = 100ms;
  p.max_backoff = 350ms;
  CHECK(p.backoff(1) == 100ms);
  CHECK(p.backoff(2) == 200ms);
  CHECK(p.backoff(3) == 350ms);
  CHECK(p.backoff(50) == 350ms);
  CHECK(p.valid());
}

TEST_CASE("a retry policy without attempts or with backoffs out of order is not valid") {
  troupe::effects::retry_policy p;
  p.max_attempts = 0;
  CHECK_FALSE(p.valid());
  p.max_attempts = 1;
  p.initial_backoff = 0ms;
  CHECK_FALSE(p.valid());
  p.initial_backoff = 2s;
  p.max_backoff = 1s;
  CHECK_FALSE(p.valid());
}

} // namespace effects_retry_policy_test
