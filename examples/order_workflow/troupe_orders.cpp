// troupe_orders: the crash-proof order workflow, and its kill -9 torture.
//
//   troupe_orders run     --orders N --dir D [--seed S] [--upto M] [--arrivals R]
//       places orders 1..M (default N; idempotent) and processes until every
//       one has ended; with --arrivals, the orders not placed before arrive
//       at R per second while earlier ones are processed; can be killed at
//       any moment and run again on the same D.
//   troupe_orders verify  --orders N --dir D
//       reads the stores (the actor system's, the gateway's, the mail
//       service's) and prints a JSON summary as its last line.
//   troupe_orders torture --cycles K --orders N --seed S --dir D
//       K times: `run` in a child process, killed with SIGKILL at a random
//       moment; then a last uninterrupted `run`, then `verify`. Orders
//       arrive as a stream across the cycles: cycle k's child places orders
//       up to k*N/K, the new ones while earlier ones are under way, and the
//       kill strikes while they arrive; each cycle says how many orders were
//       in flight (placed, not ended) when it struck.
//
// The payment gateway does not dedup by key here (`honours_keys = false`):
// no double charge is troupe's own doing, resolving lost answers by query.
// The mail service dedups by message ID, as real ones do; a duplicate
// e-mail would show as a message ID delivered twice or one that is not an
// order's.
#include "workflow.hpp"

#include <troupe/persistence/json.hpp>
#include <troupe/delivery/entities.hpp>
#include <troupe/persistence/resume.hpp>
#include <troupe/rocksdb/store.hpp>
#if defined(TROUPE_ORDERS_WITH_POSTGRES)
#include <troupe/postgres/store.hpp>
#endif

#include <asio/use_future.hpp>

#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <poll.h>
#include <random>
#include <set>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace orders;
using clock_type = std::chrono::steady_clock;

namespace {

struct args {
  std::string command;
  long orders = 100;
  long cycles = 20;
  std::uint64_t seed = 1;
  std::string dir;
  long upto = 0;        // run: place orders 1..upto (0: all)
  double arrivals = 0;  // run: new orders per second (0: all at once)
  bool exit_after_placing = false; // run: exit at once once placed (work left under way)
  long in_flight = 1000; // bench: orders under way at most
  long slice = 10000;    // bench: orders per reported slice
  long under_way = 1000; // bench-restart: orders left under way
  long repeat = 5;       // bench-restart: restarts measured, each from the same state
  long warehouses = default_warehouses; // bench (it starts from an empty directory)
  long threads = 0;      // worker threads (0: one per core)
  std::string keep_wal{}; // bench: move the store's WAL files here instead of deleting them
  std::string store{};    // run, verify, torture: a postgresql:// URI (else RocksDB under --dir)
  std::string schema = "troupe_orders"; // the PostgreSQL schema of the orders' store
  bool postgres() const { return !store.empty(); }
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "troupe_orders: " << why << "\n"
            << "usage: troupe_orders run --orders N --dir D [--seed S] [--upto M] [--arrivals R]\n"
            << "       (run, bench and bench-restart also take --threads T: worker threads, 0 for one per core)\n"
            << "       troupe_orders verify --orders N --dir D\n"
            << "       troupe_orders torture --cycles K --orders N --seed S --dir D\n"
            << "       troupe_orders bench --orders N --dir D [--in-flight W] [--slice S] [--warehouses K]"
               " [--keep-wal W]\n"
            << "       run, verify and torture take --store postgresql://... [--schema S]: the orders' store on\n"
            << "       PostgreSQL (else RocksDB under --dir; the simulated services stay under --dir)\n"
            << "       troupe_orders bench-restart --orders F --under-way U --dir D [--repeat R]\n";
  std::exit(2);
}

args parse(int argc, char** argv) {
  if (argc < 2) usage("no command");
  args a;
  a.command = argv[1];
  if (a.command != "run" && a.command != "verify" && a.command != "torture" && a.command != "bench" &&
      a.command != "bench-restart")
    usage("unknown command '" + a.command + "'");
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) usage(k + " needs a value");
    std::string v = argv[++i];
    try {
      if (k == "--orders")
        a.orders = std::stol(v);
      else if (k == "--cycles")
        a.cycles = std::stol(v);
      else if (k == "--seed")
        a.seed = std::stoull(v);
      else if (k == "--dir")
        a.dir = v;
      else if (k == "--upto")
        a.upto = std::stol(v);
      else if (k == "--arrivals")
        a.arrivals = std::stod(v);
      else if (k == "--exit-after-placing")
        a.exit_after_placing = v != "0";
      else if (k == "--in-flight")
        a.in_flight = std::stol(v);
      else if (k == "--slice")
        a.slice = std::stol(v);
      else if (k == "--under-way")
        a.under_way = std::stol(v);
      else if (k == "--repeat")
        a.repeat = std::stol(v);
      else if (k == "--warehouses" && a.command == "bench")
        a.warehouses = std::stol(v);
      else if (k == "--keep-wal" && a.command == "bench")
        a.keep_wal = v;
      else if (k == "--store" && (a.command == "run" || a.command == "verify" || a.command == "torture"))
        a.store = v;
      else if (k == "--schema" && (a.command == "run" || a.command == "verify" || a.command == "torture"))
        a.schema = v;
      else if (k == "--threads" && (a.command == "run" || a.command == "bench" || a.command == "bench-restart"))
        a.threads = std::stol(v);
      else
        usage("unknown option " + k);
    } catch (const std::logic_error&) {
      usage("bad value '" + v + "' for " + k);
    }
  }
  if (a.dir.empty()) usage("--dir is required");
  if (a.postgres() && !a.store.starts_with("postgresql://") && !a.store.starts_with("postgres://"))
    usage("--store takes a postgresql:// URI (RocksDB, the default, needs none)");
