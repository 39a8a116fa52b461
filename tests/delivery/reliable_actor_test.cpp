// Reliable delivery between persistent actors: at least once on the wire,
// each delivery ID's effects exactly once at the receiver.
#include <troupe/delivery/reliable_actor.hpp>

#include <troupe/delivery/entities.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/testing/faulty_transport.hpp>
#include <troupe/testing/wall_clock.hpp>
#include <troupe/testing/faulty_journal.hpp>
#include <troupe/persistence/memory_store.hpp>

#include "../support/stores.hpp"

#include "../support.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_reliable_actor_test {

namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// -- messages and events -------------------------------------------------------

struct item {
  static constexpr std::string_view manifest = "test.item";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item& e) { v = {{"n", e.n}}; }
item tag_invoke(json::value_to_tag<item>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct item_sent {
  static constexpr std::string_view manifest = "test.item-sent";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item_sent& e) { v = {{"n", e.n}}; }
item_sent tag_invoke(json::value_to_tag<item_sent>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct item_taken {
  static constexpr std::string_view manifest = "test.item-taken";
  std::string id;
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item_taken& e) { v = {{"id", e.id}, {"n", e.n}}; }
item_taken tag_invoke(json::value_to_tag<item_taken>, const json::value& v) {
  return {json::value_to<std::string>(v.at("id")), json::value_to<long>(v.at("n"))};
}

// -- what the test observes --------------------------------------------------

struct probe {
  std::mutex m;
  std::condition_variable changed; // something below changed
  std::vector<td::confirmed> confirmations;
  std::vector<td::delivery_failed> failures;
  std::vector<td::redelivery_warning> warnings;
  std::vector<td::delivery_rejected> rejections;
  std::atomic<int> handler_runs{0};
  std::atomic<bool> fail_handler{false};
  std::atomic<int> receivers_constructed{0}; // a restart constructs one more

  std::size_t confirmed_count() {
    std::lock_guard g(m);
    return confirmations.size();
  }

  template <class T>
  void record(std::vector<T>& into, T what) {
    {
      std::lock_guard g(m);
      into.push_back(std::move(what));
    }
    changed.notify_all();
  }
};

// Events applied to senders, process-wide: a send before recovery has
// applied every event would show here.
std::atomic<long> sender_events_applied{0};

struct send_item {
  long n;
};
struct send_two {
  long n;
};
/// `item{n}` under the business ID `order:<order>:picklist`, which other
/// senders may use too.
struct send_order {
  long order;
  long n;
};
/// `item{n}` under the ID `fixed:<n>`, to the receiver `to`.
struct send_to {
  std::string to;
  long n;
};

struct sender_state {
  long sent = 0;
  std::set<long> items;
};

class sender : public td::reliable_actor<sender, sender_state> {
public:
  using events = tp::event_types<item_sent>;

  sender(troupe::context<sender> ctx, troupe::persistence_id id, std::string to, std::shared_ptr<probe> p,
         td::delivery_options o = {})
      : reliable_actor(ctx, std::move(id), o), to_(std::move(to)), probe_(std::move(p)) {}

  static void apply(sender_state& s, const item_sent& e) {
    ++s.sent;
    s.items.insert(e.n);
    sender_events_applied.fetch_add(1);
  }

  troupe::task<> handle(send_item m) {
    if (state().items.contains(m.n)) co_return; // asked again (after a crash): already recorded
    auto id = td::delivery_id::of(pid(), m.n);
    item msg{m.n};
    item_sent e{m.n};
    co_await deliver(to_, id, msg, e);
  }

  troupe::task<> handle(send_two m) {
    // Two deliveries, the first with the event that causes both.
    auto seq = last_sequence_nr() + 1;
    item a{m.n}, b{m.n + 1};
    item_sent e{m.n};
    co_await deliver(to_, td::delivery_id::derived(pid(), seq, 0), a, e);
    co_await deliver(to_, td::delivery_id::derived(pid(), seq, 1), b);
  }

  troupe::task<> handle(send_order m) {
    auto id = td::delivery_id::of("order", m.order, "picklist");
    item msg{m.n};
    item_sent e{m.n};
    co_await deliver(to_, id, msg, e);
  }

  troupe::task<> handle(send_to m) {
    item msg{m.n};
    co_await deliver(m.to, td::delivery_id::of("fixed", m.n), msg);
  }

  long handle(troupe::persistence::persistence_id) { return state().sent; }

  void handle(td::confirmed c) { probe_->record(probe_->confirmations, std::move(c)); }
  void handle(td::delivery_failed f) { probe_->record(probe_->failures, std::move(f)); }
  void handle(td::redelivery_warning w) { probe_->record(probe_->warnings, std::move(w)); }
  void handle(td::delivery_rejected r) { probe_->record(probe_->rejections, std::move(r)); }

private:
  std::string to_;
  std::shared_ptr<probe> probe_;
};

struct receiver_state {
  std::map<std::string, int> taken;
  long total = 0;
};

struct taken_query {};

/// The item every receiver's handler fails on, before it persists anything.
constexpr long poison = 666;
/// Items every receiver's handler fails on after it persisted.
constexpr long poison_after_persist = 667, other_poison_after_persist = 668;

class receiver : public td::reliable_actor<receiver, receiver_state> {
public:
  using events = tp::event_types<item_taken>;
  using accepts = td::accepts<item>;

  receiver(troupe::context<receiver> ctx, troupe::persistence_id id, std::shared_ptr<probe> p,
           td::delivery_options o = {})
      : reliable_actor(ctx, std::move(id), o), probe_(std::move(p)) {
    ++probe_->receivers_constructed;
  }

  static void apply(receiver_state& s, const item_taken& e) {
    ++s.taken[e.id];
    s.total += e.n;
  }

  troupe::task<long> handle(td::delivery<item> d) {
    ++probe_->handler_runs;
    probe_->changed.notify_all();
    if (d.message.n == poison) throw std::runtime_error("cannot pick item " + std::to_string(poison));
    item_taken e{d.id.str(), d.message.n};
    co_await persist(e);
    if (probe_->fail_handler.load() || d.message.n == poison_after_persist || d.message.n == other_poison_after_persist)
      throw std::runtime_error("handler failed on purpose");
    co_return d.message.n * 10;
  }

  receiver_state handle(taken_query) { return state(); }

private:
  std::shared_ptr<probe> probe_;
};

// -- a process: store, journal, system, transport -------------------------------

td::delivery_options fast_options() {
  td::delivery_options o;
  o.redelivery.initial_backoff = 10ms;
  o.redelivery.max_backoff = 40ms;
  o.redelivery.max_attempts = 0; // never give up
  o.dedup.retention = std::chrono::milliseconds::max();
  return o;
}

/// A horizon of 20 ms (2 attempts, 10 ms apart), marks kept for `retention`.
td::delivery_options short_horizon(std::chrono::milliseconds retention) {
  auto o = fast_options();
  o.redelivery.max_attempts = 2;
  o.redelivery.max_backoff = 10ms;
  o.dedup.retention = retention;
  return o;
}

struct world {
  test::durable_store store;
  std::shared_ptr<troupe::testing::faulty_journal> journal;
  std::unique_ptr<troupe::actor_system> sys;
  std::shared_ptr<troupe::testing::faulty_transport> net;
  std::shared_ptr<probe> probes = std::make_shared<probe>();

  world() { boot(); }

  /// A fresh process over the same durable store.
  void boot(std::uint64_t seed = 1) {
    sys.reset();
    journal.reset();
    journal = std::make_shared<troupe::testing::faulty_journal>(store.open_process());
    sys = std::make_unique<troupe::actor_system>();
    tp::set_journal(*sys, journal);
    net = std::make_shared<troupe::testing::faulty_transport>(std::make_shared<td::local_transport>(),
                                                              sys->get_executor(), seed);
    td::set_transport(*sys, net);
  }

  /// The kill: the process goes away with whatever it had in memory.
  void crash() {
    sys.reset();
    journal.reset();
  }

  receiver_state taken(const troupe::actor_ref<receiver>& r) {
    return test::get(r.ask(taken_query{}, asio::use_future));
  }

  td::delivery_stats stats(const auto& ref) { return test::get(ref.ask(td::delivery_status{}, asio::use_future)); }

  /// Unconfirmed deliveries of `pid` in the store.
  std::size_t pending_in_store(const std::string& pid) {
    std::size_t n = 0;
    auto prefix = td::detail::key_prefix(pid) + 'p';
    REQUIRE_FALSE(store->scan(store->open_table("deliveries"), prefix, [&](auto, auto) { return ++n, true; }));
    return n;
  }

  /// Waits until `pred` holds, up to `limit`: checked again whenever the
  /// probes see a handler run, a confirmation or a failure, and at least
  /// every 5 ms (for what they do not see, such as the store).
  template <class P>
  bool eventually(P pred, std::chrono::milliseconds limit = test::deadline) {
    return test::eventually(pred, probes->m, probes->changed, 5ms, limit);
  }
};

/// Stands in for a sender: keeps the acknowledgements sent to its name.
struct ack_spy final : td::endpoint {
  std::mutex m;
  std::vector<td::acknowledgement> acks;
  void receive(td::message) override {}
  void acknowledge(td::acknowledgement a) override {
    std::lock_guard g(m);
    acks.push_back(std::move(a));
  }
};

/// Keeps what a transport warns about.
struct warnings_heard {
  std::mutex m;
  std::vector<std::string> said;
  void listen(td::transport& t) {
    t.on_warning([this](const std::string& s) {
      std::lock_guard g(m);
      said.push_back(s);
    });
  }
};

std::uint64_t seed_from_env() {
  if (const char* s = std::getenv("TROUPE_PROPERTY_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}


/// Puts the wall clock back where the test found it.
struct clock_guard {
  std::chrono::milliseconds at = troupe::testing::wall_clock_step();
  ~clock_guard() { troupe::testing::step_wall_clock(at - troupe::testing::wall_clock_step()); }
};
/// Sets the wall clock troupe reads to `wall` (ms since the epoch).
void step_to(std::int64_t wall) {
  troupe::testing::step_wall_clock(std::chrono::milliseconds(wall - troupe::detail::now_ms()));
}
/// The dedup marks of receiver `of` in the store.
std::size_t marks_of(world& w, const std::string& of) {
  std::size_t n = 0;
  REQUIRE_FALSE(
      w.store->scan(w.store->open_table("dedup_v2"), td::detail::key_prefix(of), [&](auto, auto) { return ++n, true; }));
  return n;
}

} // namespace

TEST_CASE("a delivery is processed once, confirmed with the receiver's reply, and its record removed") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  for (long n = 1; n <= 20; ++n) REQUIRE_FALSE(s.tell(send_item{n}));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 20; }));
  auto st = w.taken(r);
  CHECK(st.taken.size() == 20);
  for (auto& [id, count] : st.taken) CHECK(count == 1);
  CHECK(st.total == 210);
  {
    std::lock_guard g(w.probes->m);
    std::set<long> replies;
    for (auto& c : w.probes->confirmations) {
      CHECK(c.to == "receiver");
      replies.insert(c.reply_as<long>());
    }
    CHECK(replies.size() == 20);
    CHECK(*replies.rbegin() == 200);
  }
  REQUIRE(w.eventually([&] { return w.pending_in_store("sender") == 0; }));
  CHECK(w.stats(s).unconfirmed == 0);
  CHECK(w.stats(s).confirmed == 20);
  CHECK(w.stats(r).processed == 20);
}

