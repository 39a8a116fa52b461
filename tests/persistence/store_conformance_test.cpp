// The journal and snapshot conformance suite, run against every store: the
// memory and RocksDB stores here; an engine's own suite includes this file
// after defining TROUPE_CONFORMANCE_STORES as its fixtures (in this file's
// namespace), e.g. tests/postgres/conformance_test.cpp.
#ifndef TROUPE_CONFORMANCE_STORES
#define TROUPE_CONFORMANCE_ROCKSDB
#include <troupe/rocksdb/store.hpp>
#endif

#include <troupe/persistence/memory_store.hpp>
#include <troupe/detail/clock.hpp>

#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <asio/use_future.hpp>

#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_store_conformance_test {

namespace tp = troupe::persistence;

namespace {

struct memory_fixture {
  tp::memory_store store;
};

#ifdef TROUPE_CONFORMANCE_ROCKSDB
struct rocksdb_fixture {
  test::temp_dir dir;
  tp::rocksdb_store store{dir.path.string(), tp::rocksdb_options{.durability = tp::durability::none}};
};
#define TROUPE_CONFORMANCE_STORES memory_fixture, rocksdb_fixture
#endif

std::vector<tp::event_record> events(tp::sequence_nr first, tp::sequence_nr last) {
  std::vector<tp::event_record> out;
  for (auto s = first; s <= last; ++s) out.push_back({s, "counter.added", 1, "{\"n\":" + std::to_string(s) + "}"});
  return out;
}

template <class Store>
std::vector<tp::sequence_nr> replay(Store& s, const std::string& pid, tp::sequence_nr from = 1,
                                    tp::sequence_nr to = tp::max_sequence_nr, std::uint64_t max = UINT64_MAX) {
  std::vector<tp::sequence_nr> seen;
  REQUIRE(!s.replay(pid, from, to, max, [&](const tp::event_record& e) { seen.push_back(e.seq); }));
  return seen;
}

using V = std::vector<tp::sequence_nr>;

} // namespace

TEMPLATE_TEST_CASE("replay returns every event in order, with its manifest, version and payload", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  const auto before = troupe::detail::now_ms();
  REQUIRE(!f.store.write("p-1", events(1, 3)));
  REQUIRE(!f.store.write("p-1", events(4, 5)));
  const auto after = troupe::detail::now_ms();
  std::vector<tp::event_record> got;
  REQUIRE(
      !f.store.replay("p-1", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { got.push_back(e); }));
  // Given without a write time, each got the time of its write.
  for (auto& e : got) {
    CHECK(e.metadata.written_ms >= before);
    CHECK(e.metadata.written_ms <= after);
    e.metadata.written_ms = 0;
  }
  CHECK(got == events(1, 5));
}

TEMPLATE_TEST_CASE("events and snapshots keep their metadata: write time and entries, as given", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  auto e = events(1, 2);
  e[0].metadata.set("trace-id", "4bf92f3577b34da6").set("causation", "order:7");
  e[0].metadata.set("trace-id", "a3ce929d0e0e4736"); // replaces
  e[1].metadata.written_ms = 1234;                   // kept as given
  e[1].metadata.set("empty", "");
  e[1].metadata.set(std::string("bin\0ary", 7), std::string("\xff\0", 2));
  REQUIRE(!f.store.write("p", e));
  std::vector<tp::event_record> got;
  REQUIRE(!f.store.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& r) { got.push_back(r); }));
  REQUIRE(got.size() == 2);
  CHECK(got[0].metadata.entries == decltype(got[0].metadata.entries){{"trace-id", "a3ce929d0e0e4736"}, {"causation", "order:7"}});
  CHECK(*got[0].metadata.get("causation") == "order:7");
  CHECK(got[0].metadata.get("absent") == nullptr);
  CHECK(got[0].metadata.written_ms > 0);
  CHECK(got[1] == e[1]);

  tp::snapshot_record snap{3, 99, "{}"};
  snap.version = 4;
  snap.metadata.set("k", "v");
  REQUIRE(!f.store.save_snapshot("p", snap));
  std::optional<tp::snapshot_record> back;
  REQUIRE(!f.store.load_snapshot("p", {}, back));
  REQUIRE(back);
  CHECK(back->version == 4);
  CHECK(back->timestamp_ms == 99);
  CHECK(back->metadata.entries == snap.metadata.entries);
  CHECK(back->metadata.written_ms > 0);
}

