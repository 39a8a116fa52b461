#include <troupe/troupe.hpp>

struct add {
  int n;
};
struct total {};

class counter {
public:
  void handle(add m) { sum_ += m.n; }
  int handle(total) const { return sum_; }

private:
  int sum_ = 0;
};

int main() {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  auto c = sys.spawn<counter>();
  c.tell(add{40});
  c.tell(add{2});
  return c.ask(total{}, asio::use_future).get() == 42 ? 0 : 1;
}
