#pragma once

// The actors whose records tests/data/store-format-1/ holds: the program
// that wrote it (make_store.cpp) and the test that reads it
// (tests/persistence/store_format_test.cpp) share them, so their manifests
// and JSON shapes are the same on both sides.

#include <troupe/troupe.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/effects/effectful_actor.hpp>

#include <string>

namespace store_data {

namespace tp = troupe::persistence;
namespace td = troupe::delivery;
namespace te = troupe::effects;
namespace json = boost::json;

// -- a counter -----------------------------------------------------------------

struct incremented {
  static constexpr std::string_view manifest = "data.incremented";
  long by = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const incremented& e) { v = {{"by", e.by}}; }
inline incremented tag_invoke(json::value_to_tag<incremented>, const json::value& v) {
  return {json::value_to<long>(v.at("by"))};
}

struct counter_state {
  long value = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const counter_state& s) { v = {{"value", s.value}}; }
inline counter_state tag_invoke(json::value_to_tag<counter_state>, const json::value& v) {
  return {json::value_to<long>(v.at("value"))};
}

struct increment {
  long by = 0;
};
struct current {};

class counter : public tp::persistent_actor<counter, counter_state> {
public:
  using events = tp::event_types<incremented>;
  using persistent_actor::persistent_actor;
  static void apply(counter_state& s, const incremented& e) { s.value += e.by; }
  troupe::task<long> handle(increment m) {
    incremented e{m.by};
    co_await persist(e);
    co_return state().value;
  }
  long handle(current) const { return state().value; }
};

// -- a shop that delivers picklists, and a warehouse that takes them -------------

struct picklist {
  static constexpr std::string_view manifest = "data.picklist";
  long order = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const picklist& p) { v = {{"order", p.order}}; }
inline picklist tag_invoke(json::value_to_tag<picklist>, const json::value& v) {
  return {json::value_to<long>(v.at("order"))};
}

struct placed {
  static constexpr std::string_view manifest = "data.placed";
  long order = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const placed& e) { v = {{"order", e.order}}; }
inline placed tag_invoke(json::value_to_tag<placed>, const json::value& v) {
  return {json::value_to<long>(v.at("order"))};
}

struct picked {
  static constexpr std::string_view manifest = "data.picked";
  long order = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const picked& e) { v = {{"order", e.order}}; }
inline picked tag_invoke(json::value_to_tag<picked>, const json::value& v) {
  return {json::value_to<long>(v.at("order"))};
}

struct orders_state {
  long count = 0;
};

/// Delivers a picklist for an order under a given ID.
struct place {
  std::string to;
  std::string id;
  long order = 0;
};
struct placed_count {};

class shop : public td::reliable_actor<shop, orders_state> {
public:
  using events = tp::event_types<placed>;
  shop(troupe::context<shop> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(orders_state& s, const placed&) { ++s.count; }
  troupe::task<> handle(place p) {
    picklist list{p.order};
    placed e{p.order};
    co_await deliver(p.to, td::delivery_id(p.id), list, e);
  }
  long handle(placed_count) const { return state().count; }
};

class warehouse : public td::reliable_actor<warehouse, orders_state> {
public:
  using events = tp::event_types<picked>;
  using accepts = td::accepts<picklist>;
  warehouse(troupe::context<warehouse> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(orders_state& s, const picked&) { ++s.count; }
  troupe::task<std::string> handle(td::delivery<picklist> d) {
    picked e{d.message.order};
    co_await persist(e);
    co_return "bin-" + std::to_string(d.message.order);
  }
  long handle(placed_count) const { return state().count; }
};

// -- an effect's owner -------------------------------------------------------------

struct charge {
  static constexpr std::string_view effect_type = "data.payment";
  long amount = 0;
};
inline void tag_invoke(json::value_from_tag, json::value& v, const charge& c) { v = {{"amount", c.amount}}; }
inline charge tag_invoke(json::value_to_tag<charge>, const json::value& v) {
  return {json::value_to<long>(v.at("amount"))};
}

struct owner_state {
  te::effect_table effects;
};

struct pay {
  long order = 0;
  long amount = 0;
};
struct effect_of {
  std::string id;
};

class owner : public te::effectful_actor<owner, owner_state> {
public:
  using events = tp::event_types<>;
  owner(troupe::context<owner> ctx, troupe::persistence_id id, td::delivery_options o)
      : effectful_actor(ctx, std::move(id), o) {}
  troupe::task<bool> handle(pay p) {
    charge c{p.amount};
    auto id = "order:" + std::to_string(p.order) + ":payment";
    co_return co_await start_effect(std::move(id), c);
  }
  te::effect handle(effect_of q) const {
    const auto* e = find_effect(q.id);
    return e ? *e : te::effect{};
  }
};

} // namespace store_data
