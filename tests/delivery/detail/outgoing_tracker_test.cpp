// The outgoing-delivery tracker on its own: sending, confirmation,
// redelivery, dead letters, room under max_unconfirmed, one waiting copy
// of a received delivery.
#include <troupe/delivery/detail/outgoing_tracker.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/persistence/memory_store.hpp>
#include <troupe/testing/faulty_journal.hpp>

#include "../../support.hpp"

#include <asio/use_future.hpp>

#include <atomic>
#include <future>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_detail_outgoing_tracker_test {

using namespace std::chrono_literals;
namespace td = troupe::delivery;
namespace tp = troupe::persistence;

namespace {

/// What the tracker told its actor, and what it sent.
struct seen {
  std::mutex m;
  std::condition_variable changed;
  std::vector<std::string> told;
  std::vector<td::message> sent;
  void add(std::string s) {
    {
      std::lock_guard g(m);
      told.push_back(std::move(s));
    }
    changed.notify_all();
  }
  std::vector<std::string> told_now() {
    std::lock_guard g(m);
    return told;
  }
  std::vector<td::message> sent_now() {
    std::lock_guard g(m);
    return sent;
  }
};

struct owner_actor {
  std::shared_ptr<seen> s;
  void handle(td::detail::inbound in) { s->add("inbound " + in.msg.id.str()); }
  void handle(td::confirmed c) { s->add("confirmed " + c.id.str()); }
  void handle(td::delivery_failed f) { s->add("failed " + f.letter.id.str()); }
  void handle(td::redelivery_warning w) { s->add("warning " + w.id.str() + " " + std::to_string(w.attempts)); }
};

/// Records every message sent, delivers nothing.
struct recording_transport final : td::transport {
  std::shared_ptr<seen> s;
  void bind(const std::string&, std::shared_ptr<td::endpoint>) override {}
  void unbind(const std::string&, const td::endpoint*) override {}
  void send(td::message m) override {
    std::lock_guard g(s->m);
    s->sent.push_back(std::move(m));
  }
  void send(td::acknowledgement) override {}
  void route(const std::string&, std::function<void(td::message)>) override {}
};

struct fixture {
  std::shared_ptr<seen> s = std::make_shared<seen>();
  std::shared_ptr<tp::memory_store> store = std::make_shared<tp::memory_store>();
  std::shared_ptr<tp::journal> journal = std::make_shared<tp::journal_of<tp::memory_store>>(store);
  std::shared_ptr<recording_transport> net = std::make_shared<recording_transport>();
  troupe::actor_system sys{troupe::system_config{.threads = 2}};
  troupe::actor_ref<owner_actor> self = sys.spawn<owner_actor>(s);
  td::detail::tables tables = td::detail::tables::of(*journal);

  fixture() { net->s = s; }

  std::shared_ptr<td::detail::outgoing_tracker> tracker(td::redelivery_policy p) {
    return std::make_shared<td::detail::outgoing_tracker>("shop", journal, tables, net, self, p,
                                                                       sys.get_executor());
  }

  /// Waits until `pred` holds: checked whenever the actor is told
  /// something, and at least every 2 ms (for the store).
  template <class P>
  bool eventually(P pred) {
    return test::eventually(pred, s->m, s->changed, 2ms);
  }

  std::size_t records(char kind) {
    std::size_t n = 0;
    REQUIRE_FALSE(
        store->scan(tables.deliveries, td::detail::key_prefix("shop") + kind, [&](auto, auto) { return ++n, true; }));
    return n;
  }
};

/// Recorded now (a delivery is sent only within its horizon from then).
td::detail::outgoing out(std::string id) {
  return {"warehouse", std::move(id), "t.item", 1, "{}", troupe::detail::now_ms()};
}

/// Redelivered every 2-4 ms, without jitter, `attempts` times at most (0:
/// without end).
td::redelivery_policy quick(std::uint32_t attempts) {
  td::redelivery_policy p;
  p.initial_backoff = 2ms;
  p.max_backoff = 4ms;
  p.jitter = 0;
  p.max_attempts = attempts;
  return p;
}

td::redelivery_policy slow() {
  td::redelivery_policy p;
  p.initial_backoff = 1h;
  p.max_backoff = 1h;
  p.jitter = 0;
  return p;
}

} // namespace

