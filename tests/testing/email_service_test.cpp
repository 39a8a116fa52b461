#include <troupe/testing/email_service.hpp>

#include "../persistence/temp_dir.hpp"
#include "../support.hpp"
#include "simulators.hpp"

// In a namespace of its own: the tests build several files as one unit.
namespace testing_email_service_test {

namespace tt = troupe::testing;
namespace te = troupe::effects;

TEST_CASE("the mail service sends a message ID once, however often it is asked") {
  tt::email_service s;
  CHECK(s.send("m-1", "a@example.com") == tt::email_service::reply::sent);
  CHECK(s.send("m-1", "a@example.com") == tt::email_service::reply::sent);
  CHECK(s.deliveries("m-1") == 1);
  tt::email_service naive(test::options(false));
  naive.send("m-1", "a@example.com");
  naive.send("m-1", "a@example.com");
  CHECK(naive.deliveries("m-1") == 2);
}

TEST_CASE("a lost answer still sends, a 503 does not, the adapter resends safely") {
  tt::email_service lost(test::options(true, test::faults(0, 1)));
  CHECK(lost.send("m", "x") == tt::email_service::reply::no_response);
  CHECK(lost.deliveries("m") == 1);
  tt::email_service down(test::options(true, test::faults(1)));
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
    tt::email_service s(test::options(true, {}, dir.str(), false));
    s.send("m", "x");
  }
  tt::email_service s(test::options(true, {}, dir.str()));
  CHECK(s.deliveries("m") == 1);
}

} // namespace testing_email_service_test
