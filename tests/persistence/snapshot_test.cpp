// Snapshots, schema evolution, the system's journal and the fault-injecting
// journal, seen through persistent actors.
#include <troupe/persistence/persistent_actor.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/testing/faulty_journal.hpp>
#include <troupe/persistence/memory_store.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/detail/clock.hpp>
// The engine's own layout and RocksDB's API, which these tests reach into.
#include <troupe/rocksdb/detail/engine.hpp>

#include "../support.hpp"
#include "temp_dir.hpp"

#include <cstdlib>
#include <future>
#include <iostream>
#include <random>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_snapshot_test {

namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

// -- events: three kinds, whose order matters to the state -------------------

struct added {
  static constexpr std::string_view manifest = "ledger.added";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const added& e) { v = {{"n", e.n}}; }
added tag_invoke(json::value_to_tag<added>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct scaled {
  static constexpr std::string_view manifest = "ledger.scaled";
  long factor = 1;
};
void tag_invoke(json::value_from_tag, json::value& v, const scaled& e) { v = {{"factor", e.factor}}; }
scaled tag_invoke(json::value_to_tag<scaled>, const json::value& v) { return {json::value_to<long>(v.at("factor"))}; }

// `noted` is at version 3. Version 1 was `{"text": ...}` under the manifest
// "ledger.remark"; version 2 renamed it and added a weight.
struct remark_v1 {
  static constexpr std::string_view manifest = "ledger.remark";
  std::string text;
};
void tag_invoke(json::value_from_tag, json::value& v, const remark_v1& e) { v = {{"text", e.text}}; }
remark_v1 tag_invoke(json::value_to_tag<remark_v1>, const json::value& v) {
  return {json::value_to<std::string>(v.at("text"))};
}

struct noted_v2 {
  static constexpr std::string_view manifest = "ledger.noted";
  static constexpr std::uint32_t version = 2;
  using previous = remark_v1;
  static noted_v2 upcast(remark_v1 old) { return {std::move(old.text), 1}; }
  std::string text;
  int weight = 1;
};
void tag_invoke(json::value_from_tag, json::value& v, const noted_v2& e) {
  v = {{"text", e.text}, {"weight", e.weight}};
}
noted_v2 tag_invoke(json::value_to_tag<noted_v2>, const json::value& v) {
  return {json::value_to<std::string>(v.at("text")), json::value_to<int>(v.at("weight"))};
}

struct noted {
  static constexpr std::string_view manifest = "ledger.noted";
  static constexpr std::uint32_t version = 3;
  using previous = noted_v2;
  static noted upcast(noted_v2 old) { return {std::move(old.text), old.weight, "v2"}; }
  std::string text;
  int weight = 1;
  std::string origin = "v3";
};
void tag_invoke(json::value_from_tag, json::value& v, const noted& e) {
  v = {{"text", e.text}, {"weight", e.weight}, {"origin", e.origin}};
}
noted tag_invoke(json::value_to_tag<noted>, const json::value& v) {
  return {json::value_to<std::string>(v.at("text")), json::value_to<int>(v.at("weight")),
          json::value_to<std::string>(v.at("origin"))};
}

struct ledger_state {
  long total = 0;
  std::string log;
  long events = 0;
  friend bool operator==(const ledger_state&, const ledger_state&) = default;
};
void tag_invoke(json::value_from_tag, json::value& v, const ledger_state& s) {
  v = {{"total", s.total}, {"log", s.log}, {"events", s.events}};
}
ledger_state tag_invoke(json::value_to_tag<ledger_state>, const json::value& v) {
  return {json::value_to<long>(v.at("total")), json::value_to<std::string>(v.at("log")),
          json::value_to<long>(v.at("events"))};
}

// -- commands ----------------------------------------------------------------

struct add {
  long n;
};
struct scale {
  long factor;
};
struct note {
  std::string text;
};
struct try_add {
  long n;
};
struct add_marked {
  long n;
  std::string mark;
};
struct add_traced {
  long n;
  std::string trace;
};
struct inspect {};
struct inspection {
  ledger_state state;
  tp::sequence_nr seq = 0;
  tp::sequence_nr snapshot = 0;
};

class ledger : public tp::persistent_actor<ledger, ledger_state> {
public:
  using events = tp::event_types<added, scaled, noted>;
  using persistent_actor::persistent_actor;

  static void apply(ledger_state& s, const added& e) {
    s.total += e.n;
    ++s.events;
  }
  static void apply(ledger_state& s, const scaled& e) {
    s.total = (s.total * e.factor) % 1000003;
    ++s.events;
  }
  static void apply(ledger_state& s, const noted& e) {
    s.log += e.text + "/" + std::to_string(e.weight) + "/" + e.origin + ";";
    ++s.events;
  }

  troupe::task<> handle(add c) {
    added e{c.n};
    co_await persist(e);
  }
  troupe::task<> handle(scale c) {
    scaled e{c.factor};
    co_await persist(e);
  }
  troupe::task<> handle(note c) {
    noted e{c.text, 2, "v3"};
    co_await persist(e);
  }
  troupe::task<std::string> handle(try_add c) {
    try {
      added e{c.n};
      co_await persist(e);
    } catch (const troupe::error& e) {
      co_return e.what();
    }
    co_return "";
  }
  /// An event and a table entry in one write (what the delivery layer does
  /// with its dedup marks); a failure leaves neither.
  troupe::task<std::string> handle(add_marked c) {
    try {
      added e{c.n};
      std::vector<tp::table_write> marks{
          tp::table_write::put(storage().open_table("marks"), c.mark, std::to_string(c.n))};
      co_await persist_all_with(std::move(marks), e); // named: GCC 12 and temporaries in co_await

    } catch (const troupe::error& e) {
      co_return e.what();
    }
    co_return "";
  }
  troupe::task<> handle(add_traced c) {
    tp::record_metadata m;
    m.set("trace-id", c.trace);
    added e{c.n};
    co_await persist_tagged(std::move(m), e);
  }
  inspection handle(inspect) const { return {state(), last_sequence_nr(), recovered_from_snapshot()}; }
};

/// Waits until the journal's blocking thread has run everything queued
/// before (snapshot saves and their retention).
void drain(tp::journal& j) {
  std::promise<void> done;
  j.run_blocking([&] { done.set_value(); });
  done.get_future().wait();
}

inspection inspect_once(const std::shared_ptr<tp::journal>& j, const std::string& pid, tp::persistence_options o = {}) {
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(tp::persistence_id{pid}, j, o);
  return test::get(a.ask(inspect{}, asio::use_future));
}

std::string failure_of_recovery(const std::shared_ptr<tp::journal>& j, const std::string& pid) {
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(tp::persistence_id{pid}, j);
  return test::get(a.when_stopped(asio::use_future)).what;
}

tp::persistence_options every(std::uint64_t n, std::size_t keep, bool delete_events) {
  tp::persistence_options o;
  o.snapshots.every = n;
  o.snapshots.keep = keep;
  o.snapshots.delete_events = delete_events;
  return o;
}

std::vector<tp::sequence_nr> snapshot_seqs(tp::journal& j, const std::string& pid) {
  std::vector<tp::sequence_nr> out;
  tp::snapshot_criteria c;
  std::optional<tp::snapshot_record> s;
  while (!j.load_snapshot(pid, c, s) && s) {
    out.insert(out.begin(), s->seq);
    if (s->seq == 0) break;
    c.max_seq = s->seq - 1;
  }
  return out;
}

tp::sequence_nr first_event(tp::journal& j, const std::string& pid) {
  tp::sequence_nr first = 0;
  j.replay(pid, 1, tp::max_sequence_nr, 1, [&](const tp::event_record& r) { first = r.seq; });
  return first;
}

} // namespace