TEMPLATE_TEST_CASE("metadata over the limit is invalid_argument on every store, and nothing is written", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  const std::error_code invalid = troupe::errc::invalid_argument;
  auto e = events(1, 1);
  e[0].metadata.set("k", std::string(tp::max_metadata_bytes - 5, 'v')); // 4 + 1 + (max - 5) = max
  CHECK(e[0].metadata.entries_bytes() == tp::max_metadata_bytes);
  REQUIRE(!f.store.write("p", e));
  e = events(2, 2);
  e[0].metadata.set("k", std::string(tp::max_metadata_bytes - 4, 'v'));
  CHECK(f.store.write("p", e) == invalid);
  CHECK(f.store.highest_sequence_nr("p") == 1);
  tp::snapshot_record snap{1, 1, "{}"};
  snap.metadata.set("k", std::string(tp::max_metadata_bytes, 'v'));
  CHECK(f.store.save_snapshot("p", snap) == invalid);
  std::optional<tp::snapshot_record> back;
  REQUIRE(!f.store.load_snapshot("p", {}, back));
  CHECK(!back);
}

TEMPLATE_TEST_CASE("replay honours the lower bound, the upper bound and the count limit", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.write("p", events(1, 10)));
  CHECK(replay(f.store, "p", 4) == V{4, 5, 6, 7, 8, 9, 10});
  CHECK(replay(f.store, "p", 1, 3) == V{1, 2, 3});
  CHECK(replay(f.store, "p", 1, tp::max_sequence_nr, 2) == V{1, 2});
  CHECK(replay(f.store, "p", 3, 8, 4) == V{3, 4, 5, 6});
  CHECK(replay(f.store, "p", 5, 5) == V{5});
  CHECK(replay(f.store, "p", 1, tp::max_sequence_nr, 1) == V{1});
  CHECK(replay(f.store, "p", 1, tp::max_sequence_nr, 0).empty());
  CHECK(replay(f.store, "p", 6, 5).empty());
  CHECK(replay(f.store, "p", 11).empty());
}

TEMPLATE_TEST_CASE("an unknown persistence ID has highest sequence number 0 and no events", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  CHECK(f.store.highest_sequence_nr("nobody") == 0);
  CHECK(replay(f.store, "nobody").empty());
}

TEMPLATE_TEST_CASE("the highest sequence number is known without a replay", "", TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.write("p", events(1, 7)));
  CHECK(f.store.highest_sequence_nr("p") == 7);
}

TEMPLATE_TEST_CASE("persistence IDs that share a prefix do not see each other's events", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.write("a", events(1, 2)));
  REQUIRE(!f.store.write("ab", events(1, 3)));
  CHECK(replay(f.store, "a") == V{1, 2});
  CHECK(replay(f.store, "ab") == V{1, 2, 3});
  CHECK(f.store.highest_sequence_nr("a") == 2);
}

TEMPLATE_TEST_CASE("deleted events are never replayed and the highest sequence number stays", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.write("p", events(1, 5)));
  REQUIRE(!f.store.delete_up_to("p", 3));
  CHECK(replay(f.store, "p") == V{4, 5});
  CHECK(f.store.highest_sequence_nr("p") == 5);
  REQUIRE(!f.store.delete_up_to("p", tp::max_sequence_nr));
  CHECK(replay(f.store, "p").empty());
  CHECK(f.store.highest_sequence_nr("p") == 5);
  // Numbering continues after the highest one, never reusing a number.
  CHECK(f.store.write("p", events(1, 1)) == troupe::persistence::errc::sequence_mismatch);
  REQUIRE(!f.store.write("p", events(6, 6)));
  CHECK(replay(f.store, "p") == V{6});
}