#if !defined(TROUPE_ORDERS_WITH_POSTGRES)
  if (a.postgres()) usage("--store: this troupe_orders was built without the PostgreSQL engine (libpq-dev)");
#endif
  if (a.schema.empty()) usage("--schema must not be empty");
  if (a.warehouses < 1) usage("--warehouses must be at least 1");
  if (a.threads < 0) usage("--threads must not be negative");
  if (a.orders < 1) usage("--orders must be at least 1");
  if (a.cycles < 0) usage("--cycles must not be negative");
  if (a.upto < 0 || a.upto > a.orders) usage("--upto must be between 1 and --orders");
  if (a.upto == 0) a.upto = a.orders;
  if (!(a.arrivals >= 0)) usage("--arrivals must not be negative");
  if (a.in_flight < 1 || a.slice < 1 || a.under_way < 0) usage("--in-flight and --slice must be positive");
  return a;
}

fs::path store_dir(const args& a) { return fs::path(a.dir) / "troupe"; }

#if defined(TROUPE_ORDERS_WITH_POSTGRES)
tp::postgres_options postgres_options(const args& a) {
  tp::postgres_options o;
  o.conninfo = a.store;
  o.schema = a.schema;
  return o;
}
#endif

/// Calls `f` with the orders' store (RocksDB under --dir, or PostgreSQL).
template <class F>
void with_store(const args& a, F f) {
  if (a.postgres()) {
#if defined(TROUPE_ORDERS_WITH_POSTGRES)
    tp::postgres_store s(postgres_options(a));
    f(s);
#endif
    return;
  }
  tp::rocksdb_store s(store_dir(a).string());
  f(s);
}

/// A new store: the directory emptied, the PostgreSQL schema dropped.
void wipe(const args& a) {
  fs::remove_all(a.dir);
#if defined(TROUPE_ORDERS_WITH_POSTGRES)
  if (a.postgres()) tp::postgres_store::drop_schema(a.store, a.schema);
#endif
}
fs::path gateway_dir(const args& a) { return fs::path(a.dir) / "gateway"; }
fs::path mail_dir(const args& a) { return fs::path(a.dir) / "mail"; }

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// -- run ---------------------------------------------------------------------------

/// Counts the orders that end in this run (each order says so once, from
/// the handler whose write ended it); shows progress on a terminal.
class progress {
public:
  explicit progress(bool show) : show_(show) {}

  void handle(order_ended e) {
    {
      std::lock_guard g(m_);
      ended_.fetch_add(1, std::memory_order_relaxed);
      if (e.complete) complete_.fetch_add(1, std::memory_order_relaxed);
    }
    cv_.notify_all();
    draw(false);
  }

  void start_processing(long expected) {
    std::lock_guard g(m_);
    expected_ = expected;
    processing_start_ = clock_type::now();
    started_ = true;
  }

  long ended_this_run() const { return ended_.load(std::memory_order_relaxed); }

  /// A long-lived actor (a warehouse, the shop) recovered, replaying
  /// `events` events. Only its first recovery in this process counts (a
  /// restart by its supervisor recovers it again).
  void recovered(std::string_view pid, std::uint64_t events) {
    {
      std::lock_guard g(m_);
      if (!recovered_ids_.emplace(pid).second) return;
      replayed_ += events;
    }
    cv_.notify_all();
  }
  /// Once `n` long-lived actors have recovered (or `limit` passed): how
  /// many did, and the events they replayed.
  std::pair<long, std::uint64_t> replayed(long n, std::chrono::milliseconds limit) {
    std::unique_lock l(m_);
    cv_.wait_for(l, limit, [&] { return static_cast<long>(recovered_ids_.size()) >= n; });
    return {static_cast<long>(recovered_ids_.size()), replayed_};
  }

  /// Waits until at least `n` orders ended in this run (or `limit` passed).
  void wait_ended(long n, std::chrono::milliseconds limit = std::chrono::hours(24)) {
    std::unique_lock l(m_);
    cv_.wait_for(l, limit, [&] { return ended_this_run() >= n; });
  }
  long complete_this_run() const { return complete_.load(std::memory_order_relaxed); }
  double processing_seconds() {
    std::lock_guard g(m_);
    return seconds_since(processing_start_);
  }

