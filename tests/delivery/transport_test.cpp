// The in-process transport and the retention rule transports keep.
#include <troupe/delivery/transport.hpp>

#include <catch2/catch.hpp>

#include <mutex>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_transport_test {

using namespace std::chrono_literals;
namespace td = troupe::delivery;

namespace {
struct recorder final : td::endpoint {
  std::mutex m;
  std::vector<std::string> got;
  void receive(td::message msg) override {
    std::lock_guard g(m);
    got.push_back("message " + msg.id.str() + " from " + msg.from);
  }
  void acknowledge(td::acknowledgement a) override {
    std::lock_guard g(m);
    got.push_back("ack " + a.id.str() + " from " + a.from);
  }
};

td::message to(std::string name, std::string id) {
  return {std::move(name), "s", td::delivery_id(std::move(id)), "m", 1, "{}"};
}
} // namespace

TEST_CASE("a local transport hands what is sent to the endpoint bound to the name, and drops the rest") {
  td::local_transport t;
  auto a = std::make_shared<recorder>(), b = std::make_shared<recorder>();
  t.bind("a", a);
  t.send(to("a", "1"));
  t.send(to("nobody", "2"));
  t.send(td::acknowledgement{"a", "r", td::delivery_id("3"), std::nullopt});
  CHECK(a->got == std::vector<std::string>{"message 1 from s", "ack 3 from r"});
  t.bind("a", b);         // rebinding replaces
  t.unbind("a", a.get()); // not the bound one: no effect
  t.send(to("a", "4"));
  CHECK(b->got == std::vector<std::string>{"message 4 from s"});
  t.unbind("a", b.get());
  t.send(to("a", "5"));
  CHECK(b->got.size() == 1);
}

TEST_CASE("a transport refuses a receiver whose retention is shorter than a sender's horizon, either way round") {
  td::local_transport t;
  t.admit("sender", 10s, std::nullopt);
  CHECK_THROWS_AS(t.admit("receiver", 1s, 5s), troupe::error);
  t.admit("receiver", 1s, 10s);
  try {
    t.admit("late-sender", 60s, std::nullopt);
    FAIL("admitted a sender the receiver would forget");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    CHECK(std::string(e.what()).find("receiver") != std::string::npos);
    CHECK(std::string(e.what()).find("late-sender") != std::string::npos);
  }
  t.admit("patient-receiver", 1s, std::chrono::milliseconds::max());
}

TEST_CASE("a name admitted again replaces its admission: only the others' policies are checked against it") {
  td::local_transport t;
  t.admit("receiver", 1s, 10s);
  t.admit("receiver", 1s, 20s); // restarted with a longer retention: its 10 s is gone
  t.admit("sender", 15s, std::nullopt);
  CHECK_THROWS_AS(t.admit("receiver", 1s, 12s), troupe::error); // the sender's 15 s
  CHECK(t.retention_of("receiver") == 20s);                       // a refused admission records nothing
  t.admit("sender", 5s, std::nullopt);                            // restarted with a shorter horizon
  t.admit("receiver", 1s, 12s);
  CHECK(t.retention_of("receiver") == 12s);
  t.admit("receiver", 1s, std::nullopt); // no longer receives
  CHECK_FALSE(t.retention_of("receiver"));
  t.admit("long-sender", 1h, std::nullopt); // nothing keeps marks for less now
  // Two with the same policy, each checked against the other, not itself.
  t.admit("twin-a", 1h, 1h);
  t.admit("twin-b", 1h, 1h);
  CHECK_THROWS_AS(t.admit("short", 1s, 30min), troupe::error);
  CHECK(t.knows("twin-a"));
  CHECK_FALSE(t.knows("short"));
}

TEST_CASE("a name's policy is its own, else its longest admitted prefix's, also after prefixes are admitted again") {
  td::local_transport t;
  t.admit_entities("order-", 1s, 10s);
  t.admit_entities("order-vip-", 1s, 20s);
  t.admit("order-vip-7", 1s, 30s);
  CHECK(t.retention_of("order-1") == 10s);
  CHECK(t.retention_of("order-vip-1") == 20s);
  CHECK(t.retention_of("order-vip-7") == 30s);
  CHECK(t.retention_of("order-") == 10s); // a name that is the prefix itself
  CHECK_FALSE(t.retention_of("order"));
  CHECK_FALSE(t.retention_of("warehouse-1"));
  t.forget("order-vip-7");
  CHECK(t.retention_of("order-vip-7") == 20s);
  // Admitted again (as after a restart): still found, and only once.
  t.admit_entities("order-vip-", 1s, 25s);
  t.admit_entities("order-", 1s, 12s);
  CHECK(t.retention_of("order-vip-7") == 25s);
  CHECK(t.retention_of("order-2") == 12s);
  CHECK(t.admissions() == 2);
  // A prefix of another length, longer than any name asked for.
  t.admit_entities("a-very-long-prefix-", 1s, 15s);
  CHECK(t.retention_of("order-3") == 12s);
  CHECK(t.knows("a-very-long-prefix-x"));
}

} // namespace delivery_transport_test