TEMPLATE_TEST_CASE("a write of several events is atomic: one with a gap writes none of them", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.write("p", events(1, 2)));
  auto bad = events(3, 5);
  bad[2].seq = 9; // 3, 4, 9
  CHECK(f.store.write("p", bad) == troupe::persistence::errc::sequence_mismatch);
  CHECK(replay(f.store, "p") == V{1, 2});
  CHECK(f.store.highest_sequence_nr("p") == 2);
  CHECK(f.store.write("p", events(2, 3)) == troupe::persistence::errc::sequence_mismatch); // reuse of 2
  CHECK(f.store.write("p", events(4, 4)) == troupe::persistence::errc::sequence_mismatch); // gap at 3
}

TEMPLATE_TEST_CASE("async_write completes through a completion token", "", TROUPE_CONFORMANCE_STORES) {
  TestType f;
  auto done = f.store.async_write("p", events(1, 3), asio::use_future);
  REQUIRE(done.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  done.get();
  CHECK(replay(f.store, "p") == V{1, 2, 3});
  auto refused = f.store.async_write("p", events(1, 1), asio::use_future);
  REQUIRE(refused.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK_THROWS_AS(refused.get(), std::system_error);
}

TEMPLATE_TEST_CASE("the latest snapshot is selected by sequence number and by timestamp", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.save_snapshot("p", {10, 1000, "s10"}));
  REQUIRE(!f.store.save_snapshot("p", {20, 2000, "s20"}));
  REQUIRE(!f.store.save_snapshot("p", {30, 3000, "s30"}));
  std::optional<tp::snapshot_record> s;
  REQUIRE(!f.store.load_snapshot("p", {}, s));
  REQUIRE(s);
  CHECK(s->payload == "s30");
  REQUIRE(!f.store.load_snapshot("p", {.max_seq = 25}, s));
  CHECK(s->seq == 20);
  REQUIRE(!f.store.load_snapshot("p", {.max_timestamp_ms = 1500}, s));
  CHECK(s->seq == 10);
  REQUIRE(!f.store.load_snapshot("p", {.max_seq = 5}, s));
  CHECK(!s);
  REQUIRE(!f.store.load_snapshot("other", {}, s));
  CHECK(!s);
}

TEMPLATE_TEST_CASE("snapshots are deleted one at a time or by criteria", "", TROUPE_CONFORMANCE_STORES) {
  TestType f;
  for (tp::sequence_nr seq : {10, 20, 30, 40})
    REQUIRE(!f.store.save_snapshot("p", {seq, std::int64_t(seq) * 100, "x"}));
  REQUIRE(!f.store.delete_snapshot("p", 40));
  std::optional<tp::snapshot_record> s;
  REQUIRE(!f.store.load_snapshot("p", {}, s));
  CHECK(s->seq == 30);
  REQUIRE(!f.store.delete_snapshots("p", {.max_seq = 25}));
  REQUIRE(!f.store.load_snapshot("p", {.max_seq = 25}, s));
  CHECK(!s);
  REQUIRE(!f.store.load_snapshot("p", {}, s));
  CHECK(s->seq == 30);
}

TEMPLATE_TEST_CASE("saving a snapshot at the same sequence number overwrites it", "", TROUPE_CONFORMANCE_STORES) {
  TestType f;
  REQUIRE(!f.store.save_snapshot("p", {5, 1, "old"}));
  REQUIRE(!f.store.save_snapshot("p", {5, 2, "new"}));
  std::optional<tp::snapshot_record> s;
  REQUIRE(!f.store.load_snapshot("p", {}, s));
  CHECK(s->payload == "new");
  CHECK(s->timestamp_ms == 2);
}

TEMPLATE_TEST_CASE("large snapshots are stored and loaded whole", "", TROUPE_CONFORMANCE_STORES) {
  TestType f;
  std::string big(8 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  REQUIRE(!f.store.save_snapshot("p", {1, 1, big}));
  std::optional<tp::snapshot_record> s;
  REQUIRE(!f.store.load_snapshot("p", {}, s));
  REQUIRE(s);
  CHECK(s->payload == big);
}

namespace {
template <class Store>
std::vector<std::pair<std::string, std::string>> scan_all(Store& s, tp::table t, std::string_view prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  REQUIRE(!s.scan(t, prefix, [&](std::string_view k, std::string_view v) {
    out.emplace_back(k, v);
    return true;
  }));
  return out;
}
} // namespace

TEMPLATE_TEST_CASE("table changes are written atomically with events, or alone", "", TROUPE_CONFORMANCE_STORES) {
  TestType f;
  using tw = tp::table_write;
  const auto first = f.store.open_table("first"), second = f.store.open_table("second"),
             third = f.store.open_table("third");
  REQUIRE(!f.store.write("p", events(1, 2), {tw::put(first, "p:order-1", "intent")}));
  std::optional<std::string> v;
  REQUIRE(!f.store.get(first, "p:order-1", v));
  CHECK(v == "intent");
  // The same key in another table is another record.
  REQUIRE(!f.store.get(second, "p:order-1", v));
  CHECK(!v);

  // A rejected write (a gap) changes no table either.
  CHECK(f.store.write("p", events(4, 4), {tw::put(second, "d-1", "reply")}) ==
        troupe::persistence::errc::sequence_mismatch);
  REQUIRE(!f.store.get(second, "d-1", v));
  CHECK(!v);
  CHECK(replay(f.store, "p") == V{1, 2});

  // Without events (and without a persistence ID): puts, an overwrite and a delete.
  REQUIRE(!f.store.write("", {},
                         {tw::put(third, "o-2", "b"), tw::put(third, "o-1", "a"), tw::put(third, "o-3", "c"),
                          tw::put(third, "x-1", "other")}));
  REQUIRE(
      !f.store.write("", {}, {tw::put(third, "o-2", "b2"), tw::erase(third, "o-3"), tw::erase(third, "never-there")}));
  using KV = std::vector<std::pair<std::string, std::string>>;
  CHECK(scan_all(f.store, third, "o-") == KV{{"o-1", "a"}, {"o-2", "b2"}});
  CHECK(scan_all(f.store, third, "") == KV{{"o-1", "a"}, {"o-2", "b2"}, {"x-1", "other"}});
  CHECK(scan_all(f.store, first, "q").empty());

  // The scan stops when asked to.
  int seen = 0;
  REQUIRE(!f.store.scan(third, "", [&](std::string_view, std::string_view) { return ++seen < 2; }));
  CHECK(seen == 2);

  // Binary keys and values survive as they are.
  std::string key("k\0\xff", 3), value("\0\x01\x02", 3);
  REQUIRE(!f.store.write("", {}, {tw::put(second, key, value)}));
  REQUIRE(!f.store.get(second, key, v));
  CHECK(v == value);
}

TEMPLATE_TEST_CASE("a table's expired values are dropped by the store, the others kept", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  using tw = tp::table_write;
  const auto t = f.store.open_table("marks"), other = f.store.open_table("other");
  // The value is its expiry (milliseconds since the epoch), or "-": never.
  const auto now = troupe::detail::now_ms();
  std::vector<tw> w;
  for (int i = 0; i < 100; ++i) w.push_back(tw::put(t, "k" + std::to_string(i), std::to_string(now + (i % 2 ? -1000 : 60000))));
  w.push_back(tw::put(t, "forever", "-"));
  w.push_back(tw::put(other, "k1", std::to_string(now - 1000))); // another table: no expiry of its own
  REQUIRE(!f.store.write("", {}, w));
  f.store.set_expiry(t, [](std::string_view, std::string_view v) -> std::optional<std::int64_t> {
    if (v == "-") return std::nullopt;
    return std::stoll(std::string(v));
  });
  // Until dropped, expired values stay readable.
  std::optional<std::string> v;
  REQUIRE(!f.store.get(t, "k1", v));
  CHECK(v);
  REQUIRE(!f.store.drop_expired(t));
  CHECK(scan_all(f.store, t, "k").size() == 50);
  REQUIRE(!f.store.get(t, "k1", v));
  CHECK(!v);
  REQUIRE(!f.store.get(t, "k0", v));
  CHECK(v);
  REQUIRE(!f.store.get(t, "forever", v));
  CHECK(v == "-");
  REQUIRE(!f.store.drop_expired(other));
  REQUIRE(!f.store.get(other, "k1", v));
  CHECK(v);
}

#ifdef TROUPE_CONFORMANCE_ROCKSDB
TEST_CASE("table changes survive closing and reopening the RocksDB store") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    REQUIRE(!s.write("p", events(1, 1), {tp::table_write::put(s.open_table("second"), "d", "r")}));
  }
  tp::rocksdb_store s(dir.str());
  std::optional<std::string> v;
  REQUIRE(!s.get(s.open_table("second"), "d", v));
  CHECK(v == "r");
  CHECK(s.highest_sequence_nr("p") == 1);
}
#endif