TEST_CASE("the intent is written with the event that causes it, or not at all") {
  world w;
  w.net->set_message_faults({.drop = 1}); // nothing arrives: the intents stay
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  test::get(s.ask(send_item{1}, asio::use_future));
  w.journal->reject_next_writes(1);
  CHECK_THROWS_WITH(test::get(s.ask(send_item{2}, asio::use_future)), Catch::Contains("write rejected"));
  CHECK(test::get(s.ask(troupe::persistence_id{}, asio::use_future)) == 1);
  CHECK(w.pending_in_store("sender") == 1);
  CHECK(w.store->highest_sequence_nr("sender") == 1);
  test::get(s.ask(send_two{5}, asio::use_future));
  CHECK(w.pending_in_store("sender") == 3);
  CHECK(w.store->highest_sequence_nr("sender") == 2);
  std::vector<std::string> ids;
  REQUIRE_FALSE(
      w.store->scan(w.store->open_table("deliveries"), td::detail::key_prefix("sender") + 'p', [&](auto k, auto) {
        ids.emplace_back(k.substr(td::detail::key_prefix("sender").size() + 1));
        return true;
      }));
  CHECK(ids == std::vector<std::string>{"sender#2", "sender#2.1", "sender:1"});
}

TEST_CASE("a duplicate is acknowledged with the stored reply and its handler does not run") {
  world w;
  w.net->set_message_faults({.duplicate = 1, .max_delay = 5ms});
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  for (long n = 1; n <= 10; ++n) REQUIRE_FALSE(s.tell(send_item{n}));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 10; }));
  CHECK(w.probes->handler_runs == 10);
  w.net->heal();

  // Copies of processed deliveries, acknowledged to a spy.
  // Copies from the same sender (a delivery is its sender's ID): the spy
  // takes the sender's name, and its acknowledgements.
  auto e = std::make_shared<ack_spy>();
  w.net->bind("sender", e);
  const auto before = w.stats(r).duplicates;
  for (long n = 1; n <= 10; ++n)
    w.net->send(td::message{"receiver", "sender", td::delivery_id::of("sender", n), "test.item", 1, "{\"n\":999}"});
  REQUIRE(w.eventually([&] {
    std::lock_guard g(e->m);
    return e->acks.size() >= 10;
  }));
  CHECK(w.stats(r).duplicates >= before + 10); // (and late copies from the sender)
  CHECK(w.probes->handler_runs == 10);
  {
    std::lock_guard g(e->m);
    for (auto& a : e->acks) {
      CHECK(a.from == "receiver");
      const auto n = std::stol(a.id.str().substr(a.id.str().find(':') + 1));
      REQUIRE(a.reply);
      CHECK(*a.reply == std::to_string(n * 10)); // the stored reply, not one for n = 999
    }
  }
  auto st = w.taken(r);
  CHECK(st.taken.size() == 10);
  for (auto& [id, count] : st.taken) CHECK(count == 1);
  CHECK(st.total == 55);
}

