// ask_and_supervise: coroutine handlers that ask other actors, timeouts,
// and a supervisor restarting an actor that throws.
// (The front door: its comments are aligned by hand.)
// clang-format off
#include <troupe/troupe.hpp>

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <iostream>
#include <stdexcept>
#include <string>

using namespace std::chrono_literals;

// A flaky price service: every third lookup throws. Its state (the call
// count) is lost on restart, as a fresh instance is constructed.
struct price_of { std::string item; };

class price_service {
public:
  double handle(const price_of& q) {
    if (++calls_ % 3 == 0) throw std::runtime_error("price feed hiccup for " + q.item);
    return q.item == "apple" ? 0.5 : 2.0;
  }
private:
  int calls_ = 0;
};

// A shop asks the price service from a coroutine handler. While it waits, the
// shop handles no other message (one message at a time, also across co_await).
struct quote { std::string item; int quantity; };

class shop {
public:
  explicit shop(troupe::actor_ref<price_service> prices) : prices_(std::move(prices)) {}

  troupe::task<double> handle(quote q) {
    // as_tuple turns failures into values instead of exceptions. (The message
    // is a named variable: GCC 12 mishandles class-type temporaries with
    // non-trivial members, like this std::string, inside co_await
    // expressions; see docs/core.md.)
    price_of lookup{q.item};
    auto [error, price] = co_await prices_.ask(std::move(lookup), 500ms,
                                               asio::experimental::as_tuple(asio::use_awaitable));
    if (error) {
      std::cout << "  price lookup failed: " << troupe::error_code_of(error).message() << '\n';
      co_return -1.0;
    }
    // Wait a little, as a real handler would for I/O: still serial.
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    co_return price * q.quantity;
  }
private:
  troupe::actor_ref<price_service> prices_;
};

int main() {
  troupe::actor_system sys;

  // Restart on failure, at most 5 times within 10 s, backing off from 5 ms.
  troupe::spawn_options options;
  options.supervision = troupe::supervision::restart(5, 10s, 5ms, 100ms);
  auto prices = sys.spawn<price_service>(options);
  auto s = sys.spawn<shop>(prices);

  for (int i = 1; i <= 5; ++i) {
    double total = s.ask(quote{"apple", i}, asio::use_future).get();
    std::cout << "quote " << i << ": " << total << '\n';
  }

  // Asks from a coroutine outside any actor, with an explicit timeout.
  // This is the price service's third call since its restart: it throws, and
  // the ask fails with errc::handler_failed carrying the exception's message.
  auto fut = asio::co_spawn(sys.get_executor(), [&]() -> asio::awaitable<double> {
    price_of pear{"pear"};
    try {
      co_return co_await prices.ask(std::move(pear), 1s);
    } catch (const troupe::error& e) {
      std::cout << "pear failed (" << e.code().message() << "): " << e.what() << '\n';
      co_return -1.0;
    }
  }, asio::use_future);
  double pear_price = fut.get();
  std::cout << "pear: " << pear_price << '\n';

  // Watch the shop stop.
  s.stop();
  troupe::down d = s.when_stopped(asio::use_future).get();
  std::cout << "shop stopped (" << troupe::to_string(d.reason) << ")\n";
  std::cout << "dead letters: " << sys.dead_letters() << '\n';
}
// clang-format on
