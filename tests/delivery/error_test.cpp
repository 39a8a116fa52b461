#include <troupe/delivery/error.hpp>

#include <catch2/catch.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_error_test {

namespace td = troupe::delivery;

TEST_CASE("delivery codes have their own category, readable messages and portable conditions") {
  std::error_code ec = td::errc::backlog_full;
  CHECK(ec.category() == td::error_category());
  CHECK(std::string(ec.category().name()) == "troupe.delivery");
  CHECK(ec.message() == "too many unconfirmed deliveries");
  CHECK(ec == std::errc::resource_unavailable_try_again);
  CHECK(std::error_code(td::errc::corrupt_record) == std::errc::bad_message);
  CHECK(std::error_code(td::errc::unknown_message).message() == "message type not accepted by the receiver");
}

} // namespace delivery_error_test