  void draw(bool last) {
    if (!show_) return;
    const auto now = clock_type::now();
    std::lock_guard g(m_);
    if (!last && now - drawn_ < std::chrono::milliseconds(200)) return;
    drawn_ = now;
    const double secs = started_ ? std::chrono::duration<double>(now - processing_start_).count() : 0;
    const long n = ended_this_run();
    std::fprintf(stderr, "\r  orders ended this run %ld/%ld, %.0f orders/s   %s", n, expected_,
                 secs > 0 ? static_cast<double>(n) / secs : 0.0, last ? "\n" : "");
    std::fflush(stderr);
  }

private:
  bool show_;
  std::atomic<long> ended_{0}, complete_{0};
  std::uint64_t replayed_ = 0; // under m_
  std::set<std::string, std::less<>> recovered_ids_; // under m_
  std::mutex m_;
  std::condition_variable cv_;
  long expected_ = 0;
  bool started_ = false;
  clock_type::time_point processing_start_{}, drawn_{};
};

/// The machine's file system, except that the store's WAL files are moved
/// into a directory when RocksDB deletes them (`bench --keep-wal`): the
/// writes of a run, as RocksDB received them, for `troupe_bench_wal_replay`.
class wal_keeper final : public rocksdb::FileSystemWrapper {
public:
  explicit wal_keeper(std::string to) : FileSystemWrapper(rocksdb::FileSystem::Default()), to_(std::move(to)) {
    fs::create_directories(to_);
  }
  const char* Name() const override { return "wal_keeper"; }
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (f.ends_with(".log")) return target()->RenameFile(f, (to_ / fs::path(f).filename()).string(), o, d);
    return target()->DeleteFile(f, o, d);
  }

private:
  fs::path to_;
};

/// How many orders are placed per window of the shop (a restart places
/// again at most one window).
constexpr long window_size = 1000;

/// The order workflow in one process: the payment gateway and the mail
/// service (simulated, each with its own database), the actor system over
/// the store, the dispatcher, the warehouse, the shop, and the orders as
/// entities.
class shop_process {
public:
  explicit shop_process(const args& a, bool show_progress)
      : gateway_(make_gateway(a)), mail_(make_mail(a)), track(std::make_shared<progress>(show_progress)),
        sys(troupe::system_config{.threads = static_cast<std::size_t>(a.threads)}) {
    if (a.postgres()) {
#if defined(TROUPE_ORDERS_WITH_POSTGRES)
      journal = std::make_shared<tp::journal_of<tp::postgres_store>>(
          std::make_shared<tp::postgres_store>(postgres_options(a))); // sync: survives the server's power loss
#endif
    } else {
      tp::rocksdb_options so; // sync: survives power loss
      if (!a.keep_wal.empty()) so.file_system = std::make_shared<wal_keeper>(a.keep_wal);
      store = std::make_shared<tp::rocksdb_store>(store_dir(a).string(), so);
      journal = std::make_shared<tp::journal_of<tp::rocksdb_store>>(store);
    }
    tp::set_journal(sys, journal);
    td::set_transport(sys);
    te::retry_policy retries;
    retries.max_attempts = 100;
    retries.initial_backoff = std::chrono::milliseconds(20);
    retries.max_backoff = std::chrono::milliseconds(500);
    te::adapters adapters;
    adapters.add("payment", tk::payment_adapter(gateway_, std::chrono::milliseconds(20)), retries);
    adapters.add("email", tk::email_adapter(mail_), retries);
    te::dispatcher_options dop;
    dop.tick = std::chrono::milliseconds(5);
    dop.max_in_flight = 256;
    te::spawn_dispatcher(sys, std::move(adapters), dop);
    td::delivery_options o; // defaults: 200 ms first redelivery, 24 h dedup retention
    // The warehouses and the shop live as long as the process: what their
    // recoveries replay is counted (`events_replayed_at_start`).
    tp::persistence_options long_lived_options;
    long_lived_options.snapshots = warehouse_snapshots();
    long_lived_options.on_recovery_progress = [t = track](const tp::recovery_progress& r) {
      if (r.done) t->recovered(r.pid, r.events_read);
    };
    for (long w = 0; w < a.warehouses; ++w)
      sys.spawn<warehouse>(troupe::persistence_id{warehouse_pid(w)}, o, long_lived_options);
    // The one warehouse of stores written before picklists were spread:
    // it finishes what was delivered to it and redelivers what it sent.
    sys.spawn<warehouse>(troupe::persistence_id{"warehouse"}, o, long_lived_options);
    tp::persistence_options shop_options;
    shop_options.on_recovery_progress = long_lived_options.on_recovery_progress;
    the_shop = sys.spawn<shop>(troupe::persistence_id{"shop"}, shop_options);
    long_lived = a.warehouses + 2;
    std::function<void(order_ended)> ended = [t = track](order_ended e) { t->handle(e); };
    // Orders are entities: activated by their first message (a command, a
    // delivery, an effect's outcome), passivated once idle for a second.
    orders = td::entities<order>(sys, std::string(order_prefix), o,
                                 troupe::entity_options{.idle_timeout = std::chrono::seconds(1)}, ended,
                                 a.warehouses);
  }

  /// What the last run left under way resumes; nothing else is activated.
  std::size_t resume() { return tp::resume(*journal, orders, std::string(order_prefix), asio::use_future).get(); }

  shop_state window() { return the_shop.ask(window_query{}, asio::use_future).get(); }

  /// Orders with a mark of the work index for `reason`.
  long marked(char reason) {
    tp::work_index work(*journal);
    return static_cast<long>(
        journal->async_run([&] { return work.marked(*journal, order_prefix, reason).size(); }, asio::use_future).get());
  }

