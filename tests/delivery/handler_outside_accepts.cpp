// Must NOT compile: a delivery handler for a message missing from `accepts`
// (every delivery of it would be rejected at run time): the diagnostic names
// the message and accepts.
#include <troupe/delivery/reliable_actor.hpp>

namespace td = troupe::delivery;
namespace json = boost::json;

struct picklist {
  static constexpr std::string_view manifest = "test.picklist";
  long order = 0;
};
struct cancellation {
  static constexpr std::string_view manifest = "test.cancellation";
  long order = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const picklist& e) { v = {{"order", e.order}}; }
picklist tag_invoke(json::value_to_tag<picklist>, const json::value& v) { return {json::value_to<long>(v.at("order"))}; }
void tag_invoke(json::value_from_tag, json::value& v, const cancellation& e) { v = {{"order", e.order}}; }
cancellation tag_invoke(json::value_to_tag<cancellation>, const json::value& v) {
  return {json::value_to<long>(v.at("order"))};
}

struct stock {};

class warehouse : public td::reliable_actor<warehouse, stock> {
public:
  using events = troupe::persistence::event_types<>;
  using accepts = td::accepts<picklist>; // cancellation forgotten
  warehouse(troupe::context<warehouse> ctx, troupe::persistence_id id) : reliable_actor(ctx, std::move(id)) {}
  troupe::task<> handle(td::delivery<picklist>) { co_return; }
  troupe::task<> handle(td::delivery<cancellation>) { co_return; }
};

void start(troupe::actor_system& sys) { (void)sys.spawn<warehouse>(troupe::persistence_id{"warehouse"}); }
