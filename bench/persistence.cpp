// troupe_bench_persistence: durable persistence against raw RocksDB, side by
// side. Each iteration runs a whole workload from a fresh temporary
// directory; items are events.
#include <troupe/troupe.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/rocksdb/store.hpp>
// The engine's key layout and RocksDB's API (the raw comparison writes the same keys).
#include <troupe/rocksdb/detail/engine.hpp>

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

using bench::temp_dir;

// About 200 bytes of JSON per event.
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

double measured_mean_batch = 0; // from persist_1000actors_sync, used by raw_batch_sync

void persist_actors(benchmark::State& state, int actors, long per_actor, tp::durability mode) {
  double mean_batch = 0;
  for (auto _ : state) {
    state.PauseTiming();
    temp_dir dir;
    tp::rocksdb_store store(dir.str(), tp::rocksdb_options{.durability = mode});
    auto journal = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    std::vector<troupe::actor_ref<writer_actor>> writers;
    for (int a = 0; a < actors; ++a)
      writers.push_back(sys.spawn<writer_actor>(tp::persistence_id{"writer-" + std::to_string(a)}, journal));
    for (auto& w : writers) check(w.ask(count_query{}, asio::use_future).get() == 0, "fresh actor"); // recovered
    state.ResumeTiming();
    std::vector<std::future<long>> done;
    for (auto& w : writers) done.push_back(w.ask(persist_n{per_actor}, asio::use_future));
    for (auto& d : done) check(d.get() == per_actor, "events persisted");
    state.PauseTiming();
    mean_batch = double(store.events_written()) / double(store.batches_written());
    writers.clear();
    sys.shutdown();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * actors * per_actor);
  state.counters["mean_batch"] = mean_batch;
  if (actors > 1 && mode == tp::durability::sync) measured_mean_batch = mean_batch;
}

void persist_1actor_sync(benchmark::State& state) { persist_actors(state, 1, 2000, tp::durability::sync); }
void persist_1000actors_sync(benchmark::State& state) { persist_actors(state, 1000, 200, tp::durability::sync); }
void persist_1000actors_async(benchmark::State& state) { persist_actors(state, 1000, 200, tp::durability::async); }

std::unique_ptr<rocksdb::DB> open_raw(const std::string& path) {
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(o, path, &db).ok()) throw std::runtime_error("cannot open raw RocksDB");
  return std::unique_ptr<rocksdb::DB>(db);
}

std::string raw_key(long i) {
  std::string k = "raw-writer";
  tp::detail::put_u64(k, static_cast<std::uint64_t>(i));
  return k;
}

/// Runs `write(db, sync_options)` once per iteration on a fresh raw
/// RocksDB (opening and closing it untimed); `items` per iteration.
template <class Write>
void raw_iterations(benchmark::State& state, long items, Write&& write) {
  for (auto _ : state) {
    state.PauseTiming();
    temp_dir dir;
    auto db = open_raw(dir.str());
    rocksdb::WriteOptions wo;
    wo.sync = true;
    state.ResumeTiming();
    write(*db, wo);
    state.PauseTiming();
    db.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * items);
}

void raw_put_sync(benchmark::State& state) {
  const long n = 2000;
  const std::string value(200, 'v');
  raw_iterations(state, n, [&](rocksdb::DB& db, const rocksdb::WriteOptions& wo) {
    for (long i = 0; i < n; ++i) check(db.Put(wo, raw_key(i), value).ok(), "raw put");
  });
}

/// Raw RocksDB writes of the persisted events: 1,000 IDs × 200 events of
/// 200 bytes, in synchronous `WriteBatch`es of the size troupe's group
/// commit measured. `same_keys`: the keys troupe writes (ID prefix +
/// big-endian sequence number, every ID advancing one event per round, as
/// the actors do); otherwise one ascending key range, RocksDB's cheapest
/// case (every insert appends to the memtable).
void raw_batches(benchmark::State& state, bool same_keys) {
  const long ids = 1000, per_id = 200, total = ids * per_id;
  const long batch = std::max(1L, std::lround(measured_mean_batch > 0 ? measured_mean_batch : 100.0));
  const std::string value(200, 'v');
  std::vector<std::string> prefixes;
  for (long a = 0; a < ids; ++a) prefixes.push_back(tp::detail::id_prefix("writer-" + std::to_string(a)));
  auto key = [&](long i) {
    if (!same_keys) return raw_key(i);
    return tp::detail::seq_key(prefixes[static_cast<std::size_t>(i % ids)], static_cast<tp::sequence_nr>(i / ids + 1));
  };
  raw_iterations(state, total, [&](rocksdb::DB& db, const rocksdb::WriteOptions& wo) {
    for (long i = 0; i < total;) {
      rocksdb::WriteBatch b;
      for (long j = 0; j < batch && i < total; ++j, ++i) b.Put(key(i), value);
      check(db.Write(wo, &b).ok(), "raw batch");
    }
  });
  state.counters["batch"] = double(batch);
}

void raw_batch_sync(benchmark::State& state) { raw_batches(state, true); }
void raw_batch_sync_ascending_keys(benchmark::State& state) { raw_batches(state, false); }

// One store for both recovery benchmarks: "recovering" has 1,000,000
// events; "snapshotted" has a snapshot at 1,000,000 and a 10,000-event tail
// (the events it covers deleted).
constexpr long recovery_events = 1'000'000;
constexpr long recovery_tail = 10'000;

struct recovery_fixture {
  recovery_fixture() {
    tp::rocksdb_store store(dir.str(), tp::rocksdb_options{.durability = tp::durability::none});
    std::string payload = json::serialize(json::value_from(blob_added{0, filler}));
    auto populate = [&](const std::string& pid, long n) {
      for (long first = 1; first <= n; first += 10'000) {
        std::vector<tp::event_record> chunk;
        for (long s = first; s < first + 10'000 && s <= n; ++s)
          chunk.push_back({tp::sequence_nr(s), "bench.blob-added", 1, payload});
        check(!store.write(pid, chunk), "populate");
      }
    };
    populate("recovering", recovery_events);
    populate("snapshotted", recovery_events + recovery_tail);
    check(!store.save_snapshot("snapshotted",
                               {recovery_events, 0, json::serialize(json::value_from(blob_state{recovery_events}))}),
          "snapshot");
    check(!store.delete_up_to("snapshotted", recovery_events), "delete covered events");
    store.db().CompactRange(rocksdb::CompactRangeOptions{}, store.journal_cf(), nullptr, nullptr);
  }
  temp_dir dir;
};

void recover(benchmark::State& state, const std::string& pid, long expected, long replayed) {
  static recovery_fixture fixture;
  auto store = std::make_shared<tp::rocksdb_store>(fixture.dir.str());
  auto journal = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  for (auto _ : state) {
    auto a = sys.spawn<writer_actor>(tp::persistence_id{pid}, journal);
    check(a.ask(count_query{}, asio::use_future).get() == expected, "recovered every event");
    state.PauseTiming();
    a.stop();
    a.when_stopped(asio::use_future).get();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * replayed);
}

void recovery(benchmark::State& state) { recover(state, "recovering", recovery_events, recovery_events); }
void recovery_snapshot(benchmark::State& state) {
  recover(state, "snapshotted", recovery_events + recovery_tail, recovery_tail);
}

} // namespace

BENCHMARK(persist_1actor_sync)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(raw_put_sync)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(persist_1000actors_sync)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(raw_batch_sync)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(raw_batch_sync_ascending_keys)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(persist_1000actors_async)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(recovery)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(recovery_snapshot)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

BENCHMARK_MAIN();
