#include <troupe/concepts.hpp>

#include <troupe/task.hpp>

#include <catch2/catch.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace core_concepts_test {

namespace {
struct ping {};
struct name_query {};
struct other {};
struct fetch {};

struct sample {
  void handle(ping) {}
  std::string handle(const name_query&) const { return "sample"; }
  troupe::task<int> handle(fetch) { co_return 1; }
};
} // namespace

TEST_CASE("handles accepts exactly the messages an actor has handlers for") {
  STATIC_REQUIRE(troupe::handles<sample, ping>);
  STATIC_REQUIRE(troupe::handles<sample, name_query>);
  STATIC_REQUIRE(troupe::handles<sample, fetch>);
  STATIC_REQUIRE_FALSE(troupe::handles<sample, other>);
  STATIC_REQUIRE_FALSE(troupe::handles<sample, int>);
}

TEST_CASE("the reply type is deduced from synchronous and coroutine handlers") {
  STATIC_REQUIRE(std::is_same_v<troupe::reply_type_t<sample, ping>, void>);
  STATIC_REQUIRE(std::is_same_v<troupe::reply_type_t<sample, name_query>, std::string>);
  STATIC_REQUIRE(std::is_same_v<troupe::reply_type_t<sample, fetch>, int>);
  STATIC_REQUIRE(troupe::coroutine_handler<sample, fetch>);
  STATIC_REQUIRE_FALSE(troupe::coroutine_handler<sample, ping>);
}

} // namespace core_concepts_test
