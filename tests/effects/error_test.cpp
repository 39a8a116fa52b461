#include <troupe/effects/error.hpp>

#include <catch2/catch.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_error_test {

namespace te = troupe::effects;

TEST_CASE("effects codes have their own category, readable messages and portable conditions") {
  std::error_code ec = te::errc::corrupt_record;
  CHECK(ec.category() == te::error_category());
  CHECK(std::string(ec.category().name()) == "troupe.effects");
  CHECK(ec.message() == "unreadable outbox record");
  CHECK(ec == std::errc::bad_message);
  CHECK(std::error_code(te::errc::no_adapter).message() == "no adapter for the effect type");
  CHECK(std::error_code(te::errc::no_adapter) != std::errc::bad_message);
}

} // namespace effects_error_test