  /// Records a window of orders, before they are placed.
  void record_window(long from, long upto) { the_shop.ask(place_window{from, upto}, asio::use_future).get(); }

  std::future<void> place(long n) { return orders.get(order_pid(n)).ask(place_order{}, asio::use_future); }

  /// Places orders `from..upto` and waits until each is placed.
  void place_all(long from, long upto) {
    std::vector<std::future<void>> placed;
    placed.reserve(static_cast<std::size_t>(std::max(0L, upto - from + 1)));
    for (long n = from; n <= upto; ++n) placed.push_back(place(n));
    for (auto& f : placed) f.get();
  }

private:
  static std::shared_ptr<tk::payment_gateway> make_gateway(const args& a) {
    tk::simulator_options go;
    go.seed = a.seed;
    go.path = gateway_dir(a).string();
    go.sync = false; // survives kill -9, which is what is tested here (and not troupe's cost)
    go.write_ahead_log = a.command != "bench"; // a provider's machine, not this one: no crash in a bench
    go.honours_keys = false;
    go.faults = {.fail_before = 0.05,
                 .lose_response = 0.1,
                 .timeout = 0.03,
                 .slow = 0.1,
                 .query_unavailable = 0.05,
                 .slow_latency = std::chrono::milliseconds(2)};
    return std::make_shared<tk::payment_gateway>(go);
  }
  static std::shared_ptr<tk::email_service> make_mail(const args& a) {
    tk::simulator_options mo;
    mo.seed = a.seed * 31 + 7;
    mo.path = mail_dir(a).string();
    mo.sync = false;
    mo.write_ahead_log = a.command != "bench";
    mo.honours_keys = true;
    mo.faults = {.fail_before = 0.05, .lose_response = 0.1};
    return std::make_shared<tk::email_service>(mo);
  }

  std::shared_ptr<tk::payment_gateway> gateway_;
  std::shared_ptr<tk::email_service> mail_;

public:
  std::shared_ptr<progress> track;
  troupe::actor_system sys;
  std::shared_ptr<tp::rocksdb_store> store; // (none on PostgreSQL)
  std::shared_ptr<tp::journal> journal;
  troupe::actor_ref<shop> the_shop;
  troupe::entity_region<order> orders;
  long long_lived = 0; // warehouses and the shop
};

int run(const args& a) {
  const auto t0 = clock_type::now();
  fs::create_directories(a.dir);
  shop_process p(a, isatty(2) != 0);
  const double opened_s = seconds_since(t0);
  const auto resumed = p.resume();
  const double resumed_s = seconds_since(t0);
  const auto window = p.window();
  const long pending_at_start = p.marked(under_way);
  const double recovery_s = seconds_since(t0);
  std::cout << "ready: " << resumed << " orders resumed in " << static_cast<long>(recovery_s * 1000) << " ms ("
            << static_cast<long>(opened_s * 1000) << " ms to open the stores and start the system, "
            << static_cast<long>((resumed_s - opened_s) * 1000) << " ms to resume), " << pending_at_start
            << " not ended, " << window.upto << " placed before" << std::endl;

  // Placing: the last window again (it may have been cut short), then new
  // windows up to --upto, as a stream (or all at once without --arrivals).
  // A window is recorded before its orders are placed, and placed whole
  // before the next is recorded.
  p.track->start_processing(pending_at_start + std::max(0L, a.upto - window.upto));
  if (window.upto >= window.from && window.from > 0) p.place_all(window.from, std::min(window.upto, a.upto));
  const auto stream_start = clock_type::now();
  long arrived = 0;
  for (long from = window.upto + 1; from <= a.upto; from += window_size) {
    const long upto = std::min(a.upto, from + window_size - 1);
    p.record_window(from, upto);
    if (a.arrivals == 0) {
      p.place_all(from, upto);
      continue;
    }
    std::vector<std::future<void>> placed;
    for (long n = from; n <= upto; ++n, ++arrived) {
      std::this_thread::sleep_until(stream_start + std::chrono::duration_cast<clock_type::duration>(
                                                       std::chrono::duration<double>(arrived / a.arrivals)));
      placed.push_back(p.place(n));
    }
    for (auto& f : placed) f.get();
  }
  if (a.exit_after_placing) {
    // As a crash would: what is under way is left to the next start.
    std::cout << "placed: " << a.upto << std::endl;
    std::_Exit(0);
  }
  // Done once no order is under way (the index says so: it changes with
  // the write that ends each order). The orders marked now end in this
  // run and say so: wait for that many, then make sure.
  const long ended_before = p.track->ended_this_run();
  long left = p.marked(under_way);
  while (left > 0) {
    p.track->wait_ended(ended_before + left, std::chrono::milliseconds(200));
    p.track->draw(false);
    if (p.track->ended_this_run() >= ended_before + left) left = p.marked(under_way);
  }
  p.track->draw(true);
  const long failed = p.marked(needs_operator);
  const long done_now = p.track->ended_this_run();
  const double secs = p.track->processing_seconds();
  const long ended_total = a.upto - left;
  const auto long_lived = p.track->replayed(p.long_lived, std::chrono::minutes(1));
  boost::json::object summary{{"orders", a.upto},
                              {"ended", ended_total},
                              {"completed", ended_total - failed},
                              {"ended_this_run", done_now},
                              {"seconds", secs},
                              {"orders_per_second", secs > 0 ? done_now / secs : 0.0},
                              {"recovery_ms", static_cast<long>(recovery_s * 1000)},
                              {"open_ms", static_cast<long>(opened_s * 1000)},
                              {"events_replayed_at_start", long_lived.second},
                              {"long_lived_recovered", long_lived.first},
                              {"long_lived", p.long_lived},
                              {"not_ended_at_start", pending_at_start},
                              {"resumed_at_start", static_cast<long>(resumed)}};
  std::cout << troupe::persistence::to_plain_json(summary) << std::endl;
  return ended_total - failed == a.upto ? 0 : 1;
}

