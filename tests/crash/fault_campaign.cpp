// A seeded fault campaign against the RocksDB store. Each cycle starts a
// child process whose persistent actors persist events in sync mode through
// a fault-injecting file system (I/O errors, a full disk for a while) and
// report every acknowledged event; the child is killed with SIGKILL at a
// random moment; sometimes a byte of a store file at rest is then flipped
// (WAL, table files, manifest, CURRENT). The store is reopened and checked:
//
//   every acknowledged event is present with the payload it was written
//   with, or the store refuses to open (or to read) naming the damage, or a
//   salvage names it as dropped — never silently absent, never replaced;
//   sequence numbers never go back.
//
// A store that refuses is salvaged when its WAL is damaged, else replaced by
// a fresh one (its damage is in a table file or the manifest: nothing a
// salvage of the WAL can mend). The seed is printed; it replays the faults
// each cycle chooses (the moments depend on timing).
//
//   troupe_fault_campaign [--cycles N] [--seed S] [--dir D] [--keep 1]  (a failed run, or --keep 1, leaves its store)
#include <troupe/troupe.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/rocksdb/faulty_file_system.hpp>

#include "child_process.hpp"

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
namespace tp = troupe::persistence;
namespace json = boost::json;
using troupe::testing::faulty_file_system;

namespace {

// -- the child ------------------------------------------------------------------

struct ticked {
  static constexpr std::string_view manifest = "campaign.ticked";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const ticked& e) { v = {{"n", e.n}}; }
ticked tag_invoke(json::value_to_tag<ticked>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct tick_state {
  long last = 0;
};
struct tick {};

/// Each event's payload is its sequence number: a replaced event shows.
class ticker : public tp::persistent_actor<ticker, tick_state> {
public:
  using events = tp::event_types<ticked>;
  using persistent_actor::persistent_actor;
  static void apply(tick_state& s, const ticked& e) { s.last = e.n; }
  troupe::task<tp::sequence_nr> handle(tick) {
    ticked e{static_cast<long>(last_sequence_nr() + 1)};
    co_await persist(e);
    co_return last_sequence_nr();
  }
};

constexpr int actors = 4;

int child(const std::string& dir, std::uint64_t seed, double error_rate, bool full_disk) {
  auto faults = std::make_shared<faulty_file_system>(seed);
  if (error_rate > 0) {
    faults->fail_randomly(faulty_file_system::io_op::write, faulty_file_system::fault::io_error, error_rate);
    faults->fail_randomly(faulty_file_system::io_op::sync, faulty_file_system::fault::io_error, error_rate);
  }
  tp::rocksdb_options o;
  o.file_system = faults;
  // Opening may meet an injected fault too: a clear error, and a retry.
  std::shared_ptr<tp::rocksdb_store> store;
  while (!store) {
    try {
      store = std::make_shared<tp::rocksdb_store>(dir, o);
    } catch (const troupe::error& e) {
      if (e.code() != tp::errc::storage_failure && e.code() != tp::errc::storage_full) throw;
    }
  }
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
  std::thread disk;
  if (full_disk) // full for a moment, now and then
    disk = std::thread([faults, seed, error_rate] {
      std::mt19937_64 rng(seed ^ 0x5eed);
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 60));
        faults->fill_disk();
        std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 30));
        faults->clear();
        if (error_rate > 0) {
          faults->fail_randomly(faulty_file_system::io_op::write, faulty_file_system::fault::io_error, error_rate);
          faults->fail_randomly(faulty_file_system::io_op::sync, faulty_file_system::fault::io_error, error_rate);
        }
      }
    });
  std::vector<std::future<void>> loops;
  for (int a = 0; a < actors; ++a) {
    loops.push_back(asio::co_spawn(
        sys.get_executor(),
        [&sys, a]() -> asio::awaitable<void> {
          const std::string pid = "campaign-" + std::to_string(a);
          std::optional<troupe::actor_ref<ticker>> t;
          for (;;) {
            bool stopped = false;
            try {
              if (!t) t = sys.spawn<ticker>(tp::persistence_id{pid});
              auto seq = co_await t->ask(tick{});
              auto line = pid + " " + std::to_string(seq) + "\n";
              if (::write(1, line.data(), line.size()) < 0) co_return;
            } catch (const troupe::error& e) {
              // A failed persist (the actor restarts), or an actor that
              // stopped after too many: spawn it again once it has gone.
              stopped = e.code() == troupe::errc::actor_stopped;
            }
            if (stopped && t) {
              co_await t->when_stopped();
              t.reset();
            }
          }
        },
        asio::use_future));
  }
  for (auto& l : loops) l.get();
  return 0;
}

