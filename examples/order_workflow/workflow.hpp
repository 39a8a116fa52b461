#pragma once

// The order workflow: order actors (persistent, with effects), a warehouse
// (persistent), their events and messages. Payment and e-mails go through
// the effects layer (the gateway and e-mail simulators); the picklist goes
// to the warehouse by reliable delivery, and the warehouse reports back
// the same way.
//
//   OrderPlaced + PaymentRequested ──payment effect──▶ PaymentCompleted
//     ├─▶ ConfirmationEmailRequested ──e-mail effect──▶ ConfirmationEmailSent
//     └─▶ PicklistRequested ──delivery──▶ warehouse ──▶ PicklistAccepted, OrderShipped
//                                                        └─▶ ShippingEmailRequested ──▶ ShippingEmailSent
//   (PaymentFailed, PaymentUnknown: the payment could not be made, or nobody can tell.)

#include <troupe/troupe.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/effects/effectful_actor.hpp>
#include <troupe/persistence/work_index.hpp>
#include <troupe/testing/email_service.hpp>
#include <troupe/testing/payment_gateway.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace orders {

namespace te = troupe::effects;
namespace tk = troupe::testing;
namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;

// -- events and messages: each names the order and, where there is one, a detail --

template <const char* Manifest>
struct order_event {
  static constexpr std::string_view manifest = Manifest;
  long order = 0;
  std::string detail;
};
template <const char* M>
void tag_invoke(json::value_from_tag, json::value& v, const order_event<M>& e) {
  v = {{"order", e.order}, {"detail", e.detail}};
}
template <const char* M>
order_event<M> tag_invoke(json::value_to_tag<order_event<M>>, const json::value& v) {
  return {json::value_to<long>(v.at("order")), json::value_to<std::string>(v.at("detail"))};
}

inline constexpr char placed_m[] = "orders.order-placed";
inline constexpr char payment_requested_m[] = "orders.payment-requested";
inline constexpr char payment_completed_m[] = "orders.payment-completed";
inline constexpr char payment_failed_m[] = "orders.payment-failed";
inline constexpr char payment_unknown_m[] = "orders.payment-unknown";
inline constexpr char confirmation_requested_m[] = "orders.confirmation-email-requested";
inline constexpr char confirmation_sent_m[] = "orders.confirmation-email-sent";
inline constexpr char picklist_requested_m[] = "orders.picklist-requested";
inline constexpr char picklist_accepted_m[] = "orders.picklist-accepted";
inline constexpr char shipped_m[] = "orders.order-shipped";
inline constexpr char shipping_requested_m[] = "orders.shipping-email-requested";
inline constexpr char shipping_sent_m[] = "orders.shipping-email-sent";
inline constexpr char email_failed_m[] = "orders.email-failed";

using order_placed = order_event<placed_m>; // detail: the amount
using payment_requested = order_event<payment_requested_m>;
using payment_completed = order_event<payment_completed_m>; // detail: the payment ID
using payment_failed = order_event<payment_failed_m>;
using payment_unknown = order_event<payment_unknown_m>;
using confirmation_email_requested = order_event<confirmation_requested_m>;
using confirmation_email_sent = order_event<confirmation_sent_m>;
using picklist_requested = order_event<picklist_requested_m>;
using picklist_accepted = order_event<picklist_accepted_m>; // detail: the bin
using order_shipped = order_event<shipped_m>;               // detail: the tracking number
using shipping_email_requested = order_event<shipping_requested_m>;
using shipping_email_sent = order_event<shipping_sent_m>;
using email_failed = order_event<email_failed_m>; // detail: which e-mail, and why

/// Where an order stands, rebuilt from its events (by the actor, and by
/// `verify` reading the journal directly).
struct order_state {
  te::effect_table effects;
  long order = 0;
  long amount = 0;
  bool placed = false, paid = false, payment_failed = false, payment_unknown = false;
  bool confirmation_requested = false, confirmation_sent = false;
  bool picklist_requested = false, picklist_accepted = false, shipped = false;
  bool shipping_requested = false, shipping_sent = false;
  bool email_failed = false; // an e-mail failed or its outcome is unknown: an operator's case

  bool complete() const { return confirmation_sent && picklist_accepted && shipped && shipping_sent; }
  /// Nothing more will happen without an operator.
  bool ended() const { return complete() || payment_failed || payment_unknown || email_failed; }