TEST_CASE("snapshots every N, keeping K, and deleting the events the oldest kept one covers") {
  test::temp_dir dir;
  auto store = std::make_shared<tp::rocksdb_store>(dir.str());
  auto j = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
  ledger_state expected;
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-1"}, j, every(10, 2, true));
    for (long i = 1; i <= 35; ++i) test::get(a.ask(add{i}, asio::use_future));
    expected = test::get(a.ask(inspect{}, asio::use_future)).state;
  }
  drain(*j);
  CHECK(snapshot_seqs(*j, "l-1") == std::vector<tp::sequence_nr>{20, 30});
  CHECK(first_event(*j, "l-1") == 21);
  CHECK(store->highest_sequence_nr("l-1") == 35);

  auto r = inspect_once(j, "l-1");
  CHECK(r.snapshot == 30);
  CHECK(r.seq == 35);
  CHECK(r.state == expected);
  CHECK(r.state.total == 35 * 36 / 2);
}

TEST_CASE("recovery passes over a salvage's record whose numbers begin at or before the snapshot") {
  test::temp_dir dir;
  auto store = std::make_shared<tp::rocksdb_store>(dir.str());
  auto j = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
  REQUIRE_FALSE(store->write("l", {{1, "ledger.added", 1, "{\"n\":1}"}, {2, "ledger.added", 1, "{\"n\":1}"}}));
  // A snapshot at 3 in a table file; events 3 to 5 dropped by a salvage,
  // whose record at 5 covers them all (from 3, below the snapshot's next).
  tp::snapshot_record snapshot;
  snapshot.seq = 3;
  snapshot.payload = R"({"total":3,"log":"","events":3})";
  REQUIRE_FALSE(store->save_snapshot("l", snapshot));
  namespace d = tp::detail;
  REQUIRE(store->db()
              .Put(rocksdb::WriteOptions{}, store->journal_cf(), d::seq_key(d::id_prefix("l"), 5),
                   d::encode_event(d::events_lost_record(3, 5)))
              .ok());
  const auto seen = inspect_once(j, "l");
  CHECK(seen.snapshot == 3);
  CHECK(seen.seq == 5);
  CHECK(seen.state.total == 3);
}

