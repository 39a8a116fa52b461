#include <troupe/hooks.hpp>

#include <troupe/concepts.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <type_traits>

// In a namespace of its own: the tests build several files as one unit.
namespace core_hooks_test {

namespace {

struct own {};
struct layer {};
template <class...>
struct list {};

/// A library base: its messages and events through the hooks.
struct library_base {
  std::string troupe_handle(layer) { return "base"; }
  std::string troupe_handle(own) { return "base's own"; }
  static void troupe_apply(int& s, const layer&) { s += 100; }
  using troupe_events = list<layer>;
  using troupe_accepts = list<layer, own>;
};

/// A user's class: its own overloads would hide the base's.
struct user : library_base {
  std::string handle(own) { return "user"; }
  static void apply(int& s, const own&) { s += 1; }
  using accepts = list<own>;
};

struct plain {};

} // namespace

TEST_CASE("a message the class handles goes to handle, any other to the base's troupe_handle") {
  user u;
  CHECK(troupe::detail::invoke_handle(u, own{}) == "user");
  CHECK(troupe::detail::invoke_handle(u, layer{}) == "base");
  STATIC_REQUIRE(troupe::handles<user, own>);
  STATIC_REQUIRE(troupe::handles<user, layer>);
  STATIC_REQUIRE_FALSE(troupe::handles<user, int>);
}

TEST_CASE("an event the class applies goes to apply, any other to the base's troupe_apply") {
  int s = 0;
  troupe::detail::invoke_apply<user>(s, own{});
  troupe::detail::invoke_apply<user>(s, layer{});
  CHECK(s == 101);
}

TEST_CASE("the lists of a class and of its library base are found, or the default") {
  STATIC_REQUIRE(std::is_same_v<troupe::detail::troupe_events_or<user, list<>>::type, list<layer>>);
  STATIC_REQUIRE(std::is_same_v<troupe::detail::troupe_events_or<plain, list<>>::type, list<>>);
  STATIC_REQUIRE(std::is_same_v<troupe::detail::accepts_or<user, list<>>::type, list<own>>);
  STATIC_REQUIRE(std::is_same_v<troupe::detail::accepts_or<plain, list<int>>::type, list<int>>);
  STATIC_REQUIRE(std::is_same_v<troupe::detail::troupe_accepts_or<user, list<>>::type, list<layer, own>>);
  STATIC_REQUIRE(std::is_same_v<troupe::detail::troupe_accepts_or<plain, list<>>::type, list<>>);
}

} // namespace core_hooks_test