TEST_CASE("two senders delivering under one ID to one receiver are two deliveries, each confirmed with its own reply") {
  world w;
  auto a = w.sys->spawn<sender>(troupe::persistence_id{"shop-a"}, std::string("receiver"), w.probes, fast_options());
  auto b = w.sys->spawn<sender>(troupe::persistence_id{"shop-b"}, std::string("receiver"), w.probes, fast_options());
  test::get(a.ask(send_order{1, 1}, asio::use_future));
  test::get(b.ask(send_order{1, 2}, asio::use_future));
  // An acknowledgement from another name than the receiver's confirms nothing.
  w.net->send(td::acknowledgement{"shop-a", "intruder", td::delivery_id::of("order", 1, "picklist"), "\"forged\""});
  w.net->send(td::acknowledgement{"shop-b", "intruder", td::delivery_id::of("order", 1, "picklist"), "\"forged\""});
  CHECK(w.stats(a).unconfirmed == 1);
  CHECK(w.stats(b).unconfirmed == 1);
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 2; }));
  CHECK(w.probes->handler_runs == 2);
  CHECK(w.taken(r).total == 3);
  CHECK(w.stats(r).processed == 2);
  {
    std::lock_guard g(w.probes->m);
    std::set<long> replies;
    for (auto& c : w.probes->confirmations) {
      CHECK(c.id.str() == "order:1:picklist");
      replies.insert(c.reply_as<long>());
    }
    CHECK(replies == std::set<long>{10, 20}); // each its own: shop-b's is not shop-a's
  }
  CHECK(w.stats(a).unconfirmed == 0);
  CHECK(w.stats(b).unconfirmed == 0);
  // And each sender's redelivery is answered from its own mark.
  w.probes->handler_runs = 0;
  w.net->send(td::message{"receiver", "shop-b", td::delivery_id::of("order", 1, "picklist"), "test.item", 1, "{\"n\":2}"});
  REQUIRE(w.eventually([&] { return w.stats(r).duplicates >= 1; }));
  CHECK(w.probes->handler_runs == 0);
}

TEST_CASE("the sender dies after persisting the intent, before sending: sent after its recovery") {
  world w;
  w.net->set_message_faults({.drop = 1});
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  for (long n = 1; n <= 5; ++n) test::get(s.ask(send_item{n}, asio::use_future));
  w.crash();
  CHECK(w.pending_in_store("sender") == 5);

  w.boot();
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  REQUIRE(w.eventually([&] { return w.stats(r).processed + w.stats(r).duplicates == 0; }));
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 5; }));
  CHECK(w.probes->handler_runs == 5);
  // (A confirmation is seen before its deletion of the intent is durable.)
  CHECK(w.eventually([&] { return w.pending_in_store("sender") == 0; }));
}

TEST_CASE("nothing is sent before the sender's recovery has applied every event") {
  world w;
  w.net->set_message_faults({.drop = 1});
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  for (long n = 1; n <= 300; ++n) test::get(s.ask(send_item{n}, asio::use_future));
  w.crash();

  w.boot();
  std::atomic<long> early{0}, arrived{0};
  struct watch final : td::endpoint {
    std::atomic<long>* early;
    std::atomic<long>* arrived;
    void receive(td::message) override {
      if (sender_events_applied.load() < 300) ++*early;
      ++*arrived;
    }
    void acknowledge(td::acknowledgement) override {}
  };
  auto e = std::make_shared<watch>();
  e->early = &early;
  e->arrived = &arrived;
  w.net->bind("receiver", e);
  sender_events_applied = 0;
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  REQUIRE(w.eventually([&] { return arrived.load() >= 300; }));
  CHECK(early == 0);
  CHECK(sender_events_applied == 300);
}

TEST_CASE("the receiver dies after persisting, before acknowledging: the redelivery is answered from the dedup mark") {
  world w;
  w.net->set_ack_faults({.drop = 1});
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  for (long n = 1; n <= 5; ++n) REQUIRE_FALSE(s.tell(send_item{n}));
  REQUIRE(w.eventually([&] { return w.probes->handler_runs == 5; }));
  w.crash();

  w.boot();
  r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 5; }));
  CHECK(w.probes->handler_runs == 5);
  CHECK(w.stats(r).duplicates >= 5);
  auto st = w.taken(r);
  CHECK(st.taken.size() == 5);
  for (auto& [id, count] : st.taken) CHECK(count == 1);
  {
    std::lock_guard g(w.probes->m);
    for (auto& c : w.probes->confirmations) CHECK(c.reply.has_value()); // the stored reply
  }
}

TEST_CASE("a copy that does not say when it was recorded, after the retention window, is processed again "
          "(documented)") {
  world w;
  auto o = short_horizon(30ms);
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{1}, asio::use_future));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  // The store drops the mark...
  REQUIRE(w.eventually([&] {
    REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
    std::size_t n = 0;
    REQUIRE_FALSE(w.store->scan(w.store->open_table("dedup_v2"), td::detail::key_prefix("receiver"),
                                [&](auto, auto) { return ++n, true; }));
    return n == 0;
  }));
  // ...so a copy of the old message (from outside any sender's horizon) runs
  // the handler again.
  w.net->send(td::message{"receiver", "sender", td::delivery_id::of("sender", 1), "test.item", 1, "{\"n\":1}"});
  REQUIRE(w.eventually([&] { return w.probes->handler_runs == 2; }));
  CHECK(w.taken(r).taken.begin()->second == 2);
}

TEST_CASE("the store drops expired marks as it compacts, of a live receiver and of a passivated entity, and a "
          "receiver keeps only its most recent marks in memory") {
  world w;
  auto o = short_horizon(30s);
  o.dedup.cached_marks = 4;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto receivers = td::entities<receiver>(*w.sys, "rcv-", o, troupe::entity_options{.idle_timeout = 10ms}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  auto s2 = w.sys->spawn<sender>(troupe::persistence_id{"sender-2"}, std::string("rcv-1"), w.probes, o);
  for (long n = 1; n <= 20; ++n) {
    test::get(s.ask(send_item{n}, asio::use_future));
    test::get(s2.ask(send_item{n}, asio::use_future));
  }
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 40; }));
  const auto dedup = w.store->open_table("dedup_v2");
  const auto marks = [&](const std::string& of) {
    std::size_t n = 0;
    REQUIRE_FALSE(w.store->scan(dedup, td::detail::key_prefix(of), [&](auto, auto) { return ++n, true; }));
    return n;
  };
  CHECK(marks("receiver") == 20);
  CHECK(marks("rcv-1") == 20);
  // Duplicates of the oldest (no longer in memory) are answered from the
  // store, without running the handler again.
  const auto runs = w.probes->handler_runs.load();
  w.net->send(td::message{"receiver", "sender", td::delivery_id::of("sender", 1), "test.item", 1, "{\"n\":1}"});
  REQUIRE(w.eventually([&] { return w.stats(r).duplicates >= 1; }));
  CHECK(w.probes->handler_runs == runs);
  // rcv-1 passivates; nothing is dropped before the retention has passed.
  REQUIRE(w.eventually([&] { return receivers.stats().live == 0; }));
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  CHECK(marks("receiver") == 20);
  CHECK(marks("rcv-1") == 20);
  troupe::testing::step_wall_clock(31s); // past the retention, without waiting for it
  struct step_back {
    ~step_back() { troupe::testing::step_wall_clock(-31s); }
  } back;
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  CHECK(marks("receiver") == 0);
  CHECK(marks("rcv-1") == 0);
  CHECK(w.taken(r).taken.size() == 20);
}

