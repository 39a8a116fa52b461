#include <troupe/testing/payment_gateway.hpp>

#include "../persistence/temp_dir.hpp"
#include "../support.hpp"
#include "simulators.hpp"

// In a namespace of its own: the tests build several files as one unit.
namespace testing_payment_gateway_test {

namespace tt = troupe::testing;
namespace te = troupe::effects;

TEST_CASE("a gateway that honours keys charges once per key, one that does not charges every time") {
  tt::payment_gateway dedup;
  CHECK(dedup.charge("k", 10).what == tt::payment_gateway::reply::charged);
  auto again = dedup.charge("k", 10);
  CHECK(again.what == tt::payment_gateway::reply::charged);
  CHECK(dedup.charges("k") == 1);
  tt::payment_gateway naive(test::options(false));
  naive.charge("k", 10);
  naive.charge("k", 10);
  CHECK(naive.charges("k") == 2);
  CHECK(naive.requests() == 2);
}

TEST_CASE("a query tells charged, declined and never seen apart") {
  tt::payment_gateway g(test::options(true, test::faults(0, 0, 1)));
  CHECK(g.charge("declined", 5).what == tt::payment_gateway::reply::declined);
  g.set_faults({});
  auto paid = g.charge("paid", 5);
  CHECK(g.query("paid").what == tt::payment_gateway::found::charged);
  CHECK(g.query("paid").payment_id == paid.payment_id);
  CHECK(g.query("declined").what == tt::payment_gateway::found::declined);
  CHECK(g.query("never").what == tt::payment_gateway::found::not_found);
  CHECK(g.charges("declined") == 0);
}

TEST_CASE("a lost response still charges, a 503 does not") {
  tt::payment_gateway lost(test::options(true, test::faults(0, 1)));
  CHECK(lost.charge("k", 1).what == tt::payment_gateway::reply::no_response);
  CHECK(lost.charges("k") == 1);
  tt::payment_gateway down(test::options(true, test::faults(1)));
  CHECK(down.charge("k", 1).what == tt::payment_gateway::reply::server_error);
  CHECK(down.charges("k") == 0);
}

TEST_CASE("the adapter turns answers into outcomes: a decline is a permanent failure, a lost answer unknown") {
  auto g = std::make_shared<tt::payment_gateway>(test::options(true, test::faults(0, 1)));
  tt::payment_adapter a(g);
  te::operation op{"op-1", "payment", R"({"amount":12})", "order-1", 1};
  CHECK(test::run_here(a.execute(op)).what == te::outcome::kind::unknown);
  CHECK(test::run_here(a.query("op-1")).what == te::query_result::kind::completed);
  g->set_faults(test::faults(0, 0, 1));
  op.id = "op-2";
  auto declined = test::run_here(a.execute(op));
  CHECK(declined.what == te::outcome::kind::failed);
  CHECK(declined.permanent);
}

TEST_CASE("a gateway with a directory keeps its ledger across a restart") {
  test::temp_dir dir;
  {
    tt::payment_gateway g(test::options(true, {}, dir.str(), false));
    g.charge("k", 3);
  }
  tt::payment_gateway g(test::options(true, {}, dir.str()));
  CHECK(g.charges("k") == 1);
  CHECK(g.all_charges() == std::map<std::string, std::uint64_t>{{"k", 1}});
}

TEST_CASE("a gateway without its write-ahead log writes none, and keeps its ledger across a clean restart") {
  test::temp_dir dir;
  const auto log_bytes = [&] {
    std::uintmax_t n = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.path))
      if (f.path().extension() == ".log") n += f.file_size();
    return n;
  };
  {
    auto o = test::options(true, {}, dir.str(), false);
    o.write_ahead_log = false;
    tt::payment_gateway g(o);
    for (int i = 0; i < 100; ++i) g.charge("k" + std::to_string(i), 3);
    CHECK(g.charges("k7") == 1);
    CHECK(log_bytes() == 0);
  }
  tt::payment_gateway g(test::options(true, {}, dir.str()));
  CHECK(g.charges("k7") == 1);
  CHECK(g.all_charges().size() == 100);
}

} // namespace testing_payment_gateway_test
