// The seeded fault campaign of the delivery and effects layers. Two shops
// deliver picklists to one warehouse under colliding business IDs
// (`order:<n>:picklist` from both), after a payment through an outbox run by
// two dispatchers against a gateway that does not deduplicate (its ledger
// is a file: it outlives the process). Each cycle runs a child process over
// one store and kills it with SIGKILL at a random moment, while the
// transport drops, duplicates, reorders and delays messages and
// acknowledgements, the gateway fails before charging or loses its answer
// after charging, the warehouse's handler fails on some orders (after
// persisting), the wall clock steps, and an operator re-queues dead letters
// and resolves unknown payments (by asking the gateway's ledger). Orders
// arrive across the cycles. A last child runs without faults until
// everything has settled, then checks:
//
// - every payment key charged at most once, and every order placed;
// - every order ended: shipped, its picklist rejected as poison (the
//   warehouse's mark says so), or its payment failed;
// - the warehouse processed each (sender, ID) at most once, each shipped
//   order exactly once, a poison one never;
// - nothing pending: no delivery unconfirmed, no dead letter, no effect
//   pending or unknown.
//
//   troupe_delivery_campaign [--cycles N] [--orders M] [--seed S] [--dir D]
//
// Prints the seed first; the same seed replays the same faults (the kill
// moments and thread interleavings vary).
#include <troupe/troupe.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/effects/effectful_actor.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/testing/faulty_transport.hpp>
#include <troupe/testing/payment_gateway.hpp>
#include <troupe/testing/wall_clock.hpp>

#include <asio/use_future.hpp>

#include <boost/describe/class.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

namespace td = troupe::delivery;
namespace te = troupe::effects;
namespace tp = troupe::persistence;
namespace tk = troupe::testing;
using namespace std::chrono_literals;

namespace {

/// The warehouse's handler fails on these orders after persisting, always.
bool poison(long n) { return n % 13 == 5; }

// -- events and messages ----------------------------------------------------------------

#define CAMPAIGN_RECORD(name, manifest_text)                                                                           \
  struct name {                                                                                                        \
    static constexpr std::string_view manifest = manifest_text;                                                        \
    long order = 0;                                                                                                    \
    std::string sender;                                                                                                \
  };                                                                                                                   \
  BOOST_DESCRIBE_STRUCT(name, (), (order, sender))

CAMPAIGN_RECORD(placed, "campaign.placed")
CAMPAIGN_RECORD(picklist_sent, "campaign.picklist-sent")
CAMPAIGN_RECORD(shipped, "campaign.shipped")
CAMPAIGN_RECORD(payment_failed, "campaign.payment-failed")
CAMPAIGN_RECORD(picked, "campaign.picked")
CAMPAIGN_RECORD(picklist, "campaign.picklist")
CAMPAIGN_RECORD(shipment, "campaign.shipment")

struct place {
  long order = 0;
};
struct shop_query {};
struct warehouse_query {};

std::string payment_key(const std::string& shop, long n) { return shop + ":order:" + std::to_string(n) + ":payment"; }
/// The same for every shop: the business IDs collide at the warehouse.
td::delivery_id picklist_id(long n) { return td::delivery_id::of("order", n, "picklist"); }

// -- the shop ---------------------------------------------------------------------------

struct order_st {
  bool placed = false, picklist_sent = false, shipped = false, payment_failed = false;
};
struct shop_state {
  te::effect_table effects;
  std::map<long, order_st> orders;
};

class shop : public te::effectful_actor<shop, shop_state> {
public:
  using events = tp::event_types<placed, picklist_sent, shipped, payment_failed>;
  using accepts = td::accepts<shipment>;

  shop(troupe::context<shop> ctx, troupe::persistence_id id, td::delivery_options o)
      : effectful_actor(ctx, std::move(id), o) {}

  static void apply(shop_state& s, const placed& e) { s.orders[e.order].placed = true; }
  static void apply(shop_state& s, const picklist_sent& e) { s.orders[e.order].picklist_sent = true; }
  static void apply(shop_state& s, const shipped& e) { s.orders[e.order].shipped = true; }
  static void apply(shop_state& s, const payment_failed& e) { s.orders[e.order].payment_failed = true; }

  troupe::task<> handle(place p) {
    if (order(p.order).placed) co_return;
    tk::charge c{1000 + p.order};
    auto key = payment_key(pid(), p.order);
    placed e{p.order, pid()};
    co_await start_effect(std::move(key), c, e);
  }

  troupe::task<> on_effect(const te::effect& e) {
    const long n = std::stol(e.id.substr(pid().size() + 7)); // "<shop>:order:<n>:payment"
    const auto o = order(n);
    if (e.status == te::effect_status::completed && !o.picklist_sent) {
      picklist list{n, pid()};
      picklist_sent sent{n, pid()};
      co_await deliver("warehouse", picklist_id(n), list, sent);
    } else if (e.status == te::effect_status::failed && !o.payment_failed) {
      payment_failed f{n, pid()};
      co_await persist(f);
    }
  }

