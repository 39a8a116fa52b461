// Serves the metrics of an actor system that did known work, for the
// scrape test (prometheus_scrape.py): prints the endpoint's URL, then
// waits until its standard input closes.
//
//   troupe_serve_metrics
//     3 actors of `counter_actor`, 1000 messages to them, one failure (a
//     restart), one stopped actor and a tell to it (a dead letter); and an
//     application histogram `app_wait_seconds` with 4 observations.

#include <troupe/actor_system.hpp>
#include <troupe/observe/endpoint.hpp>

#include <asio/use_future.hpp>

#include <iostream>
#include <stdexcept>
#include <string>

namespace {

struct add {
  int n;
};
struct total {};
struct fail {};

class counter_actor {
public:
  void handle(add m) { sum_ += m.n; }
  int handle(total) const { return sum_; }
  void handle(fail) { throw std::runtime_error("failed on purpose"); }

private:
  int sum_ = 0;
};

} // namespace

int main() {
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto a = sys.spawn<counter_actor>();
  auto b = sys.spawn<counter_actor>();
  auto c = sys.spawn<counter_actor>();
  for (int i = 0; i < 500; ++i) a.tell(add{1});
  for (int i = 0; i < 499; ++i) b.tell(add{1});
  b.tell(fail{});
  (void)a.ask(total{}, asio::use_future).get();
  (void)b.ask(total{}, asio::use_future).get();
  c.stop();
  while (sys.live_actors() != 2) std::this_thread::yield();
  c.tell(add{1});
  auto& h = sys.metric_registry().make_histogram("app_wait_seconds", "A histogram of the application's", {0.01, 0.1, 1},
                                                 {{"stage", "pick \"fast\""}});
  for (double v : {0.005, 0.05, 0.5, 5.0}) h.observe(v);
  // (the processed count is taken when the workers' runs of turns end)
  while (sys.metrics().value("troupe_messages_processed_total").value_or(0) < 1002) std::this_thread::yield();

  troupe::observe::endpoint ep(sys);
  std::cout << ep.url() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {}
  std::cout << "requests " << ep.requests() << std::endl;
}
