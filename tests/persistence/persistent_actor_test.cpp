#include <troupe/persistence/persistent_actor.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/testing/faulty_journal.hpp>
#include <troupe/persistence/memory_store.hpp>
#include <troupe/rocksdb/store.hpp>
// The engine's own layout and RocksDB's API, which these tests reach into.
#include <troupe/rocksdb/detail/engine.hpp>

#include <boost/describe/class.hpp>

#include "../support.hpp"
#include "temp_dir.hpp"

#include <filesystem>
#include <random>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_persistent_actor_test {

namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

struct added {
  static constexpr std::string_view manifest = "test.added";
  int n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const added& e) { v = {{"n", e.n}}; }
added tag_invoke(json::value_to_tag<added>, const json::value& v) { return {json::value_to<int>(v.at("n"))}; }

struct counter_state {
  int total = 0;
  int events = 0;
};

struct add {
  int n;
};
struct try_add {
  int n;
};
struct get {};
struct recovered_query {};

class counter : public tp::persistent_actor<counter, counter_state> {
public:
  using events = tp::event_types<added>;

  counter(tp::persistence_id id, std::shared_ptr<tp::journal> j, tp::persistence_options o = {})
      : persistent_actor(std::move(id), std::move(j), o) {}

  static void apply(counter_state& s, const added& e) {
    s.total += e.n;
    ++s.events;
  }

  troupe::task<int> handle(add a) {
    co_await persist(added{a.n});
    co_return state().total;
  }
  /// Catches a rejected persist: the actor goes on.
  troupe::task<std::string> handle(try_add a) {
    try {
      co_await persist(added{a.n});
    } catch (const troupe::error& e) {
      co_return e.what();
    }
    co_return "";
  }
  std::pair<int, tp::sequence_nr> handle(get) const { return {state().total, last_sequence_nr()}; }
  int handle(recovered_query) const { return recovered_total_; }
  void on_recovery_completed() { recovered_total_ = state().total; }

private:
  int recovered_total_ = -1;
};

template <class Store>
std::shared_ptr<tp::journal> journal_for(Store& s) {
  return std::make_shared<tp::journal_of<Store>>(s);
}

} // namespace

TEST_CASE("persist returns once the event is durable and applied") {
  tp::memory_store store;
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-1"}, journal_for(store));
  CHECK(test::get(c.ask(add{5}, asio::use_future)) == 5);
  CHECK(test::get(c.ask(add{7}, asio::use_future)) == 12);
  CHECK(store.highest_sequence_nr("c-1") == 2);
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{12, 2});
}

TEST_CASE("state survives a restart of the system and the store, and numbering continues") {
  test::temp_dir dir;
  {
    tp::rocksdb_store store(dir.path.string());
    troupe::actor_system sys;
    auto c = sys.spawn<counter>(tp::persistence_id{"c-1"}, journal_for(store));
    for (int i = 1; i <= 10; ++i) test::get(c.ask(add{i}, asio::use_future));
  }
  tp::rocksdb_store store(dir.path.string());
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-1"}, journal_for(store));
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{55, 10});
  CHECK(test::get(c.ask(add{1}, asio::use_future)) == 56);
  CHECK(store.highest_sequence_nr("c-1") == 11);
}

TEST_CASE("commands that arrive during recovery wait for it, and on_recovery_completed sees the recovered state") {
  tp::memory_store store;
  std::vector<tp::event_record> history;
  for (int i = 1; i <= 5000; ++i) history.push_back({tp::sequence_nr(i), "test.added", 1, "{\"n\":1}"});
  REQUIRE(!store.write("c-1", history));
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-1"}, journal_for(store));
  auto first = c.ask(get{}, asio::use_future); // sent before recovery can have finished
  CHECK(test::get(first) == std::pair<int, tp::sequence_nr>{5000, 5000});
  CHECK(test::get(c.ask(recovered_query{}, asio::use_future)) == 5000);
}

