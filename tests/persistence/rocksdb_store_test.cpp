#include <troupe/persistence/journal.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/persistence/persistent_actor.hpp>
// The engine's own layout and RocksDB's API, which these tests reach into.
#include <troupe/rocksdb/detail/engine.hpp>

#include <catch2/catch.hpp>
#include <rocksdb/perf_context.h>
#include <rocksdb/perf_level.h>

#include "../support.hpp"
#include "temp_dir.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <thread>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_rocksdb_store_test {

namespace tp = troupe::persistence;

namespace {
std::vector<tp::event_record> one(tp::sequence_nr seq) { return {{seq, "m", 1, "payload"}}; }

std::error_code open_error(const std::string& path) {
  try {
    tp::rocksdb_store s(path);
  } catch (const troupe::error& e) {
    return e.code();
  }
  return {};
}

/// `v` as 4 big-endian bytes, as the format version is stored.
std::string u32_be(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
} // namespace

TEST_CASE("events survive closing and reopening the store") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    REQUIRE(!s.write("p", one(1)));
    REQUIRE(!s.write("p", one(2)));
  }
  tp::rocksdb_store s(dir.str());
  CHECK(s.highest_sequence_nr("p") == 2);
  CHECK(s.write("p", one(2)) == troupe::persistence::errc::sequence_mismatch); // never reused after a restart
  CHECK(!s.write("p", one(3)));
}

TEST_CASE("a store already open elsewhere fails to open with store_locked") {
  test::temp_dir dir;
  tp::rocksdb_store first(dir.str());
  CHECK(open_error(dir.str()) == troupe::persistence::errc::store_locked);
}

TEST_CASE("a store of a newer format fails to open with store_format_too_new") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    REQUIRE(
        s.db().Put(rocksdb::WriteOptions{}, s.meta_cf(), "format", u32_be(tp::rocksdb_store::format_version + 1)).ok());
  }
  CHECK(open_error(dir.str()) == troupe::persistence::errc::store_format_too_new);
}

TEST_CASE("a record with a bad checksum fails the replay with corrupt_record") {
  test::temp_dir dir;
  tp::rocksdb_store s(dir.str());
  REQUIRE(!s.write("p", one(1)));
  REQUIRE(!s.write("p", one(2)));
  auto key = tp::detail::seq_key(tp::detail::id_prefix("p"), 2);
  std::string v;
  REQUIRE(s.db().Get(rocksdb::ReadOptions{}, s.journal_cf(), key, &v).ok());
  v.back() ^= 0x5A;
  REQUIRE(s.db().Put(rocksdb::WriteOptions{}, s.journal_cf(), key, v).ok());
  std::vector<tp::sequence_nr> seen;
  auto ec =
      s.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { seen.push_back(e.seq); });
  CHECK(ec == troupe::persistence::errc::corrupt_record);
  CHECK(seen == std::vector<tp::sequence_nr>{1});
}

TEST_CASE("concurrent writers are group-committed into shared writes") {
  test::temp_dir dir;
  tp::rocksdb_store s(dir.str(), tp::rocksdb_options{.durability = tp::durability::sync});
  constexpr int writers = 8, per_writer = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < writers; ++w)
    threads.emplace_back([&, w] {
      for (int i = 1; i <= per_writer; ++i)
        if (s.write("writer-" + std::to_string(w), one(i))) ++failures;
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(s.events_written() == writers * per_writer);
  CHECK(s.batches_written() < s.events_written()); // at least some writes were shared
  for (int w = 0; w < writers; ++w) CHECK(s.highest_sequence_nr("writer-" + std::to_string(w)) == per_writer);
}

TEST_CASE("the store's own column families exist, and each table opened is a column family of its name") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    auto a = s.open_table("alpha");
    CHECK(s.open_table("alpha") == a);
    CHECK(s.open_table("beta") != a);
    for (auto* reserved : {"journal", "snapshots", "meta", "default", ""})
      CHECK_THROWS_MATCHES(s.open_table(reserved), troupe::error, Catch::Predicate<troupe::error>([](auto& e) {
                             return e.code() == troupe::errc::invalid_argument;
                           }));
  }
  std::vector<std::string> names;
  REQUIRE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions{}, dir.str(), &names).ok());
  for (auto* cf : {"journal", "snapshots", "meta", "alpha", "beta"})
    CHECK(std::find(names.begin(), names.end(), cf) != names.end());
  // Reopened, the store has its tables again, under the same names.
  tp::rocksdb_store s(dir.str());
  auto a = s.open_table("alpha");
  REQUIRE(!s.write("", {}, {tp::table_write::put(a, "k", "v")}));
  std::optional<std::string> v;
  REQUIRE(!s.get(a, "k", v));
  CHECK(v == "v");
}

