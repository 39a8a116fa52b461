// troupe_bench_delivery: reliable delivery between persistent actors against
// the raw RocksDB limit, side by side. Each iteration runs a whole workload
// from a fresh temporary directory; items are confirmed deliveries (or raw
// records).
#include <troupe/troupe.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/rocksdb/store.hpp>
// The engine's key layout and RocksDB's API (the raw comparison writes the same keys).
#include <troupe/rocksdb/detail/engine.hpp>

#include <asio/use_future.hpp>
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

using bench::temp_dir;

using bench::check;

// About 100 bytes of JSON per message and event.
const std::string filler(80, 'x');

struct order_line {
  static constexpr std::string_view manifest = "bench.order-line";
  long n = 0;
  std::string data;
};
void tag_invoke(json::value_from_tag, json::value& v, const order_line& e) { v = {{"n", e.n}, {"data", e.data}}; }
order_line tag_invoke(json::value_to_tag<order_line>, const json::value& v) {
  return {json::value_to<long>(v.at("n")), json::value_to<std::string>(v.at("data"))};
}

struct line_sent {
  static constexpr std::string_view manifest = "bench.line-sent";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const line_sent& e) { v = {{"n", e.n}}; }
line_sent tag_invoke(json::value_to_tag<line_sent>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct line_taken {
  static constexpr std::string_view manifest = "bench.line-taken";
  long n = 0;
  std::string data;
};
void tag_invoke(json::value_from_tag, json::value& v, const line_taken& e) { v = {{"n", e.n}, {"data", e.data}}; }
line_taken tag_invoke(json::value_to_tag<line_taken>, const json::value& v) {
  return {json::value_to<long>(v.at("n")), json::value_to<std::string>(v.at("data"))};
}

struct count_state {
  long count = 0;
};

struct send_lines {
  long n;
};

class line_sender : public td::reliable_actor<line_sender, count_state> {
public:
  using events = tp::event_types<line_sent>;
  line_sender(troupe::context<line_sender> ctx, troupe::persistence_id id, std::string to, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o), to_(std::move(to)) {}
  static void apply(count_state& s, const line_sent&) { ++s.count; }

  troupe::task<long> handle(send_lines m) {
    for (long i = 0; i < m.n; ++i) {
      const long n = state().count + 1;
      auto id = td::delivery_id::of(pid(), n);
      order_line msg{n, filler};
      line_sent e{n};
      co_await deliver(to_, id, msg, e);
    }
    co_return state().count;
  }

private:
  std::string to_;
};

class line_receiver : public td::reliable_actor<line_receiver, count_state> {
public:
  using events = tp::event_types<line_taken>;
  using accepts = td::accepts<order_line>;
  line_receiver(troupe::context<line_receiver> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(count_state& s, const line_taken&) { ++s.count; }

  troupe::task<> handle(td::delivery<order_line> d) {
    line_taken e{d.message.n, std::move(d.message.data)};
    co_await persist(e);
  }
};

using seconds = std::chrono::duration<double>;
double raw_records_per_second = 0; // measured by raw_records_sync, which runs first

/// Raw synchronous RocksDB records in large batches: the limit any layer on
/// RocksDB works under. 1,000 keys advancing together (as 1,000 actors'
/// journals do), 100-byte values, 1,000 records per synchronous write.
void raw_records_sync(benchmark::State& state) {
  const long ids = 1000, per_id = 200, total = ids * per_id, batch = 1000;
  const std::string value(100, 'v');
  std::vector<std::string> prefixes;
  for (long a = 0; a < ids; ++a) prefixes.push_back(tp::detail::id_prefix("sender-" + std::to_string(a)));
  double elapsed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    temp_dir dir;
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    check(rocksdb::DB::Open(o, dir.str(), &raw).ok(), "open raw RocksDB");
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < total;) {
      rocksdb::WriteBatch b;
      for (long j = 0; j < batch && i < total; ++j, ++i)
        b.Put(
            tp::detail::seq_key(prefixes[static_cast<std::size_t>(i % ids)], static_cast<tp::sequence_nr>(i / ids + 1)),
            value);
      check(db->Write(wo, &b).ok(), "raw batch");
    }
    elapsed += seconds(std::chrono::steady_clock::now() - start).count();
    state.PauseTiming();
    db.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * total);
  raw_records_per_second = double(state.iterations() * total) / elapsed;
}

