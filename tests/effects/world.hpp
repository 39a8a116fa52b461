#pragma once

// What the effects tests share: scripted adapters, an effect owner, and a
// process (store, journal, system, transport) that can crash and boot again.
#include <troupe/effects/effectful_actor.hpp>
#include <troupe/testing/email_service.hpp>
#include <troupe/testing/payment_gateway.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/delivery/transport.hpp>
#include <troupe/testing/faulty_journal.hpp>
#include <troupe/persistence/memory_store.hpp>

#include "../support/stores.hpp"

#include "../support.hpp"

#include <asio/io_context.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <set>

namespace te = troupe::effects;
namespace tk = troupe::testing;
namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;
using namespace std::chrono_literals;
using te::effect_status;

namespace effects_world {

// -- what the tests observe --------------------------------------------------------

struct probe {
  std::mutex m;
  std::condition_variable changed;
  std::vector<te::effect> outcomes;        // as the owners saw them (on_effect)
  std::vector<te::effect_info> thresholds; // threshold callbacks
  std::vector<std::string> calls;          // adapter calls, in order: "execute:ID", "query:ID"
  std::atomic<int> on_effect_failures{0};  // the owners' on_effect throws this many more times

  template <class T>
  void record(std::vector<T>& into, T what) {
    {
      std::lock_guard g(m);
      into.push_back(std::move(what));
    }
    changed.notify_all();
  }
  void poke() { changed.notify_all(); }
};

// -- adapters driven by the test -------------------------------------------------

/// What a scripted adapter answers, and what it saw.
struct script {
  std::shared_ptr<probe> probes;
  std::mutex m;
  std::deque<te::outcome> executes; // next answers (then `otherwise`)
  te::outcome otherwise = te::outcome::completed(std::string("done"));
  std::deque<te::query_result> queries; // next answers (then not_found)
  std::map<std::string, int> executed;  // per operation ID
  std::map<std::string, int> running;   // per operation ID, now
  int max_running_same_id = 0;
  std::atomic<int> execute_calls{0}, query_calls{0};
  std::atomic<bool> hold{false}; // executions wait while set
  std::atomic<int> holding{0};

  te::outcome next_execute(const std::string& id) {
    std::lock_guard g(m);
    ++executed[id];
    max_running_same_id = std::max(max_running_same_id, ++running[id]);
    if (executes.empty()) return otherwise;
    auto o = executes.front();
    executes.pop_front();
    return o;
  }
  void done(const std::string& id) {
    std::lock_guard g(m);
    --running[id];
  }
  te::query_result next_query() {
    std::lock_guard g(m);
    if (queries.empty()) return te::query_result::not_found();
    auto q = queries.front();
    queries.pop_front();
    return q;
  }
  int executions(const std::string& id) {
    std::lock_guard g(m);
    return executed[id];
  }
};

inline troupe::task<> wait_while(std::atomic<bool>& flag) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (flag.load()) {
    t.expires_after(1ms);
    co_await t.async_wait(asio::use_awaitable);
  }
}

/// Queryable, and/or declaring that its system honours idempotency keys.
template <bool Queryable, bool Idempotent>
struct scripted {
  static constexpr bool honours_idempotency_keys = Idempotent;
  std::shared_ptr<script> s;

  troupe::task<te::outcome> execute(const te::operation& op) {
    s->probes->record(s->probes->calls, "execute:" + op.id);
    ++s->execute_calls;
    auto o = s->next_execute(op.id);
    if (s->hold.load()) {
      ++s->holding;
      s->probes->poke();
      co_await wait_while(s->hold);
    }
    s->done(op.id);
    co_return o;
  }

  troupe::task<te::query_result> query(const std::string& id)
    requires Queryable
  {
    s->probes->record(s->probes->calls, "query:" + id);
    ++s->query_calls;
    co_return s->next_query();
  }
};

using queryable = scripted<true, false>;
using idempotent = scripted<false, true>;
using bare = scripted<false, false>; // can neither query nor retry safely

static_assert(te::queryable_adapter<queryable>);
static_assert(te::adapter<bare> && !te::queryable_adapter<bare>);
static_assert(te::honours_idempotency_keys<tk::email_adapter>() &&
              !te::honours_idempotency_keys<tk::payment_adapter>());

/// Requests for the scripted adapters.
struct task_request {
  static constexpr std::string_view effect_type = "task";
  long n = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const task_request& r) { v = {{"n", r.n}}; }

template <char... Name>
struct typed_request {
  static constexpr char name[] = {Name..., '\0'};
  static constexpr std::string_view effect_type = name;
  long n = 0;
};
template <char... Name>
inline void tag_invoke(json::value_from_tag, json::value& v, const typed_request<Name...>& r) {
  v = {{"n", r.n}};
}