// -- the campaign -------------------------------------------------------------

int failures = 0;
std::uint64_t campaign_seed = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cerr << "FAILED (seed " << campaign_seed << "): " << what << '\n';
  }
}

/// Starts the child, collects acknowledgements for `run_for`, kills it.
std::map<std::string, std::uint64_t> run_child(const std::string& self, const std::string& dir, std::uint64_t seed,
                                               double error_rate, bool full_disk, std::chrono::milliseconds run_for) {
  auto run = test::run_and_kill(
      {self, "child", dir, std::to_string(seed), std::to_string(error_rate), full_disk ? "1" : "0"}, run_for);
  check(run.killed(), "the child died by itself (status " + std::to_string(run.status) + ")");
  return run.acked;
}

/// The offset of the last whole record of a log file (RocksDB's log format:
/// 32 KiB blocks, 7-byte headers whose bytes 4 and 5 are the data's length).
std::optional<std::uint64_t> last_record(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::optional<std::uint64_t> last;
  for (std::size_t pos = 0; pos + 7 <= bytes.size();) {
    const std::size_t left = 32768 - pos % 32768;
    if (left < 7) {
      pos += left;
      continue;
    }
    const std::size_t length =
        std::size_t(std::uint8_t(bytes[pos + 4])) | std::size_t(std::uint8_t(bytes[pos + 5])) << 8;
    if (length == 0 && bytes[pos + 6] == 0) break; // never written
    if (pos + 7 + length > bytes.size()) break;    // torn
    last = pos;
    pos += 7 + length;
  }
  return last;
}

/// Flips one bit of one store file (WAL, table file, manifest or CURRENT);
/// returns what it flipped, empty if there was nothing to flip.
std::string corrupt(const fs::path& dir, std::mt19937_64& rng) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return {}; // the child died before it made the store
  for (auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    const auto ext = e.path().extension().string();
    if (ext == ".log" || ext == ".sst" || name.starts_with("MANIFEST") || name == "CURRENT")
      if (fs::file_size(e.path()) > 0) files.push_back(e.path());
  }
  if (files.empty()) return {};
  std::sort(files.begin(), files.end());
  const auto& f = files[rng() % files.size()];
  auto offset = rng() % fs::file_size(f);
  // One time in three in a log (WAL or MANIFEST), a byte of its last whole
  // record's header: the damage RocksDB takes for a crash's torn tail.
  const bool log = f.extension() == ".log" || f.filename().string().starts_with("MANIFEST");
  if (log && rng() % 3 == 0)
    if (auto last = last_record(f)) offset = *last + 4 + rng() % 3; // its length or its type
  faulty_file_system::flip_bit(f, offset, static_cast<int>(rng() % 8));
  return f.filename().string() + " at byte " + std::to_string(offset);
}