TEMPLATE_TEST_CASE("every store has the same limits: an empty or overlong ID or manifest is invalid_argument", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  const std::error_code invalid = troupe::errc::invalid_argument;
  const std::string empty, overlong(65536, 'p'), longest(65535, 'p');
  for (const auto& pid : {empty, overlong}) {
    INFO("persistence ID of " << pid.size() << " bytes");
    CHECK(f.store.write(pid, events(1, 1)) == invalid);
    CHECK(f.store.replay(pid, 1, tp::max_sequence_nr, UINT64_MAX, [](const tp::event_record&) {}) == invalid);
    CHECK_THROWS_AS(f.store.highest_sequence_nr(pid), troupe::error);
    CHECK(f.store.delete_up_to(pid, 1) == invalid);
    CHECK(f.store.save_snapshot(pid, tp::snapshot_record{1, 0, "{}"}) == invalid);
    std::optional<tp::snapshot_record> s;
    CHECK(f.store.load_snapshot(pid, tp::snapshot_criteria{}, s) == invalid);
    CHECK(f.store.delete_snapshot(pid, 1) == invalid);
    CHECK(f.store.delete_snapshots(pid, tp::snapshot_criteria{}) == invalid);
  }
  CHECK(!f.store.write(longest, events(1, 1)));
  CHECK(f.store.highest_sequence_nr(longest) == 1);
  CHECK(f.store.write("p", {{1, std::string(65536, 'm'), 1, "{}"}}) == invalid);
  CHECK(f.store.highest_sequence_nr("p") == 0);
  CHECK(!f.store.write("p", {{1, std::string(65535, 'm'), 1, "{}"}}));
}

TEMPLATE_TEST_CASE("every store treats writes without events alike, and checks a record before its number", "",
                   TROUPE_CONFORMANCE_STORES) {
  TestType f;
  const std::error_code invalid = troupe::errc::invalid_argument;
  // No events: the persistence ID is not used, whatever it is.
  CHECK(!f.store.write("", {}));
  CHECK(!f.store.write(std::string(65536, 'p'), {}));
  auto t = f.store.open_table("t");
  CHECK(!f.store.write("", {}, {tp::table_write::put(t, "k", "v")}));
  // A bad record is invalid_argument even when its number is wrong too.
  CHECK(f.store.write("p", {{7, std::string(65536, 'm'), 1, "{}"}}) == invalid);
  CHECK(f.store.write("p", {{7, "m", 1, "{}"}}) == tp::errc::sequence_mismatch);
}

} // namespace persistence_store_conformance_test
