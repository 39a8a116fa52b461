// Turn scheduling on its own: an actor woken during another's turn runs
// next on the same thread; several woken ones go to the queues.
#include <troupe/detail/turn.hpp>

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

namespace d = troupe::detail;

namespace {

struct fake_cell final : d::cell_base {
  explicit fake_cell(d::system_state& s) : cell_base(s, false) {}
  std::function<void()> on_turn;
  int turns = 0, posts = 0, continuations = 0;
  void request_stop(troupe::exit_reason) override {}
  void force_stop() noexcept override {}
  void post(bool continuation) noexcept override {
    ++posts;
    continuations += continuation ? 1 : 0;
  }
  void turn() noexcept override {
    ++turns;
    if (on_turn) on_turn();
  }
};

struct system_fixture {
  d::system_state* state = new d::system_state(troupe::system_config{.threads = 1}, nullptr);
  ~system_fixture() { state->release(); }
};

} // namespace

TEST_CASE("an actor woken by a turn runs next on the same thread, without a post") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state);
  a.on_turn = [&] { d::this_turn.hold(&b); };
  d::run_turns(&a);
  CHECK(a.turns == 1);
  CHECK(b.turns == 1);
  CHECK(b.posts == 0);
  CHECK_FALSE(d::this_turn.in_turn);
}

TEST_CASE("two actors woken by one turn are both posted as continuations") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state), c(*f.state);
  a.on_turn = [&] {
    d::this_turn.hold(&b);
    d::this_turn.hold(&c);
  };
  d::run_turns(&a);
  CHECK(b.turns == 0);
  CHECK(c.turns == 0);
  CHECK(b.posts == 1);
  CHECK(c.posts == 1);
  CHECK(b.continuations == 1);
  CHECK(d::this_turn.pending == 0);
}

TEST_CASE("past max_pending held actors the oldest goes to the shared queue at once") {
  system_fixture f;
  std::vector<std::unique_ptr<fake_cell>> woken;
  for (std::uint32_t i = 0; i <= d::turn_state::max_pending; ++i)
    woken.push_back(std::make_unique<fake_cell>(*f.state));
  fake_cell a(*f.state);
  a.on_turn = [&] {
    for (auto& w : woken) d::this_turn.hold(w.get());
    CHECK(woken[0]->posts == 1);         // went at once,
    CHECK(woken[0]->continuations == 0); // to the shared queue
  };
  d::run_turns(&a);
  for (std::size_t i = 1; i < woken.size(); ++i) CHECK(woken[i]->continuations == 1);
}

TEST_CASE("a ping-pong of hand-offs stops after max_handoffs and posts the next turn") {
  system_fixture f;
  fake_cell a(*f.state), b(*f.state);
  a.on_turn = [&] { d::this_turn.hold(&b); };
  b.on_turn = [&] { d::this_turn.hold(&a); };
  d::run_turns(&a);
  CHECK(a.turns + b.turns == static_cast<int>(d::turn_state::max_handoffs) + 1);
  CHECK(a.posts + b.posts == 1);
}
