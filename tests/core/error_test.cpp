#include <troupe/error.hpp>

#include <catch2/catch.hpp>

#include <stdexcept>

// In a namespace of its own: the tests build several files as one unit.
namespace core_error_test {

TEST_CASE("troupe error codes have their own category and readable messages") {
  std::error_code ec = troupe::errc::timeout;
  CHECK(ec.category() == troupe::error_category());
  CHECK(std::string(ec.category().name()) == "troupe");
  CHECK(ec.message() == "timed out");
  CHECK(ec == troupe::errc::timeout);
  CHECK(ec != troupe::errc::actor_stopped);
  CHECK(std::error_code(troupe::errc::actor_stopped).message() == "actor stopped");
  CHECK(std::error_code(troupe::errc::mailbox_full).message() == "mailbox full");
  CHECK(troupe::error_category().message(999).find("999") != std::string::npos);
}

TEST_CASE("a troupe error carries its code and a message naming what went wrong") {
  troupe::error e(troupe::errc::handler_failed, "handler of shop threw: boom");
  CHECK(e.code() == troupe::errc::handler_failed);
  CHECK(std::string(e.what()).find("boom") != std::string::npos);
}

TEST_CASE("error_code_of extracts the code from troupe errors and classifies other exceptions") {
  CHECK(!troupe::error_code_of(nullptr));
  CHECK(troupe::error_code_of(std::make_exception_ptr(troupe::error(troupe::errc::timeout))) == troupe::errc::timeout);
  CHECK(troupe::error_code_of(std::make_exception_ptr(std::runtime_error("x"))) == troupe::errc::handler_failed);
}

TEST_CASE("core codes with a portable meaning compare equal to the std::errc condition") {
  CHECK(std::error_code(troupe::errc::timeout) == std::errc::timed_out);
  CHECK(std::error_code(troupe::errc::invalid_argument) == std::errc::invalid_argument);
  CHECK(std::error_code(troupe::errc::mailbox_full) == std::errc::resource_unavailable_try_again);
  CHECK(std::error_code(troupe::errc::system_shutdown) == std::errc::operation_canceled);
  CHECK(std::error_code(troupe::errc::actor_stopped) != std::errc::timed_out);
  CHECK(std::error_code(troupe::errc::handler_failed).default_error_condition().category() == troupe::error_category());
}

TEST_CASE("a troupe error can carry a code of any category") {
  troupe::error e(std::make_error_code(std::errc::io_error), "disk");
  CHECK(e.code() == std::errc::io_error);
  CHECK(std::string(e.what()).find("disk") != std::string::npos);
}

} // namespace core_error_test
