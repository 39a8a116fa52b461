// troupe_bench_model: the same workloads written with handlers and written
// as coroutines over the mailbox (context::receive), and asks made from
// inside an actor with a coroutine handler against ctx.ask(...).then. Each
// iteration runs the whole workload; items are messages.
//
//   troupe_bench_model --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <troupe/troupe.hpp>

#include <asio/use_future.hpp>
#include <benchmark/benchmark.h>

#include <future>
#include <memory>
#include <stdexcept>
#include <variant>

namespace {

constexpr int rounds = 200'000;        // ping-pong round trips
constexpr long counted = 2'000'000;    // counting: messages told

void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

troupe::system_config config() { return troupe::system_config{.threads = 2}; }

// -- ping-pong with tells: handlers -------------------------------------------------

class h_pong;
struct h_ping {
  troupe::actor_ref<h_pong> from;
  int n;
};
class h_ping_actor;
struct h_ball {
  int n;
};
class h_pong {
public:
  explicit h_pong(troupe::actor_ref<h_ping_actor> to) : to_(std::move(to)) {}
  void handle(h_ping p);

private:
  troupe::actor_ref<h_ping_actor> to_;
};
struct h_start {
  troupe::actor_ref<h_pong> pong;
  std::shared_ptr<std::promise<long>> done;
};
class h_ping_actor {
public:
  void handle(h_start s) {
    pong_ = s.pong;
    done_ = s.done;
    pong_.tell(h_ping{pong_, 0});
  }
  void handle(h_ball b) {
    sum_ += b.n;
    if (b.n + 1 == rounds) return done_->set_value(sum_);
    pong_.tell(h_ping{pong_, b.n + 1});
  }

private:
  troupe::actor_ref<h_pong> pong_;
  std::shared_ptr<std::promise<long>> done_;
  long sum_ = 0;
};
void h_pong::handle(h_ping p) { to_.tell(h_ball{p.n}); }

void pingpong_handlers(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    auto ping = sys.spawn<h_ping_actor>();
    auto pong = sys.spawn<h_pong>(ping);
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    ping.tell(h_start{pong, done});
    check(result.get() == long{rounds} * (rounds - 1) / 2, "pingpong sum");
    ping.stop();
    pong.stop();
  }
  state.SetItemsProcessed(state.iterations() * 2L * rounds);
}
BENCHMARK(pingpong_handlers)->Unit(benchmark::kMillisecond)->UseRealTime();

// -- ping-pong with tells: both actors one coroutine over their mailbox ------------

class r_ping_actor;
struct r_ball {
  int n;
};
struct r_quit {};
class r_pong {
public:
  using receives = troupe::messages<r_ball, r_quit>;
  r_pong(troupe::context<r_pong> ctx, troupe::actor_ref<r_ping_actor> to) : ctx_(ctx), to_(std::move(to)) {}
  troupe::task<void> on_start();

private:
  troupe::context<r_pong> ctx_;
  troupe::actor_ref<r_ping_actor> to_;
};
class r_ping_actor {
public:
  using receives = troupe::messages<r_ball, troupe::actor_ref<r_pong>>;
  r_ping_actor(troupe::context<r_ping_actor> ctx, std::shared_ptr<std::promise<long>> done)
      : ctx_(ctx), done_(std::move(done)) {}
  troupe::task<void> on_start() {
    auto pong = co_await ctx_.receive<troupe::actor_ref<r_pong>>();
    long sum = 0;
    for (int i = 0; i < rounds; ++i) {
      pong.tell(r_ball{i});
      sum += (co_await ctx_.receive<r_ball>()).n;
    }
    pong.tell(r_quit{});
    done_->set_value(sum);
  }

private:
  troupe::context<r_ping_actor> ctx_;
  std::shared_ptr<std::promise<long>> done_;
};
troupe::task<void> r_pong::on_start() {
  for (;;) {
    auto m = co_await ctx_.receive<r_ball, r_quit>();
    if (std::holds_alternative<r_quit>(m)) co_return;
    to_.tell(std::get<r_ball>(m));
  }
}

