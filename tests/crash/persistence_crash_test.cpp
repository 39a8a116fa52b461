// kill -9 crash test of the journal: a child (persist_child) persists events
// in sync mode and reports each acknowledged sequence number through a pipe;
// it is killed at a random moment; the store is reopened and checked
// (half of the actors snapshot and delete the events their snapshots cover):
//   - every acknowledged event is present,
//   - each persistence ID's events are contiguous from 1 (or from just after
//     the snapshot whose state covers the deleted ones),
//   - the highest sequence number never decreased.
// Seeded; prints the seed. Cycles: argv or TROUPE_CRASH_CYCLES (default 50).
#include <troupe/rocksdb/store.hpp>

#include "child_process.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>

namespace tp = troupe::persistence;

namespace {

int failures = 0;
void check(bool ok, const std::string& what, std::uint64_t seed) {
  if (!ok) {
    ++failures;
    std::cerr << "FAILED (seed " << seed << "): " << what << '\n';
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: persistence_crash_test <persist_child> [cycles] [seed]\n";
    return 2;
  }
  const std::string child = argv[1];
  int cycles = argc > 2 ? std::atoi(argv[2]) : 50;
  if (const char* env = std::getenv("TROUPE_CRASH_CYCLES")) cycles = std::atoi(env);
  const std::uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : std::random_device{}();
  std::cout << "seed " << seed << ", " << cycles << " cycles" << std::endl;
  std::mt19937_64 rng(seed);

  const auto dir = std::filesystem::temp_directory_path() / ("troupe-crash-" + std::to_string(seed));
  std::filesystem::remove_all(dir);
  const int actors = 4;
  std::map<std::string, std::uint64_t> highest_seen; // highest after each reopen
  std::uint64_t total_acked = 0;
  for (int cycle = 1; cycle <= cycles && failures == 0; ++cycle) {
    // Mostly mid-run, sometimes during start-up.
    std::chrono::milliseconds run_for(rng() % 4 == 0 ? rng() % 40 : 40 + rng() % 200);
    auto acked = test::run_and_kill({child, dir.string(), std::to_string(actors)}, run_for).acked;
    tp::rocksdb_store store(dir.string());
    for (int a = 0; a < actors; ++a) {
      std::string id = "crash-" + std::to_string(a);
      auto highest = store.highest_sequence_nr(id);
      check(highest >= acked[id],
            id + ": acknowledged " + std::to_string(acked[id]) + " but highest is " + std::to_string(highest), seed);
      check(highest >= highest_seen[id],
            id + ": highest sequence number decreased from " + std::to_string(highest_seen[id]) + " to " +
                std::to_string(highest),
            seed);
      // Odd actors delete the events their oldest kept snapshot covers: the
      // journal then starts right after a snapshot of exactly that state.
      std::uint64_t expected = 1;
      if (a % 2) {
        std::uint64_t first = highest + 1;
        store.replay(id, 1, tp::max_sequence_nr, 1, [&](const tp::event_record& e) { first = e.seq; });
        if (first > 1) {
          tp::snapshot_criteria c;
          c.max_seq = first - 1;
          std::optional<tp::snapshot_record> s;
          auto sec = store.load_snapshot(id, c, s);
          check(!sec && s && s->seq == first - 1,
                id + ": events up to " + std::to_string(first - 1) + " deleted without a snapshot there", seed);
          if (s && s->seq == first - 1)
            check(s->payload == "{\"last\":" + std::to_string(s->seq) + "}",
                  id + ": snapshot at " + std::to_string(s->seq) + " holds " + s->payload, seed);
        }
        expected = first;
      }
      auto ec = store.replay(id, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
        check(e.seq == expected, id + ": gap at " + std::to_string(expected), seed);
        expected = e.seq + 1;
      });
      check(!ec, id + ": replay failed: " + ec.message(), seed);
      check(expected - 1 == highest,
            id + ": events end at " + std::to_string(expected - 1) + ", highest is " + std::to_string(highest), seed);
      highest_seen[id] = highest;
      total_acked += acked[id];
    }
    std::cout << "cycle " << cycle << ": ran " << run_for.count() << " ms, highest";
    for (auto& [id, h] : highest_seen) std::cout << ' ' << h;
    std::cout << std::endl;
  }
  std::filesystem::remove_all(dir);
  if (failures) {
    std::cout << failures << " invariant violations (seed " << seed << ")" << std::endl;
    return 1;
  }
  std::cout << "ok: every acknowledged event present, no gaps, highest never decreased (seed " << seed << ")"
            << std::endl;
  return 0;
}
