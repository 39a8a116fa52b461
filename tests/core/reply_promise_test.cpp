#include <troupe/reply_promise.hpp>

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>

#include "../support.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_reply_promise_test {

using namespace std::chrono_literals;

namespace {

// -- a cache that coalesces requests: asks parked until the value is loaded --

struct fetch {
  std::string key;
  using reply_type = std::string;
};
struct loaded {
  std::string key, value;
};
struct parked_query {};

class cache {
public:
  void handle(fetch f, troupe::reply_promise<std::string> p) {
    if (auto it = values_.find(f.key); it != values_.end()) return p.deliver(it->second);
    waiting_[f.key].push_back(std::move(p));
  }
  void handle(loaded l) {
    values_[l.key] = l.value;
    auto it = waiting_.find(l.key);
    if (it == waiting_.end()) return;
    for (auto& p : it->second) p.deliver(l.value);
    waiting_.erase(it);
  }
  std::size_t handle(parked_query) const {
    std::size_t n = 0;
    for (auto& [k, ps] : waiting_) n += ps.size();
    return n;
  }

private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<troupe::reply_promise<std::string>>> waiting_;
};

// -- a promise moved to another actor, answered there -------------------------

struct square {
  int n;
  using reply_type = int;
};
struct work {
  int n;
  std::shared_ptr<troupe::reply_promise<int>> promise; // messages are copied: the promise travels shared
};
class worker {
public:
  void handle(work w) { w.promise->deliver(w.n * w.n); }
};
class dispatcher {
public:
  explicit dispatcher(troupe::actor_ref<worker> w) : w_(std::move(w)) {}
  void handle(square s, troupe::reply_promise<int> p) {
    w_.tell(work{s.n, std::make_shared<troupe::reply_promise<int>>(std::move(p))});
  }

private:
  troupe::actor_ref<worker> w_;
};

// -- promises dropped, answered twice, failed, told --------------------------

struct drop_it {
  using reply_type = int;
};
struct keep_it {
  using reply_type = int;
};
struct throw_after_keeping {
  using reply_type = int;
};
struct answer_then_throw {
  using reply_type = int;
};
struct answer_twice {
  using reply_type = int;
};
struct fail_it {
  using reply_type = int;
};
struct told_query {
  using reply_type = void;
};
struct pending_seen_query {};
struct second_answer_query {};
struct void_later {
  using reply_type = void;
};

class careless {
public:
  void handle(drop_it, troupe::reply_promise<int>) {} // goes unanswered
  void handle(keep_it, troupe::reply_promise<int> p) { kept_.push_back(std::move(p)); }
  void handle(throw_after_keeping, troupe::reply_promise<int> p) {
    kept_.push_back(std::move(p));
    throw std::runtime_error("after keeping the promise");
  }
  void handle(answer_then_throw, troupe::reply_promise<int> p) {
    p.deliver(7);
    throw std::runtime_error("after answering");
  }
  void handle(answer_twice, troupe::reply_promise<int> p) {
    p.deliver(1);
    try {
      p.deliver(2);
    } catch (const troupe::error& e) {
      second_answer_ = e.code();
    }
  }
  void handle(fail_it, troupe::reply_promise<int> p) { p.fail(troupe::errc::invalid_argument, "no such thing"); }
  void handle(told_query, troupe::reply_promise<void> p) { told_pending_ = p.pending(); }
  bool handle(pending_seen_query) const { return told_pending_; }
  std::error_code handle(second_answer_query) const { return second_answer_; }
  void handle(void_later, troupe::reply_promise<void> p) { p.deliver(); }

private:
  std::vector<troupe::reply_promise<int>> kept_;
  std::error_code second_answer_;
  bool told_pending_ = true;
};

template <class F>
std::error_code code_of(F&& f) {
  try {
    f();
  } catch (const troupe::error& e) {
    return e.code();
  }
  return {};
}

} // namespace

TEST_CASE("a handler parks asks in promises and answers them from a later message") {
  troupe::actor_system sys;
  auto c = sys.spawn<cache>();
  auto a = c.ask(fetch{"k"}, asio::use_future);
  auto b = c.ask(fetch{"k"}, asio::use_future);
  auto other = c.ask(fetch{"other"}, asio::use_future);
  CHECK(test::get(c.ask(parked_query{}, asio::use_future)) == 3); // the cache went on handling messages
  c.tell(loaded{"k", "v"});
  CHECK(test::get(a) == "v");
  CHECK(test::get(b) == "v");
  CHECK(test::get(c.ask(fetch{"k"}, asio::use_future)) == "v"); // answered at once now
  CHECK(other.wait_for(0ms) == std::future_status::timeout);
  c.tell(loaded{"other", "w"});
  CHECK(test::get(other) == "w");
}

TEST_CASE("a promise moved to another actor is answered there") {
  troupe::actor_system sys;
  auto w = sys.spawn<worker>();
  auto d = sys.spawn<dispatcher>(w);
  std::vector<std::future<int>> fs;
  for (int i = 0; i < 100; ++i) fs.push_back(d.ask(square{i}, asio::use_future));
  for (int i = 0; i < 100; ++i) CHECK(test::get(fs[i]) == i * i);
}

TEST_CASE("a promise destroyed unanswered fails its ask at once with broken_promise") {
  troupe::actor_system sys; // no ask timeout configured: only the broken promise can end the ask
  auto c = sys.spawn<careless>();
  auto f = c.ask(drop_it{}, asio::use_future);
  REQUIRE(f.wait_for(test::deadline) == std::future_status::ready);
  CHECK(code_of([&] { f.get(); }) == troupe::errc::broken_promise);
}

