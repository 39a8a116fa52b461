// reliable_delivery: a shop delivers picklists to a warehouse over a network
// that loses a third of the messages and acknowledgements and duplicates a
// fifth of them. The shop redelivers until the warehouse confirms; the
// warehouse recognises duplicates by their delivery ID, so every picklist is
// picked exactly once.
//
//   reliable_delivery [directory]      (default: a fresh temporary directory)
#include <troupe/troupe.hpp>
#include <troupe/testing/faulty_transport.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/rocksdb/store.hpp>

#include <boost/describe/class.hpp>

#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace td = troupe::delivery;
namespace tp = troupe::persistence;

// The message delivered: JSON through Boost.JSON (its members described),
// with a stable manifest.
struct picklist {
  static constexpr std::string_view manifest = "shop.picklist";
  long order = 0;
  std::string sku;
};
BOOST_DESCRIBE_STRUCT(picklist, (), (order, sku))

// The shop's event: an order was placed (its picklist delivery is recorded
// in the same atomic write).
struct order_placed {
  static constexpr std::string_view manifest = "shop.order-placed";
  long order = 0;
};
BOOST_DESCRIBE_STRUCT(order_placed, (), (order))

// The warehouse's event: a picklist was picked.
struct picked {
  static constexpr std::string_view manifest = "warehouse.picked";
  long order = 0;
};
BOOST_DESCRIBE_STRUCT(picked, (), (order))

struct place_order {
  long order;
};
struct shop_state {
  long placed = 0;
};

class shop : public td::reliable_actor<shop, shop_state> {
public:
  using events = tp::event_types<order_placed>;
  shop(troupe::context<shop> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(shop_state& s, const order_placed&) { ++s.placed; }

  troupe::task<> handle(place_order p) {
    // A business key: the same ID on every attempt, after any crash.
    auto id = td::delivery_id::of("order", p.order, "picklist");
    picklist list{p.order, "sku-" + std::to_string(p.order % 7)};
    order_placed e{p.order};
    co_await deliver("warehouse", id, list, e);
  }

  void handle(td::confirmed c) { std::cout << "  shop: " << c.id.str() << " confirmed, reply " << *c.reply << '\n'; }
};

struct warehouse_state {
  std::map<long, int> picks; // order -> times picked
};
struct report {};

class warehouse : public td::reliable_actor<warehouse, warehouse_state> {
public:
  using events = tp::event_types<picked>;
  using accepts = td::accepts<picklist>;
  warehouse(troupe::context<warehouse> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(warehouse_state& s, const picked& e) { ++s.picks[e.order]; }

  // Runs once per delivery ID; its event, the dedup mark and the reply are
  // written together, and only then is the delivery acknowledged.
  troupe::task<std::string> handle(td::delivery<picklist> d) {
    picked e{d.message.order};
    co_await persist(e);
    co_return "bin-" + std::to_string(d.message.order % 4);
  }

  warehouse_state handle(report) const { return state(); }
};

int main(int argc, char** argv) {
  std::random_device rd;
  const auto dir = argc > 1
                       ? std::filesystem::path(argv[1])
                       : std::filesystem::temp_directory_path() / ("troupe-reliable-delivery-" + std::to_string(rd()));
  troupe::actor_system sys;
  tp::set_journal(
      sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(std::make_shared<tp::rocksdb_store>(dir.string())));

  // The network: loses and duplicates messages and acknowledgements.
  auto net = std::make_shared<troupe::testing::faulty_transport>(std::make_shared<td::local_transport>(),
                                                                 sys.get_executor(), 42);
  net->set_message_faults({.drop = 0.3, .duplicate = 0.2, .reorder = 0.1});
  net->set_ack_faults({.drop = 0.3, .duplicate = 0.2});
  td::set_transport(sys, net);

  td::delivery_options o;
  o.redelivery.initial_backoff = std::chrono::milliseconds(20);
  o.redelivery.max_backoff = std::chrono::milliseconds(200);
  auto w = sys.spawn<warehouse>(troupe::persistence_id{"warehouse"}, o);
  auto s = sys.spawn<shop>(troupe::persistence_id{"shop"}, o);

  const long orders = 10;
  std::cout << "placing " << orders << " orders over a lossy, duplicating network\n";
  for (long n = 1; n <= orders; ++n) s.ask(place_order{n}, asio::use_future).get();
  while (s.ask(td::delivery_status{}, asio::use_future).get().unconfirmed != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));

  auto st = w.ask(report{}, asio::use_future).get();
  auto ws = w.ask(td::delivery_status{}, asio::use_future).get();
  auto ss = s.ask(td::delivery_status{}, asio::use_future).get();
  auto mc = net->message_counts();
  auto ac = net->ack_counts();
  std::cout << "network: " << mc.sent << " messages sent, " << mc.dropped << " lost, " << mc.duplicated
            << " duplicated; " << ac.sent << " acknowledgements, " << ac.dropped << " lost, " << ac.duplicated
            << " duplicated\n";
  std::cout << "shop: " << ss.sent << " sent, " << ss.resent << " redelivered, " << ss.confirmed << " confirmed\n";
  std::cout << "warehouse: " << ws.processed << " processed, " << ws.duplicates
            << " duplicates answered from the dedup marks\n";
  bool once = st.picks.size() == static_cast<std::size_t>(orders);
  for (auto& [order, times] : st.picks) {
    std::cout << "  order " << order << " picked " << times << (times == 1 ? " time\n" : " times\n");
    once = once && times == 1;
  }
  std::cout << (once ? "every picklist picked exactly once\n" : "FAILED: not every picklist picked exactly once\n");
  if (argc <= 1) {
    sys.shutdown();
    std::filesystem::remove_all(dir);
  }
  return once ? 0 : 1;
}
