#include <troupe/delivery/detail/dedup_marks.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace d = troupe::delivery::detail;

namespace {
d::dedup_marks::mark made(std::optional<std::string> reply, std::int64_t time_ms) {
  d::dedup_marks::mark m;
  m.reply = std::move(reply);
  m.time_ms = time_ms;
  return m;
}
} // namespace

TEST_CASE("dedup marks answer by ID and expire oldest first, at most a batch at a time") {
  d::dedup_marks m;
  m.add("a", made(std::string("ra"), 10));
  m.add("b", made(std::nullopt, 20));
  m.add("c", made(std::string("rc"), 30));
  REQUIRE(m.find("a"));
  CHECK(m.find("a")->reply == "ra");
  CHECK_FALSE(m.find("z"));
  CHECK(m.expire(25, 1) == std::vector<std::string>{"a"});
  CHECK(m.expire(25, 10) == std::vector<std::string>{"b"});
  CHECK(m.expire(25, 10).empty());
  CHECK(m.size() == 1);
  CHECK(m.find("c"));
}

TEST_CASE("marks loaded from the store, in any order, expire by their time") {
  d::dedup_marks m;
  std::vector<std::pair<std::string, d::dedup_marks::mark>> found;
  found.push_back({"late", made(std::nullopt, 300)});
  found.push_back({"early", made(std::nullopt, 100)});
  found.push_back({"middle", made(std::nullopt, 200)});
  m.load(std::move(found));
  CHECK(m.size() == 3);
  CHECK(m.expire(250, 10) == std::vector<std::string>{"early", "middle"});
}

TEST_CASE("a mark made again (a failing delivery processed) replaces the first and goes last in the order") {
  d::dedup_marks m;
  auto failing = made(std::nullopt, 10);
  failing.what = d::dedup_marks::mark::state::failing;
  m.add("x", failing);
  auto y = made(std::nullopt, 20);
  m.add("y", y);
  auto done = made(std::string("done"), 30);
  m.add("x", done);
  CHECK(m.size() == 2);
  REQUIRE(m.find("x"));
  CHECK(m.find("x")->answers());
  CHECK(m.find("x")->reply == "done");
  // The first mark's time no longer counts: x expires by its last.
  CHECK(m.expire(25, 10) == std::vector<std::string>{"y"});
  CHECK(m.find("x"));
  CHECK(m.expire(31, 10) == std::vector<std::string>{"x"});
  CHECK(m.size() == 0);
  auto again = made(std::nullopt, 40);
  m.add("x", again); // forgotten, then marked anew
  CHECK(m.expire(50, 10) == std::vector<std::string>{"x"});
}
