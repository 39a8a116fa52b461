#pragma once

// Shared by troupe_bench_savina and its CAF peer: the workload sizes, the
// worker-thread flag, resident memory, and a completion counter.

#include <benchmark/benchmark.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <malloc.h>
#include <unistd.h>

namespace savina {

// -- workload sizes (identical for both frameworks) ---------------------------

inline constexpr int pingpong_rounds = 1'000'000;
inline constexpr long counting_messages = 10'000'000;
inline constexpr int ring_actors = 100;
inline constexpr long ring_hops = 10'000'000;
inline constexpr int forkjoin_actors = 60;
inline constexpr long forkjoin_messages_each = 200'000;
inline constexpr int spawn_actors = 1'000'000;
inline constexpr int big_actors = 120;
inline constexpr int big_pings_each = 20'000;
inline constexpr int chameneos_creatures = 100;
inline constexpr int chameneos_meetings = 200'000;
inline constexpr int fjcreate_actors = 200'000;
inline constexpr int spawntree_depth = 16; // 2^17 - 1 actors
inline constexpr int pipeline_stages = 60;
inline constexpr long pipeline_messages = 200'000;
// bndbuffer: producers and consumers through a manager with a bounded buffer
inline constexpr int bb_producers = 40;
inline constexpr int bb_consumers = 40;
inline constexpr int bb_buffer = 50;
inline constexpr int bb_items_each = 5'000;
// logmap: series of the logistic map, each term computed by a rate computer
inline constexpr int logmap_series = 10;
inline constexpr int logmap_terms = 50'000;
inline constexpr double logmap_start_rate = 3.46;
inline constexpr double logmap_rate_step = 0.0025;
// trapezoid: an integral split among workers (bound by the workers' arithmetic)
inline constexpr int trapezoid_workers = 100;
inline constexpr long trapezoid_pieces = 10'000'000;
inline constexpr double trapezoid_left = 1.0;
inline constexpr double trapezoid_right = 5.0;
// banking: a teller's transfers between accounts, each acknowledged
inline constexpr int banking_accounts = 1'000;
inline constexpr int banking_transfers = 200'000;
inline constexpr long banking_initial = 1'000'000;
// radixsort: one stage per bit, each holding back the values with its bit set
inline constexpr int radix_values = 100'000;
inline constexpr int radix_bits = 50;

/// Worker threads: `--threads=N` (removed from argv before Google Benchmark
/// sees it), default 2.
inline std::size_t threads = 2;

/// `--metrics=off`: the systems keep no per-message counts
/// (`system_config::metrics`), to measure what they cost.
inline bool metrics = true;

inline void parse_threads(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0)
      threads = std::strtoul(argv[i] + 10, nullptr, 10);
    else if (std::strcmp(argv[i], "--metrics=off") == 0)
      metrics = false;
    else if (std::strcmp(argv[i], "--metrics=on") == 0)
      metrics = true;
    else
      argv[out++] = argv[i];
  }
  argc = out;
  if (threads == 0) throw std::invalid_argument("--threads must be at least 1");
}

/// Resident set size of this process, in bytes.
inline std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

/// Resident set size after returning freed heap memory to the system, so
/// that growth from here on is memory newly taken, not memory reused.
inline std::size_t resident_baseline() {
  malloc_trim(0);
  return resident_bytes();
}

/// Completes a future once `n` parties have arrived.
class join {
public:
  explicit join(long n) : remaining_(n) {}
  void arrive() {
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.set_value();
  }
  std::future<void> future() { return done_.get_future(); }

private:
  std::atomic<long> remaining_;
  std::promise<void> done_;
};

inline void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("benchmark result is wrong: ") + what);
}

/// xorshift32: the same pseudo-random peers for both frameworks.
inline std::uint32_t next_random(std::uint32_t& s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

/// logmap: the term after `x` at rate `r`.
inline double logistic(double r, double x) { return r * x * (1.0 - x); }

/// logmap: series `i`'s last term, computed in one thread.
inline double logmap_expected(int i) {
  double x = 0.5; // every series starts here
  const double r = logmap_start_rate + i * logmap_rate_step;
  for (int t = 0; t < logmap_terms; ++t) x = logistic(r, x);
  return x;
}

/// trapezoid: the integrand, and its integral in closed form.
inline double trapezoid_f(double x) { return (x + 1.0) / std::sqrt(x * x + 1.0); }
inline double trapezoid_exact() {
  auto F = [](double x) { return std::sqrt(x * x + 1.0) + std::asinh(x); };
  return F(trapezoid_right) - F(trapezoid_left);
}
/// The trapezoid rule over pieces [first, last) of `trapezoid_pieces`.
inline double trapezoid_area(long first, long last) {
  const double h = (trapezoid_right - trapezoid_left) / double(trapezoid_pieces);
  double area = 0;
  for (long i = first; i < last; ++i) {
    const double x = trapezoid_left + double(i) * h;
    area += (trapezoid_f(x) + trapezoid_f(x + h)) * h / 2;
  }
  return area;
}

/// The seed of a workload's pseudo-random numbers (of its actor `index`).
inline std::uint32_t seed_of(int index = 0) { return 2463534242u + static_cast<std::uint32_t>(index); }

/// bndbuffer: a producer's next item, and the sum of every producer's.
inline long bb_item(std::uint32_t& seed) { return long(next_random(seed) % 1000); }
inline long bb_expected_sum() {
  long sum = 0;
  for (int p = 0; p < bb_producers; ++p) {
    std::uint32_t seed = seed_of(p);
    for (int i = 0; i < bb_items_each; ++i) sum += bb_item(seed);
  }
  return sum;
}

/// banking: the teller's next transfer (never to the account it is from).
struct transfer {
  int from, to;
  long amount;
};
inline transfer next_transfer(std::uint32_t& seed) {
  const auto from = next_random(seed) % banking_accounts;
  auto to = next_random(seed) % (banking_accounts - 1);
  if (to >= from) ++to;
  return {int(from), int(to), long(next_random(seed) % 1000) + 1};
}

/// radixsort: the values the source sends, and the sum of them.
inline long radix_value(std::uint32_t& seed) {
  const std::uint64_t hi = next_random(seed), lo = next_random(seed);
  return static_cast<long>(((hi << 32) | lo) & ((std::uint64_t{1} << radix_bits) - 1));
}
inline long radix_expected_sum() {
  long sum = 0;
  std::uint32_t seed = seed_of();
  for (int i = 0; i < radix_values; ++i) sum += radix_value(seed);
  return sum;
}

enum class colour : int { blue = 0, red = 1, yellow = 2 };

inline colour complement(colour a, colour b) {
  if (a == b) return a;
  return static_cast<colour>(3 - static_cast<int>(a) - static_cast<int>(b));
}

using workload = void (*)(benchmark::State&);

/// Registers the workloads in their fixed order (same names and settings
/// for both frameworks) and runs Google Benchmark.
inline int run(int argc, char** argv, std::initializer_list<workload> workloads) {
  static const char* const names[] = {"pingpong", "counting",  "threadring", "forkjoin", "spawn",
                                      "big",      "chameneos", "fjcreate",   "spawntree", "pipeline",
                                      "bndbuffer", "logmap",    "trapezoid",  "banking",   "radixsort"};
  parse_threads(argc, argv);
  std::size_t i = 0;
  for (auto w : workloads) {
    auto* b = benchmark::RegisterBenchmark(names[i++], w)->Unit(benchmark::kMillisecond)->UseRealTime();
    if (std::string_view(names[i - 1]) == "spawn") b->Iterations(3);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

} // namespace savina
