#include <troupe/config.hpp>

#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace core_config_test {

TEST_CASE("the system configuration defaults to one thread per core, fair batches and no ask timeout") {
  troupe::system_config c;
  CHECK(c.threads == 0); // hardware concurrency
  CHECK(c.throughput == 256);
  CHECK(c.ask_timeout == troupe::no_timeout);
  CHECK(c.shutdown_timeout.count() == 10'000);
}

TEST_CASE("spawn options default to an unbounded mailbox and restart supervision") {
  troupe::spawn_options o;
  CHECK(o.mailbox_capacity == 0);
  CHECK(o.supervision.on_failure == troupe::supervision::directive::restart);
}

} // namespace core_config_test
