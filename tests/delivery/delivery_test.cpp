// The vocabulary of reliable delivery.
#include <troupe/delivery/delivery.hpp>

#include <boost/describe/class.hpp>
#include <catch2/catch.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_delivery_test {

namespace td = troupe::delivery;

namespace {
struct bin {
  std::string name;
};
BOOST_DESCRIBE_STRUCT(bin, (), (name))

struct picklist {
  static constexpr std::string_view manifest = "t.picklist";
  long order = 0;
};
BOOST_DESCRIBE_STRUCT(picklist, (), (order))
} // namespace

TEST_CASE("a confirmation's reply reads back as the receiver's reply type") {
  td::confirmed c{td::delivery_id("d-1"), "warehouse", R"({"name":"bin-4"})"};
  CHECK(c.reply_as<bin>().name == "bin-4");
  td::confirmed none{td::delivery_id("d-2"), "warehouse", std::nullopt};
  try {
    (void)none.reply_as<bin>();
    FAIL("a reply from nothing");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    CHECK(std::string(e.what()).find("d-2") != std::string::npos);
  }
}

TEST_CASE("a message type is an event type: JSON with a manifest") {
  STATIC_REQUIRE(td::message_type<picklist>);
  STATIC_REQUIRE_FALSE(td::message_type<bin>);
}

} // namespace delivery_delivery_test
