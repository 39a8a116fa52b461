// troupe_bench_hotpath: one hot path repeated a given number of times on one
// worker thread, for instruction counts under valgrind's callgrind
// (bench/callgrind_counts.py runs it at N and 2N and reports the
// difference per operation, so start-up and shutdown cancel out).
//
//   troupe_bench_hotpath tell|ask|spawn_stop COUNT
#include <troupe/troupe.hpp>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <string_view>

namespace {

struct add {
  long n;
};
struct total {};
class counter {
public:
  void handle(add m) { sum_ += m.n; }
  long handle(total) const { return sum_; }

private:
  long sum_ = 0;
};

struct run_tells {
  long n;
};
struct run_asks {
  long n;
  std::promise<long>* done;
};
struct run_spawns {
  long n;
  std::promise<long>* done;
};
struct hello {};
class child {
public:
  explicit child(troupe::context<child> ctx) : ctx_(ctx) {}
  void handle(hello) { ctx_.stop(); }

private:
  troupe::context<child> ctx_;
};

class driver {
public:
  driver(troupe::context<driver> ctx, troupe::actor_ref<counter> c) : ctx_(ctx), counter_(std::move(c)) {}
  // Tells from inside an actor (the usual case): envelope, push, hand-off.
  void handle(run_tells r) {
    for (long i = 0; i < r.n; ++i) counter_.tell(add{1});
  }
  // Ask round trips from inside an actor, one at a time, as continuations.
  void handle(run_asks r) {
    left_ = r.n;
    done_ = r.done;
    next_ask();
  }
  // Spawn an actor, tell it once, it stops.
  void handle(run_spawns r) {
    for (long i = 0; i < r.n; ++i) ctx_.system().spawn<child>().tell(hello{});
    r.done->set_value(r.n);
  }

private:
  void next_ask() {
    if (left_-- == 0) return done_->set_value(0);
    ctx_.ask(counter_, total{}).then([this](long) { next_ask(); }, [](const troupe::error&) {});
  }

  troupe::context<driver> ctx_;
  troupe::actor_ref<counter> counter_;
  long left_ = 0;
  std::promise<long>* done_ = nullptr;
};

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s tell|ask|spawn_stop COUNT\n", argv[0]);
    return 2;
  }
  const std::string_view op = argv[1];
  const long n = std::strtol(argv[2], nullptr, 10);
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  auto c = sys.spawn<counter>();
  auto d = sys.spawn<driver>(c);
  std::promise<long> done;
  if (op == "tell") {
    d.tell(run_tells{n});
    done.set_value(c.ask(total{}, asio::use_future).get()); // after every tell (one sender: in order)
  } else if (op == "ask") {
    d.tell(run_asks{n, &done});
  } else if (op == "spawn_stop") {
    d.tell(run_spawns{n, &done});
  } else {
    std::fprintf(stderr, "unknown operation %s\n", argv[1]);
    return 2;
  }
  done.get_future().get();
  sys.shutdown();
  return 0;
}
