// The two-stage replay on its own: records read on one thread are consumed
// in order on another, with bounded memory, and a failure on either side
// stops both.
#include <troupe/persistence/detail/replay_pipeline.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_detail_replay_pipeline_test {

namespace tp = troupe::persistence;

namespace {
tp::event_record record(tp::sequence_nr s) { return {s, "m", 1, std::to_string(s)}; }
} // namespace

TEST_CASE("every record is consumed once, in order, on the applier") {
  tp::blocking_thread applier("troupe-test");
  std::vector<tp::sequence_nr> seen;
  std::thread::id where;
  auto consume = [&](const tp::event_record& r) {
    where = std::this_thread::get_id();
    CHECK(r.payload == std::to_string(r.seq));
    seen.push_back(r.seq);
  };
  tp::detail::replay_pipeline<decltype(consume)> p(&applier, consume);
  constexpr tp::sequence_nr n = 10'000;
  for (tp::sequence_nr s = 1; s <= n; ++s) p.push(record(s));
  p.finish();
  REQUIRE(seen.size() == n);
  for (tp::sequence_nr s = 1; s <= n; ++s) CHECK(seen[s - 1] == s);
  CHECK(where != std::this_thread::get_id());
}

TEST_CASE("a replay shorter than a chunk, or without an applier, is consumed inline") {
  std::vector<tp::sequence_nr> seen;
  auto consume = [&](const tp::event_record& r) { seen.push_back(r.seq); };
  {
    tp::blocking_thread applier("troupe-test");
    tp::detail::replay_pipeline<decltype(consume)> p(&applier, consume);
    for (tp::sequence_nr s = 1; s <= 3; ++s) p.push(record(s));
    p.finish();
  }
  tp::detail::replay_pipeline<decltype(consume)> q(nullptr, consume);
  for (tp::sequence_nr s = 4; s <= 2000; ++s) q.push(record(s));
  q.finish();
  CHECK(seen.size() == 2000);
}

TEST_CASE("what the applier throws reaches the reader, which stops") {
  tp::blocking_thread applier("troupe-test");
  std::atomic<tp::sequence_nr> last{0};
  auto consume = [&](const tp::event_record& r) {
    if (r.seq == 1500) throw std::runtime_error("bad record 1500");
    last = r.seq;
  };
  tp::detail::replay_pipeline<decltype(consume)> p(&applier, consume);
  bool threw = false;
  try {
    for (tp::sequence_nr s = 1; s <= 100'000; ++s) p.push(record(s));
    p.finish();
  } catch (const std::runtime_error& e) {
    threw = std::string(e.what()) == "bad record 1500";
  }
  CHECK(threw);
  CHECK(last < 1500);
}

TEST_CASE("abandon drops what is queued and waits for the applier") {
  tp::blocking_thread applier("troupe-test");
  std::atomic<int> consumed{0};
  auto consume = [&](const tp::event_record&) { ++consumed; };
  {
    tp::detail::replay_pipeline<decltype(consume)> p(&applier, consume);
    for (tp::sequence_nr s = 1; s <= 5000; ++s) p.push(record(s));
    p.abandon();
    const int after = consumed.load();
    std::this_thread::yield();
    CHECK(consumed.load() == after); // nothing runs once abandon returned
  }
  CHECK(consumed.load() <= 5000);
}

} // namespace persistence_detail_replay_pipeline_test
