#include <troupe/testing/payment_gateway.hpp>

#include "../persistence/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

namespace tt = troupe::testing;
namespace te = troupe::effects;

namespace {
/// Options built field by field (GCC 12 warns about designated initializers
/// that leave out members with default initializers).
tt::simulator_options options(bool honours_keys, tt::gateway_faults faults = {}, std::string path = {},
                              bool sync = true) {
  tt::simulator_options o;
  o.honours_keys = honours_keys;
  o.faults = faults;
  o.path = std::move(path);
  o.sync = sync;
  return o;
}
tt::gateway_faults faults(double fail_before, double lose_response = 0, double decline = 0) {
  tt::gateway_faults f;
  f.fail_before = fail_before;
  f.lose_response = lose_response;
  f.decline = decline;
  return f;
}
} // namespace

namespace {
template <class T>
T run(troupe::task<T> t) {
  asio::io_context io;
  auto f = asio::co_spawn(io, std::move(t), asio::use_future);
  io.run();
  return f.get();
}
} // namespace

TEST_CASE("a gateway that honours keys charges once per key, one that does not charges every time") {
  tt::payment_gateway dedup;
  CHECK(dedup.charge("k", 10).what == tt::payment_gateway::reply::charged);
  auto again = dedup.charge("k", 10);
  CHECK(again.what == tt::payment_gateway::reply::charged);
  CHECK(dedup.charges("k") == 1);
  tt::payment_gateway naive(options(false));
  naive.charge("k", 10);
  naive.charge("k", 10);
  CHECK(naive.charges("k") == 2);
  CHECK(naive.requests() == 2);
}

TEST_CASE("a query tells charged, declined and never seen apart") {
  tt::payment_gateway g(options(true, faults(0, 0, 1)));
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
  tt::payment_gateway lost(options(true, faults(0, 1)));
  CHECK(lost.charge("k", 1).what == tt::payment_gateway::reply::no_response);
  CHECK(lost.charges("k") == 1);
  tt::payment_gateway down(options(true, faults(1)));
  CHECK(down.charge("k", 1).what == tt::payment_gateway::reply::server_error);
  CHECK(down.charges("k") == 0);
}

TEST_CASE("the adapter turns answers into outcomes: a decline is a permanent failure, a lost answer unknown") {
  auto g = std::make_shared<tt::payment_gateway>(options(true, faults(0, 1)));
  tt::payment_adapter a(g);
  te::operation op{"op-1", "payment", R"({"amount":12})", "order-1", 1};
  CHECK(run(a.execute(op)).what == te::outcome::kind::unknown);
  CHECK(run(a.query("op-1")).what == te::query_result::kind::completed);
  g->set_faults(faults(0, 0, 1));
  op.id = "op-2";
  auto declined = run(a.execute(op));
  CHECK(declined.what == te::outcome::kind::failed);
  CHECK(declined.permanent);
}

TEST_CASE("a gateway with a directory keeps its ledger across a restart") {
  test::temp_dir dir;
  {
    tt::payment_gateway g(options(true, {}, dir.str(), false));
    g.charge("k", 3);
  }
  tt::payment_gateway g(options(true, {}, dir.str()));
  CHECK(g.charges("k") == 1);
  CHECK(g.all_charges() == std::map<std::string, std::uint64_t>{{"k", 1}});
}