TEST_CASE("recovered deliveries are sent at once, an acknowledgement forgets one and removes its record later") {
  fixture f;
  REQUIRE_FALSE(f.store->write(
      "", {},
      {tp::table_write::put(f.tables.deliveries, td::detail::key(td::detail::key_prefix("shop"), 'p', "a"),
                            td::detail::encode_outgoing(out("a")))}));
  auto t = f.tracker(slow());
  t->start({out("a"), out("b")});
  auto sent = f.s->sent_now();
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].from == "shop");
  CHECK(sent[0].to == "warehouse");
  CHECK(t->stats().unconfirmed == 2);
  t->acknowledge({"shop", "warehouse", td::delivery_id("a"), std::nullopt});
  t->acknowledge({"shop", "warehouse", td::delivery_id("a"), std::nullopt}); // repeated: harmless
  CHECK(t->stats().unconfirmed == 1);
  CHECK(t->stats().confirmed == 1);
  CHECK(f.eventually([&] { return f.s->told_now() == std::vector<std::string>{"confirmed a"}; }));
  CHECK(f.eventually([&] { return f.records('p') == 0; })); // the later write
  t->close();
}

TEST_CASE("an unconfirmed delivery is sent again with the same ID, warned about, then dead-lettered atomically") {
  fixture f;
  auto p = quick(3);
  p.warn_after = 2;
  auto t = f.tracker(p);
  t->start({});
  REQUIRE(t->try_reserve(1));
  REQUIRE_FALSE(f.store->write(
      "", {}, {tp::table_write::put(f.tables.deliveries, t->pending_key("d"), td::detail::encode_outgoing(out("d")))}));
  t->add_reserved(out("d"));
  REQUIRE(f.eventually([&] { return t->stats().dead_lettered == 1; }));
  auto sent = f.s->sent_now();
  REQUIRE(sent.size() == 3);
  for (auto& m : sent) CHECK(m.id.str() == "d");
  CHECK(t->stats().resent == 2);
  CHECK(f.records('p') == 0);
  CHECK(f.records('x') == 1);
  CHECK(f.eventually([&] {
    auto told = f.s->told_now();
    return told == std::vector<std::string>{"warning d 2", "failed d"};
  }));
  t->close();
}

TEST_CASE("room under max_unconfirmed is reserved, a waiter is released by a confirmation, or by the close") {
  fixture f;
  auto p = slow();
  p.max_unconfirmed = 2;
  auto t = f.tracker(p);
  t->start({});
  REQUIRE(t->try_reserve(2));
  CHECK_FALSE(t->try_reserve(1));
  t->add_reserved(out("x"));
  t->add_reserved(out("y"));
  CHECK_FALSE(t->try_reserve(1));
  auto room = t->wait_for_room(asio::use_future);
  t->acknowledge({"shop", "warehouse", td::delivery_id("x"), std::nullopt});
  test::get(room);
  CHECK(t->try_reserve(1));
  auto closed = t->wait_for_room(asio::use_future);
  t->close();
  CHECK_THROWS_AS(test::get(closed), std::system_error);
}

TEST_CASE("a received delivery waits in the mailbox as one copy per sender and ID") {
  fixture f;
  auto t = f.tracker(slow());
  t->start({});
  td::message m{"shop", "warehouse", td::delivery_id("r"), "t.item", 1, "{}"};
  t->receive(m);
  t->receive(m); // a redelivery of what is still waiting: dropped
  td::message other = m;
  other.from = "another-sender";
  t->receive(other); // the same ID from another sender: its own copy
  CHECK(f.eventually([&] { return f.s->told_now().size() == 2; }));
  t->dequeued(m);
  t->receive(m);
  CHECK(f.eventually([&] { return f.s->told_now().size() == 3; }));
  t->close();
}