TEST_CASE("an unknown manifest fails recovery with the persistence ID, sequence number and manifest, and the journal "
          "is untouched") {
  tp::memory_store store;
  REQUIRE(!store.write("c-9", {{1, "test.added", 1, "{\"n\":1}"}, {2, "test.removed", 1, "{}"}}));
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(troupe::spawn_options{.supervision = troupe::supervision::stop()},
                              tp::persistence_id{"c-9"}, journal_for(store));
  auto d = test::get(c.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(d.what.find("c-9") != std::string::npos);
  CHECK(d.what.find("sequence number 2") != std::string::npos);
  CHECK(d.what.find("test.removed") != std::string::npos);
  CHECK(store.highest_sequence_nr("c-9") == 2);
  int n = 0;
  REQUIRE(!store.replay("c-9", 1, tp::max_sequence_nr, UINT64_MAX, [&](auto&) { ++n; }));
  CHECK(n == 2);
}

TEST_CASE("an unparsable payload fails recovery naming the event") {
  tp::memory_store store;
  REQUIRE(!store.write("c-8", {{1, "test.added", 1, "{not json"}}));
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(troupe::spawn_options{.supervision = troupe::supervision::stop()},
                              tp::persistence_id{"c-8"}, journal_for(store));
  auto d = test::get(c.when_stopped(asio::use_future));
  CHECK(d.what.find("sequence number 1 (test.added): cannot parse") != std::string::npos);
}

TEST_CASE("an event over the size limit is rejected: nothing written, state unchanged, the actor goes on") {
  tp::memory_store store;
  troupe::actor_system sys;
  tp::persistence_options small;
  small.max_event_bytes = 8;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-2"}, journal_for(store), small);
  auto message = test::get(c.ask(try_add{123456}, asio::use_future)); // {"n":123456} is 12 bytes
  CHECK(message.find("limit is 8") != std::string::npos);
  CHECK(store.highest_sequence_nr("c-2") == 0);
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{0, 0});
  CHECK(test::get(c.ask(try_add{1}, asio::use_future)).empty()); // {"n":1} fits
}

TEST_CASE("a storage failure fails the handler, and the restarted actor recovers what is durable") {
  tp::memory_store store;
  auto faulty = std::make_shared<troupe::testing::faulty_journal>(journal_for(store));
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-3"}, faulty);
  CHECK(test::get(c.ask(add{4}, asio::use_future)) == 4);
  faulty->fail_next_writes(1);
  auto failed = c.ask(add{100}, asio::use_future);
  REQUIRE(failed.wait_for(test::deadline) == std::future_status::ready);
  try {
    failed.get();
    FAIL("the persist succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::handler_failed);
    CHECK(std::string(e.what()).find("storage failure") != std::string::npos);
  }
  // Restarted (default supervision) and recovered: 4, not 104.
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{4, 1});
  CHECK(test::get(c.ask(add{1}, asio::use_future)) == 5);
}

TEST_CASE("a failing replay stops the actor from starting until recovery succeeds") {
  tp::memory_store store;
  REQUIRE(!store.write("c-4", {{1, "test.added", 1, "{\"n\":3}"}}));
  auto faulty = std::make_shared<troupe::testing::faulty_journal>(journal_for(store));
  faulty->fail_next_replays(2);
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(troupe::spawn_options{.supervision = troupe::supervision::restart(
                                                        5, std::chrono::seconds(10), std::chrono::milliseconds(1),
                                                        std::chrono::milliseconds(1))},
                              tp::persistence_id{"c-4"}, faulty);
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{3, 1}); // third attempt
}

namespace {
/// An event holding JSON values: they share the storage of the value they
/// were converted from.
struct noted {
  static constexpr std::string_view manifest = "test.noted";
  json::object details;
};
void tag_invoke(json::value_from_tag, json::value& v, const noted& e) { v = {{"details", e.details}}; }
noted tag_invoke(json::value_to_tag<noted>, const json::value& v) { return {v.at("details").as_object()}; }

struct notes_state {
  std::vector<json::object> notes;
};
struct note {
  int i;
};
struct all_notes {};

class notebook : public tp::persistent_actor<notebook, notes_state> {
public:
  using events = tp::event_types<noted>;
  notebook(tp::persistence_id id, std::shared_ptr<tp::journal> j) : persistent_actor(std::move(id), std::move(j)) {}
  static void apply(notes_state& s, const noted& e) { s.notes.push_back(e.details); }
  troupe::task<> handle(note n) {
    json::object details;
    details["i"] = n.i;
    details["text"] = "a note long enough to need storage of its own, number " + std::to_string(n.i);
    noted e{std::move(details)}; // named: GCC 12 mishandles temporaries in co_await
    co_await persist(e);
  }
  std::string handle(all_notes) const {
    std::string out;
    for (auto& n : state().notes) out += json::serialize(n) + "\n";
    return out;
  }
};
} // namespace

