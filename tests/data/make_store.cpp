// Writes a small store through the public API, for the compatibility test
// (`persistence/a store written by format 1 opens and reads unchanged`):
//
//   troupe_make_test_store <directory>
//
// tests/data/store-format-1/ was written by this program at on-disk format
// 1. It holds, in every column family of that format:
//   journal    counter-1: 5 events (increments of 1..5), trimmed-1: 4 events
//              with 1..2 deleted (a watermark in meta); shop-1, warehouse-1,
//              owner-1: their own events
//   snapshots  counter-1 at seq 3 (value 6)
//   deliveries shop-1 -> warehouse-offline: 2 pending (picklist:1, picklist:2);
//              shop-1 -> nobody: 1 dead letter (lost:1)
//   dedup      warehouse-1: the mark of shop-1's picklist:9 (reply "bin-9")
//   outbox     owner-1's effect order:1:payment, pending (no dispatcher ran)
#include "store_actors.hpp"

#include <troupe/rocksdb/store.hpp>
// The engine's own layout and RocksDB's API, which these tests reach into.
#include <troupe/rocksdb/detail/engine.hpp>

#include <asio/use_future.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

using namespace store_data;
namespace fs = std::filesystem;

namespace {

template <class Ready>
void wait_until(Ready ready, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "make_store: timed out waiting for " << what << '\n';
      std::exit(1);
    }
    std::this_thread::yield();
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: troupe_make_test_store <directory>\n";
    return 2;
  }
  const fs::path dir = argv[1];
  if (fs::exists(dir)) {
    std::cerr << "make_store: " << dir << " exists; give a new directory\n";
    return 2;
  }
  {
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    auto store = std::make_shared<tp::rocksdb_store>(dir.string());
    tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
    td::set_transport(sys);

    // Events and a snapshot at 3.
    tp::persistence_options snapshots;
    snapshots.snapshots.every = 3;
    snapshots.snapshots.keep = 1;
    auto c = sys.spawn<counter>(troupe::persistence_id{"counter-1"}, snapshots);
    for (long i = 1; i <= 5; ++i) c.ask(increment{i}, asio::use_future).get();

    // Events with the first two deleted.
    auto t = sys.spawn<counter>(troupe::persistence_id{"trimmed-1"}, tp::persistence_options{});
    for (long i = 1; i <= 4; ++i) t.ask(increment{10}, asio::use_future).get();
    if (auto ec = store->delete_up_to("trimmed-1", 2)) {
      std::cerr << "make_store: delete_up_to: " << ec.message() << '\n';
      return 1;
    }
    // What is written so far goes to table files; the rest stays in the WAL.
    store->flush_writes();
    if (!store->db()
             .Flush(rocksdb::FlushOptions{}, {store->journal_cf(), store->snapshots_cf(), store->meta_cf()})
             .ok()) {
      std::cerr << "make_store: flush failed\n";
      return 1;
    }

    // A receiver's dedup mark: warehouse-1 processes shop-1's picklist:9.
    td::delivery_options quick;
    quick.redelivery.initial_backoff = std::chrono::milliseconds(10);
    quick.redelivery.max_backoff = std::chrono::milliseconds(10);
    quick.redelivery.max_attempts = 1;
    quick.dedup.retention = std::chrono::milliseconds::max();
    auto w = sys.spawn<warehouse>(troupe::persistence_id{"warehouse-1"}, quick);
    auto s = sys.spawn<shop>(troupe::persistence_id{"shop-1"}, quick);
    s.ask(place{"warehouse-1", "picklist:9", 9}, asio::use_future).get();
    wait_until([&] { return w.ask(td::delivery_status{}, asio::use_future).get().processed == 1; }, "the dedup mark");
    wait_until([&] { return s.ask(td::delivery_status{}, asio::use_future).get().unconfirmed == 0; },
               "the confirmation");

    // A dead letter: nobody answers, one attempt only.
    s.ask(place{"nobody", "lost:1", 1}, asio::use_future).get();
    wait_until([&] { return s.ask(td::delivery_status{}, asio::use_future).get().dead_lettered == 1; },
               "the dead letter");

    // Two pending deliveries to a receiver that is not running; the shop
    // stops before it gives them up.
    td::delivery_options patient;
    patient.redelivery.initial_backoff = std::chrono::hours(1);
    patient.redelivery.max_backoff = std::chrono::hours(1);
    patient.dedup.retention = std::chrono::milliseconds::max();
    s.stop();
    s.when_stopped(asio::use_future).get();
    auto s2 = sys.spawn<shop>(troupe::persistence_id{"shop-1"}, patient);
    s2.ask(place{"warehouse-offline", "picklist:1", 1}, asio::use_future).get();
    s2.ask(place{"warehouse-offline", "picklist:2", 2}, asio::use_future).get();

    // An effect requested with no dispatcher running: pending in the outbox.
    auto o = sys.spawn<owner>(troupe::persistence_id{"owner-1"}, patient);
    o.ask(pay{1, 1500}, asio::use_future).get();

    store->flush_writes();
    sys.shutdown();
  }
  // The info logs are not part of the store.
  for (auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().starts_with("LOG")) fs::remove(f.path());
  std::cout << "wrote " << dir << '\n';
}