TEST_CASE("an unreadable snapshot falls back to an older one, then to the whole journal") {
  test::temp_dir dir;
  auto store = std::make_shared<tp::rocksdb_store>(dir.str());
  auto j = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-2"}, j, every(10, 3, false));
    for (long i = 1; i <= 25; ++i) test::get(a.ask(add{i}, asio::use_future));
  }
  drain(*j);
  REQUIRE(snapshot_seqs(*j, "l-2") == std::vector<tp::sequence_nr>{10, 20});

  // A bad checksum on the latest: recovery starts from the older one.
  auto key = tp::detail::seq_key(tp::detail::id_prefix("l-2"), 20);
  REQUIRE(store->db().Put(rocksdb::WriteOptions{}, store->snapshots_cf(), key, "garbage, not a snapshot").ok());
  auto r = inspect_once(j, "l-2");
  CHECK(r.snapshot == 10);
  CHECK(r.state.total == 25 * 26 / 2);
  CHECK(r.seq == 25);

  // A snapshot that decodes but is not a state: the whole journal.
  tp::snapshot_record not_a_state{10, 1, "{\"something\":\"else\"}"};
  REQUIRE(!store->save_snapshot("l-2", not_a_state));
  r = inspect_once(j, "l-2");
  CHECK(r.snapshot == 0);
  CHECK(r.state.total == 25 * 26 / 2);
  CHECK(r.state.events == 25);
}

TEST_CASE("with the covered events deleted and no readable snapshot, recovery fails and touches nothing") {
  auto store = std::make_shared<tp::memory_store>();
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-3"}, j, every(5, 1, true));
    for (long i = 1; i <= 12; ++i) test::get(a.ask(add{i}, asio::use_future));
  }
  drain(*j);
  REQUIRE(snapshot_seqs(*j, "l-3") == std::vector<tp::sequence_nr>{10});
  REQUIRE(first_event(*j, "l-3") == 11);
  REQUIRE(!store->save_snapshot("l-3", tp::snapshot_record{10, 1, "[1,2,3]"}));

  // Named as what it is: the snapshot that replaced events 1 to 10 cannot be used.
  auto what = failure_of_recovery(j, "l-3");
  CHECK(what.find("l-3") != std::string::npos);
  CHECK(what.find("snapshot 10 cannot be used") != std::string::npos);
  CHECK(what.find("events 1 to 10 it covers were deleted") != std::string::npos);
  CHECK(first_event(*j, "l-3") == 11);
  CHECK(store->highest_sequence_nr("l-3") == 12);
}