  /// Applies an event by manifest (for `verify`); false if it is none of
  /// the order's.
  bool apply_manifest(std::string_view m) {
    bool* flag = m == placed_m                   ? &placed
                 : m == payment_completed_m      ? &paid
                 : m == payment_failed_m         ? &payment_failed
                 : m == payment_unknown_m        ? &payment_unknown
                 : m == confirmation_requested_m ? &confirmation_requested
                 : m == confirmation_sent_m      ? &confirmation_sent
                 : m == picklist_requested_m     ? &picklist_requested
                 : m == picklist_accepted_m      ? &picklist_accepted
                 : m == shipped_m                ? &shipped
                 : m == shipping_requested_m     ? &shipping_requested
                 : m == shipping_sent_m          ? &shipping_sent
                 : m == email_failed_m           ? &email_failed
                                                 : nullptr;
    if (flag) *flag = true;
    return flag || m == payment_requested_m;
  }
};

// -- messages between the orders and the warehouse --------------------------------

// (The same shape as the events: the order and a detail.)
inline constexpr char picklist_msg_m[] = "warehouse.picklist";
inline constexpr char accepted_msg_m[] = "warehouse.picklist-accepted";
inline constexpr char shipped_msg_m[] = "warehouse.shipped";
using picklist = order_event<picklist_msg_m>; // detail: the items
using accepted = order_event<accepted_msg_m>; // detail: the bin
using shipment = order_event<shipped_msg_m>;  // detail: the tracking number

inline constexpr std::string_view order_prefix = "order-";
inline std::string order_pid(long n) { return std::string(order_prefix) + std::to_string(n); }
inline long order_number(std::string_view pid) { return std::stol(std::string(pid.substr(order_prefix.size()))); }

/// The orders' own marks in the work index: placed and not ended (it goes
/// with the event that ends the order), and ended without completing (an
/// operator's case).
inline constexpr char under_way = 'O';
inline constexpr char needs_operator = 'F';
inline std::string op_id(long n, const char* step) { return "order:" + std::to_string(n) + ":" + step; }
inline long amount_of(long n) { return 1000 + n % 97; }
/// The warehouses: order `n`'s picklist goes to `warehouse-(n % count)`.
/// Each is one persistent actor that handles a picklist at a time (one
/// durable write each), so their number bounds the orders per second: one
/// alone allows about one picklist per group commit.
inline constexpr long default_warehouses = 8;
inline std::string warehouse_pid(long w) { return "warehouse-" + std::to_string(w); }

/// Commands and queries of an order.
struct place_order {};
struct order_status {};

/// Told to the progress tracker once an order has ended (durably: once per
/// order, by the handler whose write ended it).
struct order_ended {
  long order = 0;
  bool complete = false;
};

// -- the order -----------------------------------------------------------------

class order : public te::effectful_actor<order, order_state> {
public:
  using events = tp::event_types<order_placed, payment_requested, payment_completed, payment_failed, payment_unknown,
                                 confirmation_email_requested, confirmation_email_sent, picklist_requested,
                                 picklist_accepted, order_shipped, shipping_email_requested, shipping_email_sent,
                                 email_failed>;
  using accepts = td::accepts<accepted, shipment>;

  /// An entity: its number is in its persistence ID (`order-42`).
  /// An entity of `td::entities<order>`: its delivery options are those
  /// given there.
  order(troupe::context<order> ctx, troupe::persistence_id id, std::function<void(order_ended)> ended,
        long warehouses = default_warehouses)
      : effectful_actor(ctx, std::move(id)), n_(order_number(pid())), warehouses_(warehouses),
        ended_(std::move(ended)), work_(storage()) {
    tp::work_index::claim_reason(under_way, "orders");
    tp::work_index::claim_reason(needs_operator, "orders");
  }