TEST_CASE("reserve refuses an ID held for another receiver, finds the same delivery, and claims under one lock") {
  fixture f;
  auto p = slow();
  p.max_unconfirmed = 2;
  auto t = f.tracker(p);
  t->start({}, {{"buried", "elsewhere"}});
  using outcome = td::detail::outgoing_tracker::reservation::outcome;
  auto to = [](std::string id, std::string receiver) {
    auto o = out(std::move(id));
    o.to = std::move(receiver);
    return o;
  };
  CHECK(t->reserve(out("a")).what == outcome::reserved); // claimed, being recorded
  CHECK(t->reserve(out("a")).what == outcome::same);
  auto held = t->reserve(to("a", "other"));
  CHECK(held.what == outcome::held_elsewhere);
  CHECK(held.other == "warehouse");
  auto dead = t->reserve(out("buried"));
  CHECK(dead.what == outcome::dead_elsewhere);
  CHECK(dead.other == "elsewhere");
  CHECK(t->reserve(to("buried", "elsewhere")).what == outcome::reserved); // its own receiver: a new delivery
  CHECK(t->reserve(out("c")).what == outcome::full);
  CHECK_FALSE(t->holder("c"));
  // A tracked delivery holds its ID; its claim's node serves the next claim.
  t->add_reserved(out("a"));
  CHECK(*t->holder("a") == "warehouse");
  t->unclaim("buried");
  CHECK_FALSE(t->holder("buried"));
  CHECK(t->reserve(to("c", "third")).what == outcome::reserved);
  CHECK(*t->holder("c") == "third");
  CHECK(t->reserve(to("c", "warehouse")).what == outcome::held_elsewhere);
  t->acknowledge({"shop", "warehouse", td::delivery_id("a"), std::nullopt});
  CHECK_FALSE(t->holder("a"));
  t->close();
}

TEST_CASE("a tracker whose deliveries were all confirmed goes idle, and redelivers the next one unconfirmed") {
  fixture f;
  auto t = f.tracker(quick(0));
  t->start({});
  REQUIRE(t->try_reserve(1));
  t->add_reserved(out("a"));
  t->acknowledge({"shop", "warehouse", td::delivery_id("a"), std::nullopt});
  // Idle: the timer's last wait ends, and none follows (nothing is due).
  REQUIRE(f.eventually([&] { return !t->timer_waits(); }));
  const auto idle = t->stats();
  CHECK(idle.resent == 0);
  REQUIRE(t->try_reserve(1));
  t->add_reserved(out("b"));
  REQUIRE(f.eventually([&] { return t->stats().resent >= 2; }));
  for (auto& m : f.s->sent_now()) CHECK((m.id.str() == "a" || m.id.str() == "b"));
  t->close();
}

TEST_CASE("a sender's work mark goes only once nothing is outstanding: a burial does not clear it under a delivery "
          "recorded meanwhile") {
  fixture f;
  // Completions of writes come 300 ms late: a burial is written, and its
  // delivery's ID still claimed, for that long.
  auto j = std::make_shared<troupe::testing::faulty_journal>(f.journal);
  auto p = quick(1);
  p.initial_backoff = p.max_backoff = 20ms;
  auto t = std::make_shared<td::detail::outgoing_tracker>("shop", j, f.tables, f.net, f.self, p,
                                                                      f.sys.get_executor());
  t->start({});
  const tp::work_index work(f.tables.work);
  const auto marked = [&] { return work.marked(*f.journal, "shop"); };
  const auto record = [&](const std::string& id) {
    auto r = t->reserve(out(id));
    REQUIRE(r.what == decltype(r)::outcome::reserved);
    std::vector<tp::table_write> w{tp::table_write::put(f.tables.deliveries, t->pending_key(id),
                                                        td::detail::encode_outgoing(out(id)))};
    if (r.first) w.push_back(t->work_mark());
    REQUIRE_FALSE(f.store->write("", {}, w));
    t->add_reserved(out(id), r.first);
    return r.first;
  };
  CHECK(record("d1")); // the first outstanding: recorded with the mark
  CHECK(marked() == std::vector<std::string>{"shop"});
  j->delay_writes(300ms);
  // d1 runs out of attempts: its burial is written, not yet complete.
  REQUIRE(f.eventually([&] { return f.records('x') == 1; }));
  CHECK_FALSE(record("d2")); // d1 is still outstanding (claimed): no mark of its own
  CHECK(f.records('p') == 1);
  CHECK(marked() == std::vector<std::string>{"shop"}); // (it was cleared here before)
  // Both buried in the end: then it goes.
  REQUIRE(f.eventually([&] { return t->stats().dead_lettered == 2; }));
  REQUIRE(f.eventually([&] { return marked().empty(); }));
  t->close();
}