TEST_CASE("events holding JSON values are recovered intact") {
  test::temp_dir dir;
  std::string before;
  {
    tp::rocksdb_store store(dir.path.string());
    troupe::actor_system sys;
    auto b = sys.spawn<notebook>(tp::persistence_id{"notes"}, journal_for(store));
    for (int i = 1; i <= 40; ++i) test::get(b.ask(note{i}, asio::use_future));
    before = test::get(b.ask(all_notes{}, asio::use_future));
  }
  tp::rocksdb_store store(dir.path.string());
  troupe::actor_system sys;
  auto b = sys.spawn<notebook>(tp::persistence_id{"notes"}, journal_for(store));
  const auto after = test::get(b.ask(all_notes{}, asio::use_future));
  CHECK(after == before);
  CHECK(after.find("number 1\"") != std::string::npos);
  CHECK(after.find("number 40\"") != std::string::npos);
}

namespace {
struct named {
  static constexpr std::string_view manifest = "test.named";
  std::string name;
};
BOOST_DESCRIBE_STRUCT(named, (), (name))
struct names_state {
  std::vector<std::string> names;
};
struct name_it {
  std::string name;
};
struct all_names {};
class names : public tp::persistent_actor<names, names_state> {
public:
  using events = tp::event_types<named>;
  using persistent_actor::persistent_actor;
  static void apply(names_state& s, const named& e) { s.names.push_back(e.name); }
  troupe::task<void> handle(name_it n) {
    named e{std::move(n.name)}; // (named: GCC 12 and aggregate temporaries in co_await, docs/core.md)
    co_await persist(std::move(e));
  }
  std::vector<std::string> handle(all_names) const { return state().names; }
};
} // namespace

TEST_CASE("events holding strings that are not UTF-8 (Latin-1 text, binary bytes) are recovered as written") {
  test::temp_dir dir;
  const std::vector<std::string> written{"caf\xe9", std::string("\xff\x00\xfe", 3), "plain", "\xc3"};
  {
    tp::rocksdb_store store(dir.path.string());
    troupe::actor_system sys;
    auto a = sys.spawn<names>(tp::persistence_id{"names"}, journal_for(store));
    for (auto& n : written) test::get(a.ask(name_it{n}, asio::use_future));
  }
  tp::rocksdb_store store(dir.path.string());
  troupe::actor_system sys;
  auto a = sys.spawn<names>(tp::persistence_id{"names"}, journal_for(store));
  CHECK(test::get(a.ask(all_names{}, asio::use_future)) == written);
}

TEST_CASE("a second live actor of one persistence ID fails to spawn with already_running, also while the first "
          "restarts; once the first has stopped the ID is free") {
  tp::memory_store store;
  auto faulty = std::make_shared<troupe::testing::faulty_journal>(journal_for(store));
  troupe::actor_system sys;
  auto first = sys.spawn<counter>(
      troupe::spawn_options{.supervision = troupe::supervision::restart(3, std::chrono::seconds(10),
                                                                        std::chrono::milliseconds(300),
                                                                        std::chrono::milliseconds(300))},
      tp::persistence_id{"c-twice"}, faulty);
  CHECK(test::get(first.ask(add{1}, asio::use_future)) == 1);
  auto spawn_again = [&] {
    try {
      (void)sys.spawn<counter>(tp::persistence_id{"c-twice"}, journal_for(store));
    } catch (const troupe::error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("c-twice"));
      return e.code();
    }
    return std::error_code{};
  };
  CHECK(spawn_again() == tp::errc::already_running);
  // Another journal over the same store: the same rule.
  CHECK(spawn_again() == tp::errc::already_running);
  // While the first restarts (a failed write; 300 ms of backoff).
  faulty->fail_next_writes(1);
  auto failed = first.ask(add{1}, asio::use_future);
  REQUIRE(failed.wait_for(test::deadline) == std::future_status::ready);
  CHECK(spawn_again() == tp::errc::already_running);
  CHECK(test::get(first.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{1, 1}); // restarted
  CHECK(spawn_again() == tp::errc::already_running);
  first.stop();
  (void)test::get(first.when_stopped(asio::use_future));
  auto second = sys.spawn<counter>(tp::persistence_id{"c-twice"}, journal_for(store));
  CHECK(test::get(second.ask(add{2}, asio::use_future)) == 3);
  CHECK(store.live_ids().size() == 1);
}