/// 1,000 persistent senders each deliver 100 messages, one after another
/// (each `deliver` waits for its intent to be durable), to 1,000 persistent
/// receivers (one each); done when every delivery is confirmed.
void deliver_confirm(benchmark::State& state, tp::durability mode) {
  const int pairs = 1000;
  const long per_sender = 100;
  double records = 0, deliveries = 0, elapsed = 0;
  td::delivery_options o;
  o.redelivery.initial_backoff = std::chrono::seconds(5); // no redelivery on the normal path
  o.redelivery.max_backoff = std::chrono::seconds(5);
  for (auto _ : state) {
    state.PauseTiming();
    temp_dir dir;
    auto store = std::make_shared<tp::rocksdb_store>(dir.str(), tp::rocksdb_options{.durability = mode});
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
    td::set_transport(sys);
    std::vector<troupe::actor_ref<line_receiver>> receivers;
    std::vector<troupe::actor_ref<line_sender>> senders;
    for (int i = 0; i < pairs; ++i)
      receivers.push_back(sys.spawn<line_receiver>(troupe::persistence_id{"receiver-" + std::to_string(i)}, o));
    for (int i = 0; i < pairs; ++i)
      senders.push_back(sys.spawn<line_sender>(troupe::persistence_id{"sender-" + std::to_string(i)},
                                               "receiver-" + std::to_string(i), o));
    for (auto& r : receivers) r.ask(td::delivery_status{}, asio::use_future).get(); // recovered
    for (auto& s : senders) s.ask(td::delivery_status{}, asio::use_future).get();
    const auto records_before = store->records_written();
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::future<long>> done;
    for (auto& s : senders) done.push_back(s.ask(send_lines{per_sender}, asio::use_future));
    for (auto& d : done) check(d.get() == per_sender, "deliveries recorded");
    // Then until every delivery is confirmed (the senders are idle now, so
    // their status answers at once), and every confirmation's deletion is
    // durable.
    for (bool all = false; !all;) {
      all = true;
      for (auto& s : senders)
        if (s.ask(td::delivery_status{}, asio::use_future).get().unconfirmed != 0) {
          all = false;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          break;
        }
    }
    check(!store->flush_writes(), "confirmations written");
    elapsed += seconds(std::chrono::steady_clock::now() - start).count();
    state.PauseTiming();
    // A confirmation counts once its delete is durable.
    records += double(store->records_written() - records_before);
    deliveries += double(pairs * per_sender);
    long processed = 0;
    for (auto& r : receivers) processed += r.ask(td::delivery_status{}, asio::use_future).get().processed;
    check(processed == pairs * per_sender, "each delivery processed once");
    senders.clear();
    receivers.clear();
    sys.shutdown();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * pairs * per_sender);
  const double per_delivery = records / deliveries;
  state.counters["records_per_delivery"] = per_delivery;
  // DESIGN §6: deliveries per second against the raw limit, raw records per
  // second / records per delivery (target: at least 0.70).
  if (raw_records_per_second > 0)
    state.counters["of_raw_limit"] = (deliveries / elapsed) / (raw_records_per_second / per_delivery);
}

void deliver_confirm_sync(benchmark::State& state) { deliver_confirm(state, tp::durability::sync); }
void deliver_confirm_async(benchmark::State& state) { deliver_confirm(state, tp::durability::async); }

/// Admitting N reliable actors' policies to one transport (every reliable
/// actor's constructor does): items are admissions; run at N and 4N, the
/// rate should not fall with N.
void transport_admit(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<std::string> names;
  for (long i = 0; i < n; ++i) names.push_back("order-" + std::to_string(i));
  for (auto _ : state) {
    td::local_transport t;
    for (long i = 0; i < n; ++i)
      t.admit(names[static_cast<std::size_t>(i)], std::chrono::hours(1),
              i % 2 ? std::optional(std::chrono::milliseconds(std::chrono::hours(24))) : std::nullopt);
    benchmark::DoNotOptimize(t.knows(names.back()));
  }
  state.SetItemsProcessed(state.iterations() * n);
}

} // namespace

BENCHMARK(transport_admit)->Arg(20'000)->Arg(80'000)->Unit(benchmark::kMillisecond);
BENCHMARK(raw_records_sync)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(deliver_confirm_sync)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(deliver_confirm_async)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

BENCHMARK_MAIN();
