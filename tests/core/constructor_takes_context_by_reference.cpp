// Must NOT compile: a constructor that takes its context by non-const
// reference; the diagnostic says to take troupe::context<T> by value.
#include <troupe/troupe.hpp>

struct ping {};

class by_ref_context {
public:
  explicit by_ref_context(troupe::context<by_ref_context>& ctx) : ctx_(ctx) {}
  void handle(ping) {}

private:
  troupe::context<by_ref_context> ctx_;
};

int main() {
  troupe::actor_system sys;
  (void)sys.spawn<by_ref_context>();
}
