#include <troupe/testing/faulty_transport.hpp>

#include <troupe/actor_system.hpp>

#include "../support.hpp"

#include <atomic>

// In a namespace of its own: the tests build several files as one unit.
namespace testing_faulty_transport_test {

using namespace std::chrono_literals;
namespace td = troupe::delivery;
namespace tt = troupe::testing;

namespace {
struct counter final : td::endpoint {
  std::atomic<int> messages{0}, acks{0};
  void receive(td::message) override { ++messages; }
  void acknowledge(td::acknowledgement) override { ++acks; }
};

struct fixture {
  troupe::actor_system sys{troupe::system_config{.threads = 1}};
  std::shared_ptr<td::local_transport> inner = std::make_shared<td::local_transport>();
  std::shared_ptr<counter> end = std::make_shared<counter>();
  std::shared_ptr<tt::faulty_transport> net;
  explicit fixture(std::uint64_t seed = 1)
      : net(std::make_shared<tt::faulty_transport>(inner, sys.get_executor(), seed)) {
    net->bind("r", end);
  }
  void send(int n) {
    for (int i = 0; i < n; ++i)
      net->send(td::message{"r", "s", td::delivery_id("d" + std::to_string(i)), "m", 1, "{}"});
  }
};
} // namespace

TEST_CASE("without faults everything arrives at once, exactly once") {
  fixture f;
  f.send(100);
  CHECK(f.end->messages == 100);
  CHECK(f.net->message_counts().sent == 100);
  CHECK(f.net->message_counts().dropped == 0);
}

TEST_CASE("drops lose messages, duplicates send them twice, delays hold them back, the counts say which") {
  fixture f;
  f.net->set_message_faults({.drop = 1});
  f.send(50);
  CHECK(f.end->messages == 0);
  CHECK(f.net->message_counts().dropped == 50);
  f.net->set_message_faults({.duplicate = 1, .max_delay = 5ms});
  f.send(50);
  CHECK(test::eventually([&] { return f.end->messages == 100; }));
  CHECK(f.net->message_counts().duplicated == 50);
  f.net->set_message_faults({.delay = 1, .max_delay = 20ms});
  f.send(10);
  CHECK(f.end->messages < 110); // held back
  CHECK(test::eventually([&] { return f.end->messages == 110; }));
  f.net->heal();
  f.send(1);
  CHECK(f.end->messages == 111);
}

TEST_CASE("acknowledgements have faults of their own") {
  fixture f;
  f.net->set_ack_faults({.drop = 1});
  f.net->send(td::acknowledgement{"r", "s", td::delivery_id("d"), std::nullopt});
  f.send(1);
  CHECK(f.end->acks == 0);
  CHECK(f.end->messages == 1);
  CHECK(f.net->ack_counts().dropped == 1);
}

TEST_CASE("one seed draws the same faults") {
  auto dropped = [](std::uint64_t seed) {
    fixture f(seed);
    f.net->set_message_faults({.drop = 0.5});
    f.send(200);
    return f.net->message_counts().dropped;
  };
  CHECK(dropped(7) == dropped(7));
  CHECK(dropped(7) > 50);
  CHECK(dropped(7) < 150);
}

TEST_CASE("probabilities outside [0, 1] and windows under 1 ms are refused") {
  fixture f;
  CHECK_THROWS_AS(f.net->set_message_faults({.drop = 1.5}), troupe::error);
  CHECK_THROWS_AS(f.net->set_ack_faults({.delay = -0.1}), troupe::error);
  CHECK_THROWS_AS(f.net->set_message_faults({.reorder_window = 0ms}), troupe::error);
  CHECK_THROWS_AS(tt::faulty_transport(nullptr, f.sys.get_executor(), 1), troupe::error);
}

} // namespace testing_faulty_transport_test
