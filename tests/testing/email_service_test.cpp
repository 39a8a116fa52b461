#include <troupe/testing/email_service.hpp>

#include "../persistence/temp_dir.hpp"

#include <catch2/catch.hpp>

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

TEST_CASE("the mail service sends a message ID once, however often it is asked") {
  tt::email_service s;
  CHECK(s.send("m-1", "a@example.com") == tt::email_service::reply::sent);
  CHECK(s.send("m-1", "a@example.com") == tt::email_service::reply::sent);
  CHECK(s.deliveries("m-1") == 1);
  tt::email_service naive(options(false));
  naive.send("m-1", "a@example.com");
  naive.send("m-1", "a@example.com");
  CHECK(naive.deliveries("m-1") == 2);
}

TEST_CASE("a lost answer still sends, a 503 does not, the adapter resends safely") {
  tt::email_service lost(options(true, faults(0, 1)));
  CHECK(lost.send("m", "x") == tt::email_service::reply::no_response);
  CHECK(lost.deliveries("m") == 1);
  tt::email_service down(options(true, faults(1)));
  CHECK(down.send("m", "x") == tt::email_service::reply::server_error);
  CHECK(down.deliveries("m") == 0);
  STATIC_REQUIRE(te::honours_idempotency_keys<tt::email_adapter>());
  auto s = std::make_shared<tt::email_service>();
  tt::email_adapter a(s);
  te::operation op{"m-9", "email", R"({"to":"b@example.com","subject":"hi"})", "order-9", 1};
  CHECK(a.execute(op).what == te::outcome::kind::completed);
  CHECK(a.execute(op).what == te::outcome::kind::completed);
  CHECK(s->deliveries("m-9") == 1);
}

TEST_CASE("a mail service with a directory keeps its ledger across a restart") {
  test::temp_dir dir;
  {
    tt::email_service s(options(true, {}, dir.str(), false));
    s.send("m", "x");
  }
  tt::email_service s(options(true, {}, dir.str()));
  CHECK(s.deliveries("m") == 1);
}
