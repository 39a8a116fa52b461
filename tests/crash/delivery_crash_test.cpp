// kill -9 crash test of reliable delivery: the child (delivery_child) runs
// four senders delivering a stream of items to two receivers over a lossy,
// duplicating, reordering transport, and is killed at random moments
// (sometimes during start-up and recovery); then a last run finishes. The
// stores are then read directly:
//   - each delivery ID's effect (a receiver event) is applied exactly once,
//   - every delivery recorded by a sender (its event) was processed by the
//     right receiver, and nothing is left unconfirmed or dead-lettered.
// Seeded; prints the seed. Cycles: argv or TROUPE_CRASH_CYCLES (default 30);
// items per sender: argv (default 4,000).
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/rocksdb/store.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <poll.h>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

pid_t start(const std::string& child, const std::string& dir, std::uint64_t seed, long items, bool finish,
            int* out = nullptr) {
  int fds[2] = {-1, -1};
  if (out && pipe(fds) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    if (out) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
    }
    auto s = std::to_string(seed), n = std::to_string(items);
    execl(child.c_str(), child.c_str(), dir.c_str(), s.c_str(), n.c_str(), finish ? "finish" : "run", nullptr);
    _exit(127);
  }
  if (out) {
    close(fds[1]);
    *out = fds[0];
  }
  return pid;
}

/// Waits up to `limit` for output from the child (its "ready" line) or its
/// exit; true if some came.
bool wait_output(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
  char buf[16];
  return read(fd, buf, sizeof buf) > 0;
}

/// Waits up to `limit` for the end of the child's output (it exited).
bool wait_eof(int fd, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[256];
    if (read(fd, buf, sizeof buf) <= 0) return true;
  }
}

} // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cout << "FAILED: " << e.what() << std::endl;
    return 1;
  }
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: delivery_crash_test <delivery_child> [cycles] [items per sender] [seed]\n";
    return 2;
  }
  const std::string child = argv[1];
  int cycles = argc > 2 ? std::atoi(argv[2]) : 30;
  if (const char* env = std::getenv("TROUPE_CRASH_CYCLES")) cycles = std::atoi(env);
  const long items = argc > 3 ? std::atol(argv[3]) : 4000;
  const std::uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : std::random_device{}();
  std::cout << "seed " << seed << " (reproduce: delivery_crash_test <child> " << cycles << ' ' << items << ' ' << seed
            << ")" << std::endl;
  std::cout << cycles << " cycles, " << items << " items per sender" << std::endl;
  std::mt19937_64 rng(seed);

  const auto dir = std::filesystem::temp_directory_path() / ("troupe-delivery-crash-" + std::to_string(seed));
  std::filesystem::remove_all(dir);
  for (int cycle = 1; cycle <= cycles; ++cycle) {
    // A quarter of the kills during start-up and recovery, the others at a
    // random moment of processing (counted from the child's "ready").
    const bool during_startup = rng() % 4 == 0;
    std::chrono::milliseconds run_for(during_startup ? rng() % 60 : 20 + rng() % 300);
    int out = -1;
    pid_t pid = start(child, dir.string(), rng(), items, false, &out);
    if (!during_startup) wait_output(out, std::chrono::seconds(60)); // "ready"
    wait_output(out, run_for);                                       // nothing more comes: the moment to kill
    kill(pid, SIGKILL);
    close(out);
    int status = 0;
    waitpid(pid, &status, 0);
    tp::sequence_nr processed = 0;
    {
      tp::rocksdb_store store(dir.string());
      for (int r = 0; r < 2; ++r) processed += store.highest_sequence_nr("r" + std::to_string(r));
    }
    std::cout << "cycle " << cycle << ": killed " << run_for.count() << " ms after "
              << (during_startup ? "start" : "ready") << ", " << processed << " deliveries processed so far"
              << std::endl;
  }
  // The final run: its output pipe closes when it exits.
  int out = -1;
  pid_t pid = start(child, dir.string(), rng(), items, true, &out);
  int status = 0;
  if (!wait_eof(out, std::chrono::seconds(120))) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(out);
    std::cout << "FAILED (seed " << seed << "): the final run did not confirm every delivery within 120 s" << std::endl;
    return 1;
  }
  close(out);
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cout << "FAILED (seed " << seed << "): the final run exited with status " << status << std::endl;
    return 1;
  }

  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 20) std::cout << "FAILED (seed " << seed << "): " << what << std::endl;
  };
  auto store_ptr = std::make_unique<tp::rocksdb_store>(dir.string());
  auto& store = *store_ptr;
  std::map<std::string, int> effects; // delivery ID -> receiver events
  for (int r = 0; r < 2; ++r) {
    const std::string rid = "r" + std::to_string(r);
    auto ec = store.replay(rid, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
      auto id = json::value_to<std::string>(json::parse(e.payload).at("id"));
      const auto sender = std::stoi(id.substr(1, id.find(':') - 1));
      if (sender % 2 != r) fail(id + " processed by " + rid);
      ++effects[id];
    });
    if (ec) fail(rid + ": replay failed: " + ec.message());
  }
  long recorded = 0;
  for (int s = 0; s < 4; ++s) {
    const std::string sid = "s" + std::to_string(s);
    std::map<long, int> sent;
    store.replay(sid, 1, tp::max_sequence_nr, UINT64_MAX,
                 [&](const tp::event_record& e) { ++sent[json::value_to<long>(json::parse(e.payload).at("n"))]; });
    for (long n = 1; n <= items; ++n) {
      if (sent[n] != 1) fail(sid + ": item " + std::to_string(n) + " recorded " + std::to_string(sent[n]) + " times");
      const auto id = sid + ":" + std::to_string(n);
      if (effects[id] != 1) fail(id + ": effect applied " + std::to_string(effects[id]) + " times");
    }
    recorded += static_cast<long>(sent.size());
    std::size_t left = 0;
    store.scan(store.open_table("deliveries"), td::detail::key_prefix(sid), [&](auto, auto) { return ++left, true; });
    if (left != 0) fail(sid + ": " + std::to_string(left) + " deliveries unconfirmed or dead-lettered");
  }
  for (auto& [id, n] : effects)
    if (n != 1) fail(id + ": effect applied " + std::to_string(n) + " times");
  store_ptr.reset(); // closed before its files go (its threads may still be deleting some)
  std::filesystem::remove_all(dir);
  if (failures) {
    std::cout << failures << " invariant violations (seed " << seed << ")" << std::endl;
    return 1;
  }
  std::cout << "ok: " << recorded << " deliveries over " << cycles
            << " kills, each effect applied exactly once, all confirmed (seed " << seed << ")" << std::endl;
  return 0;
}
