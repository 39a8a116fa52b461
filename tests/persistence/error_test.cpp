#include <troupe/persistence/error.hpp>

#include <catch2/catch.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_error_test {

namespace tp = troupe::persistence;

TEST_CASE("persistence codes have their own category, readable messages and portable conditions") {
  std::error_code ec = tp::errc::storage_failure;
  CHECK(ec.category() == tp::error_category());
  CHECK(std::string(ec.category().name()) == "troupe.persistence");
  CHECK(ec.message() == "storage failure");
  CHECK(ec == tp::errc::storage_failure);
  CHECK(ec != troupe::errc::invalid_argument);
  CHECK(ec == std::errc::io_error);
  CHECK(std::error_code(tp::errc::store_locked) == std::errc::device_or_resource_busy);
  CHECK(std::error_code(tp::errc::corrupt_record) == std::errc::bad_message);
  CHECK(std::error_code(tp::errc::event_too_large) == std::errc::message_size);
  CHECK(std::error_code(tp::errc::sequence_mismatch) != std::errc::io_error);
  CHECK(tp::error_category().message(999).find("999") != std::string::npos);
}

TEST_CASE("a persistence code is not mistaken for a core code of the same value") {
  std::error_code p = tp::errc::storage_failure;   // 1
  std::error_code c = troupe::errc::actor_stopped; // 1
  CHECK(p.value() == c.value());
  CHECK(p != c);
}

} // namespace persistence_error_test