  static void apply(order_state& s, const order_placed& e) {
    s.placed = true;
    s.order = e.order;
    s.amount = std::stol(e.detail);
  }
  static void apply(order_state&, const payment_requested&) {}
  static void apply(order_state& s, const payment_completed&) { s.paid = true; }
  static void apply(order_state& s, const payment_failed&) { s.payment_failed = true; }
  static void apply(order_state& s, const payment_unknown&) { s.payment_unknown = true; }
  static void apply(order_state& s, const confirmation_email_requested&) { s.confirmation_requested = true; }
  static void apply(order_state& s, const confirmation_email_sent&) { s.confirmation_sent = true; }
  static void apply(order_state& s, const picklist_requested&) { s.picklist_requested = true; }
  static void apply(order_state& s, const picklist_accepted&) { s.picklist_accepted = true; }
  static void apply(order_state& s, const order_shipped&) { s.shipped = true; }
  static void apply(order_state& s, const shipping_email_requested&) { s.shipping_requested = true; }
  static void apply(order_state& s, const shipping_email_sent&) { s.shipping_sent = true; }
  static void apply(order_state& s, const email_failed&) { s.email_failed = true; }

  /// Placing is idempotent: an order placed before is not placed again.
  /// The order is marked under way in the work index in the same write
  /// (a restart resumes it until it ends).
  troupe::task<> handle(place_order) {
    if (state().placed) co_return;
    order_placed placed{n_, std::to_string(amount_of(n_))};
    payment_requested requested{n_, op_id(n_, "payment")};
    tk::charge c{amount_of(n_)};
    auto id = op_id(n_, "payment");
    begin_batch();
    try {
      co_await start_effect(std::move(id), c, placed, requested);
    } catch (...) {
      abort_batch();
      throw;
    }
    std::vector<tp::table_write> mark{work_.mark(pid(), under_way)}; // (GCC 12: not inside the co_await)
    co_await commit_batch(std::move(mark));
  }

  order_state handle(order_status) const { return state(); }

  /// An effect's outcome, persisted; the next steps go into the same write.
  troupe::task<> on_effect(const te::effect& e) {
    const bool was_ended = state().ended();
    if (e.id == op_id(n_, "payment")) {
      if (e.status == te::effect_status::completed && !state().paid) {
        payment_completed paid{n_, e.result_as<std::string>()};
        confirmation_email_requested mail{n_, {}};
        tk::email m{"customer-" + std::to_string(n_) + "@example.com", "order confirmed"};
        auto mail_id = op_id(n_, "confirmation-email");
        co_await start_effect(std::move(mail_id), m, paid, mail);
        picklist list{n_, "sku-" + std::to_string(n_ % 13)};
        picklist_requested asked{n_, {}};
        auto pick_id = td::delivery_id(op_id(n_, "picklist"));
        co_await deliver(warehouse_pid(n_ % warehouses_), std::move(pick_id), list, asked);
      } else if (e.status == te::effect_status::failed && !state().payment_failed) {
        payment_failed f{n_, e.reason};
        co_await persist(f);
      } else if (e.status == te::effect_status::unknown && !state().payment_unknown) {
        payment_unknown u{n_, e.reason};
        co_await persist(u);
      }
    } else if (e.status == te::effect_status::completed) {
      if (e.id == op_id(n_, "confirmation-email") && !state().confirmation_sent) {
        confirmation_email_sent sent{n_, {}};
        co_await persist(sent);
      } else if (e.id == op_id(n_, "shipping-email") && !state().shipping_sent) {
        shipping_email_sent sent{n_, {}};
        co_await persist(sent);
      }
    } else if ((e.status == te::effect_status::failed || e.status == te::effect_status::unknown) &&
               !state().email_failed) {
      // An e-mail that could not be sent (or nobody can tell): the order
      // ends, an operator's case, rather than stay under way for ever.
      email_failed f{n_, e.id + ": " + e.reason};
      co_await persist(f);
    }
    co_await report(was_ended);
  }

  troupe::task<> handle(td::delivery<accepted> d) {
    if (state().picklist_accepted) co_return;
    const bool was_ended = state().ended();
    picklist_accepted e{n_, d.message.detail};
    co_await persist(e);
    co_await report(was_ended);
  }

  troupe::task<> handle(td::delivery<shipment> d) {
    if (state().shipped) co_return;
    order_shipped e{n_, d.message.detail};
    shipping_email_requested mail{n_, {}};
    tk::email m{"customer-" + std::to_string(n_) + "@example.com", "order shipped: " + d.message.detail};
    auto id = op_id(n_, "shipping-email");
    co_await start_effect(std::move(id), m, e, mail);
  }

private:
  /// An order this handler ended: its marks change in the handler's write
  /// (every step after placing is a delivery's, one write), and once that
  /// is durable it says so.
  troupe::task<> report(bool was_ended) {
    if (was_ended || !state().ended()) co_return;
    std::vector<tp::table_write> marks{work_.clear(pid(), under_way)};
    if (!state().complete()) marks.push_back(work_.mark(pid(), needs_operator));
    co_await persist_all_with(std::move(marks));
    this->after_commit([f = ended_, e = order_ended{n_, state().complete()}] { f(e); });
  }