TEST_CASE("events are deleted only once the snapshot replacing them was read back and decoded") {
  auto store = std::make_shared<tp::memory_store>();
  auto faulty =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-readback"}, faulty, every(5, 1, true));
    for (long i = 1; i <= 4; ++i) test::get(a.ask(add{i}, asio::use_future));
    faulty->fail_next_snapshot_loads(1); // the read-back of the snapshot at 5
    test::get(a.ask(add{5}, asio::use_future));
  }
  drain(*faulty);
  CHECK(snapshot_seqs(*faulty, "l-readback") == std::vector<tp::sequence_nr>{5});
  CHECK(first_event(*faulty, "l-readback") == 1); // not deleted: the snapshot was not read back
}

TEST_CASE("a failed snapshot load falls back to replaying the whole journal") {
  auto store = std::make_shared<tp::memory_store>();
  auto faulty =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-4"}, faulty, every(4, 2, false));
    for (long i = 1; i <= 9; ++i) test::get(a.ask(add{i}, asio::use_future));
  }
  drain(*faulty);
  REQUIRE(snapshot_seqs(*faulty, "l-4") == std::vector<tp::sequence_nr>{4, 8});
  faulty->fail_next_snapshot_loads(1);
  auto r = inspect_once(faulty, "l-4");
  CHECK(r.snapshot == 0);
  CHECK(r.state.total == 45);
  r = inspect_once(faulty, "l-4");
  CHECK(r.snapshot == 8);
  CHECK(r.state.total == 45);
}

TEST_CASE("a snapshot load that fails over deleted events fails recovery with the store's error, not as lost events") {
  auto store = std::make_shared<tp::memory_store>();
  auto faulty =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-full"}, faulty, every(5, 1, true));
    for (long i = 1; i <= 7; ++i) test::get(a.ask(add{i}, asio::use_future));
  }
  drain(*faulty);
  REQUIRE(snapshot_seqs(*faulty, "l-full") == std::vector<tp::sequence_nr>{5});
  REQUIRE(first_event(*faulty, "l-full") == 6);
  faulty->fail_next_snapshot_loads(1, tp::errc::storage_full);
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(troupe::spawn_options{.supervision = troupe::supervision::stop()},
                             tp::persistence_id{"l-full"}, faulty, tp::persistence_options{});
  const auto what = test::get(a.when_stopped(asio::use_future)).what;
  INFO(what);
  CHECK(what.find("the snapshots could not be read") != std::string::npos);
  CHECK(what.find(tp::make_error_code(tp::errc::storage_full).message()) != std::string::npos);
  CHECK(what.find("are missing") == std::string::npos);
  // The store itself is fine once it reads again.
  CHECK(inspect_once(faulty, "l-full").state.total == 28);
}

TEST_CASE("older versions of an event are upcast through the chain on recovery") {
  auto store = std::make_shared<tp::memory_store>();
  std::vector<tp::event_record> history{
      {1, "ledger.remark", 1, R"({"text":"first"})"},
      {2, "ledger.noted", 2, R"({"text":"second","weight":5})"},
      {3, "ledger.noted", 3, R"({"text":"third","weight":7,"origin":"v3"})"},
  };
  REQUIRE(!store->write("l-5", history));
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  auto r = inspect_once(j, "l-5");
  CHECK(r.state.log == "first/1/v2;second/5/v2;third/7/v3;");
  CHECK(r.seq == 3);

  // A version newer than any known one is unknown: recovery fails naming it.
  REQUIRE(!store->write("l-6", {{1, "ledger.noted", 4, R"({"text":"future"})"}}));
  auto what = failure_of_recovery(j, "l-6");
  CHECK(what.find("l-6") != std::string::npos);
  CHECK(what.find("sequence number 1") != std::string::npos);
  CHECK(what.find("ledger.noted' version 4") != std::string::npos);
}

TEST_CASE("persistent actors find the journal attached to their system") {
  auto store = std::make_shared<tp::memory_store>();
  {
    troupe::actor_system sys;
    tp::set_journal(sys, std::make_shared<tp::journal_of<tp::memory_store>>(store));
    auto a = sys.spawn<ledger>(troupe::persistence_id{"l-7"});
    test::get(a.ask(add{4}, asio::use_future));
    CHECK(test::get(a.ask(inspect{}, asio::use_future)).state.total == 4);
  }
  CHECK(store->highest_sequence_nr("l-7") == 1);

  troupe::actor_system bare;
  try {
    bare.spawn<ledger>(troupe::persistence_id{"l-7"});
    FAIL("spawn without an attached journal must throw");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    CHECK(std::string(e.what()).find("troupe::persistence::set_journal") != std::string::npos);
  }
}

