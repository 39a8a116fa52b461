// payment_outbox: orders charge a card through a payment gateway that fails
// before charging, loses the answer after charging, or does not answer in
// time — and then send a confirmation e-mail through a service that loses
// answers too. Each charge and each e-mail goes through the outbox with a
// stable operation ID; an answer that was lost is an *unknown* outcome,
// resolved by asking the gateway (or by sending again under the same
// message ID), never by charging again.
//
//   payment_outbox [directory]      (default: a fresh temporary directory)
#include <troupe/troupe.hpp>
#include <troupe/effects/effectful_actor.hpp>
#include <troupe/testing/email_service.hpp>
#include <troupe/testing/payment_gateway.hpp>
#include <troupe/rocksdb/store.hpp>

#include <boost/describe/class.hpp>

#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <thread>

namespace te = troupe::effects;
namespace tk = troupe::testing;
namespace td = troupe::delivery;
namespace tp = troupe::persistence;

struct order_placed {
  static constexpr std::string_view manifest = "shop.order-placed";
  long order = 0;
  long amount = 0;
};
BOOST_DESCRIBE_STRUCT(order_placed, (), (order, amount))

struct order_state {
  te::effect_table effects; // the effects' states, rebuilt from events like the rest
  long amount = 0;
};

struct place {
  long amount;
};
struct show {};

class order : public te::effectful_actor<order, order_state> {
public:
  using events = tp::event_types<order_placed>;
  order(troupe::context<order> ctx, troupe::persistence_id id, long number, td::delivery_options o)
      : effectful_actor(ctx, std::move(id), o), number_(number) {}

  static void apply(order_state& s, const order_placed& e) { s.amount = e.amount; }

  // The intent (order_placed + the payment's outbox record) in one write.
  troupe::task<> handle(place p) {
    order_placed e{number_, p.amount};
    tk::charge c{p.amount};
    auto op = op_id("payment");
    co_await start_effect(std::move(op), c, e);
  }

  // An outcome arrives as a persisted event; the next step is started in
  // the same atomic write.
  troupe::task<> on_effect(const te::effect& e) {
    if (e.type == "payment" && e.status == te::effect_status::completed) {
      tk::email m{"customer-" + std::to_string(number_) + "@example.com", "payment received"};
      auto op = op_id("confirmation-email");
      co_await start_effect(std::move(op), m);
    }
  }

  te::effect_table handle(show) const { return state().effects; }

private:
  std::string op_id(const char* step) const { return "order:" + std::to_string(number_) + ":" + step; }
  long number_;
};

int main(int argc, char** argv) {
  std::random_device rd;
  const auto dir = argc > 1
                       ? std::filesystem::path(argv[1])
                       : std::filesystem::temp_directory_path() / ("troupe-payment-outbox-" + std::to_string(rd()));
  troupe::actor_system sys;
  tp::set_journal(
      sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(std::make_shared<tp::rocksdb_store>(dir.string())));
  td::set_transport(sys);

  // The external systems, with their faults (seeded).
  tk::simulator_options go;
  go.seed = 42;
  go.faults = {.fail_before = 0.2, .lose_response = 0.3, .timeout = 0.1, .slow = 0.1};
  auto gateway = std::make_shared<tk::payment_gateway>(go);
  tk::simulator_options mo;
  mo.seed = 43;
  mo.faults = {.fail_before = 0.1, .lose_response = 0.3};
  auto mail = std::make_shared<tk::email_service>(mo);

  te::retry_policy retries;
  retries.max_attempts = 20;
  retries.initial_backoff = std::chrono::milliseconds(10);
  retries.max_backoff = std::chrono::milliseconds(100);
  te::adapters a;
  a.add("payment", tk::payment_adapter(gateway, std::chrono::milliseconds(50)), retries);
  a.add("email", tk::email_adapter(mail), retries);
  te::dispatcher_options dop;
  dop.tick = std::chrono::milliseconds(5);
  te::spawn_dispatcher(sys, std::move(a), dop);

  td::delivery_options o;
  o.redelivery.initial_backoff = std::chrono::milliseconds(20);
  o.redelivery.max_backoff = std::chrono::milliseconds(200);
  const long orders = 10;
  std::vector<troupe::actor_ref<order>> refs;
  std::cout << "placing " << orders << " orders; the gateway fails, loses answers and times out\n";
  for (long n = 1; n <= orders; ++n) {
    refs.push_back(sys.spawn<order>(troupe::persistence_id{"order-" + std::to_string(n)}, n, o));
    refs.back().ask(place{n * 1000}, asio::use_future).get();
  }
  auto done = [&] {
    for (auto& r : refs) {
      auto t = r.ask(show{}, asio::use_future).get();
      if (t.size() != 2) return false;
      for (auto& [id, e] : t)
        if (e.status == te::effect_status::pending) return false;
    }
    return true;
  };
  while (!done()) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  bool ok = true;
  for (long n = 1; n <= orders; ++n) {
    auto t = refs[n - 1].ask(show{}, asio::use_future).get();
    const auto pay = "order:" + std::to_string(n) + ":payment";
    const auto mail_id = "order:" + std::to_string(n) + ":confirmation-email";
    const auto* p = t.find(pay);
    const auto charged = gateway->charges(pay);
    const auto mailed = mail->deliveries(mail_id);
    std::cout << "  order " << n << ": payment " << te::to_string(p->status);
    if (p->status == te::effect_status::completed) std::cout << " (" << p->result_as<std::string>() << ")";
    std::cout << " after " << p->attempts << " attempt(s), charged " << charged << "x; e-mail sent " << mailed << "x\n";
    ok = ok && p->status == te::effect_status::completed && charged == 1 && mailed == 1;
  }
  std::cout << "gateway: " << gateway->requests() << " charge requests, " << gateway->queries()
            << " queries; mail service: " << mail->requests() << " requests\n";
  std::cout << (ok ? "every order charged once and e-mailed once\n"
                   : "FAILED: an order was not charged or e-mailed exactly once\n");
  if (argc <= 1) {
    sys.shutdown();
    std::filesystem::remove_all(dir);
  }
  return ok ? 0 : 1;
}