TEST_CASE("a receiver whose retention is shorter than a sender's redelivery horizon is refused") {
  world w;
  auto o = fast_options();
  o.redelivery.max_attempts = 10;
  o.redelivery.max_backoff = 1000ms; // horizon 10 s
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  o.dedup.retention = 5000ms;
  CHECK_THROWS_WITH(w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o),
                    Catch::Contains("dedup retention of receiver receiver (5000 ms)") &&
                        Catch::Contains("(10000 ms, max attempts x max backoff)"));
  o.dedup.retention = 10000ms;
  CHECK_NOTHROW(w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o));
  // And a sender that never gives up against a receiver that forgets.
  auto forever = fast_options();
  forever.dedup.retention = 60'000ms;
  CHECK_THROWS_WITH(
      w.sys->spawn<sender>(troupe::persistence_id{"sender-2"}, std::string("receiver"), w.probes, forever),
      Catch::Contains("unlimited"));
}

TEST_CASE("after max attempts a delivery becomes a dead letter, an operator lists and re-queues it") {
  world w;
  auto o = fast_options();
  o.redelivery.max_attempts = 4;
  o.redelivery.warn_after = 2;
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{7}, asio::use_future)); // no receiver yet
  REQUIRE(w.eventually([&] {
    std::lock_guard g(w.probes->m);
    return w.probes->failures.size() == 1;
  }));
  {
    std::lock_guard g(w.probes->m);
    CHECK(w.probes->failures[0].letter.id.str() == "sender:7");
    CHECK(w.probes->failures[0].letter.attempts == 4);
    REQUIRE(w.probes->warnings.size() == 1);
    CHECK(w.probes->warnings[0].attempts == 2);
  }
  CHECK(w.pending_in_store("sender") == 0);
  auto dead = test::get(s.ask(td::list_dead_letters{}, asio::use_future));
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].to == "receiver");
  CHECK(dead[0].manifest == "test.item");
  CHECK(dead[0].attempts == 4);
  CHECK(w.stats(s).dead_lettered == 1);

  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  CHECK_FALSE(test::get(s.ask(td::requeue{td::delivery_id("nope")}, asio::use_future)));
  CHECK(test::get(s.ask(td::requeue{td::delivery_id::of("sender", 7)}, asio::use_future)));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(test::get(s.ask(td::list_dead_letters{}, asio::use_future)).empty());
  CHECK(w.taken(r).total == 7);
}

TEST_CASE("past max_unconfirmed, deliver fails, or waits for room") {
  world w;
  auto o = fast_options();
  o.redelivery.max_unconfirmed = 2;
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{1}, asio::use_future));
  test::get(s.ask(send_item{2}, asio::use_future));
  CHECK_THROWS_WITH(test::get(s.ask(send_item{3}, asio::use_future)), Catch::Contains("unconfirmed deliveries"));
  CHECK(w.pending_in_store("sender") == 2);
  CHECK(test::get(s.ask(troupe::persistence_id{}, asio::use_future)) == 2);

  o.redelivery.wait_when_full = true;
  auto s2 = w.sys->spawn<sender>(troupe::persistence_id{"sender-2"}, std::string("receiver"), w.probes, o);
  test::get(s2.ask(send_item{1}, asio::use_future));
  test::get(s2.ask(send_item{2}, asio::use_future));
  auto third = s2.ask(send_item{3}, asio::use_future);
  CHECK(third.wait_for(100ms) == std::future_status::timeout); // waiting for room
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  test::get(third); // the receiver confirmed some
  REQUIRE(w.eventually([&] { return w.taken(r).taken.size() == 5; }));
}

TEST_CASE("a handler that throws writes nothing and acknowledges nothing, the redelivery succeeds") {
  world w;
  w.probes->fail_handler = true;
  troupe::spawn_options patient;
  patient.supervision = troupe::supervision::restart(1000, 10s, 1ms, 5ms);
  auto r = w.sys->spawn<receiver>(patient, troupe::persistence_id{"receiver"}, w.probes, fast_options());
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  test::get(s.ask(send_item{3}, asio::use_future));
  REQUIRE(w.eventually([&] { return w.probes->handler_runs >= 2; }));
  CHECK(w.store->highest_sequence_nr("receiver") == 0);
  CHECK(w.probes->confirmed_count() == 0);
  w.probes->fail_handler = false;
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(w.store->highest_sequence_nr("receiver") == 1);
  auto st = w.taken(r);
  CHECK(st.taken.size() == 1);
  CHECK(st.total == 3);
}

TEST_CASE("a failed write of the handler's batch acknowledges nothing, the redelivery is processed once") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  w.net->set_message_faults({.drop = 1});
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, fast_options());
  test::get(s.ask(send_item{4}, asio::use_future));
  w.journal->fail_next_writes(1); // the receiver's unit
  w.net->heal();
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(w.probes->handler_runs == 2);
  auto st = w.taken(r);
  CHECK(st.taken.size() == 1);
  CHECK(st.taken.begin()->second == 1);
}

TEST_CASE("a message type the receiver does not accept is not acknowledged, and the transport warns once per kind") {
  world w;
  warnings_heard heard;
  heard.listen(*w.net);
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  REQUIRE(w.eventually([&] { return w.stats(r).rejected == 0; }));
  for (const char* id : {"x1", "x2", "x3"})
    w.net->send(td::message{"receiver", "nobody", td::delivery_id(id), "test.other", 1, "{}"});
  for (const char* id : {"y1", "y2"})
    w.net->send(td::message{"receiver", "nobody", td::delivery_id(id), "test.item", 1, "not json"});
  for (const char* id : {"z1", "z2"})
    w.net->send(td::message{"receiver", "nobody", td::delivery_id(id), "test.item", 2, "{\"n\":1}"});
  REQUIRE(w.eventually([&] { return w.stats(r).rejected == 7; }));
  CHECK(w.probes->handler_runs == 0);
  std::vector<std::string> said;
  {
    std::lock_guard g(heard.m);
    for (auto& s : heard.said)
      if (s.find("does not take") != std::string::npos) said.push_back(s);
  }
  INFO(Catch::Detail::stringify(said));
  CHECK(said.size() == 3); // one per kind (the two unreadable payloads are one kind)
  const auto any = [&](std::initializer_list<const char*> parts) {
    return std::any_of(said.begin(), said.end(), [&](const std::string& s) {
      for (auto* p : parts)
        if (s.find(p) == std::string::npos) return false;
      return true;
    });
  };
  CHECK(any({"test.other is not in its accepts", "it accepts test.item v1"}));
  CHECK(any({"another version", "version 2"}));
  CHECK(any({"does not read as test.item"}));
}