  troupe::task<> handle(td::delivery<shipment> d) {
    if (order(d.message.order).shipped) co_return;
    shipped e{d.message.order, pid()};
    co_await persist(e);
  }

  shop_state handle(shop_query) const { return state(); }

private:
  order_st order(long n) const {
    auto it = state().orders.find(n);
    return it == state().orders.end() ? order_st{} : it->second;
  }
};

// -- the warehouse ----------------------------------------------------------------------

struct warehouse_state {
  std::map<std::pair<std::string, long>, int> picks; // (sender, order) -> times
};

class warehouse : public td::reliable_actor<warehouse, warehouse_state> {
public:
  using events = tp::event_types<picked>;
  using accepts = td::accepts<picklist>;

  warehouse(troupe::context<warehouse> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}

  static void apply(warehouse_state& s, const picked& e) { ++s.picks[{e.sender, e.order}]; }

  troupe::task<> handle(td::delivery<picklist> d) {
    const long n = d.message.order;
    picked e{n, d.sender};
    co_await persist(e);
    if (poison(n)) throw std::runtime_error("no such item for order " + std::to_string(n));
    // Its own ID for each delivery it makes: the sender is part of it.
    shipment s{n, d.sender};
    co_await deliver(d.sender, td::delivery_id::of("shipment", d.sender, n), s);
  }

  warehouse_state handle(warehouse_query) const { return state(); }
};

// -- the gateway: a ledger file that outlives the process ---------------------------------

class ledger {
public:
  explicit ledger(std::string path) : path_(std::move(path)) {}

  /// Appends `key`, durably, before it returns.
  void charge(const std::string& key) {
    std::lock_guard g(m_);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) std::abort();
    const auto line = key + "\n";
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fdatasync(fd) != 0)
      std::abort();
    ::close(fd);
  }

  std::map<std::string, int> charges() const {
    std::lock_guard g(m_);
    std::map<std::string, int> out;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) ++out[line];
    return out;
  }

  bool charged(const std::string& key) const { return charges().contains(key); }

private:
  std::string path_;
  mutable std::mutex m_;
};

/// Queryable, and it does not honour idempotency keys: a second execute is
/// a second charge.
struct gateway_adapter {
  std::shared_ptr<ledger> book;
  std::shared_ptr<std::mutex> m;
  std::shared_ptr<std::mt19937_64> rng;
  double fail_before = 0, lose_answer = 0, query_timeout = 0;

  bool chance(double p) {
    std::lock_guard g(*m);
    return p > 0 && std::uniform_real_distribution<double>(0, 1)(*rng) < p;
  }

  te::outcome execute(const te::operation& op) {
    if (chance(fail_before)) return te::outcome::failed("503 before charging");
    book->charge(op.id);
    if (chance(lose_answer)) return te::outcome::unknown("timeout after charging");
    return te::outcome::completed(op.id);
  }

  te::query_result query(const std::string& id) {
    if (chance(query_timeout)) return te::query_result::unknown("query timed out");
    return book->charged(id) ? te::query_result::completed(id) : te::query_result::not_found();
  }
};

// -- one child process --------------------------------------------------------------------

struct run_options {
  std::string dir;
  std::uint64_t seed = 1;
  int cycle = 0;
  long orders = 0; // placed so far (this cycle places up to it)
  bool last = false;
};

const char* const shops[] = {"shop-a", "shop-b"};
const char* const dispatchers[] = {"dispatcher-1", "dispatcher-2"};

td::delivery_options delivery_options_for() {
  td::delivery_options o;
  o.redelivery.initial_backoff = 10ms;
  o.redelivery.max_backoff = 40ms;
  // A horizon of 1.2 s: dead letters for the operator (the outcomes the
  // dispatchers deliver are never given up).
  o.redelivery.max_attempts = 30;
  o.dedup.retention = 24h;
  return o;
}

te::adapters adapters_for(const std::shared_ptr<ledger>& book, std::uint64_t seed, bool faults) {
  gateway_adapter g{book, std::make_shared<std::mutex>(), std::make_shared<std::mt19937_64>(seed)};
  if (faults) {
    g.fail_before = 0.1;
    g.lose_answer = 0.15;
    g.query_timeout = 0.1;
  }
  te::retry_policy p;
  p.max_attempts = 6;
  p.initial_backoff = 2ms;
  p.max_backoff = 20ms;
  te::adapters a;
  a.add("payment", std::move(g), p);
  return a;
}

struct verdict {
  std::vector<std::string> violations;
  long orders = 0, shipped = 0, rejected = 0, failed = 0, charges = 0;
  void fail(std::string s) {
    if (violations.size() < 20) violations.push_back(std::move(s));
  }
};