void pingpong_receive(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    auto ping = sys.spawn<r_ping_actor>(done);
    auto pong = sys.spawn<r_pong>(ping);
    ping.tell(pong);
    check(result.get() == long{rounds} * (rounds - 1) / 2, "pingpong sum");
    ping.stop();
    pong.stop();
  }
  state.SetItemsProcessed(state.iterations() * 2L * rounds);
}
BENCHMARK(pingpong_receive)->Unit(benchmark::kMillisecond)->UseRealTime();

// -- counting: a counter with handlers, and one that receives --------------------

struct add {
  long n;
};
struct total {};
class h_counter {
public:
  void handle(add a) { sum_ += a.n; }
  long handle(total) const { return sum_; }

private:
  long sum_ = 0;
};

struct report {
  std::shared_ptr<std::promise<long>> to;
};
class r_counter {
public:
  using receives = troupe::messages<add, report>;
  explicit r_counter(troupe::context<r_counter> ctx) : ctx_(ctx) {}
  troupe::task<void> on_start() {
    long sum = 0;
    for (;;) {
      auto m = co_await ctx_.receive<add, report>();
      if (auto* a = std::get_if<add>(&m)) {
        sum += a->n;
      } else {
        std::get<report>(m).to->set_value(sum);
        sum = 0;
      }
    }
  }

private:
  troupe::context<r_counter> ctx_;
};

void counting_handlers(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    auto c = sys.spawn<h_counter>();
    for (long i = 0; i < counted; ++i) c.tell(add{1});
    check(c.ask(total{}, asio::use_future).get() == counted, "counting total");
    c.stop();
  }
  state.SetItemsProcessed(state.iterations() * counted);
}
BENCHMARK(counting_handlers)->Unit(benchmark::kMillisecond)->UseRealTime();

void counting_receive(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    auto c = sys.spawn<r_counter>();
    for (long i = 0; i < counted; ++i) c.tell(add{1});
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    c.tell(report{done});
    check(result.get() == counted, "counting total");
    c.stop();
  }
  state.SetItemsProcessed(state.iterations() * counted);
}
BENCHMARK(counting_receive)->Unit(benchmark::kMillisecond)->UseRealTime();

// -- asks from inside an actor: a coroutine handler against ask(...).then ---------

struct echo {
  int n;
};
class echoer {
public:
  int handle(echo e) const { return e.n; }
};
struct go {
  std::shared_ptr<std::promise<long>> done;
};
class awaiting_asker {
public:
  explicit awaiting_asker(troupe::actor_ref<echoer> to) : to_(std::move(to)) {}
  troupe::task<void> handle(go g) {
    long sum = 0;
    for (int i = 0; i < rounds; ++i) sum += co_await to_.ask(echo{i});
    g.done->set_value(sum);
  }

private:
  troupe::actor_ref<echoer> to_;
};
class continuing_asker : public troupe::with_context<continuing_asker> {
public:
  explicit continuing_asker(troupe::actor_ref<echoer> to) : to_(std::move(to)) {}
  void handle(go g) {
    done_ = g.done;
    next(0);
  }

private:
  void next(int i) {
    ctx().ask(to_, echo{i}).then([this, i](int r) {
      sum_ += r;
      if (i + 1 == rounds) return done_->set_value(sum_);
      next(i + 1);
    });
  }
  troupe::actor_ref<echoer> to_;
  std::shared_ptr<std::promise<long>> done_;
  long sum_ = 0;
};

template <class Asker>
void asks(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    auto e = sys.spawn<echoer>();
    auto a = sys.spawn<Asker>(e);
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    a.tell(go{done});
    check(result.get() == long{rounds} * (rounds - 1) / 2, "ask sum");
    a.stop();
    e.stop();
  }
  state.SetItemsProcessed(state.iterations() * 2L * rounds);
}
BENCHMARK_TEMPLATE(asks, awaiting_asker)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(asks, continuing_asker)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