// -- bench ---------------------------------------------------------------------------

/// The process's resident memory now and at its peak, in MiB (Linux).
std::pair<double, double> rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  double now = 0, peak = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) now = std::stod(line.substr(6)) / 1024;
    if (line.starts_with("VmHWM:")) peak = std::stod(line.substr(6)) / 1024;
  }
  return {now, peak};
}

/// The malloc this process runs on (jemalloc and tcmalloc export entry
/// points of their own), linked in or preloaded: the bench reports it with
/// its figures.
std::string allocator_name() {
  if (dlsym(RTLD_DEFAULT, "mallctl") != nullptr) return "jemalloc";
  if (dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr) return "tcmalloc";
  return "system";
}

/// This thread's CPU time, in seconds.
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// What raw RocksDB writes on this machine: records per second in
/// synchronous batches of 1,000 records of 100 bytes, for about a second,
/// and the CPU time per record of the thread writing them.
struct raw_rate {
  double records_per_second = 0;
  double cpu_us_per_record = 0;
};

raw_rate raw_records_per_second(const fs::path& dir) {
  fs::remove_all(dir);
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::Open(o, dir.string(), &raw).ok()) throw std::runtime_error("cannot open " + dir.string());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const std::string value(100, 'x');
  std::uint64_t n = 0;
  const auto t0 = clock_type::now();
  const double cpu0 = thread_cpu_seconds();
  while (seconds_since(t0) < 1.0) {
    rocksdb::WriteBatch b;
    for (int i = 0; i < 1000; ++i, ++n) b.Put(std::to_string(n).insert(0, 1, 'k'), value);
    if (!db->Write(wo, &b).ok()) throw std::runtime_error("raw write failed");
  }
  const double records = static_cast<double>(n);
  const raw_rate r{records / seconds_since(t0), (thread_cpu_seconds() - cpu0) * 1e6 / records};
  db.reset();
  fs::remove_all(dir);
  return r;
}