  long n_;
  long warehouses_;
  std::function<void(order_ended)> ended_;
  tp::work_index work_;
};

// -- the shop ------------------------------------------------------------------------

/// The window of orders the shop is placing (orders `from..upto`): written
/// before they are placed, so that a restart places again only what may
/// have been cut short, never every order there ever was.
struct placing {
  static constexpr std::string_view manifest = "shop.placing";
  long from = 0;
  long upto = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const placing& e) {
  v = {{"from", e.from}, {"upto", e.upto}};
}
inline placing tag_invoke(json::value_to_tag<placing>, const json::value& v) {
  return {json::value_to<long>(v.at("from")), json::value_to<long>(v.at("upto"))};
}

struct shop_state {
  long from = 0;
  long upto = 0;
};
/// Commands of the shop: record a window before placing it; which one is.
struct place_window {
  long from = 0;
  long upto = 0;
};
struct window_query {};

class shop : public tp::persistent_actor<shop, shop_state> {
public:
  using events = tp::event_types<placing>;
  using persistent_actor::persistent_actor;
  static void apply(shop_state& s, const placing& e) {
    s.from = e.from;
    s.upto = e.upto;
  }
  troupe::task<> handle(place_window w) {
    placing e{w.from, w.upto};
    co_await persist(e);
  }
  shop_state handle(window_query) const { return state(); }
};

// -- the warehouse ---------------------------------------------------------------

struct picked {
  static constexpr std::string_view manifest = "warehouse.picked";
  long order = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const picked& e) { v = {{"order", e.order}}; }
inline picked tag_invoke(json::value_to_tag<picked>, const json::value& v) {
  return {json::value_to<long>(v.at("order"))};
}

struct warehouse_state {
  long picked = 0;
};
// JSON: a warehouse's journal grows with every order, so it is recovered
// from a snapshot (see `warehouse_snapshots`).
inline void tag_invoke(json::value_from_tag, json::value& v, const warehouse_state& s) { v = {{"picked", s.picked}}; }
inline warehouse_state tag_invoke(json::value_to_tag<warehouse_state>, const json::value& v) {
  return {json::value_to<long>(v.at("picked"))};
}

/// A warehouse takes one picklist per order, for as long as the shop runs:
/// a snapshot every 100 of them, so that a restart replays fewer than 100
/// events per warehouse, not every order there ever was. The events stay
/// (snapshots only shorten the recovery).
inline tp::snapshot_policy warehouse_snapshots() { return {.every = 100, .keep = 2, .delete_events = false}; }

/// Accepts each picklist once (dedup by its delivery ID), picks it, and
/// reports acceptance and shipment to the order — reliably, in the same
/// write as the pick.
class warehouse : public td::reliable_actor<warehouse, warehouse_state> {
public:
  using events = tp::event_types<picked>;
  using accepts = td::accepts<picklist>;
  warehouse(troupe::context<warehouse> ctx, troupe::persistence_id id, td::delivery_options o,
            tp::persistence_options p = {})
      : reliable_actor(ctx, std::move(id), o, std::move(p)) {}

  static void apply(warehouse_state& s, const picked&) { ++s.picked; }

  troupe::task<std::string> handle(td::delivery<picklist> d) {
    const long n = d.message.order;
    picked e{n};
    co_await persist(e);
    auto bin = "bin-" + std::to_string(n % 8);
    accepted a{n, bin};
    auto accepted_id = td::delivery_id(op_id(n, "picklist-accepted"));
    co_await deliver(order_pid(n), std::move(accepted_id), a);
    shipment s{n, "track-" + std::to_string(n * 7919 % 100000)};
    auto shipped_id = td::delivery_id(op_id(n, "shipment"));
    co_await deliver(order_pid(n), std::move(shipped_id), s);
    co_return bin;
  }
};

} // namespace orders