/// Every acknowledged event of every actor is present, with its payload;
/// numbers contiguous but for what salvages kept; highest never decreased.
/// False (and the reason in `refused`) if the store cannot say.
bool verify(tp::rocksdb_store& store, const std::map<std::string, std::uint64_t>& acked,
            std::map<std::string, std::uint64_t>& highest_seen, std::string& refused) {
  for (int a = 0; a < actors; ++a) {
    const std::string id = "campaign-" + std::to_string(a);
    tp::sequence_nr highest = 0;
    try {
      highest = store.highest_sequence_nr(id);
    } catch (const troupe::error& e) {
      refused = e.what();
      return false;
    }
    auto ack = acked.count(id) ? acked.at(id) : 0;
    check(highest >= ack, id + ": acknowledged " + std::to_string(ack) + " but highest is " + std::to_string(highest));
    check(highest >= highest_seen[id], id + ": highest decreased from " + std::to_string(highest_seen[id]) + " to " +
                                           std::to_string(highest));
    tp::sequence_nr expected = 1;
    auto ec = store.replay(id, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
      if (e.manifest == tp::events_lost_manifest) {
        expected = e.seq + 1; // a salvage said so
        return;
      }
      check(e.seq == expected, id + ": event " + std::to_string(expected) + " missing (next is " +
                                   std::to_string(e.seq) + ")");
      check(e.payload == "{\"n\":" + std::to_string(e.seq) + "}",
            id + ": event " + std::to_string(e.seq) + " replaced: " + e.payload);
      expected = e.seq + 1;
    });
    if (ec) {
      refused = id + ": " + ec.message() + " (" + store.last_failure() + ")";
      return false;
    }
    check(expected - 1 == highest,
          id + ": events end at " + std::to_string(expected - 1) + ", highest is " + std::to_string(highest));
    highest_seen[id] = highest;
  }
  return true;
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& otherwise) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return otherwise;
}

} // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::string(argv[1]) == "child")
    return child(argv[2], std::strtoull(argv[3], nullptr, 10), std::atof(argv[4]), std::string(argv[5]) == "1");

  const int cycles = std::stoi(arg(argc, argv, "--cycles", "40"));
  campaign_seed = std::stoull(arg(argc, argv, "--seed", std::to_string(std::random_device{}())));
  const fs::path base = arg(argc, argv, "--dir", (fs::temp_directory_path() / "troupe-campaign").string());
  const fs::path dir = base / std::to_string(campaign_seed);
  std::cout << "fault campaign: seed " << campaign_seed << ", " << cycles << " cycles" << std::endl;
  std::mt19937_64 rng(campaign_seed);
  fs::remove_all(dir);

  std::map<std::string, std::uint64_t> acked, highest_seen;
  int refusals = 0, salvages = 0, fresh_stores = 0, corruptions = 0, faulty_runs = 0;
  for (int cycle = 1; cycle <= cycles && failures == 0; ++cycle) {
    const double error_rate = rng() % 3 == 0 ? 0.002 * static_cast<double>(1 + rng() % 5) : 0.0;
    const bool full_disk = rng() % 4 == 0;
    if (error_rate > 0 || full_disk) ++faulty_runs;
    const std::chrono::milliseconds run_for(rng() % 5 == 0 ? rng() % 40 : 60 + rng() % 240);
    auto got = run_child(argv[0], dir.string(), rng(), error_rate, full_disk, run_for);
    for (auto& [id, seq] : got) acked[id] = std::max(acked[id], seq);
    std::string flipped;
    if (rng() % 5 == 0) flipped = corrupt(dir, rng);
    if (!flipped.empty()) ++corruptions;

    std::string refused;
    bool ok = false;
    try {
      tp::rocksdb_store store(dir.string());
      ok = verify(store, acked, highest_seen, refused);
    } catch (const troupe::error& e) {
      refused = e.what();
      check(e.code() == tp::errc::corrupt_store || e.code() == tp::errc::storage_failure,
            std::string("refused with an unexpected error: ") + e.what());
    }
    if (!ok) {
      ++refusals;
      // Refusing is allowed only for damage this campaign did, and must name it.
      check(!flipped.empty(), "refused although nothing was damaged: " + refused);
      check(!refused.empty(), "refused without saying why");
      bool mended = false;
      if (refused.find(".log") != std::string::npos) {
        // The WAL: a salvage names what it drops and keeps the numbers.
        try {
          tp::rocksdb_options o;
          o.salvage = true;
          tp::rocksdb_store store(dir.string(), o);
          ++salvages;
          std::string report;
          for (auto& line : store.salvaged()) report += line + "; ";
          // An acknowledged event the salvage dropped must be named.
          for (auto& [id, seq] : acked) {
            auto h = store.highest_sequence_nr(id);
            check(h >= seq || report.find(" of " + id + " dropped") != std::string::npos,
                  id + ": acknowledged " + std::to_string(seq) + ", highest " + std::to_string(h) +
                      " after a salvage that did not name it: " + report);
          }
          std::string again;
          mended = verify(store, acked, highest_seen, again);
          if (!mended) std::cout << "  the salvaged store still refuses: " << again << std::endl;
        } catch (const troupe::error& e) {
          std::cout << "  salvage refused: " << e.what() << std::endl;
        }
      }
      if (!mended) { // damage a salvage cannot mend: start over
        ++fresh_stores;
        fs::remove_all(dir);
        acked.clear();
        highest_seen.clear();
      }
    }
    std::cout << "cycle " << cycle << ": " << run_for.count() << " ms" << (error_rate > 0 ? ", I/O errors" : "")
              << (full_disk ? ", full disk" : "") << (flipped.empty() ? "" : ", flipped " + flipped)
              << (ok ? "" : " -> refused: " + refused.substr(0, 160)) << "; highest";
    for (auto& [id, h] : highest_seen) std::cout << ' ' << h;
    std::cout << std::endl;
  }
  if (failures == 0 && arg(argc, argv, "--keep", "0") != "1") fs::remove_all(dir); // else left to look at
  std::cout << (failures ? "FAILED" : "ok") << ": " << cycles << " cycles, " << faulty_runs << " with injected faults, "
            << corruptions << " files damaged, " << refusals << " refusals naming the damage, " << salvages
            << " salvages, " << fresh_stores << " fresh stores; " << failures << " violations (seed "
            << campaign_seed << ")" << std::endl;
  return failures ? 1 : 0;
}
