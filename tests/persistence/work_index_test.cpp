// The work index's reasons: each byte belongs to one owner, which claims it;
// the persistence layer names none of them (the delivery layer claims its
// own when it opens its tables).
#include <troupe/persistence/work_index.hpp>

#include <troupe/persistence/memory_store.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_work_index_test {

namespace tp = troupe::persistence;

TEST_CASE("a work reason belongs to the first owner that claims it; another owner is refused, naming both") {
  // (The registry is the process's: each test takes bytes of its own.)
  CHECK(tp::work_index::reason_owner('Q').empty());
  tp::work_index::claim_reason('Q', "orders");
  CHECK(tp::work_index::reason_owner('Q') == "orders");
  CHECK_NOTHROW(tp::work_index::claim_reason('Q', "orders")); // the same owner again
  try {
    tp::work_index::claim_reason('Q', "invoices");
    FAIL("a second owner was let in");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    const std::string what = e.what();
    CHECK(what.find("'Q'") != std::string::npos);
    CHECK(what.find("orders") != std::string::npos);
    CHECK(what.find("invoices") != std::string::npos);
  }
  CHECK(tp::work_index::reason_owner('Q') == "orders"); // unchanged
}

TEST_CASE("a work reason needs an owner's name; a byte that is not printable is named by its value") {
  try {
    tp::work_index::claim_reason('R', "");
    FAIL("an empty owner was let in");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
  }
  CHECK(tp::work_index::reason_owner('R').empty());
  tp::work_index::claim_reason('\x01', "app");
  try {
    tp::work_index::claim_reason('\x01', "other");
    FAIL("a second owner was let in");
  } catch (const troupe::error& e) {
    CHECK(std::string(e.what()).find("byte 1") != std::string::npos);
  }
}

TEST_CASE("marks of several reasons for one ID are kept apart, and scanned by reason") {
  auto store = std::make_shared<tp::memory_store>();
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  tp::work_index::claim_reason('S', "test");
  tp::work_index::claim_reason('T', "test");
  const tp::work_index work(*j);
  std::promise<std::error_code> p;
  j->write({}, {}, {work.mark("a", 'S'), work.mark("a", 'T'), work.mark("b", 'T')},
           [&](std::error_code ec) { p.set_value(ec); });
  REQUIRE_FALSE(p.get_future().get());
  CHECK(work.marked(*j, "", 'S') == std::vector<std::string>{"a"});
  CHECK(work.marked(*j, "", 'T') == std::vector<std::string>{"a", "b"});
  CHECK(work.marked(*j, "") == std::vector<std::string>{"a", "b"});
}

} // namespace persistence_work_index_test