TEST_CASE("a table of another store, or no table, is refused and nothing is written") {
  test::temp_dir d1, d2;
  tp::rocksdb_store s1(d1.str()), s2(d2.str());
  auto mine = s1.open_table("t");
  (void)s2.open_table("t");
  auto theirs = s2.open_table("u");
  std::optional<std::string> v;
  CHECK(s1.get(tp::table{}, "k", v) == troupe::errc::invalid_argument);
  CHECK(s1.write("", {}, {tp::table_write::put(theirs, "k", "v")}) == troupe::errc::invalid_argument);
  CHECK(s1.write("p", {{1, "m", 1, "x"}},
                 {tp::table_write::put(mine, "k", "v"), tp::table_write::put(tp::table{}, "k", "v")}) ==
        troupe::errc::invalid_argument);
  CHECK(s1.highest_sequence_nr("p") == 0);
  REQUIRE(!s1.get(mine, "k", v));
  CHECK(!v);
}

TEST_CASE("record checksums are CRC-32C, with or without the CPU instruction") {
  CHECK(tp::detail::crc32c("123456789") == 0xE3069283u);
  std::mt19937 rng(7);
  for (std::size_t n = 0; n < 300; ++n) {
    std::string data(n, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    tp::detail::crc32c_type table;
    table.process_bytes(data.data(), data.size());
    INFO("length " << n);
    CHECK(tp::detail::crc32c(data) == table.checksum());
    for (bool hardware : {false, tp::detail::cpu_has_crc32c()}) { // in pieces, both ways
      tp::detail::crc32c_state pieces(hardware);
      pieces.update(std::string_view(data).substr(0, n / 3));
      pieces.update(std::string_view(data).substr(n / 3));
      CHECK(pieces.value() == table.checksum());
    }
  }
}

// Interleaved appends and deletions over many IDs, with reopens: the
// journal's memtable insert hints must never misplace a key.
TEST_CASE("random appends, deletions and reopens agree with a model") {
  test::temp_dir dir;
  const auto seed = std::random_device{}();
  // The writer's cache of IDs: all 40 IDs, or 8 of them (evicted and read
  // back all the time).
  const std::size_t cache = GENERATE(100'000, 8);
  INFO("seed " << seed << ", id_cache " << cache);
  std::mt19937 rng(seed);
  std::map<std::string, std::pair<tp::sequence_nr, tp::sequence_nr>> model; // id -> (first kept, highest)
  const tp::rocksdb_options options{.durability = tp::durability::none, .id_cache = cache};
  auto store = std::make_unique<tp::rocksdb_store>(dir.str(), options);
  for (int step = 0; step < 3000; ++step) {
    auto id = "id-" + std::to_string(rng() % 40);
    auto& [first, highest] = model.try_emplace(id, 1, 0).first->second;
    switch (rng() % 10) {
    case 0: {
      auto to = highest == 0 ? 0 : rng() % (highest + 2);
      REQUIRE(!store->delete_up_to(id, to));
      first = std::max(first, std::min<tp::sequence_nr>(to, highest) + 1); // later events are not deleted
      break;
    }
    case 1:
      if (rng() % 20 == 0) {
        store.reset();
        store = std::make_unique<tp::rocksdb_store>(dir.str(), options);
      }
      break;
    default: {
      std::vector<tp::event_record> batch;
      for (auto n = 1 + rng() % 3; n > 0; --n) batch.push_back({highest + batch.size() + 1, "m", 1, id});
      REQUIRE(!store->write(id, batch));
      highest += batch.size();
    }
    }
  }
  for (auto& [id, range] : model) {
    INFO(id);
    CHECK(store->highest_sequence_nr(id) == range.second);
    std::vector<tp::sequence_nr> seen;
    REQUIRE(!store->replay(id, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
      CHECK(e.payload == id);
      seen.push_back(e.seq);
    }));
    std::vector<tp::sequence_nr> expected;
    for (auto s = range.first; s <= range.second; ++s) expected.push_back(s);
    CHECK(seen == expected);
  }
  CHECK(store->cached_ids() <= cache);
}

TEST_CASE("write_later's changes go into the next group commit, before the writes requested after them") {
  test::temp_dir dir;
  tp::table t;
  const auto put = [&](std::string k, std::string v) { return tp::table_write::put(t, std::move(k), std::move(v)); };
  const auto value_of = [&](tp::rocksdb_store& s, const std::string& k) {
    std::optional<std::string> v;
    REQUIRE(!s.get(t, k, v));
    return v;
  };
  // Keys of every shape: owner-prefixed ones, and ones too short for or
  // shorter than their length prefix (outside the insert hints' domain).
  const std::string owned = std::string("\0\3abc", 5) + "p1", short_key = "k",
                    odd = std::string("\0\x09"
                                      "ab",
                                      4);
  {
    tp::rocksdb_store s(dir.str());
    t = s.open_table("bookkeeping");
    const auto before = s.records_written();
    std::vector<tp::table_write> later;
    later.push_back(put(owned, "first"));
    later.push_back(put(short_key, "x"));
    later.push_back(put(odd, "y"));
    s.write_later(std::move(later));
    // Requested after it: applied after it, in the same group or a later one.
    REQUIRE(!s.write("", {}, std::vector<tp::table_write>{put(owned, "second")}));
    CHECK(value_of(s, owned) == "second");
    CHECK(value_of(s, short_key) == "x");
    CHECK(value_of(s, odd) == "y");
    std::vector<tp::table_write> erase;
    erase.push_back(tp::table_write::erase(t, short_key));
    s.write_later(std::move(erase));
    REQUIRE(!s.flush_writes());
    CHECK_FALSE(value_of(s, short_key));
    CHECK(s.records_written() - before == 5);
    // Queued and not yet written when the store closes: written by the close.
    std::vector<tp::table_write> last;
    last.push_back(put(short_key, "at close"));
    s.write_later(std::move(last));
  }
  tp::rocksdb_store s(dir.str());
  REQUIRE(s.open_table("bookkeeping") == t); // reopened: the same table
  CHECK(value_of(s, short_key) == "at close");
  CHECK(value_of(s, owned) == "second");
}

namespace {
/// The deletions RocksDB's iterators skipped on this thread while `f` ran.
template <class F>
std::uint64_t deletions_skipped(F&& f) {
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  f();
  const auto n = rocksdb::get_perf_context()->internal_delete_skipped_count;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  return n;
}
} // namespace

TEST_CASE("reads of one prefix never walk the deletions of the keys that follow it") {
  // Thousands of actors whose records were deleted (confirmed deliveries,
  // swept marks, deleted events): a read of one ID must not skip all of
  // the others' deletions to find that it has nothing (each actor's start
  // did: a restart of n actors read O(n^2) deletions).
  test::temp_dir dir;
  tp::rocksdb_store s(dir.str());
  using tw = tp::table_write;
  const auto t = s.open_table("deliveries");
  std::vector<tw> puts, erases;
  for (int i = 0; i < 2000; ++i) {
    const auto k = "b:" + std::to_string(i);
    puts.push_back(tw::put(t, k, "v"));
    erases.push_back(tw::erase(t, k));
  }
  REQUIRE(!s.write("", {}, puts));
  REQUIRE(!s.write("", {}, erases));
  REQUIRE(!s.write("", {}, {tw::put(t, "c:live", "v")}));
  // Persistence IDs of one length sort by their bytes: "a", then the
  // deleted "b000".."b499", then the live "zzzz".
  const auto id = [](int n) {
    auto d = std::to_string(n);
    return "b" + std::string(3 - d.size(), '0') + d;
  };
  for (int n = 0; n < 500; ++n) REQUIRE(!s.write(id(n), one(1)));
  for (int n = 0; n < 500; ++n) REQUIRE(!s.delete_up_to(id(n), tp::max_sequence_nr));
  REQUIRE(!s.write("zzzz", one(1)));
  std::size_t seen = 0;
  CHECK(deletions_skipped([&] {
          REQUIRE(!s.scan(t, "a:", [&](auto, auto) { return ++seen, true; }));
        }) < 10);
  CHECK(seen == 0);
  CHECK(deletions_skipped([&] {
          REQUIRE(!s.replay("aaaa", 1, tp::max_sequence_nr, 100, [&](const tp::event_record&) { ++seen; }));
        }) < 10);
  CHECK(seen == 0);
}

namespace {
/// Writes `rounds` files into table `t`, each flushed on its own: 200
/// records kept and 200 index entries written then deleted (the shape of
/// the outbox: records and their pending index). Returns the files left in
/// level 0 once RocksDB has no compaction pending or running.
std::uint64_t level0_files_after_flushes(tp::rocksdb_store& s, tp::table t, int rounds) {
  using tw = tp::table_write;
  auto* cf = s.column_family(t);
  for (int r = 0; r < rounds; ++r) {
    std::vector<tw> puts, erases;
    for (int i = 0; i < 200; ++i) {
      const auto id = std::to_string(r) + ":" + std::to_string(i);
      puts.push_back(tw::put(t, "e" + id, std::string(100, 'x')));
      puts.push_back(tw::put(t, "p" + id, ""));
      erases.push_back(tw::erase(t, "p" + id));
    }
    REQUIRE(!s.write("", {}, puts));
    REQUIRE(!s.write("", {}, erases));
    REQUIRE(s.db().Flush(rocksdb::FlushOptions{}, cf).ok());
  }
  const auto settled = [&] {
    std::uint64_t pending = 1, running = 1;
    s.db().GetIntProperty(cf, "rocksdb.compaction-pending", &pending);
    s.db().GetIntProperty("rocksdb.num-running-compactions", &running);
    return pending == 0 && running == 0;
  };
  REQUIRE(test::eventually(settled, std::chrono::seconds(10)));
  std::string files;
  REQUIRE(s.db().GetProperty(cf, "rocksdb.num-files-at-level0", &files));
  return std::stoull(files);
}
} // namespace

TEST_CASE("a table with an expiry keeps its files where they are; one without compacts those heavy with deletions") {
  // The outbox keeps finished records for a retention and deletes their
  // pending index entries: had each of its new files been compacted for
  // those deletions, every flush would have rewritten every record kept
  // (a long stream of orders slowed down as its outbox grew).
  test::temp_dir dir;
  tp::rocksdb_store s(dir.str());
  const auto kept = s.open_table("kept");
  s.set_expiry(kept, [](std::string_view, std::string_view) { return std::optional<std::int64_t>{}; });
  CHECK(level0_files_after_flushes(s, kept, 3) == 3);
  // Short-lived records (deliveries until confirmed): a scan must not walk
  // their deletions for long.
  const auto brief = s.open_table("brief");
  CHECK(level0_files_after_flushes(s, brief, 3) == 0);
}

TEST_CASE("the store counts its compactions and the bytes they read and wrote") {
  test::temp_dir dir;
  tp::rocksdb_store s(dir.str());
  CHECK(s.compactions().compactions == 0);
  const auto t = s.open_table("t");
  for (int i = 0; i < 100; ++i)
    REQUIRE(!s.write("", {}, {tp::table_write::put(t, "k" + std::to_string(i), std::string(100, 'v'))}));
  REQUIRE(!s.drop_expired(t)); // flushes, then compacts
  const auto c = s.compactions();
  CHECK(c.compactions >= 1);
  CHECK(c.bytes_read > 0);
  CHECK(c.bytes_written > 0);
}

TEST_CASE("the store reports how its writer thread spent its time") {
  test::temp_dir dir;
  const auto opened = std::chrono::steady_clock::now();
  tp::rocksdb_store s(dir.str(), tp::rocksdb_options{.durability = tp::durability::sync});
  const auto zero = s.writer_times();
  CHECK(zero.busy.count() == 0);
  CHECK(zero.writing.count() == 0);
  CHECK(zero.writing_cpu.count() == 0);
  const auto t = s.open_table("t");
  for (int i = 1; i <= 20; ++i) {
    REQUIRE(!s.write("writer", one(i)));
    REQUIRE(!s.write("", {}, {tp::table_write::put(t, "k" + std::to_string(i), "v")}));
  }
  const auto first = s.writer_times();
  CHECK(first.writing.count() > 0);
  CHECK(first.writing <= first.busy); // the write is part of the group's time
  // The CPU time is measured inside the write's wall time (1 ms for the two clocks' accounting).
  CHECK(first.writing_cpu <= first.writing + std::chrono::milliseconds(1));
  CHECK(first.busy <= std::chrono::steady_clock::now() - opened); // waiting for requests is not counted
  REQUIRE(!s.write("writer", one(21)));
  const auto second = s.writer_times();
  CHECK(second.busy > first.busy);
  CHECK(second.writing > first.writing);
}

TEST_CASE("try_get answers from memory, and leaves to get what needs a read from disk") {
  test::temp_dir dir;
  auto s = std::make_shared<tp::rocksdb_store>(dir.str());
  auto t = s->open_table("t");
  REQUIRE(!s->write("", {}, {tp::table_write::put(t, "k", "v")}));
  std::optional<std::string> v = "stale";
  // In the memtable: answered, a key that is there and one that is not.
  REQUIRE(s->try_get(t, "k", v));
  CHECK(v == "v");
  REQUIRE(s->try_get(t, "other", v));
  CHECK(!v);
  CHECK(!s->try_get(tp::table{}, "k", v)); // not a table of this store: left to get, which says so
  // Compacted into a file whose data block is not cached: only get can
  // tell; once get has read the block, it is in memory again.
  REQUIRE(!s->drop_expired(t));
  CHECK(!s->try_get(t, "k", v));
  CHECK(!v);
  REQUIRE(!s->get(t, "k", v));
  CHECK(v == "v");
  v.reset();
  REQUIRE(s->try_get(t, "k", v));
  CHECK(v == "v");
  // Through the journal: the store's answer.
  tp::journal_of<tp::rocksdb_store> j(s);
  v.reset();
  CHECK(j.try_get(t, "k", v));
  CHECK(v == "v");
}

TEST_CASE("try_get never reads from the disk, however cold the cache") {
  // A table's files below level 0, a block cache far smaller than them,
  // and ordinary gets in between that keep evicting what try_get would
  // need: it may decline, but it must not read a block itself.
  test::temp_dir dir;
  tp::rocksdb_options o;
  o.durability = tp::durability::async;
  o.block_cache = 64 << 10;
  tp::rocksdb_store s(dir.str(), o);
  auto t = s.open_table("t");
  const int n = 60'000;
  const auto key = [](int i) { return "k" + std::to_string(1'000'000 + i); };
  for (int b = 0; b < n; b += 1000) {
    std::vector<tp::table_write> w;
    for (int i = b; i < b + 1000; ++i) w.push_back(tp::table_write::put(t, key(i), std::string(100, 'v')));
    REQUIRE(!s.write("", {}, w));
  }
  REQUIRE(!s.drop_expired(t)); // to the bottom level, out of level 0's pinned blocks
  std::mt19937 rng(7);
  std::optional<std::string> v;
  const auto churn = [&] {
    for (int j = 0; j < 20; ++j) REQUIRE(!s.get(t, key(static_cast<int>(rng() % n)), v));
  };
  int reads = 0, answered = 0;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  for (int i = 0; i < 400; ++i) {
    churn();
    // Half keys that are there, half that are not (a new delivery's mark).
    const auto k = key(static_cast<int>(rng() % n)) + (i % 2 ? "" : "x");
    rocksdb::get_perf_context()->Reset();
    const bool ok = s.try_get(t, k, v);
    reads += static_cast<int>(rocksdb::get_perf_context()->block_read_count);
    answered += ok;
    if (ok) CHECK(v.has_value() == (i % 2 == 1));
  }
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  INFO("answered " << answered << " of 400");
  CHECK(reads == 0);
}

} // namespace persistence_rocksdb_store_test

