// Must NOT compile: a handler that answers later through reply_promise<R>
// for a message that names no reply type; the diagnostic says to declare
// `using reply_type = R` in the message.
#include <troupe/troupe.hpp>

#include <string>

struct fetch_without_reply_type {
  std::string key;
};

class cache {
public:
  void handle(fetch_without_reply_type, troupe::reply_promise<std::string> p) { p.deliver("v"); }
};

int main() {
  troupe::actor_system sys;
  auto c = sys.spawn<cache>();
  (void)c.ask(fetch_without_reply_type{}, asio::use_future);
}
