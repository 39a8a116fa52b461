// The in-process transport and the retention rule transports keep.
#include <troupe/delivery/transport.hpp>

#include <catch2/catch.hpp>

#include <mutex>
#include <vector>

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
