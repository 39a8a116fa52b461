// Persistent actors on PostgreSQL: recovery claims the ID, so an actor of
// the same ID in another actor system (another process, in production) on
// the same database fences the one before, which stops instead of writing.
#include "support.hpp"

#include <troupe/actor_system.hpp>
#include <troupe/persistence/persistent_actor.hpp>

#include "../support.hpp"

#include <boost/describe/class.hpp>

#include <asio/use_future.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <string>

namespace postgres_persistent_actor_test {

namespace tp = troupe::persistence;

struct added {
  static constexpr std::string_view manifest = "test.added";
  long by = 0;
};
BOOST_DESCRIBE_STRUCT(added, (), (by))

struct total {
  long value = 0;
};
BOOST_DESCRIBE_STRUCT(total, (), (value))

struct add {
  long by;
};
struct current {};

class counter : public tp::persistent_actor<counter, total> {
public:
  using events = tp::event_types<added>;
  using persistent_actor::persistent_actor;
  static void apply(total& s, const added& e) { s.value += e.by; }
  troupe::task<long> handle(add a) {
    co_await persist(added{a.by});
    co_return state().value;
  }
  long handle(current) const { return state().value; }
};

struct node {
  explicit node(const test::pg::schema& db)
      : store(std::make_shared<tp::postgres_store>(db.options())),
        journal(std::make_shared<tp::journal_of<tp::postgres_store>>(store)) {
    tp::set_journal(sys, journal);
  }
  troupe::actor_system sys{troupe::system_config{.threads = 2}};
  std::shared_ptr<tp::postgres_store> store;
  std::shared_ptr<tp::journal_of<tp::postgres_store>> journal;
};

TEST_CASE("an actor recovered in a second system fences the first: its next persist is refused, and it stops") {
  test::pg::schema db;
  node a(db), b(db);
  auto first = a.sys.spawn<counter>(troupe::persistence_id{"c-1"});
  CHECK(test::get(first.ask(add{1}, asio::use_future)) == 1);
  CHECK(test::get(first.ask(add{1}, asio::use_future)) == 2);
  // The same ID recovered elsewhere: it has the events, and the claim.
  auto second = b.sys.spawn<counter>(troupe::persistence_id{"c-1"});
  CHECK(test::get(second.ask(current{}, asio::use_future)) == 2);
  CHECK(test::get(second.ask(add{10}, asio::use_future)) == 12);
  // The first one's write commits nothing; it is refused as fenced.
  try {
    test::get(first.ask(add{100}, asio::use_future));
    FAIL("a fenced actor's persist succeeded");
  } catch (const troupe::error& e) {
    // The handler threw the journal's error: the asker gets it as the
    // handler's failure, with its message.
    CHECK(e.code() == troupe::errc::handler_failed);
    CHECK(std::string(e.what()).find(make_error_code(tp::errc::fenced).message()) != std::string::npos);
  }
  CHECK(test::eventually([&] { return first.tell(current{}) != std::error_code{}; })); // stopped
  CHECK(test::get(second.ask(add{1}, asio::use_future)) == 13);
  CHECK(b.store->highest_sequence_nr("c-1") == 4);
}

} // namespace postgres_persistent_actor_test