TEST_CASE("under drops, duplicates, reordering and delays, each delivery's effect is applied once") {
  const auto seed = seed_from_env();
  INFO("seed " << seed << " (TROUPE_PROPERTY_SEED)");
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 4; ++round) {
    world w;
    w.boot(rng());
    troupe::testing::fault_rates faults{.drop = 0.3, .duplicate = 0.2, .reorder = 0.2, .delay = 0.1, .max_delay = 20ms};
    w.net->set_message_faults(faults);
    w.net->set_ack_faults(faults);
    auto o = fast_options();
    std::vector<troupe::actor_ref<receiver>> rs;
    std::vector<troupe::actor_ref<sender>> ss;
    for (int i = 0; i < 3; ++i)
      rs.push_back(w.sys->spawn<receiver>(troupe::persistence_id{"r" + std::to_string(i)}, w.probes, o));
    for (int i = 0; i < 6; ++i)
      ss.push_back(w.sys->spawn<sender>(troupe::persistence_id{"s" + std::to_string(i)}, "r" + std::to_string(i % 3),
                                        w.probes, o));
    const int per_sender = 40;
    for (int k = 1; k <= per_sender; ++k)
      for (auto& s : ss) REQUIRE_FALSE(s.tell(send_item{k}));
    // Restart the world in the middle, once.
    if (round % 2 == 1) {
      REQUIRE(w.eventually([&] { return w.probes->confirmed_count() >= 40; }));
      w.crash();
      w.boot(rng());
      w.net->set_message_faults(faults);
      w.net->set_ack_faults(faults);
      rs.clear();
      ss.clear();
      for (int i = 0; i < 3; ++i)
        rs.push_back(w.sys->spawn<receiver>(troupe::persistence_id{"r" + std::to_string(i)}, w.probes, o));
      for (int i = 0; i < 6; ++i)
        ss.push_back(w.sys->spawn<sender>(troupe::persistence_id{"s" + std::to_string(i)}, "r" + std::to_string(i % 3),
                                          w.probes, o));
      // What the crashed process had not recorded is asked again.
      for (int k = 1; k <= per_sender; ++k)
        for (auto& s : ss) REQUIRE_FALSE(s.tell(send_item{k}));
    }
    // Every delivery recorded (first), then none left unconfirmed.
    REQUIRE(w.eventually([&] {
      long sent = 0;
      for (auto& s : ss) sent += test::get(s.ask(troupe::persistence_id{}, asio::use_future));
      return sent == 6 * per_sender;
    }));
    REQUIRE(w.eventually([&] {
      for (int i = 0; i < 6; ++i)
        if (w.pending_in_store("s" + std::to_string(i)) != 0) return false;
      return true;
    }));
    std::size_t ids = 0;
    for (auto& r : rs) {
      auto st = w.taken(r);
      ids += st.taken.size();
      for (auto& [id, count] : st.taken) {
        INFO(id);
        CHECK(count == 1);
      }
    }
    CHECK(ids == 6 * per_sender);
    CHECK(w.net->message_counts().dropped > 0);
    CHECK(w.net->ack_counts().duplicated > 0);
  }
}

TEST_CASE("deliver refuses a message over the size limit before anything is written") {
  world w;
  auto o = fast_options();
  o.max_message_bytes = 8; // the message's JSON text
  w.net->set_message_faults({.drop = 1}); // nothing arrives: what was recorded stays
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{10}, asio::use_future)); // {"n":10}: 8 bytes
  // (The asker sees the handler's failure, whose text carries the error's.)
  CHECK_THROWS_WITH(test::get(s.ask(send_item{100}, asio::use_future)),
                    Catch::Contains("has 9 bytes; the limit is 8 (delivery_options::max_message_bytes)") &&
                        Catch::Contains(td::make_error_code(td::errc::message_too_large).message()));
  CHECK(w.pending_in_store("sender") == 1);
  CHECK(w.store->highest_sequence_nr("sender") == 1); // the refused one's event was not written either
}

TEST_CASE("a delivery whose handler keeps failing is rejected after max_handler_failures, and the receiver serves others") {
  world w;
  auto o = fast_options();
  o.max_handler_failures = 3;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{poison}, asio::use_future));
  for (long n = 1; n <= 5; ++n) test::get(s.ask(send_item{n}, asio::use_future));
  REQUIRE(w.eventually([&] {
    std::lock_guard g(w.probes->m);
    return w.probes->rejections.size() == 1 && w.probes->confirmations.size() == 5;
  }));
  {
    std::lock_guard g(w.probes->m);
    auto& rej = w.probes->rejections.front();
    CHECK(rej.id.str() == "sender:666");
    CHECK(rej.to == "receiver");
    CHECK(rej.reason.find("failed 3 time(s)") != std::string::npos);
    CHECK(rej.reason.find("cannot pick item 666") != std::string::npos);
  }
  auto rs = w.stats(r);
  CHECK(rs.handler_failures == 3);
  CHECK(rs.poison_rejected == 1);
  CHECK(rs.processed == 5);
  CHECK(w.taken(r).total == 15);
  auto ss = w.stats(s);
  CHECK(ss.refused == 1);
  CHECK(ss.confirmed == 5);
  CHECK(ss.unconfirmed == 0);
  REQUIRE(w.eventually([&] { return w.pending_in_store("sender") == 0; }));

  // The rejection is durable: after a restart of both, a copy is answered
  // with it, and the handler does not run again.
  w.crash();
  w.boot();
  w.probes->handler_runs = 0;
  r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto e = std::make_shared<ack_spy>();
  w.net->bind("sender", e);
  REQUIRE(w.eventually([&] { // sent until the receiver has started and bound its name
    w.net->send(td::message{"receiver", "sender", td::delivery_id::of("sender", poison), "test.item", 1, "{\"n\":666}"});
    std::lock_guard g(e->m);
    return !e->acks.empty();
  }));
  std::lock_guard g(e->m);
  REQUIRE(e->acks.front().rejection);
  CHECK(e->acks.front().rejection->find("cannot pick item 666") != std::string::npos);
  CHECK(!e->acks.front().reply);
  CHECK(w.probes->handler_runs == 0);
}

TEST_CASE("a handler that fails after persisting is counted and its state recovered in place: rejected at "
          "max_handler_failures, without a restart") {
  world w;
  auto o = fast_options();
  CHECK(o.max_handler_failures == 3);
  w.probes->fail_handler = true; // fails after persisting: the instance's state holds unwritten events
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{7}, asio::use_future));
  REQUIRE(w.eventually([&] {
    std::lock_guard g(w.probes->m);
    return w.probes->rejections.size() == 1;
  }));
  CHECK(w.probes->handler_runs == 3);
  CHECK(w.taken(r).total == 0); // nothing of the failed runs is in the state: recovered from the store
  CHECK(w.stats(r).poison_rejected == 1);
  CHECK(w.probes->receivers_constructed == 1);
  {
    std::lock_guard g(w.probes->m);
    CHECK(w.probes->rejections.front().reason.find("failed 3 time(s)") != std::string::npos);
  }
  // The instance persists again.
  w.probes->fail_handler = false;
  test::get(s.ask(send_item{8}, asio::use_future));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(w.taken(r).total == 8);
}

TEST_CASE("two poison deliveries that fail after persisting, under the default supervision: both rejected, the "
          "receiver serves the others") {
  world w;
  auto o = fast_options();
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{poison_after_persist}, asio::use_future));
  test::get(s.ask(send_item{other_poison_after_persist}, asio::use_future));
  for (long n = 1; n <= 3; ++n) test::get(s.ask(send_item{n}, asio::use_future));
  REQUIRE(w.eventually([&] {
    std::lock_guard g(w.probes->m);
    return w.probes->rejections.size() == 2 && w.probes->confirmations.size() == 3;
  }));
  CHECK(w.taken(r).total == 6);
  CHECK(w.stats(r).poison_rejected == 2);
  CHECK(w.stats(r).handler_failures == 6);
}

