// troupe_bench_postgres: persistent actors on the PostgreSQL engine against
// raw libpq writing the same events in the same group sizes, on the same
// server in the same run; and recovery from the server. Items are events.
//
// The server: TROUPE_BENCH_POSTGRES (a libpq connection string), e.g.
//   sh tests/postgres/server.sh start /tmp/troupe-bench-pg 25433
//   export TROUPE_BENCH_POSTGRES=postgresql://troupe@127.0.0.1:25433/postgres
//   ./build/bench/troupe_bench_postgres --benchmark_repetitions=5
//   (add --benchmark_enable_random_interleaving=true to interleave them)
#include <troupe/troupe.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/postgres/store.hpp>
// The engine's connection (libpq), which these reach into.
#include <troupe/postgres/detail/connection.hpp>

#include <asio/use_future.hpp>
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

// About 200 bytes of JSON per event, as troupe_bench_persistence.
const std::string filler(180, 'x');

struct blob_added {
  static constexpr std::string_view manifest = "bench.blob-added";
  long n = 0;
  std::string data;
};
void tag_invoke(json::value_from_tag, json::value& v, const blob_added& e) { v = {{"n", e.n}, {"data", e.data}}; }
blob_added tag_invoke(json::value_to_tag<blob_added>, const json::value& v) {
  return {json::value_to<long>(v.at("n")), json::value_to<std::string>(v.at("data"))};
}
struct blob_state {
  long count = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const blob_state& s) { v = {{"count", s.count}}; }
blob_state tag_invoke(json::value_to_tag<blob_state>, const json::value& v) {
  return {json::value_to<long>(v.at("count"))};
}
struct persist_n {
  long n;
};
struct count_query {};

class writer_actor : public tp::persistent_actor<writer_actor, blob_state> {
public:
  using events = tp::event_types<blob_added>;
  using persistent_actor::persistent_actor;
  static void apply(blob_state& s, const blob_added&) { ++s.count; }
  troupe::task<long> handle(persist_n p) {
    for (long i = 0; i < p.n; ++i) {
      blob_added e{i, filler}; // named: see docs/core.md on GCC 12 and temporaries in co_await
      co_await persist(std::move(e));
    }
    co_return state().count;
  }
  long handle(count_query) const { return state().count; }
};

using bench::check;

std::string conninfo() {
  const char* c = std::getenv("TROUPE_BENCH_POSTGRES");
  if (!c || !*c) {
    std::cerr << "troupe_bench_postgres: set TROUPE_BENCH_POSTGRES to a libpq connection string (see the top of "
                 "bench/postgres.cpp)\n";
    std::exit(2);
  }
  return c;
}

std::string fresh_schema() {
  std::random_device rd;
  return "bench_" + std::to_string((std::uint64_t{rd()} << 32) | rd());
}

tp::postgres_options options(const std::string& schema) {
  tp::postgres_options o;
  o.conninfo = conninfo();
  o.schema = schema;
  return o;
}

double measured_mean_group = 0; // from persist_1000actors_postgres, used by raw_libpq
constexpr int actors = 1000;
constexpr long per_actor = 20;

void persist_1000actors_postgres(benchmark::State& state) {
  double mean_group = 0, commits = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const auto schema = fresh_schema();
    {
      auto store = std::make_shared<tp::postgres_store>(options(schema));
      auto journal = std::make_shared<tp::journal_of<tp::postgres_store>>(store);
      troupe::actor_system sys(troupe::system_config{.threads = 2});
      std::vector<troupe::actor_ref<writer_actor>> writers;
      for (int a = 0; a < actors; ++a)
        writers.push_back(sys.spawn<writer_actor>(tp::persistence_id{"writer-" + std::to_string(a)}, journal));
      for (auto& w : writers) check(w.ask(count_query{}, asio::use_future).get() == 0, "fresh actor");
      const auto before = store->counts();
      state.ResumeTiming();
      std::vector<std::future<long>> done;
      for (auto& w : writers) done.push_back(w.ask(persist_n{per_actor}, asio::use_future));
      for (auto& d : done) check(d.get() == per_actor, "events persisted");
      state.PauseTiming();
      const auto after = store->counts();
      commits = double(after.commits - before.commits);
      mean_group = double(after.writes - before.writes) / commits;
      writers.clear();
      sys.shutdown();
    }
    tp::postgres_store::drop_schema(conninfo(), schema);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * actors * per_actor);
  state.counters["mean_group"] = mean_group;
  state.counters["commits"] = commits;
  measured_mean_group = mean_group;
}