TEST_CASE("an actor whose recovery failed never handles a message, also under supervision::resume") {
  tp::memory_store store;
  REQUIRE(!store.write("c-half", {{1, "test.added", 1, "{\"n\":1}"},
                                  {2, "test.added", 1, "{\"n\":2}"},
                                  {3, "test.unknown", 1, "{}"},
                                  {4, "test.added", 1, "{\"n\":4}"}}));
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(troupe::spawn_options{.supervision = troupe::supervision::resume()},
                              tp::persistence_id{"c-half"}, journal_for(store));
  auto answer = c.ask(get{}, asio::use_future);
  REQUIRE(answer.wait_for(test::deadline) == std::future_status::ready);
  CHECK_THROWS_AS(answer.get(), troupe::error); // not the state of events 1-2
  auto d = test::get(c.when_stopped(asio::use_future));
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK_THAT(d.what, Catch::Contains("sequence number 3"));
  CHECK(store.live_ids().size() == 0);
}

TEST_CASE("recovery passes over the numbers a salvage dropped, and the next event continues after them") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    REQUIRE(!s.write("c-salvaged", {{1, "test.added", 1, "{\"n\":1}"}, {2, "test.added", 1, "{\"n\":2}"}}));
    // What a salvage leaves when it dropped events 3 to 5.
    namespace d = tp::detail;
    REQUIRE(s.db()
                .Put(rocksdb::WriteOptions{}, s.journal_cf(), d::seq_key(d::id_prefix("c-salvaged"), 5),
                     d::encode_event(d::events_lost_record(3, 5)))
                .ok());
  }
  auto store = std::make_shared<tp::rocksdb_store>(dir.str());
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-salvaged"}, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{3, 5});
  CHECK(test::get(c.ask(add{4}, asio::use_future)) == 7);
  CHECK(store->highest_sequence_nr("c-salvaged") == 6);
}

TEST_CASE("a long recovery reports its progress every so many events and at the end") {
  tp::memory_store store;
  std::vector<tp::event_record> es;
  for (tp::sequence_nr s = 1; s <= 2500; ++s) es.push_back({s, "test.added", 1, "{\"n\":1}"});
  REQUIRE(!store.write("c-long", es));
  std::mutex m;
  std::vector<tp::recovery_progress> seen;
  tp::persistence_options o;
  o.recovery_progress_every = 1000;
  o.on_recovery_progress = [&](const tp::recovery_progress& p) {
    std::lock_guard g(m);
    seen.push_back(p);
  };
  troupe::actor_system sys;
  auto c = sys.spawn<counter>(tp::persistence_id{"c-long"}, journal_for(store), o);
  CHECK(test::get(c.ask(get{}, asio::use_future)).first == 2500);
  std::lock_guard g(m);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].events_read == 1000);
  CHECK(seen[1].events_read == 2000);
  CHECK_FALSE(seen[1].done);
  CHECK(seen[2].done);
  CHECK(seen[2].events_read == 2500);
  for (auto& p : seen) CHECK(p.highest == 2500);
}

} // namespace persistence_persistent_actor_test

namespace persistence_persistent_actor_test {

TEST_CASE("metrics: a recovery through the system's journal counts its events and its time") {
  tp::memory_store store;
  {
    troupe::actor_system sys;
    auto c = sys.spawn<counter>(tp::persistence_id{"c-1"}, journal_for(store));
    for (int i = 1; i <= 10; ++i) test::get(c.ask(add{i}, asio::use_future));
  }
  troupe::actor_system sys;
  auto j = journal_for(store);
  tp::set_journal(sys, j);
  auto c = sys.spawn<counter>(tp::persistence_id{"c-1"}, j);
  auto d = sys.spawn<counter>(tp::persistence_id{"c-2"}, j); // nothing to replay
  CHECK(test::get(c.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{55, 10});
  CHECK(test::get(d.ask(get{}, asio::use_future)) == std::pair<int, tp::sequence_nr>{0, 0});
  const auto m = sys.metrics();
  CHECK(m.value("troupe_recovery_events_total") == 10);
  const auto* r = m.sample("troupe_recovery_seconds");
  REQUIRE(r);
  CHECK(r->count == 2);
  CHECK(r->sum > 0);
}

} // namespace persistence_persistent_actor_test