TEST_CASE("a rejected write leaves the state unchanged and the actor running, delayed writes keep commands serial") {
  auto store = std::make_shared<tp::memory_store>();
  auto faulty =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(tp::persistence_id{"l-8"}, faulty);
  faulty->reject_next_writes(1);
  CHECK(test::get(a.ask(try_add{5}, asio::use_future)).find("write rejected") != std::string::npos);
  CHECK(test::get(a.ask(try_add{6}, asio::use_future)).empty());

  faulty->delay_writes(std::chrono::milliseconds(30));
  auto first = a.ask(add{10}, asio::use_future);
  auto second = a.ask(inspect{}, asio::use_future); // waits for the persist before it
  CHECK(test::get(second).state.total == 16);
  test::get(first);
  CHECK(store->highest_sequence_nr("l-8") == 2);
}

TEST_CASE("bad snapshot policies are refused at construction") {
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(std::make_shared<tp::memory_store>());
  troupe::actor_system sys;
  CHECK_THROWS_WITH(sys.spawn<ledger>(tp::persistence_id{"l-9"}, j, every(10, 0, false)),
                    Catch::Contains("keep must be at least 1"));
}

// Property: for random event sequences and random policies, recovering from
// snapshot + tail gives the state (and sequence number) of a full replay.
TEST_CASE("snapshot plus tail equals full replay, for random histories and policies") {
  const char* env = std::getenv("TROUPE_PROPERTY_SEED");
  const std::uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  const int runs = 40;
  INFO("seed " << seed << " (rerun with TROUPE_PROPERTY_SEED=" << seed << ")");
  std::cout << "snapshot property test: seed " << seed << '\n';
  std::mt19937_64 rng(seed);
  for (int run = 0; run < runs; ++run) {
    const auto n_events = std::uniform_int_distribution<int>(0, 120)(rng);
    const auto policy =
        every(std::uniform_int_distribution<int>(1, 25)(rng), std::uniform_int_distribution<std::size_t>(1, 3)(rng),
              std::bernoulli_distribution(0.5)(rng));
    INFO("run " << run << ": " << n_events << " events, snapshot every " << policy.snapshots.every << ", keep "
                << policy.snapshots.keep << (policy.snapshots.delete_events ? ", deleting events" : ""));

    auto with = std::make_shared<tp::memory_store>();
    auto without = std::make_shared<tp::memory_store>();
    auto jw = std::make_shared<tp::journal_of<tp::memory_store>>(with);
    auto jo = std::make_shared<tp::journal_of<tp::memory_store>>(without);
    {
      troupe::actor_system sys;
      auto a = sys.spawn<ledger>(tp::persistence_id{"p"}, jw, policy);
      auto b = sys.spawn<ledger>(tp::persistence_id{"p"}, jo);
      // Restarts in the middle: recovery from a snapshot, then more events.
      for (int i = 0; i < n_events; ++i) {
        switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
        case 0: {
          long n = std::uniform_int_distribution<long>(-50, 100)(rng);
          a.tell(add{n});
          b.tell(add{n});
          break;
        }
        case 1: {
          long f = std::uniform_int_distribution<long>(-3, 7)(rng);
          a.tell(scale{f});
          b.tell(scale{f});
          break;
        }
        default: {
          note m{std::string(1, static_cast<char>('a' + i % 26))};
          a.tell(m);
          b.tell(m);
        }
        }
        if (std::bernoulli_distribution(0.03)(rng)) {
          test::get(a.ask(inspect{}, asio::use_future));
          a.stop();
          test::get(a.when_stopped(asio::use_future));
          drain(*jw);
          a = sys.spawn<ledger>(tp::persistence_id{"p"}, jw, policy);
        }
      }
      auto sa = test::get(a.ask(inspect{}, asio::use_future));
      auto sb = test::get(b.ask(inspect{}, asio::use_future));
      REQUIRE(sa.state == sb.state);
      REQUIRE(sa.seq == sb.seq);
    }
    drain(*jw);
    auto recovered = inspect_once(jw, "p", policy);
    auto full = inspect_once(jo, "p");
    CHECK(full.snapshot == 0);
    CHECK(full.seq == static_cast<tp::sequence_nr>(n_events));
    if (n_events >= static_cast<int>(policy.snapshots.every)) CHECK(recovered.snapshot > 0);
    REQUIRE(recovered.state == full.state);
    REQUIRE(recovered.seq == full.seq);
  }
}