struct unserializable {
  static constexpr std::string_view effect_type = "task";
};
inline void tag_invoke(json::value_from_tag, json::value&, const unserializable&) {
  throw std::runtime_error("no JSON here");
}

// -- the owner ---------------------------------------------------------------------

struct order_placed {
  static constexpr std::string_view manifest = "test.order-placed";
  long order = 0;
  long amount = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const order_placed& e) {
  v = {{"order", e.order}, {"amount", e.amount}};
}
inline order_placed tag_invoke(json::value_to_tag<order_placed>, const json::value& v) {
  return {json::value_to<long>(v.at("order")), json::value_to<long>(v.at("amount"))};
}

struct shop_state {
  te::effect_table effects;
  std::map<long, long> orders;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const shop_state& s) {
  json::array orders;
  for (auto& [o, a] : s.orders) orders.push_back({o, a});
  v = {{"effects", json::value_from(s.effects)}, {"orders", orders}};
}
inline shop_state tag_invoke(json::value_to_tag<shop_state>, const json::value& v) {
  shop_state s;
  s.effects = json::value_to<te::effect_table>(v.at("effects"));
  for (auto& x : v.at("orders").as_array()) s.orders[x.as_array()[0].as_int64()] = x.as_array()[1].as_int64();
  return s;
}

struct place {
  long order = 0;
  long amount = 0;
};
/// Starts effect `id` of type "task", "other", "fail" or "hold".
struct start_task {
  std::string id;
  std::string type = "task";
};
struct start_bad {
  std::string id;
};
/// Starts effect `id` of type "task": 1, 0 (requested before) or -1
/// (refused: another owner's ID).
struct try_task {
  std::string id;
};
struct send_email {
  long order = 0;
};
struct effects_query {};

inline std::string payment_id(long order) { return "order:" + std::to_string(order) + ":payment"; }
inline std::string email_id(long order) { return "order:" + std::to_string(order) + ":confirmation-email"; }

class shop : public te::effectful_actor<shop, shop_state> {
public:
  using events = tp::event_types<order_placed>;

  shop(troupe::context<shop> ctx, troupe::persistence_id id, std::shared_ptr<probe> p, td::delivery_options o,
       bool email_after_payment = false, tp::persistence_options po = {})
      : effectful_actor(ctx, std::move(id), o, po), probe_(std::move(p)), chain_(email_after_payment) {}

  static void apply(shop_state& s, const order_placed& e) { s.orders[e.order] = e.amount; }

  troupe::task<bool> handle(place p) {
    if (state().orders.contains(p.order)) co_return false;
    order_placed e{p.order, p.amount};
    tk::charge c{p.amount};
    auto id = payment_id(p.order);
    co_return co_await start_effect(std::move(id), c, e);
  }

  troupe::task<bool> handle(start_task t) {
    if (t.type == "other") {
      typed_request<'o', 't', 'h', 'e', 'r'> r{1};
      co_return co_await start_effect(t.id, r);
    }
    if (t.type == "fail") {
      typed_request<'f', 'a', 'i', 'l'> r{1};
      co_return co_await start_effect(t.id, r);
    }
    if (t.type == "hold") {
      typed_request<'h', 'o', 'l', 'd'> r{1};
      co_return co_await start_effect(t.id, r);
    }
    task_request r{1};
    co_return co_await start_effect(t.id, r);
  }

  troupe::task<bool> handle(send_email m) {
    tk::email e{"customer-" + std::to_string(m.order) + "@example.com", "order confirmed"};
    auto id = email_id(m.order);
    co_return co_await start_effect(std::move(id), e);
  }

  troupe::task<int> handle(try_task t) {
    bool refused = false;
    try {
      task_request r{1};
      co_return co_await start_effect(t.id, r) ? 1 : 0;
    } catch (const troupe::error& e) {
      if (e.code() != te::errc::id_in_use) throw;
      refused = true;
    }
    co_return refused ? -1 : 0;
  }

  troupe::task<bool> handle(start_bad t) {
    unserializable r;
    co_return co_await start_effect(t.id, r);
  }

  te::effect_table handle(effects_query) const { return state().effects; }

  /// The workflow goes on from an outcome, in the same unit of work.
  troupe::task<> on_effect(const te::effect& e) {
    if (probe_->on_effect_failures.load() > 0) {
      --probe_->on_effect_failures;
      throw std::runtime_error("on_effect failed on purpose");
    }
    probe_->record(probe_->outcomes, e);
    if (chain_ && e.type == "payment" && e.status == effect_status::completed) {
      const long order = std::stol(e.id.substr(6));
      tk::email m{"customer-" + std::to_string(order) + "@example.com", "order confirmed"};
      auto id = email_id(order);
      co_await start_effect(std::move(id), m);
    }
  }

private:
  std::shared_ptr<probe> probe_;
  bool chain_;
};