TEST_CASE("an actor that stops with parked promises breaks them") {
  troupe::actor_system sys;
  auto c = sys.spawn<careless>();
  auto f = c.ask(keep_it{}, asio::use_future);
  auto g = c.ask(keep_it{}, asio::use_future);
  test::get(c.ask(pending_seen_query{}, asio::use_future)); // both parked
  c.stop();
  CHECK(code_of([&] { test::get(f); }) == troupe::errc::broken_promise);
  CHECK(code_of([&] { test::get(g); }) == troupe::errc::broken_promise);
}

TEST_CASE("a handler that throws fails its ask with handler_failed, even with its promise kept") {
  troupe::actor_system sys;
  auto c = sys.spawn<careless>(troupe::spawn_options{.supervision = troupe::supervision::resume()});
  auto f = c.ask(throw_after_keeping{}, asio::use_future);
  CHECK(code_of([&] { test::get(f); }) == troupe::errc::handler_failed);
}

TEST_CASE("a promise answers once: a second answer throws, the asker sees the first") {
  troupe::actor_system sys;
  auto c = sys.spawn<careless>();
  CHECK(test::get(c.ask(answer_twice{}, asio::use_future)) == 1);
  CHECK(test::get(c.ask(second_answer_query{}, asio::use_future)) ==
        troupe::errc::invalid_argument);
}

TEST_CASE("a promise failed with an error code fails the ask with it") {
  troupe::actor_system sys;
  auto c = sys.spawn<careless>();
  auto f = c.ask(fail_it{}, asio::use_future);
  try {
    test::get(f);
    FAIL("the ask succeeded");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    CHECK(std::string(e.what()).find("no such thing") != std::string::npos);
  }
}

TEST_CASE("a told message gets a promise nobody waits for; a void promise completes a void ask") {
  troupe::actor_system sys;
  auto c = sys.spawn<careless>();
  c.tell(told_query{});
  CHECK_FALSE(test::get(c.ask(pending_seen_query{}, asio::use_future)));
  test::get(c.ask(void_later{}, asio::use_future));
  // An ask of the same message: someone waits.
  auto f = c.ask(told_query{}, asio::use_future);
  CHECK(code_of([&] { test::get(f); }) == troupe::errc::broken_promise);
  CHECK(test::get(c.ask(pending_seen_query{}, asio::use_future)));
}

TEST_CASE("the reply type of an ask answered later is the message's reply_type") {
  STATIC_REQUIRE(std::is_same_v<troupe::reply_type_t<cache, fetch>, std::string>);
  STATIC_REQUIRE(std::is_same_v<troupe::reply_type_t<careless, void_later>, void>);
  STATIC_REQUIRE(troupe::handles<cache, fetch>);
  STATIC_REQUIRE(troupe::answers<cache, fetch>);
  STATIC_REQUIRE_FALSE(troupe::handles<worker, fetch>);
}

// -- stash ----------------------------------------------------------------------

namespace {

struct initialised {};
struct record {
  int n;
};
struct log_query {};
struct lookup {
  int n;
  using reply_type = int;
};

/// Sets everything aside until it is initialised, then takes it back in order.
class starter {
public:
  explicit starter(troupe::context<starter> ctx) : ctx_(ctx) {}
  void handle(initialised) {
    ready_ = true;
    unstashed_ = ctx_.unstash_all();
  }
  void handle(record r) {
    if (!ready_) return ctx_.stash(r);
    log_.push_back(r.n);
  }
  void handle(lookup l, troupe::reply_promise<int> p) {
    if (!ready_) return ctx_.stash(l, std::move(p));
    log_.push_back(-l.n);
    p.deliver(l.n * 10);
  }
  std::vector<int> handle(log_query) const {
    auto v = log_;
    v.push_back(static_cast<int>(unstashed_));
    v.push_back(static_cast<int>(ctx_.stashed()));
    return v;
  }

private:
  troupe::context<starter> ctx_;
  bool ready_ = false;
  std::size_t unstashed_ = 0;
  std::vector<int> log_;
};

} // namespace

TEST_CASE("stashed messages are handled after unstash_all, in order, before what was queued after them") {
  troupe::actor_system sys;
  auto s = sys.spawn<starter>();
  s.tell(record{1});
  auto asked = s.ask(lookup{2}, asio::use_future);
  s.tell(record{3});
  s.tell(initialised{});
  s.tell(record{4});
  CHECK(test::get(asked) == 20);
  // 1, the ask (-2), 3 from the stash, then 4; three were unstashed, none is left.
  CHECK(test::get(s.ask(log_query{}, asio::use_future)) == std::vector<int>{1, -2, 3, 4, 3, 0});
}

TEST_CASE("an actor that stops with stashed messages counts them as dead letters and fails stashed asks") {
  troupe::actor_system sys;
  auto s = sys.spawn<starter>();
  s.tell(record{1});
  s.tell(record{2});
  auto asked = s.ask(lookup{3}, asio::use_future);
  test::get(s.ask(log_query{}, asio::use_future));
  const auto before = sys.dead_letters();
  s.stop();
  test::get(s.when_stopped(asio::use_future));
  CHECK(code_of([&] { test::get(asked); }) == troupe::errc::actor_stopped);
  CHECK(sys.dead_letters() == before + 3);
}

TEST_CASE("an answer given through the promise before the handler throws is the ask's reply; the exception is "
          "still the actor's failure") {
  troupe::actor_system sys;
  auto c = sys.spawn<careless>(troupe::spawn_options{.supervision = troupe::supervision::stop()});
  CHECK(test::get(c.ask(answer_then_throw{}, asio::use_future)) == 7);
  auto d = test::get(c.when_stopped(asio::use_future)); // its supervision saw the failure
  CHECK(d.reason == troupe::exit_reason::failure);
  CHECK(d.what.find("after answering") != std::string::npos);
}

} // namespace core_reply_promise_test
