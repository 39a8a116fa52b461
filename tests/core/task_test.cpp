#include <troupe/task.hpp>

#include <troupe/actor_system.hpp>

#include "../support.hpp"

#include <asio/post.hpp>

// In a namespace of its own: the tests build several files as one unit.
namespace core_task_test {

namespace {
struct twice {
  int n;
};
/// A coroutine handler written with troupe::task.
class doubler {
public:
  troupe::task<int> handle(twice m) {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable); // yields once
    co_return 2 * m.n;
  }
};
} // namespace

TEST_CASE("task is an Asio awaitable, so a handler returning it is a coroutine handler") {
  STATIC_REQUIRE(std::is_same_v<troupe::task<int>, asio::awaitable<int, asio::any_io_executor>>);
  STATIC_REQUIRE(std::is_same_v<troupe::task<>, asio::awaitable<void, asio::any_io_executor>>);
  troupe::actor_system sys;
  auto d = sys.spawn<doubler>();
  CHECK(test::get(d.ask(twice{21}, asio::use_future)) == 42);
}

} // namespace core_task_test
