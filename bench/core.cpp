// troupe_bench_core: first throughput figures of the core's hot paths.
// Each iteration runs a whole workload; items are messages.
#include <troupe/troupe.hpp>

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <benchmark/benchmark.h>

#include <stdexcept>

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

// One thread tells a counter N messages, then asks for the total.
void tell_throughput(benchmark::State& state) {
  const long n = state.range(0);
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  for (auto _ : state) {
    auto c = sys.spawn<counter>();
    for (long i = 0; i < n; ++i) c.tell(add{1});
    if (c.ask(total{}, asio::use_future).get() != n) throw std::logic_error("lost messages");
    c.stop();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(tell_throughput)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// A coroutine on a worker thread asks a counter N times, one after another.
void ask_roundtrip(benchmark::State& state) {
  const long n = state.range(0);
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto c = sys.spawn<counter>();
  for (auto _ : state) {
    auto done = asio::co_spawn(
        sys.get_executor(),
        [c, n]() -> asio::awaitable<long> {
          long last = 0;
          for (long i = 0; i < n; ++i) last = co_await c.ask(total{});
          co_return last;
        },
        asio::use_future);
    done.get();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(ask_roundtrip)->Arg(100'000)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
