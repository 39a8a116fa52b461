// What the memory store does beyond the conformance suite: its tables.
#include <troupe/persistence/memory_store.hpp>

#include <catch2/catch.hpp>

#include <asio/use_future.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_memory_store_test {

namespace tp = troupe::persistence;

TEST_CASE("the memory store gives one table per name and refuses tables that are not its own") {
  tp::memory_store s, other;
  auto a = s.open_table("a"), b = s.open_table("b");
  CHECK(a != b);
  CHECK(s.open_table("a") == a);
  CHECK_THROWS_AS(s.open_table(""), troupe::error);
  // The third table of another store: this one has two (a table is valid
  // only for the store that gave it).
  (void)other.open_table("x");
  (void)other.open_table("y");
  auto foreign = other.open_table("z");
  std::optional<std::string> v;
  CHECK(s.get(foreign, "k", v) == troupe::errc::invalid_argument);
  CHECK(s.get(tp::table{}, "k", v) == troupe::errc::invalid_argument);
  CHECK(s.write("p", {{1, "m", 1, "x"}}, {tp::table_write::put(foreign, "k", "v")}) == troupe::errc::invalid_argument);
  CHECK(s.highest_sequence_nr("p") == 0);
}

TEST_CASE("the memory store's async_write completes through a token") {
  tp::memory_store s;
  s.async_write("p", {{1, "m", 1, "x"}}, asio::use_future).get();
  CHECK(s.highest_sequence_nr("p") == 1);
}

} // namespace persistence_memory_store_test