TEST_CASE("after a storage failure the instance persists nothing more, even when the handler caught it") {
  auto store = std::make_shared<tp::memory_store>();
  auto faulty =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(tp::persistence_id{"l-10"}, faulty);
  CHECK(test::get(a.ask(try_add{1}, asio::use_future)).empty());
  faulty->fail_next_writes(1);
  CHECK(test::get(a.ask(try_add{2}, asio::use_future)).find("storage failure") != std::string::npos);
  CHECK(test::get(a.ask(try_add{3}, asio::use_future)).find("must restart and recover") != std::string::npos);
  CHECK(store->highest_sequence_nr("l-10") == 1);
  CHECK(test::get(a.ask(inspect{}, asio::use_future)).state.total == 1);
}

// Long journals are recovered in two stages (one thread reads, the other
// decodes and applies, in chunks): the order, the failures and their
// sequence numbers must be those of a plain replay.
TEST_CASE("long recoveries apply every event in order, and fail at the exact record") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  auto store = std::make_shared<tp::memory_store>();
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  REQUIRE(j->applier() != nullptr);
  ledger_state expected;
  std::vector<tp::event_record> history;
  const int n = 20'000;
  for (int i = 1; i <= n; ++i) {
    switch (rng() % 3) {
    case 0: {
      added e{static_cast<long>(rng() % 100)};
      ledger::apply(expected, e);
      history.push_back({tp::sequence_nr(i), std::string(added::manifest), 1, json::serialize(json::value_from(e))});
      break;
    }
    case 1: {
      scaled e{static_cast<long>(rng() % 5)};
      ledger::apply(expected, e);
      history.push_back({tp::sequence_nr(i), std::string(scaled::manifest), 1, json::serialize(json::value_from(e))});
      break;
    }
    default: {
      noted e{std::string(1 + rng() % 3000, 'n'), 1, "v3"}; // some records large, to fill chunks by size
      ledger::apply(expected, e);
      history.push_back({tp::sequence_nr(i), std::string(noted::manifest), 3, json::serialize(json::value_from(e))});
    }
    }
  }
  REQUIRE(!store->write("long", history));
  auto r = inspect_once(j, "long");
  CHECK(r.seq == static_cast<tp::sequence_nr>(n));
  CHECK(r.state == expected);

  // An unknown record deep in the journal: the applier fails, the reader stops.
  auto bad = history;
  bad[12'345].manifest = "ledger.unheard-of";
  REQUIRE(!store->write("long-bad", bad));
  auto what = failure_of_recovery(j, "long-bad");
  CHECK(what.find("sequence number 12346") != std::string::npos);
  CHECK(what.find("ledger.unheard-of") != std::string::npos);

  // A hole deep in the journal: the reader fails while the applier works.
  test::temp_dir dir;
  auto rocks = std::make_shared<tp::rocksdb_store>(dir.str());
  REQUIRE(!rocks->write("long-gap", history));
  for (tp::sequence_nr s = 15'001; s <= 15'010; ++s)
    REQUIRE(rocks->db()
                .Delete(rocksdb::WriteOptions{}, rocks->journal_cf(),
                        tp::detail::seq_key(tp::detail::id_prefix("long-gap"), s))
                .ok());
  what = failure_of_recovery(std::make_shared<tp::journal_of<tp::rocksdb_store>>(rocks), "long-gap");
  CHECK(what.find("events 15001 to 15010 are missing") != std::string::npos);
}

