#include <troupe/delivery/detail/dedup_marks.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_detail_dedup_marks_test {

namespace d = troupe::delivery::detail;

namespace {
d::dedup_marks::mark made(std::optional<std::string> reply, std::int64_t time_ms) {
  d::dedup_marks::mark m;
  m.reply = std::move(reply);
  m.time_ms = time_ms;
  return m;
}
} // namespace

TEST_CASE("dedup marks in memory answer by key, and keep the most recent up to their capacity") {
  d::dedup_marks m(3);
  m.add("a", made(std::string("ra"), 10));
  m.add("b", made(std::nullopt, 20));
  m.add("c", made(std::string("rc"), 30));
  REQUIRE(m.find("a"));
  CHECK(m.find("a")->reply == "ra");
  CHECK_FALSE(m.find("z"));
  m.add("d", made(std::nullopt, 40));
  CHECK(m.size() == 3);
  CHECK_FALSE(m.find("a")); // the least recent went
  CHECK(m.find("b"));
  CHECK(m.find("d"));
}

TEST_CASE("a mark made again (a failing delivery processed) replaces the first and is the most recent") {
  d::dedup_marks m(2);
  auto failing = made(std::nullopt, 10);
  failing.what = d::dedup_marks::mark::state::failing;
  m.add("x", failing);
  CHECK_FALSE(m.find("x")->answers());
  m.add("y", made(std::nullopt, 20));
  m.add("x", made(std::string("done"), 30));
  CHECK(m.size() == 2);
  REQUIRE(m.find("x"));
  CHECK(m.find("x")->answers());
  CHECK(m.find("x")->reply == "done");
  // y is now the least recent.
  m.add("z", made(std::nullopt, 40));
  CHECK_FALSE(m.find("y"));
  CHECK(m.find("x"));
  CHECK(m.find("z"));
}

TEST_CASE("dedup marks keep at least one") {
  d::dedup_marks m(0);
  CHECK(m.capacity() == 1);
  m.add("a", made(std::nullopt, 1));
  m.add("b", made(std::nullopt, 2));
  CHECK(m.size() == 1);
  CHECK(m.find("b"));
}

} // namespace delivery_detail_dedup_marks_test
