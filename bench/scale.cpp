// troupe_bench_scale: how costs grow with the work (docs/performance.md).
//
//   troupe_bench_scale activate --actors N [--slice S]
//       activates N reliable actors as entities (each recovers from the
//       store and starts its delivery layer, then is passivated once idle),
//       reported per slice of S: activations per second and resident memory.
//   troupe_bench_scale recovery --events N
//       one persistent actor with N events (written by a child process):
//       its recovery's events per second, the growth of resident memory
//       during it, and its progress reports.
//
// Each prints a JSON line per slice (or report) and a summary as its last
// line. Run from a Release build; compare N and 4N.
#include <troupe/persistence/json.hpp>
#include <troupe/actor_system.hpp>
#include <troupe/delivery/entities.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/rocksdb/store.hpp>

#include "bench_common.hpp"

#include <asio/use_future.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace tp = troupe::persistence;
namespace td = troupe::delivery;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

/// Resident memory now and at its peak, in MiB.
std::pair<double, double> rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  double now = 0, peak = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) now = std::stod(line.substr(6)) / 1024;
    if (line.starts_with("VmHWM:")) peak = std::stod(line.substr(6)) / 1024;
  }
  return {now, peak};
}

long option(int argc, char** argv, const std::string& name, long fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (argv[i] == name) return std::stol(argv[i + 1]);
  return fallback;
}

// -- activate ------------------------------------------------------------------------

struct touch {};
struct nothing {};

/// A reliable actor that receives, with nothing in its journal.
class account : public td::reliable_actor<account, nothing> {
public:
  using events = tp::event_types<>;
  account(troupe::context<account> ctx, troupe::persistence_id id) : reliable_actor(ctx, std::move(id)) {}
  int handle(touch) { return 1; }
};

int activate(long actors, long slice) {
  bench::temp_dir dir;
  troupe::actor_system sys;
  auto store = std::make_shared<tp::rocksdb_store>(dir.str(), tp::rocksdb_options{.durability = tp::durability::none});
  tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
  td::set_transport(sys);
  td::delivery_options o;
  auto accounts = td::entities<account>(sys, "account-", o,
                                        troupe::entity_options{.idle_timeout = 200ms, .max_live = 20'000});
  std::vector<double> rates;
  const auto t0 = clock_type::now();
  for (long from = 0; from < actors; from += slice) {
    const auto s0 = clock_type::now();
    const long upto = std::min(actors, from + slice);
    std::vector<std::future<int>> replies;
    replies.reserve(static_cast<std::size_t>(upto - from));
    // At most 10,000 activations asked at once.
    for (long n = from; n < upto; ++n) {
      replies.push_back(accounts.get("account-" + std::to_string(n)).ask(touch{}, asio::use_future));
      if (replies.size() == 10'000) {
        for (auto& r : replies) bench::check(r.get() == 1, "touch");
        replies.clear();
      }
    }
    for (auto& r : replies) bench::check(r.get() == 1, "touch");
    const double secs = seconds_since(s0);
    rates.push_back(static_cast<double>(upto - from) / secs);
    const auto [now, peak] = rss_mib();
    const auto st = accounts.stats();
    boost::json::object line{{"activated", upto},
                             {"seconds", secs},
                             {"activations_per_second", rates.back()},
                             {"live", static_cast<long>(st.live)},
                             {"passivations", static_cast<long>(st.passivations)},
                             {"transport_admissions", static_cast<long>(sys.extension<td::transport>()->admissions())},
                             {"rss_mib", now},
                             {"peak_rss_mib", peak}};
    std::cout << troupe::persistence::to_plain_json(line) << std::endl;
  }
  boost::json::object summary{{"actors", actors},
                              {"seconds", seconds_since(t0)},
                              {"first_slice_per_second", rates.front()},
                              {"last_slice_per_second", rates.back()},
                              {"last_to_first", rates.back() / rates.front()},
                              {"peak_rss_mib", rss_mib().second}};
  std::cout << troupe::persistence::to_plain_json(summary) << std::endl;
  return 0;
}

// -- recovery ------------------------------------------------------------------------

struct added {
  static constexpr std::string_view manifest = "bench.added";
  long n = 0;
};
void tag_invoke(boost::json::value_from_tag, boost::json::value& v, const added& e) { v = {{"n", e.n}}; }
added tag_invoke(boost::json::value_to_tag<added>, const boost::json::value& v) {
  return {boost::json::value_to<long>(v.at("n"))};
}
struct total {};

class ledger : public tp::persistent_actor<ledger, long> {
public:
  using events = tp::event_types<added>;
  using persistent_actor::persistent_actor;
  static void apply(long& s, const added& e) { s += e.n; }
  long handle(total) const { return state(); }
};

int recovery(long events) {
  bench::temp_dir dir;
  // Written by a child: this process's memory starts without it.
  const pid_t child = fork();
  if (child == 0) {
    {
      // Closed before the child exits: what it wrote is in the store.
      tp::rocksdb_store store(dir.str(), tp::rocksdb_options{.durability = tp::durability::async});
      std::vector<tp::event_record> batch;
      for (long s = 1; s <= events; ++s) {
        batch.push_back({static_cast<tp::sequence_nr>(s), "bench.added", 1, "{\"n\":1}"});
        if (batch.size() == 10'000 || s == events) {
          if (store.write("ledger", batch)) _exit(1);
          batch.clear();
        }
      }
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  bench::check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writing the journal");
  troupe::actor_system sys;
  auto store = std::make_shared<tp::rocksdb_store>(dir.str(), tp::rocksdb_options{.durability = tp::durability::none});
  tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
  const auto before = rss_mib().first;
  tp::persistence_options o;
  o.recovery_progress_every = static_cast<std::uint64_t>(std::max(1L, events / 5));
  o.on_recovery_progress = [](const tp::recovery_progress& p) {
    boost::json::object line{{"events_read", p.events_read},
                             {"highest", p.highest},
                             {"seconds", std::chrono::duration<double>(p.elapsed).count()},
                             {"done", p.done},
                             {"rss_mib", rss_mib().first}};
    std::cout << troupe::persistence::to_plain_json(line) << std::endl;
  };
  const auto t0 = clock_type::now();
  auto l = sys.spawn<ledger>(troupe::persistence_id{"ledger"}, o);
  bench::check(l.ask(total{}, asio::use_future).get() == events, "recovered total");
  const double secs = seconds_since(t0);
  const auto peak = rss_mib().second;
  boost::json::object summary{{"events", events},
                              {"seconds", secs},
                              {"events_per_second", static_cast<double>(events) / secs},
                              {"rss_before_mib", before},
                              {"peak_rss_mib", peak},
                              {"rss_growth_mib", peak - before}};
  std::cout << troupe::persistence::to_plain_json(summary) << std::endl;
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "activate") return activate(option(argc, argv, "--actors", 1'000'000), option(argc, argv, "--slice", 100'000));
    if (mode == "recovery") return recovery(option(argc, argv, "--events", 5'000'000));
  } catch (const std::exception& ex) {
    std::cerr << "troupe_bench_scale: " << ex.what() << std::endl;
    return 1;
  }
  std::cerr << "usage: troupe_bench_scale activate [--actors N] [--slice S]\n"
               "       troupe_bench_scale recovery [--events N]\n";
  return 2;
}