TEST_CASE("persist_all_with writes the events and the table entries together, or neither") {
  auto store = std::make_shared<tp::memory_store>();
  auto faulty =
      std::make_shared<troupe::testing::faulty_journal>(std::make_shared<tp::journal_of<tp::memory_store>>(store));
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(tp::persistence_id{"l-11"}, faulty);
  add_marked first{5, "mark-1"};
  CHECK(test::get(a.ask(std::move(first), asio::use_future)).empty());
  std::optional<std::string> v;
  REQUIRE(!faulty->get(faulty->open_table("marks"), "mark-1", v));
  CHECK(v == "5");
  faulty->reject_next_writes(1);
  add_marked second{7, "mark-2"};
  CHECK(test::get(a.ask(std::move(second), asio::use_future)).find("write rejected") != std::string::npos);
  REQUIRE(!faulty->get(faulty->open_table("marks"), "mark-2", v));
  CHECK(!v);
  CHECK(store->highest_sequence_nr("l-11") == 1);
  CHECK(test::get(a.ask(inspect{}, asio::use_future)).state.total == 5);
}

TEST_CASE("events carry the metadata a persist gives and the options' hook adds, and the store's write time") {
  auto store = std::make_shared<tp::memory_store>();
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  tp::persistence_options o;
  o.event_metadata = [](std::string_view pid, std::string_view manifest, tp::record_metadata& m) {
    m.set("hook", std::string(pid) + "/" + std::string(manifest));
  };
  const auto before = troupe::detail::now_ms();
  {
    troupe::actor_system sys;
    auto a = sys.spawn<ledger>(tp::persistence_id{"l-meta"}, j, o);
    test::get(a.ask(add_traced{1, "trace-1"}, asio::use_future));
    test::get(a.ask(add{2}, asio::use_future));
  }
  std::vector<tp::event_record> got;
  REQUIRE(!j->replay("l-meta", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& r) { got.push_back(r); }));
  REQUIRE(got.size() == 2);
  CHECK(*got[0].metadata.get("trace-id") == "trace-1");
  CHECK(*got[0].metadata.get("hook") == "l-meta/ledger.added");
  CHECK(got[1].metadata.get("trace-id") == nullptr);
  CHECK(*got[1].metadata.get("hook") == "l-meta/ledger.added");
  for (auto& e : got) CHECK(e.metadata.written_ms >= before);
  // Metadata over the limit fails the persist, nothing written, the actor goes on.
  tp::persistence_options big;
  big.event_metadata = [](std::string_view, std::string_view, tp::record_metadata& m) {
    m.set("k", std::string(tp::max_metadata_bytes, 'x'));
  };
  troupe::actor_system sys;
  auto a = sys.spawn<ledger>(tp::persistence_id{"l-meta"}, j, big);
  auto what = test::get(a.ask(try_add{5}, asio::use_future));
  CHECK(what.find("metadata of ledger.added for l-meta") != std::string::npos);
  CHECK(store->highest_sequence_nr("l-meta") == 2);
  CHECK(test::get(a.ask(inspect{}, asio::use_future)).state.total == 3);
}

namespace {

// A state at version 2 that replaced version 1: its snapshots of version 1
// are upcast; its JSON has a field version 1 lacked.
struct tally_v1 {
  long count = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const tally_v1& s) { v = {{"count", s.count}}; }
tally_v1 tag_invoke(json::value_to_tag<tally_v1>, const json::value& v) { return {json::value_to<long>(v.at("count"))}; }

struct tally_v2 {
  static constexpr std::uint32_t version = 2;
  using previous = tally_v1;
  static tally_v2 upcast(tally_v1 old) { return {old.count, "upcast"}; }
  long count = 0;
  std::string origin = "v2";
};
void tag_invoke(json::value_from_tag, json::value& v, const tally_v2& s) {
  v = {{"count", s.count}, {"origin", s.origin}};
}
tally_v2 tag_invoke(json::value_to_tag<tally_v2>, const json::value& v) {
  return {json::value_to<long>(v.at("count")), json::value_to<std::string>(v.at("origin"))};
}

/// A state whose data member is named `version`: its snapshots are of version 1.
struct tally_plain {
  long count = 0;
  int version = 7;
};
void tag_invoke(json::value_from_tag, json::value& v, const tally_plain& s) {
  v = {{"count", s.count}, {"version", s.version}};
}
tally_plain tag_invoke(json::value_to_tag<tally_plain>, const json::value& v) {
  return {json::value_to<long>(v.at("count")), json::value_to<int>(v.at("version"))};
}

struct tally_query {};

template <class S>
class tally : public tp::persistent_actor<tally<S>, S> {
public:
  using events = tp::event_types<added>;
  using tp::persistent_actor<tally<S>, S>::persistent_actor;
  static void apply(S& s, const added& e) { s.count += e.n; }
  troupe::task<> handle(add c) {
    added e{c.n};
    co_await this->persist(e);
  }
  std::pair<S, tp::sequence_nr> handle(tally_query) const { return {this->state(), this->recovered_from_snapshot()}; }
};

} // namespace

