#include <troupe/delivery/delivery_id.hpp>

#include <catch2/catch.hpp>

#include <set>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_delivery_id_test {

using troupe::delivery::delivery_id;

TEST_CASE("delivery IDs from business identity join their parts") {
  CHECK(delivery_id::of("order", 42, "picklist").str() == "order:42:picklist");
  CHECK(delivery_id::of(std::string("order"), std::string_view("42"), 7u, -1).str() == "order:42:7:-1");
  CHECK(delivery_id::of("order", 42, "picklist") == delivery_id::of("order", 42, "picklist"));
}

TEST_CASE("different parts never give the same delivery ID") {
  std::set<std::string> seen;
  for (auto id : {delivery_id::of("a:b", "c"), delivery_id::of("a", "b:c"), delivery_id::of("a", "b", "c"),
                  delivery_id::of("a\\", "b:c"), delivery_id::of("a\\:b", "c")})
    CHECK(seen.insert(id.str()).second);
  CHECK(delivery_id::of("a:b", "c").str() == "a\\:b:c");
}

TEST_CASE("derived delivery IDs depend only on the sender and its event") {
  CHECK(delivery_id::derived("order-42", 17).str() == "order-42#17");
  CHECK(delivery_id::derived("order-42", 17, 2).str() == "order-42#17.2");
  CHECK(delivery_id::derived("order-42", 17) == delivery_id::derived("order-42", 17));
  CHECK(delivery_id::derived("order-42", 17) != delivery_id::derived("order-42", 18));
}

TEST_CASE("empty and oversized delivery IDs are refused with invalid_argument") {
  auto code = [](auto&& make) {
    try {
      make();
    } catch (const troupe::error& e) {
      return e.code();
    }
    return std::error_code{};
  };
  CHECK(code([] { delivery_id(""); }) == troupe::errc::invalid_argument);
  CHECK(code([] { delivery_id(std::string(delivery_id::max_size + 1, 'x')); }) == troupe::errc::invalid_argument);
  CHECK(code([] { delivery_id::of("order", ""); }) == troupe::errc::invalid_argument);
  CHECK(code([] { delivery_id::derived("", 1); }) == troupe::errc::invalid_argument);
  CHECK_NOTHROW(delivery_id(std::string(delivery_id::max_size, 'x')));
}

} // namespace delivery_delivery_id_test