/// Raw libpq: the same events (the same table shape as the engine's
/// journal) in transactions of the group size the engine reached, each a
/// BEGIN, one multi-row INSERT and a COMMIT, one after the other on one
/// connection with synchronous commits.
void raw_libpq(benchmark::State& state) {
  const long group = std::max<long>(1, std::lround(measured_mean_group > 0 ? measured_mean_group : 100));
  const long total = actors * per_actor;
  for (auto _ : state) {
    state.PauseTiming();
    const auto schema = fresh_schema();
    {
      tp::detail::pg::connection c(conninfo(), schema, true);
      auto r = c.exec("CREATE SCHEMA " + c.identifier(schema) +
                      "; CREATE TABLE raw_journal (persistence_id bytea NOT NULL, seq_nr bigint NOT NULL, "
                      "manifest bytea NOT NULL, version integer NOT NULL, payload bytea NOT NULL, "
                      "entries bytea NOT NULL, written_ms bigint NOT NULL, PRIMARY KEY (persistence_id, seq_nr))");
      check(r.ok(), "raw schema");
      const std::string payload = "{\"n\":1,\"data\":\"" + filler + "\"}";
      std::vector<std::string> statements;
      for (long first = 0; first < total; first += group) {
        const long n = std::min(group, total - first);
        std::string sql = "INSERT INTO raw_journal VALUES ";
        for (long i = 0; i < n; ++i) {
          const long e = first + i;
          if (i) sql += ',';
          sql += "('\\x" + std::to_string(1000 + e % actors) + "'::bytea," + std::to_string(e / actors) +
                 ",'bench.blob-added'::bytea,1,convert_to('" + payload + "','UTF8'),''::bytea," +
                 std::to_string(e) + ")";
        }
        statements.push_back(std::move(sql));
      }
      state.ResumeTiming();
      for (auto& sql : statements) {
        check(c.exec("BEGIN").ok(), "begin");
        auto ins = c.exec(sql);
        if (!ins.ok()) std::cerr << ins.message() << "\n";
        check(ins.ok(), "insert");
        check(c.exec("COMMIT").ok(), "commit");
      }
      state.PauseTiming();
      (void)c.exec("DROP SCHEMA " + c.identifier(schema) + " CASCADE");
    }
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * total);
  state.counters["group"] = double(group);
}

/// Recovery of one persistent actor with 100,000 events from the server.
constexpr long recovery_events = 100'000;
std::string recovery_schema;

void recovery_postgres(benchmark::State& state) {
  if (recovery_schema.empty()) {
    recovery_schema = fresh_schema();
    tp::postgres_store s(options(recovery_schema));
    const std::string payload = "{\"n\":1,\"data\":\"" + filler + "\"}";
    for (long first = 1; first <= recovery_events; first += 1000) {
      std::vector<tp::event_record> ev;
      for (long i = 0; i < 1000; ++i) ev.push_back({tp::sequence_nr(first + i), "bench.blob-added", 1, payload});
      check(!s.write("recovering", ev), "recovery events written");
    }
  }
  for (auto _ : state) {
    auto store = std::make_shared<tp::postgres_store>(options(recovery_schema));
    auto journal = std::make_shared<tp::journal_of<tp::postgres_store>>(store);
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    auto w = sys.spawn<writer_actor>(tp::persistence_id{"recovering"}, journal);
    check(w.ask(count_query{}, asio::use_future).get() == recovery_events, "recovered");
  }
  state.SetItemsProcessed(state.iterations() * recovery_events);
}

} // namespace

BENCHMARK(persist_1000actors_postgres)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(raw_libpq)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(recovery_postgres)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!recovery_schema.empty()) tp::postgres_store::drop_schema(conninfo(), recovery_schema);
  return 0;
}
