#include <troupe/delivery/detail/dedup_marks.hpp>

#include <catch2/catch.hpp>

namespace d = troupe::delivery::detail;

TEST_CASE("dedup marks answer by ID and expire oldest first, at most a batch at a time") {
  d::dedup_marks m;
  m.add("a", {std::string("ra"), 10});
  m.add("b", {std::nullopt, 20});
  m.add("c", {std::string("rc"), 30});
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
  found.push_back({"late", {std::nullopt, 300}});
  found.push_back({"early", {std::nullopt, 100}});
  found.push_back({"middle", {std::nullopt, 200}});
  m.load(std::move(found));
  CHECK(m.size() == 3);
  CHECK(m.expire(250, 10) == std::vector<std::string>{"early", "middle"});
}
