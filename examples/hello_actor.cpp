// hello_actor: the smallest complete troupe program.
// (The front door: its comments are aligned by hand.)
// clang-format off
#include <troupe/troupe.hpp>          // the whole core: actor_system, actor_ref, ...

#include <iostream>
#include <string>

struct greet { std::string name; };   // a message is any movable type
struct greeted {};                    // an ask: the reply type is the handler's return type

class greeter {                       // an actor is a plain class: no base class
public:
  void handle(greet m) {              // a synchronous handler: the fast path
    std::cout << "hello, " << m.name << "!\n";
    ++count_;                         // state needs no lock: one message at a time
  }
  int handle(greeted) const {         // returns int, so ask(greeted{}) yields an int
    return count_;
  }
private:
  int count_ = 0;
};

int main() {
  troupe::actor_system sys;           // worker threads: one per core by default

  auto g = sys.spawn<greeter>();      // a typed reference: actor_ref<greeter>
  g.tell(greet{"world"});             // tell returns at once; messages from one
  g.tell(greet{"troupe"});            // sender are handled in the order sent
  // g.tell(42);                      // would not compile: greeter has no handle(int)

  // ask waits for the reply; use_future suits code outside coroutines,
  // use_awaitable (the default) suits coroutines: co_await g.ask(greeted{}).
  int n = g.ask(greeted{}, asio::use_future).get();
  std::cout << "greeted " << n << " times\n";

  g.stop();                           // stop after the current message
  return n == 2 ? 0 : 1;              // ~actor_system shuts everything down
}
// clang-format on