namespace {

/// Records delivery `id` through `t` as a reliable actor does: its intent,
/// with the work mark when the reservation says so, in one write to `j`.
void record_through(fixture& f, troupe::testing::faulty_journal& j, td::detail::outgoing_tracker& t,
                    const std::string& id) {
  auto r = t.reserve(out(id));
  REQUIRE(r.what == decltype(r)::outcome::reserved);
  std::vector<tp::table_write> w{
      tp::table_write::put(f.tables.deliveries, t.pending_key(id), td::detail::encode_outgoing(out(id)))};
  if (r.first) w.push_back(t.work_mark());
  std::promise<std::error_code> done;
  j.write("", {}, std::move(w), [&](std::error_code ec) { done.set_value(ec); });
  REQUIRE_FALSE(done.get_future().get());
  t.add_reserved(out(id), r.first);
}

/// The deliveries recorded as unconfirmed for "shop", as a new activation
/// loads them.
std::vector<td::detail::outgoing> loaded(fixture& f) {
  std::vector<td::detail::outgoing> out;
  const auto prefix = td::detail::key_prefix("shop") + 'p';
  REQUIRE_FALSE(f.store->scan(f.tables.deliveries, prefix, [&](std::string_view k, std::string_view v) {
    out.push_back(td::detail::decode_outgoing(std::string(k.substr(prefix.size())), std::string(v)));
    return true;
  }));
  return out;
}

} // namespace

TEST_CASE("the first delivery of a sender's next activation carries its work mark, though it loaded a confirmation "
          "whose removal was not yet written") {
  fixture f;
  troupe::testing::faulty_journal j(f.journal);
  j.defer_later_writes(true); // a group commit that has not come yet
  const tp::work_index work(f.tables.work);
  const auto marked = [&] { return work.marked(*f.journal, "shop"); };
  auto t1 = std::make_shared<td::detail::outgoing_tracker>("shop", std::shared_ptr<tp::journal>(&j, [](auto*) {}),
                                                                       f.tables, f.net, f.self, slow(), f.sys.get_executor());
  t1->start({});
  record_through(f, j, *t1, "d1");
  REQUIRE(marked() == std::vector<std::string>{"shop"});
  t1->acknowledge({"shop", "warehouse", td::delivery_id("d1"), std::nullopt});
  t1->close(); // passivated before the confirmation's removal (and the mark's clearing) is written
  auto stale = loaded(f);
  REQUIRE(stale.size() == 1); // d1, confirmed, still in the store
  auto t2 = std::make_shared<td::detail::outgoing_tracker>("shop", std::shared_ptr<tp::journal>(&j, [](auto*) {}),
                                                                       f.tables, f.net, f.self, slow(), f.sys.get_executor());
  t2->start(std::move(stale));
  record_through(f, j, *t2, "d2"); // its write carries the held clearing first
  CHECK(f.records('p') == 1);      // d2 (d1's record went with the held changes)
  CHECK(marked() == std::vector<std::string>{"shop"}); // d2 is unconfirmed: its sender is marked
  t2->close();
}

TEST_CASE("an acknowledgement reaching a stopped activation's tracker does not clear the mark its successor relies "
          "on") {
  fixture f;
  troupe::testing::faulty_journal j(f.journal);
  const tp::work_index work(f.tables.work);
  const auto marked = [&] { return work.marked(*f.journal, "shop"); };
  auto shared = std::shared_ptr<tp::journal>(&j, [](auto*) {});
  auto t1 = std::make_shared<td::detail::outgoing_tracker>("shop", shared, f.tables, f.net, f.self, slow(),
                                                                       f.sys.get_executor());
  t1->start({});
  record_through(f, j, *t1, "d1");
  t1->close(); // a restart: d1 still unconfirmed
  auto t2 = std::make_shared<td::detail::outgoing_tracker>("shop", shared, f.tables, f.net, f.self, slow(),
                                                                       f.sys.get_executor());
  t2->start(loaded(f));
  record_through(f, j, *t2, "d2");
  // d1's acknowledgement, on its way when the first instance stopped.
  t1->acknowledge({"shop", "warehouse", td::delivery_id("d1"), std::nullopt});
  REQUIRE_FALSE(f.store->write("", {}, {})); // applies what write_later queued
  CHECK(marked() == std::vector<std::string>{"shop"}); // d2 is unconfirmed
  t2->close();
}

} // namespace delivery_detail_outgoing_tracker_test
