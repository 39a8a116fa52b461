#include <troupe/detail/restart.hpp>

#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace core_detail_restart_test {

using namespace std::chrono_literals;
using troupe::detail::restart_budget;

TEST_CASE("restarts back off from min_backoff, doubling up to max_backoff, until max_restarts in the window") {
  auto p = troupe::supervision::restart(4, 10s, 10ms, 50ms);
  restart_budget b;
  const auto t0 = restart_budget::clock::time_point{} + 1h;
  CHECK(b.next(p, t0) == 10ms);
  CHECK(b.next(p, t0 + 1ms) == 20ms);
  CHECK(b.next(p, t0 + 2ms) == 40ms);
  CHECK(b.next(p, t0 + 3ms) == 50ms); // capped
  CHECK_FALSE(b.next(p, t0 + 4ms));   // the fifth failure in the window
}

TEST_CASE("a failure after the window opens a new one, with the first backoff again") {
  auto p = troupe::supervision::restart(1, 1s, 10ms, 1s);
  restart_budget b;
  const auto t0 = restart_budget::clock::time_point{} + 1h;
  CHECK(b.next(p, t0) == 10ms);
  CHECK_FALSE(b.next(p, t0 + 500ms));
  CHECK(b.next(p, t0 + 1001ms) == 10ms);
}

} // namespace core_detail_restart_test
