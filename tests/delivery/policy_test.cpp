#include <troupe/delivery/policy.hpp>

#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_policy_test {

using namespace std::chrono_literals;

TEST_CASE("a sender's redelivery horizon is its attempts times its longest backoff, or unlimited") {
  troupe::delivery::redelivery_policy p;
  p.max_backoff = 2s;
  p.max_attempts = 10;
  CHECK(p.horizon() == 20s);
  p.max_attempts = 0;
  CHECK(p.horizon() == std::chrono::milliseconds::max());
}

TEST_CASE("the default policies keep dedup marks a day, longer than the default horizon") {
  troupe::delivery::delivery_options o;
  CHECK(o.dedup.retention >= o.redelivery.horizon());
}

} // namespace delivery_policy_test
