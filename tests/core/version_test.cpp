#include <troupe/version.hpp>

#include <catch2/catch.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace core_version_test {

TEST_CASE("the version macros and the version string agree") {
  const std::string expected = std::to_string(TROUPE_VERSION_MAJOR) + "." + std::to_string(TROUPE_VERSION_MINOR) + "." +
                               std::to_string(TROUPE_VERSION_PATCH);
  CHECK(troupe::version_string == expected);
  CHECK(TROUPE_VERSION == TROUPE_VERSION_MAJOR * 10000 + TROUPE_VERSION_MINOR * 100 + TROUPE_VERSION_PATCH);
}

} // namespace core_version_test
