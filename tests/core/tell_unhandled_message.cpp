// Must NOT compile: the diagnostic must name the actor and the message type.
#include <troupe/troupe.hpp>

struct add {
  int n;
};
struct not_a_counter_message {};

class counter {
public:
  void handle(add m) { sum_ += m.n; }

private:
  int sum_ = 0;
};

int main() {
  troupe::actor_system sys;
  auto c = sys.spawn<counter>();
  c.tell(not_a_counter_message{});
}