namespace persistence_rocksdb_store_metrics_test {

TEST_CASE("metrics: a RocksDB journal reports its group commits, events and records with the system's metrics") {
  namespace tp = troupe::persistence;
  test::temp_dir dir;
  auto store = std::make_shared<tp::rocksdb_store>(dir.str());
  auto j = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  tp::set_journal(sys, j);
  for (tp::sequence_nr s = 1; s <= 10; ++s) {
    std::promise<std::error_code> p;
    j->write("p", {{s, "m", 1, "x"}}, {}, [&](std::error_code ec) { p.set_value(ec); });
    REQUIRE_FALSE(test::get(p.get_future()));
  }
  const auto m = sys.metrics();
  const troupe::metric_labels engine{{"engine", "rocksdb"}};
  CHECK(m.value("troupe_store_events_written_total", engine) == 10);
  CHECK(m.value("troupe_store_group_commits_total", engine) == static_cast<double>(store->batches_written()));
  CHECK(m.value("troupe_store_group_commits_total", engine) >= 1);
  CHECK(m.value("troupe_store_records_written_total", engine) >= 10);
  CHECK(m.value("troupe_persist_writes_total") == 10);
  CHECK(m.sample("troupe_persist_latency_seconds")->count == 10);
}

} // namespace persistence_rocksdb_store_metrics_test