// -- a process: store, journal, system, transport, simulators --------------------------

inline td::delivery_options fast_delivery() {
  td::delivery_options o;
  o.redelivery.initial_backoff = 10ms;
  o.redelivery.max_backoff = 40ms;
  o.redelivery.max_attempts = 0;
  o.dedup.retention = std::chrono::milliseconds::max();
  return o;
}

inline te::retry_policy fast_retries(std::uint32_t attempts = 5) {
  te::retry_policy p;
  p.max_attempts = attempts;
  p.initial_backoff = 2ms;
  p.max_backoff = 10ms;
  return p;
}

inline te::dispatcher_options fast_dispatcher(std::string name = "dispatcher") {
  te::dispatcher_options o;
  o.name = std::move(name);
  o.tick = 2ms;
  o.delivery = fast_delivery();
  return o;
}

struct world {
  test::durable_store store;
  std::shared_ptr<troupe::testing::faulty_journal> journal;
  std::unique_ptr<troupe::actor_system> sys;
  std::shared_ptr<probe> probes = std::make_shared<probe>();

  world() { boot(); }

  /// A fresh process over the same durable store.
  void boot() {
    sys.reset();
    journal.reset();
    journal = std::make_shared<troupe::testing::faulty_journal>(store.open_process());
    sys = std::make_unique<troupe::actor_system>();
    tp::set_journal(*sys, journal);
    td::set_transport(*sys);
  }

  /// The kill: the process goes away with whatever it had in memory
  /// (attempts under way are abandoned where they stand).
  void crash() {
    sys.reset();
    journal.reset();
  }

  troupe::actor_ref<shop> owner(const std::string& name = "shop", bool chain = false, tp::persistence_options po = {}) {
    return sys->spawn<shop>(troupe::persistence_id{name}, probes, fast_delivery(), chain, po);
  }

  /// A dispatcher, once it has loaded the outbox (so that what the test
  /// starts next reaches it as news, not in its first load).
  troupe::actor_ref<te::dispatcher> dispatcher(te::adapters a, te::dispatcher_options o = fast_dispatcher()) {
    auto d = te::spawn_dispatcher(*sys, std::move(a), std::move(o));
    (void)test::get(d.ask(te::effects_status{}, asio::use_future));
    return d;
  }

  std::shared_ptr<script> new_script() {
    auto s = std::make_shared<script>();
    s->probes = probes;
    return s;
  }

  te::effect_table effects(const troupe::actor_ref<shop>& s) {
    return test::get(s.ask(effects_query{}, asio::use_future));
  }

  effect_status status(const troupe::actor_ref<shop>& s, const std::string& id) { return effects(s).status(id); }

  /// The store drops the outbox records whose time has come (as a
  /// compaction would).
  void drop_expired() {
    // (Through the process's journal: the expiry rule is registered there.)
    REQUIRE(journal);
    REQUIRE_FALSE(journal->drop_expired(journal->open_table("outbox")));
  }

  /// The outbox record of `id` in the store, if any.
  std::optional<te::effect_info> record(const std::string& id) {
    std::optional<std::string> v;
    REQUIRE_FALSE(store->get(store->open_table("outbox"), te::detail::outbox_key(id), v));
    if (!v) return std::nullopt;
    return te::detail::decode(id, *v).info;
  }

  /// Starts effect `id` (type "task", run by `sc`), stops the owner while
  /// the attempt runs, then lets the attempt complete: its outcome's
  /// delivery stays unconfirmed while the owner is down.
  void complete_while_owner_is_down(script& sc, const std::string& id) {
    {
      auto s = owner();
      sc.hold = true;
      CHECK(test::get(s.ask(start_task{id}, asio::use_future)));
      REQUIRE(eventually([&] { return sc.holding.load() == 1; }));
      s.stop();
      test::get(s.when_stopped(asio::use_future));
    }
    sc.hold = false;
    REQUIRE(eventually([&] { return record(id) && record(id)->status == effect_status::completed; }));
  }

  template <class P>
  bool eventually(P pred, std::chrono::milliseconds limit = test::deadline) {
    return test::eventually(pred, probes->m, probes->changed, 5ms, limit);
  }

  /// Waits until `s` has `count` effects, all completed.
  bool all_completed(const troupe::actor_ref<shop>& s, std::size_t count) {
    return eventually([&] {
      auto t = effects(s);
      for (auto& [id, e] : t)
        if (e.status != effect_status::completed) return false;
      return t.size() == count;
    });
  }

  bool settled(const troupe::actor_ref<shop>& s, const std::string& id, effect_status want) {
    return eventually([&] { return status(s, id) == want; });
  }
};

inline std::uint64_t seed_from_env() {
  if (const char* s = std::getenv("TROUPE_PROPERTY_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

} // namespace effects_world