/// Runs the workload: until killed, or (last) until everything settled.
int run_child(const run_options& r) {
  std::mt19937_64 rng(r.seed * 1000003 + static_cast<std::uint64_t>(r.cycle));
  auto book = std::make_shared<ledger>(r.dir + "/ledger");
  auto verdict_out = std::make_shared<verdict>();
  bool settled = false;
  {
    troupe::actor_system sys(troupe::system_config{.threads = 2});
    auto store = std::make_shared<tp::rocksdb_store>(r.dir + "/store");
    tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
    auto net = std::make_shared<tk::faulty_transport>(std::make_shared<td::local_transport>(), sys.get_executor(),
                                                      rng());
    if (!r.last) {
      tk::fault_rates f{.drop = 0.15, .duplicate = 0.1, .reorder = 0.1, .delay = 0.05, .max_delay = 20ms};
      net->set_message_faults(f);
      net->set_ack_faults(f);
    }
    net->on_warning([](const std::string&) {});
    td::set_transport(sys, net);

    std::vector<troupe::actor_ref<te::dispatcher>> ds;
    for (int i = 0; i < 2; ++i) {
      te::dispatcher_options o;
      o.name = dispatchers[i];
      o.tick = 5ms;
      o.delivery = delivery_options_for();
      o.retention.completed = 24h;
      ds.push_back(te::spawn_dispatcher(sys, adapters_for(book, rng(), !r.last), o));
    }
    auto w = sys.spawn<warehouse>(troupe::persistence_id{"warehouse"}, delivery_options_for());
    std::vector<troupe::actor_ref<shop>> ss;
    for (auto* name : shops) ss.push_back(sys.spawn<shop>(troupe::persistence_id{name}, delivery_options_for()));

    for (long n = 1; n <= r.orders; ++n)
      for (auto& s : ss) (void)s.tell(place{n});

    // The operator, and the clock steps, until killed (or settled).
    const auto start = std::chrono::steady_clock::now();
    const auto limit = r.last ? 120s : 3600s;
    auto step_at = start + std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng));
    bool stepped = false;
    while (std::chrono::steady_clock::now() - start < limit) {
      std::this_thread::sleep_for(r.last ? 100ms : 20ms);
      if (!r.last && !stepped && std::chrono::steady_clock::now() >= step_at) {
        tk::step_wall_clock(std::chrono::milliseconds(std::uniform_int_distribution<int>(-5000, 5000)(rng)));
        stepped = true;
      }
      try {
        auto requeue_all = [](auto& a) {
          for (auto& d : a.ask(td::list_dead_letters{}, asio::use_future).get()) {
            try {
              (void)a.ask(td::requeue{d.id}, asio::use_future).get();
            } catch (const std::exception&) { // refused: shown below if it stays
            }
          }
        };
        for (auto& s : ss) requeue_all(s);
        requeue_all(w);
        for (auto& d : ds)
          for (auto& e : d.ask(te::list_effects{}, asio::use_future).get())
            if (e.status == te::effect_status::unknown) {
              const bool charged = book->charged(e.id);
              (void)d.ask(te::resolve_effect{e.id, charged, charged ? "\"" + e.id + "\"" : "not in the ledger"},
                          asio::use_future)
                  .get();
            }
      } catch (const std::exception& ex) {
        if (r.last) verdict_out->fail(std::string("operator: ") + ex.what());
        continue;
      }
      if (!r.last) continue;
      // Settled: every order ended, nothing unconfirmed anywhere.
      bool done = true;
      for (auto& s : ss) {
        auto st = s.ask(shop_query{}, asio::use_future).get();
        auto ds_ = s.ask(td::delivery_status{}, asio::use_future).get();
        if (ds_.unconfirmed != 0) done = false;
        for (long n = 1; n <= r.orders && done; ++n) {
          auto it = st.orders.find(n);
          if (it == st.orders.end() || !it->second.placed) {
            done = false;
            break;
          }
          const auto& o = it->second;
          if (!(o.shipped || o.payment_failed || (poison(n) && o.picklist_sent))) done = false;
        }
      }
      for (auto& d : ds) {
        auto x = d.ask(te::effects_status{}, asio::use_future).get();
        if (x.pending != 0 || x.unknown != 0 || d.ask(td::delivery_status{}, asio::use_future).get().unconfirmed != 0)
          done = false;
      }
      if (w.ask(td::delivery_status{}, asio::use_future).get().unconfirmed != 0) done = false;
      if (done) {
        settled = true;
        break;
      }
    }
    if (!r.last) return 0; // (not reached: killed)
    if (!settled) verdict_out->fail("not settled after 120 s");

    // What the actors say.
    auto& v = *verdict_out;
    auto wh = w.ask(warehouse_query{}, asio::use_future).get();
    for (auto& [key, times] : wh.picks)
      if (times > 1)
        v.fail(key.first + " order " + std::to_string(key.second) + " picked " + std::to_string(times) + " times");
    for (std::size_t i = 0; i < ss.size(); ++i) {
      const std::string name = shops[i];
      auto st = ss[i].ask(shop_query{}, asio::use_future).get();
      for (long n = 1; n <= r.orders; ++n) {
        ++v.orders;
        auto it = st.orders.find(n);
        if (it == st.orders.end() || !it->second.placed) {
          v.fail(name + " order " + std::to_string(n) + " lost");
          continue;
        }
        const auto& o = it->second;
        const auto picks = wh.picks.contains({name, n}) ? wh.picks.at({name, n}) : 0;
        if (o.shipped) {
          ++v.shipped;
          if (poison(n)) v.fail(name + " poison order " + std::to_string(n) + " shipped");
          if (picks != 1) v.fail(name + " order " + std::to_string(n) + " shipped, picked " + std::to_string(picks));
        } else if (o.payment_failed) {
          ++v.failed;
        } else if (poison(n) && o.picklist_sent) {
          ++v.rejected;
          if (picks != 0) v.fail(name + " poison order " + std::to_string(n) + " picked");
        } else {
          v.fail(name + " order " + std::to_string(n) + " stuck");
        }
      }
      auto dl = ss[i].ask(td::list_dead_letters{}, asio::use_future).get();
      if (!dl.empty()) v.fail(name + " has " + std::to_string(dl.size()) + " dead letters left");
    }
    if (auto dl = w.ask(td::list_dead_letters{}, asio::use_future).get(); !dl.empty())
      v.fail("the warehouse has " + std::to_string(dl.size()) + " dead letters left");
    for (auto& [key, n] : book->charges()) {
      v.charges += n;
      if (n > 1) v.fail(key + " charged " + std::to_string(n) + " times");
    }
  }
  // The warehouse's marks of the poison orders say rejected.
  {
    tp::rocksdb_store store(r.dir + "/store");
    auto dedup = store.open_table("dedup_v2");
    for (auto* name : shops)
      for (long n = 1; n <= r.orders; ++n) {
        if (!poison(n)) continue;
        std::optional<std::string> v;
        const auto key =
            td::detail::key(td::detail::key_prefix("warehouse"), 0, td::detail::mark_key(name, picklist_id(n).str()));
        if (store.get(dedup, key, v) || !v ||
            td::detail::decode_mark(*v).what != td::detail::dedup_marks::mark::state::rejected)
          verdict_out->fail(std::string(name) + " poison order " + std::to_string(n) + " has no rejection mark");
      }
  }
  auto& v = *verdict_out;
  std::printf("{\"orders\":%ld,\"shipped\":%ld,\"rejected\":%ld,\"payment_failed\":%ld,\"charges\":%ld,"
              "\"violations\":%zu}\n",
              v.orders, v.shipped, v.rejected, v.failed, v.charges, v.violations.size());
  for (auto& s : v.violations) std::printf("violation: %s\n", s.c_str());
  std::fflush(stdout);
  return v.violations.empty() ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  int cycles = 20;
  long orders = 60;
  std::uint64_t seed = std::random_device{}();
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--cycles")
      cycles = std::atoi(argv[i + 1]);
    else if (a == "--orders")
      orders = std::atol(argv[i + 1]);
    else if (a == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--dir")
      dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: troupe_delivery_campaign [--cycles N] [--orders M] [--seed S] [--dir D]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    char tmpl[] = "/tmp/troupe-delivery-campaign-XXXXXX";
    if (!::mkdtemp(tmpl)) return 2;
    dir = tmpl;
  } else {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  std::printf("seed %llu, %d cycles, %ld orders per shop, in %s\n", static_cast<unsigned long long>(seed), cycles,
              orders, dir.c_str());
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  int kills = 0;
  for (int c = 0; c < cycles; ++c) {
    run_options r{dir, seed, c, std::min(orders, orders * (c + 1) / std::max(1, cycles / 2)), false};
    const int run_ms = std::uniform_int_distribution<int>(30, 400)(rng);
    const pid_t pid = ::fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      std::freopen("/dev/null", "w", stdout);
      ::_exit(run_child(r));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(run_ms));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++kills;
    } else {
      std::printf("cycle %d: the child ended by itself (status %d): seed %llu\n", c, status,
                  static_cast<unsigned long long>(seed));
      return 1;
    }
  }
  run_options last{dir, seed, cycles, orders, true};
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::fflush(stdout);
    ::_exit(run_child(last));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("%s: %d cycles killed with SIGKILL, then a run to the end: seed %llu\n", ok ? "ok" : "FAILED", kills,
              static_cast<unsigned long long>(seed));
  if (ok) std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
