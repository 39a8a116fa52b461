#pragma once

// Shared by troupe_bench_savina and its CAF peer: the workload sizes, the
// worker-thread flag, resident memory, and a completion counter.

#include <benchmark/benchmark.h>

#include <atomic>
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

/// Worker threads: `--threads=N` (removed from argv before Google Benchmark
/// sees it), default 2.
inline std::size_t threads = 2;

inline void parse_threads(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0)
      threads = std::strtoul(argv[i] + 10, nullptr, 10);
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
                                      "big",      "chameneos", "fjcreate",   "spawntree", "pipeline"};
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
