#include <troupe/persistence/event.hpp>

#include <boost/describe/class.hpp>
#include <catch2/catch.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_event_test {

namespace tp = troupe::persistence;

namespace {

struct item_added_v1 {
  static constexpr std::string_view manifest = "cart.item-added";
  std::string sku;
};
BOOST_DESCRIBE_STRUCT(item_added_v1, (), (sku))

struct item_added {
  static constexpr std::string_view manifest = "cart.item-added";
  static constexpr std::uint32_t version = 2;
  using previous = item_added_v1;
  static item_added upcast(item_added_v1 old) { return {std::move(old.sku), 1}; }
  std::string sku;
  int quantity = 0;
};
BOOST_DESCRIBE_STRUCT(item_added, (), (sku, quantity))

struct no_manifest {
  int x = 0;
};
BOOST_DESCRIBE_STRUCT(no_manifest, (), (x))

struct not_json {
  static constexpr std::string_view manifest = "x";
};

} // namespace

TEST_CASE("an event has a manifest and converts to JSON, its version defaults to 1") {
  STATIC_REQUIRE(tp::event<item_added_v1>);
  STATIC_REQUIRE(tp::event<item_added>);
  STATIC_REQUIRE_FALSE(tp::event<no_manifest>);
  STATIC_REQUIRE_FALSE(tp::event<not_json>);
  STATIC_REQUIRE(tp::version_of<item_added_v1>() == 1);
  STATIC_REQUIRE(tp::version_of<item_added>() == 2);
}

TEST_CASE("an event that declares its predecessor and an upcast is upcastable") {
  STATIC_REQUIRE(tp::upcastable<item_added>);
  STATIC_REQUIRE_FALSE(tp::upcastable<item_added_v1>);
  auto e = item_added::upcast(item_added_v1{"pear"});
  CHECK(e.sku == "pear");
  CHECK(e.quantity == 1);
}

} // namespace persistence_event_test