/// Orders as a stream: `--orders` of them, at most `--in-flight` under way
/// (the next is placed as one ends), reported per slice of `--slice`
/// orders as a JSON line each; then records per order and orders/s against
/// the raw RocksDB limit measured in the same run, before and after.
int bench(const args& a) {
  fs::remove_all(a.dir);
  fs::create_directories(a.dir);
  const auto raw_before = raw_records_per_second(fs::path(a.dir) / "raw");
  shop_process p(a, false);
  p.track->start_processing(a.orders);
  const auto t0 = clock_type::now();
  const auto writer0 = p.store->writer_times();
  const auto records0 = p.store->records_written();
  auto slice_start = t0;
  long placed = 0, next_slice = a.slice, slices = 0;
  std::vector<double> rates;
  std::vector<std::future<void>> pending;
  constexpr double mib = 1 << 20;
  std::uint64_t compacted = 0; // bytes RocksDB's compactions wrote before this slice
  const auto report = [&](long ended) {
    const double secs = seconds_since(slice_start);
    const auto [now, peak] = rss_mib();
    const double rate = static_cast<double>(std::min(a.slice, ended - (next_slice - a.slice))) / secs;
    rates.push_back(rate);
    const auto written = p.store->compactions().bytes_written;
    boost::json::object line{{"slice", ++slices},
                             {"orders", ended},
                             {"seconds", secs},
                             {"orders_per_second", rate},
                             {"rss_mib", now},
                             {"peak_rss_mib", peak},
                             {"live_orders", static_cast<long>(p.orders.stats().live)},
                             {"compaction_mib", static_cast<double>(written - compacted) / mib}};
    compacted = written;
    std::cout << troupe::persistence::to_plain_json(line) << std::endl;
    slice_start = clock_type::now();
  };
  // Orders keep arriving past --orders until --orders have ended: every
  // slice is measured with --in-flight under way (the tail is not counted).
  const long arriving = a.orders + a.in_flight;
  while (placed < arriving) {
    const long from = placed + 1, upto = std::min(arriving, placed + window_size);
    p.record_window(from, upto);
    for (long n = from; n <= upto; ++n) {
      // Closed loop: at most --in-flight under way.
      p.track->wait_ended(n - a.in_flight);
      pending.push_back(p.place(n));
      placed = n;
      while (next_slice <= a.orders && p.track->ended_this_run() >= next_slice) {
        report(next_slice);
        next_slice += a.slice;
      }
    }
    for (auto& f : pending) f.get();
    pending.clear();
  }
  while (next_slice <= a.orders) {
    p.track->wait_ended(next_slice);
    report(next_slice);
    next_slice += a.slice;
  }
  const double secs = seconds_since(t0);
  const auto writer = p.store->writer_times();
  const auto written_in_run = static_cast<double>(p.store->records_written() - records0);
  const long arrived_total = placed;
  p.track->wait_ended(arrived_total);
  const double records = static_cast<double>(p.store->records_written()) * a.orders / static_cast<double>(arrived_total);
  const double groups = static_cast<double>(p.store->batches_written()) * a.orders / static_cast<double>(arrived_total);
  const auto compacted_total = p.store->compactions();
  const auto raw_after = raw_records_per_second(fs::path(a.dir) / "raw");
  const double raw = (raw_before.records_per_second + raw_after.records_per_second) / 2;
  // Where the writer's time went over the run (the tail's writes included in
  // its records, as in `records_per_order`).
  const auto seconds_of = [](std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); };
  const double busy = seconds_of(writer.busy - writer0.busy), writing = seconds_of(writer.writing - writer0.writing),
               writing_cpu = seconds_of(writer.writing_cpu - writer0.writing_cpu);
  const double per_order = records / static_cast<double>(a.orders);
  const double rate = static_cast<double>(a.orders) / secs;
  boost::json::object summary{{"orders", a.orders},
                              {"in_flight", a.in_flight},
                              {"warehouses", a.warehouses},
                              {"seconds", secs},
                              {"orders_per_second", rate},
                              {"first_slice_per_second", rates.front()},
                              {"last_slice_per_second", rates.back()},
                              {"last_to_first", rates.back() / rates.front()},
                              {"records_per_order", per_order},
                              {"group_commits_per_second", groups / secs},
                              {"records_per_group_commit", records / groups},
                              {"raw_records_per_second", raw},
                              {"raw_before", raw_before.records_per_second},
                              {"raw_after", raw_after.records_per_second},
                              {"raw_cpu_us_per_record",
                               (raw_before.cpu_us_per_record + raw_after.cpu_us_per_record) / 2},
                              {"writer_busy_share", busy / secs},
                              {"writer_in_write_share", writing / busy},
                              {"writer_write_cpu_share", writing_cpu / writing},
                              {"write_cpu_us_per_record", writing_cpu * 1e6 / written_in_run},
                              {"raw_limit_orders_per_second", raw / per_order},
                              {"of_raw_limit", rate / (raw / per_order)},
                              {"compactions", compacted_total.compactions},
                              {"compaction_read_mib", static_cast<double>(compacted_total.bytes_read) / mib},
                              {"compaction_written_mib", static_cast<double>(compacted_total.bytes_written) / mib},
                              {"peak_rss_mib", rss_mib().second},
                              {"allocator", allocator_name()}};
  std::cout << troupe::persistence::to_plain_json(summary) << std::endl;
  return 0;
}

// -- verify ------------------------------------------------------------------------

/// What the stores say, each counted independently of the actor system's
/// own view.
boost::json::object verify(const args& a) {
  long completed = 0, lost = 0, stuck = 0, failed = 0, unknown = 0, mail_failed = 0;
  std::set<long> known;
  with_store(a, [&](auto& store) {
    for (long n = 1; n <= a.orders; ++n) {
      order_state s;
      auto ec = store.replay(order_pid(n), 1, tp::max_sequence_nr, UINT64_MAX,
                             [&](const tp::event_record& r) { s.apply_manifest(r.manifest); });
      if (ec)
        throw troupe::error(troupe::persistence::errc::storage_failure,
                            "reading " + order_pid(n) + ": " + ec.message());
      if (!s.placed) continue;
      known.insert(n);
      if (s.complete())
        ++completed;
      else if (s.payment_failed)
        ++failed;
      else if (s.payment_unknown)
        ++unknown;
      else if (s.email_failed)
        ++mail_failed;
      else
        ++stuck;
    }
  });
  // The providers' own records.
  tk::simulator_options go;
  go.path = gateway_dir(a).string();
  go.sync = false;
  tk::payment_gateway gateway(go);
  tk::simulator_options mo = go;
  mo.path = mail_dir(a).string();
  tk::email_service mail(mo);
  long charges = 0, double_charges = 0, duplicate_emails = 0, emails = 0;
  auto order_of = [](const std::string& key) -> long {
    // "order:N:step"
    auto a = key.find(':'), b = key.rfind(':');
    if (a == std::string::npos || b == a) return 0;
    try {
      return std::stol(key.substr(a + 1, b - a - 1));
    } catch (const std::logic_error&) {
      return 0;
    }
  };
  for (auto& [key, times] : gateway.all_charges()) {
    charges += static_cast<long>(times);
    if (times > 1) ++double_charges;
  }
  for (auto& [id, times] : mail.all_deliveries()) {
    emails += static_cast<long>(times);
    const auto n = order_of(id);
    const bool expected =
        n >= 1 && n <= a.orders && (id == op_id(n, "confirmation-email") || id == op_id(n, "shipping-email"));
    if (!expected)
      duplicate_emails += static_cast<long>(times); // not an order's message ID: an e-mail nobody asked for
    else if (times > 1)
      duplicate_emails += static_cast<long>(times - 1);
  }
  // Lost: placed by `run` (after a full run, every order of 1..N was) and
  // unknown to the system.
  for (long n = 1; n <= a.orders; ++n)
    if (!known.contains(n)) ++lost;
  return {{"orders", a.orders},
          {"store", a.postgres() ? "postgresql" : "rocksdb"},
          {"placed", static_cast<long>(known.size())},
          {"completed", completed},
          {"charges", charges},
          {"double_charges", double_charges},
          {"lost_orders", lost},
          {"duplicate_emails", duplicate_emails},
          {"stuck", stuck},
          {"payment_failed", failed},
          {"payment_unknown", unknown},
          {"email_failed", mail_failed},
          {"emails", emails}};
}