static_assert(tp::state_version_of<tally_v1>() == 1);
static_assert(tp::state_version_of<tally_v2>() == 2);
static_assert(tp::state_version_of<tally_plain>() == 1);
static_assert(tp::state_upcastable<tally_v2> && !tp::state_upcastable<tally_v1>);

TEST_CASE("snapshots carry the state's version, and a snapshot of an older state is upcast on recovery") {
  auto store = std::make_shared<tp::memory_store>();
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  {
    troupe::actor_system sys;
    auto a = sys.spawn<tally<tally_v1>>(tp::persistence_id{"t-1"}, j, every(4, 1, true));
    for (long i = 1; i <= 5; ++i) test::get(a.ask(add{i}, asio::use_future));
  }
  drain(*j);
  std::optional<tp::snapshot_record> snap;
  REQUIRE(!j->load_snapshot("t-1", {}, snap));
  REQUIRE(snap);
  CHECK(snap->seq == 4);
  CHECK(snap->version == 1);
  REQUIRE(first_event(*j, "t-1") == 5); // events 1-4 deleted: the snapshot is load-bearing

  // A new release: the state is at version 2 and reads version 1 through its upcast.
  troupe::actor_system sys;
  auto a = sys.spawn<tally<tally_v2>>(tp::persistence_id{"t-1"}, j, every(4, 1, false));
  auto [s, from] = test::get(a.ask(tally_query{}, asio::use_future));
  CHECK(from == 4);
  CHECK(s.count == 15);
  CHECK(s.origin == "upcast");
  for (long i = 6; i <= 8; ++i) test::get(a.ask(add{i}, asio::use_future));
  drain(*j);
  REQUIRE(!j->load_snapshot("t-1", {}, snap));
  CHECK(snap->seq == 8);
  CHECK(snap->version == 2);
}

TEST_CASE("a snapshot of a state version the actor does not read falls back to the events, or is named when they are gone") {
  auto store = std::make_shared<tp::memory_store>();
  auto j = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  {
    troupe::actor_system sys;
    auto a = sys.spawn<tally<tally_plain>>(tp::persistence_id{"t-2"}, j, every(3, 1, false));
    auto b = sys.spawn<tally<tally_plain>>(tp::persistence_id{"t-3"}, j, every(3, 1, true));
    for (long i = 1; i <= 4; ++i) {
      test::get(a.ask(add{i}, asio::use_future));
      test::get(b.ask(add{i}, asio::use_future));
    }
  }
  drain(*j);
  // Snapshots of a version-2 state (as a newer release would write them),
  // read by a release whose state is `tally_v1`, which reads only version 1.
  for (const char* pid : {"t-2", "t-3"}) {
    std::optional<tp::snapshot_record> snap;
    REQUIRE(!j->load_snapshot(pid, {}, snap));
    REQUIRE(snap);
    CHECK(snap->version == 1); // a data member named `version` is not the state's version
    snap->version = 2;
    REQUIRE(!store->save_snapshot(pid, *snap));
  }
  troupe::actor_system sys;
  auto a = sys.spawn<tally<tally_v1>>(tp::persistence_id{"t-2"}, j);
  auto [s, from] = test::get(a.ask(tally_query{}, asio::use_future));
  CHECK(from == 0); // the snapshot was passed over: the events rebuilt the state
  CHECK(s.count == 10);
  auto b = sys.spawn<tally<tally_v1>>(tp::persistence_id{"t-3"}, j);
  auto why = test::get(b.when_stopped(asio::use_future)).what;
  CHECK(why.find("snapshot 3 cannot be used (its state version 2 is none this actor reads") != std::string::npos);
  CHECK(why.find("events 1 to 3 it covers were deleted") != std::string::npos);
}

} // namespace persistence_snapshot_test
