// Turn scheduling on its own: an actor woken during another's turn runs
// next on the same thread; others woken wait in the thread's run queue;
// an idle worker steals from a busy one.
#include <troupe/detail/turn.hpp>

#include <catch2/catch.hpp>

#include <asio/post.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_detail_turn_test {

namespace d = troupe::detail;

namespace {

struct fake_cell final : d::cell_base {
  explicit fake_cell(d::system_state& s) : cell_base(s, false, s.type_stats(&d::actor_type_key<fake_cell>, "fake_cell")) {}
  std::function<void()> on_turn;
  int turns = 0, posts = 0;
  void request_stop(troupe::exit_reason) override {}
  void force_stop() noexcept override {}
  troupe::down final_down() const override { return {}; }
  void post(bool) noexcept override { ++posts; }
  void turn() noexcept override {
    ++turns;
    if (on_turn) on_turn();
  }
};

struct system_fixture {
  explicit system_fixture(std::size_t threads = 1)
      : state(new d::system_state(troupe::system_config{.threads = threads}, nullptr)) {}
  ~system_fixture() {
    state->pool->join();
    state->release();
  }
  /// Runs `f` on one of the system's worker threads and waits for it.
  template <class F>
  void on_worker(F f) {
    std::promise<void> done;
    asio::post(state->executor(), [&] {
      f();
      done.set_value();
    });
    done.get_future().get();
  }
  d::system_state* state;
};

} // namespace

TEST_CASE("an actor woken by a turn runs next on the same thread, without a post") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state);
  a.on_turn = [&] { d::this_turn.hold(&b); };
  f.on_worker([&] {
    d::run_turns(&a);
    CHECK_FALSE(d::this_turn.in_turn);
  });
  CHECK(a.turns == 1);
  CHECK(b.turns == 1);
  CHECK(b.posts == 0);
}

TEST_CASE("two actors woken by one turn both run on this thread: the first next, the second from the run queue") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state), c(*f.state);
  std::vector<int> order;
  a.on_turn = [&] {
    d::this_turn.hold(&b);
    d::this_turn.hold(&c);
  };
  b.on_turn = [&] { order.push_back(2); };
  c.on_turn = [&] { order.push_back(3); };
  f.on_worker([&] {
    d::run_turns(&a);
    CHECK(d::this_turn.pending == 0);
  });
  CHECK(order == std::vector<int>{2, 3});
  CHECK(b.posts + c.posts == 0);
}

TEST_CASE("past max_pending held actors the oldest goes to the run queue at once") {
  system_fixture f;
  std::vector<std::unique_ptr<fake_cell>> woken;
  for (std::uint32_t i = 0; i <= d::turn_state::max_pending; ++i)
    woken.push_back(std::make_unique<fake_cell>(*f.state));
  fake_cell a(*f.state);
  a.on_turn = [&] {
    for (auto& w : woken) d::this_turn.hold(w.get());
    CHECK(d::this_turn.queue->size() == 1); // the oldest, where another worker may take it
  };
  f.on_worker([&] { d::run_turns(&a); });
  for (auto& w : woken) {
    CHECK(w->turns == 1);
    CHECK(w->posts == 0);
  }
}

TEST_CASE("a ping-pong of hand-offs lets a queued actor run after at most max_handoffs") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state), c(*f.state);
  int handoffs_before_c = -1;
  b.on_turn = [&] {
    if (c.turns == 0) d::this_turn.hold(&a);
  };
  c.on_turn = [&] { handoffs_before_c = a.turns + b.turns - 1; };
  a.on_turn = [&, first = true]() mutable {
    if (first) {
      d::this_turn.hold(&b);
      d::this_turn.hold(&c); // waits in the run queue behind b
      first = false;
    } else if (c.turns == 0) {
      d::this_turn.hold(&b);
    }
  };
  f.on_worker([&] { d::run_turns(&a); });
  CHECK(c.turns == 1);
  CHECK(handoffs_before_c <= static_cast<int>(d::turn_state::max_handoffs));
  CHECK(a.posts + b.posts + c.posts == 0);
}

