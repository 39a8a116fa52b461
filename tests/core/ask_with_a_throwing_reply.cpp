// Must NOT compile: a reply whose move may throw is refused with a
// diagnostic that says why.
#include <troupe/troupe.hpp>

#include <stdexcept>

struct fragile {
  fragile() = default;
  fragile(const fragile&) { throw std::runtime_error("no copies"); }
};
struct query {};

class holder {
public:
  fragile handle(query) const { return {}; }
};

int main() {
  troupe::actor_system sys;
  auto h = sys.spawn<holder>();
  (void)h.ask(query{}, asio::use_future);
}