bool healthy(const boost::json::object& v, long orders) {
  return v.at("double_charges").as_int64() == 0 && v.at("duplicate_emails").as_int64() == 0 &&
         v.at("lost_orders").as_int64() == 0 && v.at("stuck").as_int64() == 0 && v.at("completed").as_int64() == orders;
}

// -- torture -----------------------------------------------------------------------

/// Starts `run` in a child process, its standard output on a pipe.
pid_t start_child(const args& a, std::uint64_t seed, int& out, long upto, double arrivals) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::string self = fs::read_symlink("/proc/self/exe").string();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2); // no progress display from the child
    auto n = std::to_string(a.orders), s = std::to_string(seed), u = std::to_string(upto),
         r = std::to_string(arrivals);
    if (a.postgres())
      execl(self.c_str(), self.c_str(), "run", "--orders", n.c_str(), "--dir", a.dir.c_str(), "--seed", s.c_str(),
            "--upto", u.c_str(), "--arrivals", r.c_str(), "--store", a.store.c_str(), "--schema", a.schema.c_str(),
            static_cast<char*>(nullptr));
    else
      execl(self.c_str(), self.c_str(), "run", "--orders", n.c_str(), "--dir", a.dir.c_str(), "--seed", s.c_str(),
            "--upto", u.c_str(), "--arrivals", r.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  out = fds[0];
  return pid;
}

/// Reads the child's output until it contains `marker` or `limit` passes;
/// false on timeout or end of output.
bool wait_for(int fd, const std::string& marker, std::chrono::milliseconds limit, std::string& seen) {
  const auto end = clock_type::now() + limit;
  while (seen.find(marker) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[512];
    auto k = read(fd, buf, sizeof buf);
    if (k <= 0) return false;
    seen.append(buf, static_cast<std::size_t>(k));
  }
  return true;
}