// -- commands from outside -------------------------------------------------------

namespace {
/// The error an ask failed with (none if it succeeded).
template <class T>
troupe::error failure_of(std::future<T> f) {
  try {
    test::get(f);
  } catch (const troupe::error& e) {
    return e;
  }
  return troupe::error(std::error_code(), "succeeded");
}
td::command<item> command(std::string id, long n, std::string client = "driver", std::int64_t first_sent = 0) {
  return {td::delivery_id(std::move(id)), item{n}, std::move(client), first_sent};
}
} // namespace

TEST_CASE("a command retried under its request ID gets the original reply, and its handler runs once") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  CHECK(test::get(r.ask(command("req-1", 4), asio::use_future)) == 40);
  CHECK(test::get(r.ask(command("req-1", 4), asio::use_future)) == 40);
  CHECK(w.probes->handler_runs == 1);
  CHECK(w.store->highest_sequence_nr("receiver") == 1);
  auto st = w.stats(r);
  CHECK(st.processed == 1);
  CHECK(st.duplicates == 1);
  // The handler saw the client as its sender.
  CHECK(w.taken(r).taken.count("req-1") == 1);
}

TEST_CASE("a command retried after a crash, with another payload, gets the original reply; nothing runs again") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  CHECK(test::get(r.ask(command("req-1", 4), asio::use_future)) == 40);
  w.crash();
  w.boot();
  w.probes->handler_runs = 0;
  r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  CHECK(test::get(r.ask(command("req-1", 5), asio::use_future)) == 40);
  CHECK(w.probes->handler_runs == 0);
  CHECK(w.taken(r).total == 4);
}

TEST_CASE("the same request ID from two clients is two commands") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  CHECK(test::get(r.ask(command("req-1", 4, "a"), asio::use_future)) == 40);
  CHECK(test::get(r.ask(command("req-1", 5, "b"), asio::use_future)) == 50);
  CHECK(w.probes->handler_runs == 2);
  CHECK(w.taken(r).total == 9);
  CHECK(test::get(r.ask(command("req-1", 6, "a"), asio::use_future)) == 40);
}

TEST_CASE("a command whose write fails is not marked: the ask fails, and its retry runs it once") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  w.journal->fail_next_writes(1);
  CHECK(failure_of(r.ask(command("req-1", 4), asio::use_future)).code());
  CHECK(test::get(r.ask(command("req-1", 4), asio::use_future)) == 40);
  CHECK(test::get(r.ask(command("req-1", 4), asio::use_future)) == 40);
  CHECK(w.taken(r).taken.at("req-1") == 1);
  CHECK(w.taken(r).total == 4);
  CHECK(w.probes->handler_runs == 2);
}

TEST_CASE("a command whose handler throws fails its ask, not its actor; at max_handler_failures every retry is "
          "rejected") {
  world w;
  auto o = fast_options();
  CHECK(o.max_handler_failures == 3);
  auto r = w.sys->spawn<receiver>(troupe::spawn_options{.supervision = troupe::supervision::stop()},
                                  troupe::persistence_id{"receiver"}, w.probes, o);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto e = failure_of(r.ask(command("bad", poison), asio::use_future));
    CHECK(e.code() == troupe::errc::handler_failed);
    CHECK(std::string(e.what()).find("cannot pick item 666") != std::string::npos);
  }
  auto third = failure_of(r.ask(command("bad", poison), asio::use_future));
  CHECK(third.code() == td::errc::rejected);
  CHECK(std::string(third.what()).find("failed 3 time(s)") != std::string::npos);
  auto fourth = failure_of(r.ask(command("bad", poison), asio::use_future));
  CHECK(fourth.code() == td::errc::rejected);
  CHECK(w.probes->handler_runs == 3);
  // One that failed after persisting: its state is recovered in place.
  CHECK(failure_of(r.ask(command("bad-2", poison_after_persist), asio::use_future)).code() ==
        troupe::errc::handler_failed);
  CHECK(w.taken(r).total == 0);
  CHECK(test::get(r.ask(command("good", 1), asio::use_future)) == 10);
  CHECK(w.probes->receivers_constructed == 1); // never restarted (and, under stop, never stopped)
}

TEST_CASE("a command retried later than the retention from its first sending, with no mark, is refused and not run") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, short_horizon(2000ms));
  const auto now = troupe::detail::now_ms();
  // No mark can have been dropped yet: the store has not expired any.
  CHECK(test::get(r.ask(command("old", 1, "driver", now - 10'000), asio::use_future)) == 10);
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  // Now marks up to the present may be gone: a first sending 10 s ago may
  // have run and been forgotten.
  auto e = failure_of(r.ask(command("older", 2, "driver", now - 10'000), asio::use_future));
  CHECK(e.code() == td::errc::request_expired);
  CHECK(std::string(e.what()).find("older") != std::string::npos);
  CHECK(w.probes->handler_runs == 1);
  // One sent just now runs, and its mark counts from its first sending.
  CHECK(test::get(r.ask(command("new", 3, "driver", troupe::detail::now_ms()), asio::use_future)) == 30);
  CHECK(test::get(r.ask(command("new", 3, "driver", troupe::detail::now_ms()), asio::use_future)) == 30);
  CHECK(w.probes->handler_runs == 2);
}

TEST_CASE("a command with a client name over 256 bytes is refused, naming the limit") {
  world w;
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  auto e = failure_of(r.ask(command("req", 1, std::string(257, 'c')), asio::use_future));
  CHECK(e.code() == troupe::errc::invalid_argument);
  CHECK(std::string(e.what()).find("256") != std::string::npos);
  CHECK(w.probes->handler_runs == 0);
}

TEST_CASE("a reliable actor cannot take a name of the commands' clients") {
  world w;
  CHECK_THROWS_WITH(w.sys->spawn<receiver>(troupe::persistence_id{"troupe.command:driver"}, w.probes, fast_options()),
                    Catch::Contains("reserved"));
  CHECK_THROWS_WITH(w.net->admit_entities("troupe.", 1s, 1s), Catch::Contains("reserved"));
  w.net->admit_entities("troupe-like-", 1s, 1s); // others are not
}

TEST_CASE("a reliable actor named exactly like the start of the commands' clients' names is not refused") {
  // An exact name is a client's only if it starts with troupe.command:;
  // the prefix check is for entity prefixes, which cover longer names.
  {
    world w;
    CHECK_NOTHROW(w.sys->spawn<receiver>(troupe::persistence_id{"troupe.command"}, w.probes, fast_options()));
  }
  world w;
  CHECK_NOTHROW(w.net->admit("troupe.", 1s, 1s));
  CHECK_NOTHROW(w.net->admit("t", 1s, 1s));
  CHECK_THROWS_WITH(w.net->admit("troupe.command:x", 1s, 1s), Catch::Contains("reserved"));
}

TEST_CASE("a command to a receiver entity is answered once across passivations and restarts") {
  world w;
  auto o = fast_options();
  {
    auto receivers =
        td::entities<receiver>(*w.sys, "rcv-", o, troupe::entity_options{.idle_timeout = 10ms}, w.probes, o);
    CHECK(test::get(receivers.get("rcv-1").ask(command("req-1", 4), asio::use_future)) == 40);
    REQUIRE(w.eventually([&] { return receivers.stats().live == 0; }));
    CHECK(test::get(receivers.get("rcv-1").ask(command("req-1", 4), asio::use_future)) == 40);
  }
  w.crash();
  w.boot();
  auto again = td::entities<receiver>(*w.sys, "rcv-", o, troupe::entity_options{}, w.probes, o);
  CHECK(test::get(again.get("rcv-1").ask(command("req-1", 4), asio::use_future)) == 40);
  CHECK(w.probes->handler_runs == 1);
  CHECK(test::get(again.get("rcv-1").ask(taken_query{}, asio::use_future)).total == 4);
}

TEST_CASE("deliver refuses an ID still unconfirmed to another receiver, and takes it again for the same one") {
  world w;
  auto o = fast_options();
  w.net->set_message_faults({.drop = 1}); // nothing arrives: the first stays unconfirmed
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_to{"warehouse-a", 1}, asio::use_future));
  CHECK_THROWS_WITH(test::get(s.ask(send_to{"warehouse-b", 1}, asio::use_future)),
                    Catch::Contains("fixed:1") && Catch::Contains("unconfirmed to warehouse-a") &&
                        Catch::Contains(td::make_error_code(td::errc::id_in_use).message()));
  test::get(s.ask(send_to{"warehouse-a", 1}, asio::use_future)); // the same delivery
  CHECK(w.pending_in_store("sender") == 1);
  CHECK(w.stats(s).unconfirmed == 1);
  // The record is still the first one's, for its receiver.
  const auto prefix = td::detail::key_prefix("sender") + 'p';
  REQUIRE_FALSE(w.store->scan(w.store->open_table("deliveries"), prefix, [&](std::string_view k, std::string_view v) {
    CHECK(td::detail::decode_outgoing(k.substr(prefix.size()), v).to == "warehouse-a");
    return true;
  }));
}

TEST_CASE("a dead letter keeps its ID for its receiver: a delivery under it to another is refused, also after a "
          "restart") {
  world w;
  auto o = short_horizon(24h);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_to{"ghost-a", 1}, asio::use_future)); // nobody there: a dead letter
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
  CHECK_THROWS_WITH(test::get(s.ask(send_to{"ghost-b", 1}, asio::use_future)),
                    Catch::Contains("a dead letter under that ID is to ghost-a"));
  w.crash();
  w.boot();
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  CHECK_THROWS_WITH(test::get(s.ask(send_to{"ghost-b", 1}, asio::use_future)),
                    Catch::Contains("a dead letter under that ID is to ghost-a"));
  auto dead = test::get(s.ask(td::list_dead_letters{}, asio::use_future));
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].to == "ghost-a");
  test::get(s.ask(send_to{"ghost-a", 1}, asio::use_future)); // to its own receiver: a delivery again
  CHECK(w.pending_in_store("sender") == 1);
}

