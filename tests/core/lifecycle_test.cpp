#include <troupe/lifecycle.hpp>

#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace core_lifecycle_test {

TEST_CASE("exit reasons have readable names") {
  CHECK(troupe::to_string(troupe::exit_reason::normal) == "normal");
  CHECK(troupe::to_string(troupe::exit_reason::failure) == "failure");
  CHECK(troupe::to_string(troupe::exit_reason::system_shutdown) == "system shutdown");
}

TEST_CASE("a default down notification names no actor and a normal stop") {
  troupe::down d;
  CHECK(d.id == 0);
  CHECK(d.reason == troupe::exit_reason::normal);
  CHECK(d.what.empty());
}

} // namespace core_lifecycle_test
