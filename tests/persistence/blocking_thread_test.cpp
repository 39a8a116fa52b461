#include <troupe/persistence/blocking_thread.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_blocking_thread_test {

TEST_CASE("a blocking thread runs what is posted in order, on one thread, and its destruction waits for it") {
  std::vector<int> order;
  std::set<std::thread::id> threads;
  std::mutex m;
  {
    troupe::persistence::blocking_thread t("troupe-test");
    for (int i = 0; i < 100; ++i)
      t.post([&, i] {
        std::lock_guard g(m);
        order.push_back(i);
        threads.insert(std::this_thread::get_id());
      });
  }
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[i] == i);
  CHECK(threads.size() == 1);
  CHECK_FALSE(threads.count(std::this_thread::get_id()));
}

} // namespace persistence_blocking_thread_test