TEST_CASE("a delivery given up keeps its ID while its dead letter is being written") {
  world w;
  auto o = short_horizon(24h);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_to{"ghost-a", 1}, asio::use_future)); // nobody there
  w.journal->delay_writes(300ms); // the dead letter's write, among others, completes late
  // Given up (no longer unconfirmed), its dead letter not yet written.
  REQUIRE(w.eventually([&] {
    auto st = w.stats(s);
    return st.unconfirmed == 0 && st.dead_lettered == 0;
  }));
  CHECK_THROWS_WITH(test::get(s.ask(send_to{"ghost-b", 1}, asio::use_future)),
                    Catch::Contains(td::make_error_code(td::errc::id_in_use).message()));
  w.journal->delay_writes(0ms);
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
  CHECK(test::get(s.ask(td::list_dead_letters{}, asio::use_future))[0].to == "ghost-a");
  CHECK(w.pending_in_store("sender") == 0);
}

TEST_CASE("re-queues count from the delivery's first record: repeated ones stop before the receiver forgets it") {
  world w;
  auto o = short_horizon(150ms);
  w.net->set_ack_faults({.drop = 1}); // processed, never confirmed: a dead letter, again and again
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{1}, asio::use_future));
  const auto first = std::chrono::steady_clock::now();
  bool refused = false;
  while (!refused && std::chrono::steady_clock::now() - first < 2s) {
    REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
    bool accepted = false;
    try {
      accepted = test::get(s.ask(td::requeue{td::delivery_id::of("sender", 1)}, asio::use_future));
    } catch (const std::exception& ex) {
      CHECK_THAT(ex.what(), Catch::Contains("first recorded"));
      refused = true;
      break;
    }
    CHECK(accepted);
  }
  CHECK(refused);
  CHECK(std::chrono::steady_clock::now() - first < 2s);
  // Every accepted re-queue was answered from the mark.
  CHECK(w.probes->handler_runs == 1);
  CHECK(w.taken(r).total == 1);
}

namespace {
/// Stands in for a receiver: records when each copy arrives.
struct arrivals final : td::endpoint {
  std::mutex m;
  std::vector<std::int64_t> at_ms;
  void receive(td::message) override {
    std::lock_guard g(m);
    at_ms.push_back(troupe::detail::now_ms());
  }
  void acknowledge(td::acknowledgement) override {}
  std::size_t count() {
    std::lock_guard g(m);
    return at_ms.size();
  }
};
} // namespace

TEST_CASE("a delivery past its horizon is dead-lettered and never sent late, also when a restart finds it") {
  world w;
  auto o = fast_options();
  o.redelivery.max_attempts = 1000;   // the attempts would allow more...
  o.redelivery.max_backoff = 10ms;    // ...the horizon (10 s) does not
  o.redelivery.initial_backoff = 10ms;
  o.redelivery.max_attempts = 8;      // horizon 80 ms
  auto spy = std::make_shared<arrivals>();
  w.net->bind("receiver", spy);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{1}, asio::use_future));
  // The record's time, from which the horizon counts.
  std::int64_t recorded = 0;
  const auto prefix = td::detail::key_prefix("sender") + 'p';
  REQUIRE_FALSE(w.store->scan(w.store->open_table("deliveries"), prefix, [&](std::string_view k, std::string_view v) {
    recorded = td::detail::decode_outgoing(k.substr(prefix.size()), v).created_ms;
    return false;
  }));
  REQUIRE(recorded > 0);
  REQUIRE(w.eventually([&] { return spy->count() >= 2; }));
  // The process dies with the delivery pending, and comes back after its
  // horizon: its attempts would start again at 1.
  w.crash();
  REQUIRE(w.eventually([&] { return troupe::detail::now_ms() > recorded + 90; })); // down past the horizon
  w.boot();
  w.net->bind("receiver", spy);
  const auto before = spy->count();
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
  CHECK(spy->count() == before); // not one copy after the restart
  std::lock_guard g(spy->m);
  for (auto t : spy->at_ms) CHECK(t - recorded <= 80 + 10); // sent before 80 ms, handed over at once
}

