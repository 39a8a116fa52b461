// Must not compile: an actor class that lacks a handler of the protocol,
// made into a reference of that protocol where it is spawned (the test
// checks that the diagnostic names implements and the class).
#include <troupe/actor_system.hpp>
#include <troupe/protocol.hpp>

struct add {
  int n;
};
struct total {};
using counter_protocol = troupe::protocol<void(add), int(total)>;

class adder_without_total {
public:
  void handle(add) {}
};

void f(troupe::actor_system& sys) { troupe::typed_ref<counter_protocol> c = sys.spawn<adder_without_total>(); }