int torture(const args& a) {
  wipe(a);
  fs::create_directories(a.dir);
  std::cout << "torture: " << a.cycles << " cycles, " << a.orders << " orders, seed " << a.seed << ", dir " << a.dir
            << std::endl;
  std::mt19937_64 rng(a.seed);
  auto uniform = [&](long lo, long hi) { return std::uniform_int_distribution<long>(lo, hi)(rng); };
  // Orders arrive as a stream across the cycles: cycle k's child places
  // orders up to k*N/(K+1), the ones it adds at about the rate the system
  // has completed them so far, and the kill strikes while they arrive (or,
  // one cycle in four after the first, during start-up, when what the last
  // kill interrupted is recovering).
  double rate = 500; // orders per second, updated from each cycle
  long completed = 0, kills_in_flight = 0;
  for (long k = 1; k <= a.cycles; ++k) {
    int out = -1;
    const auto started = clock_type::now();
    const long upto = std::max(1L, a.orders * k / (a.cycles + 1));
    const long before = a.orders * (k - 1) / (a.cycles + 1);
    const double arrivals = std::clamp(rate, 50.0, 5000.0);
    pid_t pid = start_child(a, a.seed + static_cast<std::uint64_t>(k), out, upto, arrivals);
    std::string seen;
    std::string phase;
    long after_ms = 0;
    bool finished = false;
    if (k > 1 && uniform(0, 3) == 0) {
      after_ms = uniform(0, 400);
      phase = "start-up";
      if (wait_for(out, "\"orders\":", std::chrono::milliseconds(after_ms), seen)) finished = true;
    } else {
      if (!wait_for(out, "ready:", std::chrono::minutes(5), seen)) {
        std::cout << "cycle " << k << ": the child neither got ready nor finished; output: " << seen << std::endl;
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        return 1;
      }
      // Within the time the new orders take to arrive (at least 20 ms).
      const double arriving_ms = 1000.0 * static_cast<double>(upto - before) / arrivals;
      after_ms = uniform(5, std::max(20L, static_cast<long>(arriving_ms)));
      phase = "processing";
      if (wait_for(out, "\"orders\":", std::chrono::milliseconds(after_ms), seen)) finished = true;
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(out);
    const auto v = verify(a);
    const long now_completed = v.at("completed").as_int64();
    // In flight when it struck: placed and not ended (nothing moved since).
    const long in_flight = v.at("stuck").as_int64();
    if (in_flight > 0) ++kills_in_flight;
    if (phase == "processing" && !finished && after_ms >= 20 && now_completed > completed)
      rate =
          0.5 * rate + 0.5 * (1000.0 * static_cast<double>(now_completed - completed) / static_cast<double>(after_ms));
    completed = now_completed;
    std::cout << "cycle " << k << "/" << a.cycles << ": "
              << (finished ? "finished before the kill" : "killed " + std::to_string(after_ms) + " ms into " + phase)
              << " (" << static_cast<long>(seconds_since(started) * 1000) << " ms); placed "
              << v.at("placed").as_int64() << "/" << a.orders << ", in flight at the kill " << in_flight
              << ", completed " << now_completed << ", charges " << v.at("charges").as_int64() << ", double charges "
              << v.at("double_charges").as_int64() << std::endl;
    if (v.at("double_charges").as_int64() != 0 || v.at("duplicate_emails").as_int64() != 0) {
      std::cout << troupe::persistence::to_plain_json(v) << std::endl;
      return 1;
    }
  }
  // The last run, uninterrupted.
  int out = -1;
  pid_t pid = start_child(a, a.seed + static_cast<std::uint64_t>(a.cycles) + 1, out, a.orders, 0);
  std::string seen;
  const bool done = wait_for(out, "\"orders\":", std::chrono::minutes(20), seen);
  if (!done) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(out);
  std::cout << "final run: " << (done && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "finished" : "FAILED");
  if (auto at = seen.rfind('{'); at != std::string::npos)
    std::cout << ", " << seen.substr(at, seen.find('\n', at) - at);
  std::cout << std::endl;
  auto v = verify(a);
  v["cycles"] = a.cycles;
  v["kills_in_flight"] = kills_in_flight;
  std::cout << troupe::persistence::to_plain_json(v) << std::endl;
  return healthy(v, a.orders) && done ? 0 : 1;
}

// -- bench-restart --------------------------------------------------------------------

/// Runs this program with `argv` in a child process; its standard output
/// in `out`, its exit status returned.
int run_self(const std::vector<std::string>& argv, std::string& out) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    std::vector<char*> v;
    v.push_back(const_cast<char*>(self.c_str()));
    for (auto& x : argv) v.push_back(const_cast<char*>(x.c_str()));
    v.push_back(nullptr);
    execv(self.c_str(), v.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  for (ssize_t k; (k = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(k));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/// A restart with `--orders` finished orders and `--under-way` left under
/// way (placed by a process that then exited, as a crash would leave
/// them): how long until the system is ready, every order under way
/// resumed. Then it finishes them and checks the stores.
int bench_restart(const args& a) {
  fs::remove_all(a.dir);
  const auto total = std::to_string(a.orders + a.under_way);
  const auto threads = std::to_string(a.threads);
  std::string out;
  if (run_self({"run", "--orders", std::to_string(a.orders), "--dir", a.dir, "--threads", threads}, out) != 0) {
    std::cerr << "the first run failed: " << out << std::endl;
    return 1;
  }
  out.clear();
  if (run_self({"run", "--orders", total, "--dir", a.dir, "--exit-after-placing", "1", "--threads", threads}, out) != 0) {
    std::cerr << "the placing run failed: " << out << std::endl;
    return 1;
  }
  // The state a crash left: each restart starts from a copy of it.
  const auto saved = fs::path(a.dir + ".saved");
  fs::remove_all(saved);
  fs::copy(a.dir, saved, fs::copy_options::recursive);
  std::vector<double> ready, opening;
  boost::json::object last;
  for (long k = 0; k < std::max(1L, a.repeat); ++k) {
    fs::remove_all(a.dir);
    fs::copy(saved, a.dir, fs::copy_options::recursive);
    out.clear();
    const int status = run_self({"run", "--orders", total, "--dir", a.dir, "--threads", threads}, out);
    const auto at = out.rfind('{');
    if (status != 0 || at == std::string::npos) {
      std::cerr << "the restart failed: " << out << std::endl;
      return 1;
    }
    last = boost::json::parse(out.substr(at)).as_object();
    ready.push_back(static_cast<double>(last.at("recovery_ms").as_int64()));
    opening.push_back(static_cast<double>(last.at("open_ms").as_int64()));
  }
  fs::remove_all(saved);
  auto sorted = ready;
  std::sort(sorted.begin(), sorted.end());
  std::sort(opening.begin(), opening.end());
  boost::json::array each;
  for (auto r : ready) each.push_back(r);
  boost::json::object summary{{"finished", a.orders},
                              {"under_way", a.under_way},
                              {"resumed", last.at("resumed_at_start")},
                              {"not_ended_at_start", last.at("not_ended_at_start")},
                              {"ready_ms_median", sorted[sorted.size() / 2]},
                              {"ready_ms_min", sorted.front()},
                              {"ready_ms_max", sorted.back()},
                              {"ready_ms", each},
                              {"open_ms_median", opening[opening.size() / 2]},
                              {"finished_them_seconds", last.at("seconds")}};
  std::cout << troupe::persistence::to_plain_json(summary) << std::endl;
  auto v = verify(args{.command = "verify", .orders = a.orders + a.under_way, .dir = a.dir});
  return healthy(v, a.orders + a.under_way) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  const auto a = parse(argc, argv);
  try {
    if (a.command == "run") return run(a);
    if (a.command == "bench") return bench(a);
    if (a.command == "bench-restart") return bench_restart(a);
    if (a.command == "verify") {
      auto v = verify(a);
      std::cout << troupe::persistence::to_plain_json(v) << std::endl;
      return healthy(v, a.orders) ? 0 : 1;
    }
    return torture(a);
  } catch (const std::exception& ex) {
    std::cerr << "troupe_orders: " << ex.what() << std::endl;
    return 1;
  }
}