TEST_CASE("re-queueing a dead letter the receiver may have forgotten is refused, unless forced") {
  world w;
  auto o = short_horizon(400ms);
  w.net->set_ack_faults({.drop = 1}); // processed, never confirmed: a dead letter
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  test::get(s.ask(send_item{1}, asio::use_future));
  test::get(s.ask(send_item{2}, asio::use_future));
  const auto sent2 = troupe::detail::now_ms(); // item 2 was first recorded before this
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 2; }));
  CHECK(w.probes->handler_runs == 2);
  w.net->heal();
  // Within the receiver's retention (less the new horizon): answered from the mark.
  CHECK(test::get(s.ask(td::requeue{td::delivery_id::of("sender", 1)}, asio::use_future)));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(w.probes->handler_runs == 2);
  // Later, the mark may be gone: refused, and the dead letter stays.
  REQUIRE(w.eventually([&] { return troupe::detail::now_ms() > sent2 + 400; })); // past the retention
  CHECK_THROWS_WITH(test::get(s.ask(td::requeue{td::delivery_id::of("sender", 2)}, asio::use_future)),
                    Catch::Contains("re-queue of sender:2 from sender to receiver refused") &&
                        Catch::Contains("keeps its dedup marks for 400 ms"));
  CHECK(test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1);
  // Forced: the operator accepts that it is processed again (once the
  // store has dropped the mark: until then it answers).
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  CHECK(test::get(s.ask(td::requeue{td::delivery_id::of("sender", 2), true}, asio::use_future)));
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 2; }));
  CHECK(w.probes->handler_runs == 3);
  CHECK(w.taken(r).total == 5); // item 2 twice: what forcing means
}

TEST_CASE("a backward clock step between a delivery's record and its processing does not let its mark expire inside "
          "the sender's horizon") {
  world w;
  clock_guard g;
  auto o = fast_options();
  o.redelivery.initial_backoff = 200ms;
  o.redelivery.max_backoff = 400ms;
  o.redelivery.max_attempts = 5; // a horizon of 2 s
  o.dedup.retention = 2000ms;    // = the horizon: accepted
  w.net->set_ack_faults({.drop = 1}); // confirmations lost: the sender keeps it pending
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  const auto t0 = troupe::detail::now_ms();
  test::get(s.ask(send_item{1}, asio::use_future)); // recorded at T = t0; nobody receives it yet
  troupe::testing::step_wall_clock(-1500ms);         // the clock steps back
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  REQUIRE(w.eventually([&] { return w.stats(r).processed == 1; })); // at P = t0 - 1.5 s; its mark durable
  w.crash(); // the sender's restart resets its attempts
  step_to(t0 + 1250); // past P + 2 s, before T + 2 s
  w.boot();
  r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  CHECK(marks_of(w, "receiver") == 1); // the mark counts from T
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o); // sends again
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(w.probes->handler_runs == 1);
  CHECK(w.taken(r).taken.begin()->second == 1);
}

TEST_CASE("a re-queue the check accepts after a backward clock step is answered from the mark") {
  world w;
  clock_guard g;
  auto o = fast_options();
  o.redelivery.initial_backoff = 100ms;
  o.redelivery.max_backoff = 250ms;
  o.redelivery.max_attempts = 4; // a horizon of 1 s
  o.dedup.retention = 2500ms;
  w.net->set_ack_faults({.drop = 1}); // processed, never confirmed: a dead letter
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  const auto t0 = troupe::detail::now_ms();
  test::get(s.ask(send_item{1}, asio::use_future));
  troupe::testing::step_wall_clock(-1500ms);
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
  CHECK(w.probes->handler_runs == 1);
  step_to(t0 + 1300);
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  CHECK(marks_of(w, "receiver") == 1); // kept until T + 2.5 s
  w.net->heal();
  CHECK(test::get(s.ask(td::requeue{td::delivery_id::of("sender", 1)}, asio::use_future))); // 1.3 + 1 <= 2.5
  REQUIRE(w.eventually([&] { return w.probes->confirmed_count() == 1; }));
  CHECK(w.probes->handler_runs == 1);
}

TEST_CASE("a copy whose mark may have been dropped is not processed, whatever the clock does after the drop; it "
          "becomes a dead letter") {
  world w;
  clock_guard g;
  auto o = fast_options();
  o.redelivery.initial_backoff = 200ms;
  o.redelivery.max_backoff = 400ms;
  o.redelivery.max_attempts = 5; // a horizon of 2 s
  o.dedup.retention = 2000ms;
  w.net->set_ack_faults({.drop = 1});
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  const auto t0 = troupe::detail::now_ms();
  test::get(s.ask(send_item{1}, asio::use_future));
  REQUIRE(w.eventually([&] { return w.stats(r).processed == 1; }));
  w.crash();
  step_to(t0 + 2500); // past T + 2 s: the mark may go
  w.boot();
  r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, o);
  REQUIRE_FALSE(w.journal->drop_expired(w.journal->open_table("dedup_v2")));
  CHECK(marks_of(w, "receiver") == 0);
  step_to(t0 + 1000); // the clock steps back: the sender is inside its horizon again
  s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
  CHECK(w.probes->handler_runs == 1);
  CHECK(w.stats(r).expired >= 1);
  CHECK(w.taken(r).taken.begin()->second == 1);
  // The operator may still force it: a second processing, accepted.
  CHECK(test::get(s.ask(td::requeue{td::delivery_id::of("sender", 1), true}, asio::use_future)));
  REQUIRE(w.eventually([&] { return w.probes->handler_runs == 2; }));
}

TEST_CASE("a receiver warns once about a sender whose horizon its transport does not know") {
  warnings_heard heard; // outlives the world, whose transport calls it
  world w;
  heard.listen(*w.net);
  auto r = w.sys->spawn<receiver>(troupe::persistence_id{"receiver"}, w.probes, fast_options());
  REQUIRE(w.eventually([&] { // sent until the receiver has bound its name
    for (long n = 1; n <= 3; ++n)
      w.net->send(td::message{"receiver", "elsewhere", td::delivery_id::of("x", n), "test.item", 1, "{\"n\":1}"});
    return w.stats(r).processed == 3;
  }));
  std::lock_guard g(heard.m);
  REQUIRE(heard.said.size() == 1);
  CHECK(heard.said[0].find("from elsewhere, whose redelivery horizon this transport does not know") != std::string::npos);
}

TEST_CASE("a delivery whose write completes past its horizon is a dead letter, never sent") {
  world w;
  auto o = fast_options();
  o.redelivery.initial_backoff = 10ms;
  o.redelivery.max_backoff = 10ms;
  o.redelivery.max_attempts = 4; // horizon 40 ms
  auto spy = std::make_shared<arrivals>();
  w.net->bind("receiver", spy);
  auto s = w.sys->spawn<sender>(troupe::persistence_id{"sender"}, std::string("receiver"), w.probes, o);
  w.journal->delay_writes(100ms); // durable, and acknowledged late
  test::get(s.ask(send_item{1}, asio::use_future));
  w.journal->delay_writes(0ms);
  REQUIRE(w.eventually([&] { return test::get(s.ask(td::list_dead_letters{}, asio::use_future)).size() == 1; }));
  CHECK(spy->count() == 0);
}

TEST_CASE("the warnings about unknown senders are bounded: one per name up to a limit, then one that says so") {
  warnings_heard heard; // outlives the world, whose transport calls it
  world w;
  heard.listen(*w.net);
  for (int i = 0; i < 3000; ++i) w.net->unknown_sender("elsewhere-" + std::to_string(i), "receiver");
  w.net->unknown_sender("elsewhere-1", "receiver");
  std::lock_guard g(heard.m);
  CHECK(heard.said.size() == td::transport::max_warned_senders + 1);
  CHECK(heard.said.back().find("no further unknown senders are named") != std::string::npos);
}

} // namespace delivery_reliable_actor_test