TEST_CASE("a long chain of turns yields the thread: work posted to the pool meanwhile runs before it ends") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state);
  const int total = 20 * static_cast<int>(d::turn_state::max_turns);
  std::atomic<int> turns_when_posted_ran{-1};
  std::promise<void> done;
  a.on_turn = [&] {
    if (a.turns == 1)
      asio::post(f.state->executor(), [&] { turns_when_posted_ran = a.turns + b.turns; });
    if (a.turns + b.turns < total) d::this_turn.hold(&b);
  };
  b.on_turn = [&] {
    if (a.turns + b.turns < total)
      d::this_turn.hold(&a);
    else
      done.set_value();
  };
  asio::post(f.state->executor(), [&] { d::run_turns(&a); });
  done.get_future().get();
  CHECK(turns_when_posted_ran > 0);
  CHECK(turns_when_posted_ran < total);
}

TEST_CASE("an idle worker steals from a busy one's run queue") {
  system_fixture f(2);
  std::mutex m;
  std::condition_variable both_ran;
  std::set<std::thread::id> threads;
  std::vector<std::unique_ptr<fake_cell>> slow;
  std::atomic<int> finished{0};
  std::promise<void> all_done;
  for (int i = 0; i < 8; ++i) {
    auto c = std::make_unique<fake_cell>(*f.state);
    c->on_turn = [&] {
      {
        // Busy until the other worker has run one of them too: only a
        // steal from this worker's queue ends the wait before its deadline.
        std::unique_lock l(m);
        threads.insert(std::this_thread::get_id());
        both_ran.notify_all();
        both_ran.wait_for(l, std::chrono::seconds(10), [&] { return threads.size() == 2; });
      }
      if (++finished == 8) all_done.set_value();
    };
    slow.push_back(std::move(c));
  }
  fake_cell a(*f.state);
  a.on_turn = [&] {
    for (auto& c : slow) d::this_turn.hold(c.get());
  };
  asio::post(f.state->executor(), [&] { d::run_turns(&a); });
  REQUIRE(all_done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  std::lock_guard g(m);
  CHECK(threads.size() == 2);
}

TEST_CASE("actors scheduled from outside the turns wait in one list, then run in the order scheduled") {
  system_fixture f;
  std::promise<void> gate;
  auto open = gate.get_future().share();
  asio::post(f.state->executor(), [open] { open.wait(); }); // the one worker is busy
  constexpr int n = 100;
  std::vector<int> order;
  std::promise<void> all_done;
  std::vector<std::unique_ptr<fake_cell>> cells;
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<fake_cell>(*f.state);
    c->on_turn = [&order, &all_done, i] {
      order.push_back(i);
      if (i == n - 1) all_done.set_value();
    };
    cells.push_back(std::move(c));
  }
  for (auto& c : cells) d::inject(c.get());
  // All wait in the list, newest first, for the one drain posted into the
  // pool by the first: a burst from outside wakes a worker once.
  int listed = 0;
  for (auto* l = f.state->injected.load(); l; l = l->run_next) {
    CHECK(l == cells[static_cast<std::size_t>(n - 1 - listed)].get());
    ++listed;
  }
  CHECK(listed == n);
  gate.set_value();
  REQUIRE(all_done.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  std::vector<int> expected(n);
  for (int i = 0; i < n; ++i) expected[static_cast<std::size_t>(i)] = i;
  CHECK(order == expected);
  CHECK(f.state->injected.load() == nullptr);
  for (auto& c : cells) CHECK(c->posts == 0);
}

TEST_CASE("actors injected behind a long turn are taken by an idle worker, however many came together") {
  system_fixture f(2);
  constexpr int n = 10; // behind a long turn: the monitor finds its worker stuck, and an idle one takes half
  std::atomic<int> others_ran{0};
  std::promise<void> all_others;
  std::promise<bool> first_released;
  std::vector<std::unique_ptr<fake_cell>> cells;
  for (int i = 0; i < n; ++i) cells.push_back(std::make_unique<fake_cell>(*f.state));
  auto others = all_others.get_future();
  cells[0]->on_turn = [&] { // long: it waits for every other to run, on the other worker
    first_released.set_value(others.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  };
  for (int i = 1; i < n; ++i)
    cells[static_cast<std::size_t>(i)]->on_turn = [&] {
      if (++others_ran == n - 1) all_others.set_value();
    };
  std::promise<void> gate; // the workers are busy until all are injected
  auto open = gate.get_future().share();
  asio::post(f.state->executor(), [open] { open.wait(); });
  asio::post(f.state->executor(), [open] { open.wait(); });
  for (auto& c : cells) d::inject(c.get());
  gate.set_value();
  auto released = first_released.get_future();
  REQUIRE(released.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(released.get());
  CHECK(others_ran == n - 1);
}

TEST_CASE("a worker's time per turn is a moving average, and its queue's work is that times the actors waiting") {
  d::run_queue q;
  CHECK(q.turn_ns() == 0);
  q.record_turns(10, std::chrono::microseconds(10)); // 1 µs per turn: the first figure is taken whole
  CHECK(q.turn_ns() == 1'000);
  for (int i = 0; i < 200; ++i) q.record_turns(10, std::chrono::microseconds(10));
  CHECK(q.turn_ns() == 1'000);
  q.record_turns(1, std::chrono::microseconds(9)); // one slow run moves it by an eighth of the difference
  CHECK(q.turn_ns() >= 1'990);
  CHECK(q.turn_ns() <= 2'000);
  std::vector<d::run_link> links(5);
  for (auto& l : links) q.push(&l);
  CHECK(q.backlog_ns() == 5 * std::uint64_t{q.turn_ns()});
}

TEST_CASE("a steal takes from a queue only when its work reaches the threshold, half of it, and at most max_taken") {
  d::run_queues qs(2);
  auto& victim = qs[0];
  auto& thief = qs[1];
  for (int i = 0; i < 50; ++i) victim.record_turns(1, std::chrono::nanoseconds(100)); // ~100 ns per turn
  const std::uint64_t per_turn = victim.turn_ns();
  REQUIRE(per_turn > 90);

  std::vector<d::run_link> links(10);
  for (auto& l : links) victim.push(&l);
  // 10 short turns: less work than asked for, left where they are.
  CHECK(qs.steal(&thief, 10 * per_turn + 1) == nullptr);
  CHECK(victim.size() == 10);
  // Enough: the older half, the first to run now, the rest in the thief's queue.
  d::run_link* first = qs.steal(&thief, 10 * per_turn);
  CHECK(first == &links[0]);
  CHECK(victim.size() == 5);
  CHECK(thief.size() == 4);
  CHECK(thief.pop() == &links[1]);
  CHECK(victim.pop() == &links[5]);
  // Zero takes from any queue that holds one.
  CHECK(qs.steal(&thief, 0) == &links[6]);

  std::vector<d::run_link> many(1'000);
  d::run_queue a;
  for (auto& l : many) a.push(&l);
  std::uint32_t n = 0;
  d::run_link* last = nullptr;
  d::run_link* chain = a.take_half(n, last);
  CHECK(n == d::run_queue::max_taken); // the owner's wait is bounded, however long its queue
  CHECK(chain == &many[0]);
  CHECK(last == &many[d::run_queue::max_taken - 1]);
  CHECK(last->run_next == nullptr);
  CHECK(a.size() == 1'000 - d::run_queue::max_taken);
}

TEST_CASE("a turn that pushes more than a turn's budget in total lets an idle worker take the actor it woke; one "
          "that pushes no more keeps it held") {
  // The budget is 256 by default; a flood is more than 256 + 16 pushes.
  const bool flood = GENERATE(false, true);
  system_fixture f(2);
  const std::uint32_t threshold = d::flood_pushes(*f.state);
  REQUIRE(threshold == 256 + d::turn_state::flood_slack);
  std::atomic<bool> consumer_ran{false};
  std::atomic<bool> ran_during_turn{false};
  std::promise<void> done, turn_ended;
  fake_cell consumer(*f.state);
  consumer.on_turn = [&] {
    if (!consumer_ran.exchange(true)) done.set_value();
  };
  fake_cell producer(*f.state);
  producer.on_turn = [&] {
    d::this_turn.hold(&consumer); // the push that woke it: one
    for (std::uint32_t i = 1; i < threshold + (flood ? 1 : 0); ++i) d::this_turn.pushed();
    // Held, the consumer runs only after this turn; spilled, the other
    // worker takes it now.
    const auto until = std::chrono::steady_clock::now() + (flood ? std::chrono::seconds(10) : std::chrono::milliseconds(50));
    while (!consumer_ran.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    ran_during_turn = consumer_ran.load();
    turn_ended.set_value();
  };
  asio::post(f.state->executor(), [&] { d::run_turns(&producer); });
  REQUIRE(done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(turn_ended.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  INFO("flood: " << flood);
  CHECK(ran_during_turn == flood);
}

} // namespace core_detail_turn_test
