// kill -9 crash test of the work index: the child (work_index_child) runs
// sender entities that passivate between a confirmation and their next
// delivery on a store with slow syncs, and is killed at random moments.
// After every kill the store is read directly: every sender with a
// delivery recorded as unconfirmed has its mark in the work index (else
// `resume` would never activate it). A last run then finishes the work
// with `resume` alone: every delivery confirmed, each processed once.
// Seeded; prints the seed. Cycles: argv or TROUPE_CRASH_CYCLES.
#include <troupe/delivery/detail/codec.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/persistence/work_index.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <poll.h>
#include <random>
#include <set>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace tp = troupe::persistence;
namespace td = troupe::delivery;

namespace {

pid_t start(const std::string& child, const std::string& dir, std::uint64_t seed, long items, bool finish, int* out) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    auto s = std::to_string(seed), n = std::to_string(items);
    execl(child.c_str(), child.c_str(), dir.c_str(), s.c_str(), n.c_str(), finish ? "finish" : "run", nullptr);
    _exit(127);
  }
  close(fds[1]);
  *out = fds[0];
  return pid;
}

bool wait_output(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
  char buf[16];
  return read(fd, buf, sizeof buf) > 0;
}

/// The senders with a delivery recorded as unconfirmed and no work mark.
std::vector<std::string> unmarked_senders(tp::rocksdb_store& store) {
  const auto deliveries = store.open_table("deliveries");
  std::set<std::string> pending;
  store.scan(deliveries, {}, [&](std::string_view k, std::string_view) {
    const auto n = troupe::detail::prefixed_length(k);
    if (n != 0 && n < k.size() && k[n] == 'p') pending.emplace(k.substr(2, n - 2));
    return true;
  });
  tp::journal_of<tp::rocksdb_store> j(std::shared_ptr<tp::rocksdb_store>(&store, [](auto*) {}));
  const auto marked = tp::work_index(j).marked(j, "");
  std::vector<std::string> out;
  for (auto& p : pending)
    if (std::find(marked.begin(), marked.end(), p) == marked.end()) out.push_back(p);
  return out;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: work_index_crash_test <work_index_child> [cycles] [items] [seed]\n";
    return 2;
  }
  const std::string child = argv[1];
  int cycles = argc > 2 ? std::atoi(argv[2]) : 20;
  if (const char* env = std::getenv("TROUPE_CRASH_CYCLES")) cycles = std::atoi(env);
  const long items = argc > 3 ? std::atol(argv[3]) : 100'000;
  const std::uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : std::random_device{}();
  std::cout << "seed " << seed << " (reproduce: work_index_crash_test <child> " << cycles << ' ' << items << ' '
            << seed << ")" << std::endl;
  std::mt19937_64 rng(seed);
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-work-index-crash-" + std::to_string(seed));
  std::filesystem::remove_all(dir);
  int failures = 0;
  for (int cycle = 1; cycle <= cycles; ++cycle) {
    int out = -1;
    const auto child_seed = rng();
    const pid_t pid = start(child, dir.string(), child_seed, items, false, &out);
    wait_output(out, std::chrono::seconds(60)); // "ready"
    const std::chrono::milliseconds run_for(200 + rng() % 1000);
    wait_output(out, run_for);
    kill(pid, SIGKILL);
    close(out);
    int status = 0;
    waitpid(pid, &status, 0);
    tp::rocksdb_store store(dir.string());
    const auto unmarked = unmarked_senders(store);
    std::cout << "cycle " << cycle << ": killed " << run_for.count() << " ms after ready (r1 "
              << (child_seed % 3 != 0 ? "present" : "missing") << "), " << store.highest_sequence_nr("r0") << " + "
              << store.highest_sequence_nr("r1") << " processed, " << unmarked.size() << " senders unmarked"
              << std::endl;
    for (auto& s : unmarked) {
      ++failures;
      std::cout << "FAILED (seed " << seed << "): after kill " << cycle << ", " << s
                << " has an unconfirmed delivery and no work mark" << std::endl;
    }
  }
  int out = -1;
  const pid_t pid = start(child, dir.string(), rng(), items, true, &out);
  int status = 0;
  waitpid(pid, &status, 0);
  close(out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ++failures;
    std::cout << "FAILED (seed " << seed << "): resume alone did not finish every delivery (status " << status << ")"
              << std::endl;
  }
  std::map<std::string, int> taken;
  {
    tp::rocksdb_store store(dir.string());
    for (const char* r : {"r0", "r1"})
      store.replay(r, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
        ++taken[boost::json::value_to<std::string>(boost::json::parse(e.payload).at("id"))];
      });
  }
  for (auto& [id, n] : taken)
    if (n != 1) {
      ++failures;
      std::cout << "FAILED (seed " << seed << "): " << id << " processed " << n << " times" << std::endl;
    }
  std::filesystem::remove_all(dir);
  if (failures) {
    std::cout << failures << " violations (seed " << seed << ")" << std::endl;
    return 1;
  }
  std::cout << "ok: " << taken.size() << " deliveries, every unconfirmed one marked after each of " << cycles
            << " kills, all finished by resume alone (seed " << seed << ")" << std::endl;
  return 0;
}
