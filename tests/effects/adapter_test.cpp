// The adapter contract and the registry of adapters.
#include <troupe/effects/adapter.hpp>

#include "../support.hpp"

#include <boost/describe/class.hpp>

#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_adapter_test {

namespace te = troupe::effects;

namespace {

struct sync_adapter {
  te::outcome execute(const te::operation& op) { return te::outcome::completed("did " + op.id); }
};

struct async_adapter {
  static constexpr bool honours_idempotency_keys = true;
  troupe::task<te::outcome> execute(const te::operation& op) {
    co_return te::outcome::unknown("no answer for " + op.id);
  }
  troupe::task<te::query_result> query(const std::string& id) { co_return te::query_result::completed("found " + id); }
};

struct not_an_adapter {
  int execute(const te::operation&) { return 0; }
};

struct amount {
  long value = 0;
};
BOOST_DESCRIBE_STRUCT(amount, (), (value))

} // namespace

TEST_CASE("an adapter executes synchronously or as a coroutine, a queryable one also queries") {
  STATIC_REQUIRE(te::adapter<sync_adapter>);
  STATIC_REQUIRE(te::adapter<async_adapter>);
  STATIC_REQUIRE_FALSE(te::queryable_adapter<sync_adapter>);
  STATIC_REQUIRE(te::queryable_adapter<async_adapter>);
  STATIC_REQUIRE_FALSE(te::adapter<not_an_adapter>);
  STATIC_REQUIRE_FALSE(te::honours_idempotency_keys<sync_adapter>());
  STATIC_REQUIRE(te::honours_idempotency_keys<async_adapter>());
}

TEST_CASE("the registry runs each type's adapter, synchronous or not, behind one interface") {
  te::adapters a;
  a.add("sync", sync_adapter{}).add("async", async_adapter{});
  const auto* s = a.find("sync");
  const auto* c = a.find("async");
  REQUIRE(s);
  REQUIRE(c);
  CHECK_FALSE(a.find("other"));
  CHECK_FALSE(s->can_query);
  CHECK(c->can_query);
  CHECK(c->idempotent);
  te::operation op{"op-1", "sync", "{}", "owner", 1};
  auto done = test::run_here(s->execute(op));
  CHECK(done.what == te::outcome::kind::completed);
  CHECK(done.detail == R"("did op-1")");
  CHECK(test::run_here(c->execute(op)).what == te::outcome::kind::unknown);
  CHECK(test::run_here(c->query("op-1")).detail == R"("found op-1")");
}

TEST_CASE("the registry refuses an empty type, a null adapter, a bad policy and a second adapter of a type") {
  te::adapters a;
  a.add("t", sync_adapter{});
  auto refused = [](auto f) {
    try {
      f();
    } catch (const troupe::error& e) {
      return e.code() == troupe::errc::invalid_argument;
    }
    return false;
  };
  CHECK(refused([&] { a.add("", sync_adapter{}); }));
  CHECK(refused([&] { a.add("n", std::shared_ptr<sync_adapter>{}); }));
  te::retry_policy bad;
  bad.max_attempts = 0;
  CHECK(refused([&] { a.add("p", sync_adapter{}, bad); }));
  CHECK(refused([&] { a.add("t", sync_adapter{}); }));
}

TEST_CASE("outcomes and query results carry their result as JSON, and operations read their request") {
  CHECK(te::outcome::completed(amount{5}).detail == R"({"value":5})");
  CHECK(te::outcome::failed("declined", true).permanent);
  CHECK(te::query_result::not_found().what == te::query_result::kind::not_found);
  te::operation op{"id", "t", R"({"value":7})", "o", 1};
  CHECK(op.request_as<amount>().value == 7);
}

} // namespace effects_adapter_test
